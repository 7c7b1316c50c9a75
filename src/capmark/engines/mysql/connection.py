"""Connections to MySQL and MariaDB through mysqlclient (libmariadb / libmysqlclient), with readable errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from capmark.errors import CapmarkError

SCHEMES = ("mysql", "mariadb")
DEFAULT_PORT = 3306
DATABASE = "capmark"  # the engine's equivalent of PostgreSQL's schema capmark: nothing is created outside it
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class MysqlDsn:
    """The parts of a mysql:// or mariadb:// URL that a connection needs; the password never leaves here in text."""

    host: str
    port: int
    user: str
    password: str
    database: str  # the database the URL names: only where capmark connects first; its objects go in `capmark`
    unix_socket: str = ""

    def redacted(self) -> str:
        where = f"{self.host}:{self.port}" if not self.unix_socket else f"localhost?socket={self.unix_socket}"
        return f"mysql://{self.user}{':***' if self.password else ''}@{where}/{self.database}"

    @property
    def local(self) -> bool:
        return bool(self.unix_socket) or self.host in ("localhost", "127.0.0.1", "::1")


def parse(dsn: str) -> MysqlDsn:
    """mysql://user:password@host:port/database (or mariadb://); ?socket=/path for a Unix socket."""
    parts = urlsplit(dsn)
    if parts.scheme.lower() not in SCHEMES:
        raise CapmarkError(f"'{parts.scheme}://' is not a MySQL URL; write mysql://user:password@host:3306/database.")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise CapmarkError("The port in the MySQL URL is not a number; write mysql://user@host:3306/database.") from None
    query = parse_qs(parts.query)
    unknown = sorted(set(query) - {"socket"})
    if unknown:
        raise CapmarkError(f"The MySQL URL has options capmark does not know ({', '.join(unknown)}); only socket= "
                           "is understood.")
    return MysqlDsn(host=parts.hostname or "localhost", port=port, user=unquote(parts.username or "root"),
                    password=unquote(parts.password or ""), database=parts.path.lstrip("/") or DATABASE,
                    unix_socket=(query.get("socket") or [""])[0])


# MySQL/MariaDB client error numbers capmark explains (mysqld_error.h, errmsg.h)
ER_ACCESS_DENIED = 1045
ER_DBACCESS_DENIED = 1044
ER_BAD_DB = 1049
ER_TOO_MANY_CONNECTIONS = 1040
ER_TOO_MANY_USER_CONNECTIONS = 1203
CR_CONNECTION_ERROR = 2002  # local socket
CR_CONN_HOST_ERROR = 2003
CR_UNKNOWN_HOST = 2005
CR_SERVER_LOST = 2013


def explain_connect_error(err: Exception, target: MysqlDsn) -> CapmarkError:
    """One sentence with the fix for a failed connection; never echoes the password."""
    code = err.args[0] if err.args and isinstance(err.args[0], int) else None
    text = str(err.args[1]) if len(err.args) > 1 else str(err)
    text = text.replace(target.password, "***") if target.password else text
    safe = target.redacted()
    if code == ER_ACCESS_DENIED:
        return CapmarkError(f"The server at {safe} rejected the login ({text}); correct the user or password in "
                            "--dsn / CAPMARK_DSN.")
    if code == ER_DBACCESS_DENIED:
        return CapmarkError(f"The user '{target.user}' may not use database '{target.database}' at {safe}; grant it, "
                            "or name database capmark in the URL.")
    if code == ER_BAD_DB:
        return CapmarkError(f"Database '{target.database}' does not exist at {safe}; create it, or leave the "
                            "database out of the URL (capmark then works in its own database capmark).")
    if code in (ER_TOO_MANY_CONNECTIONS, ER_TOO_MANY_USER_CONNECTIONS):
        return CapmarkError(f"The server at {safe} has no connection free for capmark ({text}); close other "
                            "clients, lower --jobs, or raise max_connections (or the user's MAX_USER_CONNECTIONS).")
    if code in (CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR, CR_UNKNOWN_HOST, CR_SERVER_LOST):
        return CapmarkError(f"Cannot connect to MySQL/MariaDB at {safe} ({text}); check the host, port and that the "
                            "server is running.")
    return CapmarkError(f"Cannot connect to MySQL/MariaDB at {safe} ({text}).")


def connect(dsn: str, *, application_name: str = "capmark", autocommit: bool = True,
            timeout_s: float | None = None) -> Any:
    """A mysqlclient connection. MySQL has no application_name that a client can set through this driver, so capmark
    tells its own sessions apart by their connection ids."""
    import MySQLdb  # imported here: the PostgreSQL-only user need not have the MySQL extra installed

    target = parse(dsn)
    options: dict[str, Any] = {"user": target.user, "passwd": target.password, "autocommit": autocommit,
                               "connect_timeout": int(timeout_s or CONNECT_TIMEOUT_S), "charset": "utf8mb4"}
    if target.unix_socket:
        options["unix_socket"] = target.unix_socket
    else:
        options["host"], options["port"] = target.host, target.port
    if target.database != DATABASE:
        options["database"] = target.database
    try:
        conn = MySQLdb.connect(**options)
    except MySQLdb.Error as err:
        raise explain_connect_error(err, target) from None
    return conn
