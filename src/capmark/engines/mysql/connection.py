"""Connections to MySQL and MariaDB through mysqlclient (libmariadb / libmysqlclient), with readable errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capmark.config import MYSQL_SCHEMES, mysql_url_parts, redact_text, redact_url
from capmark.errors import CapmarkError

SCHEMES = MYSQL_SCHEMES
DEFAULT_PORT = 3306
DATABASE = "capmark"  # the engine's equivalent of PostgreSQL's schema capmark: nothing is created outside it
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class MysqlDsn:
    """The parts of a mysql:// or mariadb:// URL that a connection needs; the password never leaves here in text."""

    url: str = field(repr=False)  # as the user gave it: shown only through redacted()
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str  # the database the URL names: only where capmark connects first; its objects go in `capmark`
    unix_socket: str = ""

    def redacted(self) -> str:
        """The URL as the user wrote it, its password and secret parameters masked."""
        return redact_url(self.url)

    @property
    def local(self) -> bool:
        return bool(self.unix_socket) or self.host in ("localhost", "127.0.0.1", "::1")


def parse(dsn: str, what: str = "") -> MysqlDsn:
    """mysql://user:password@host:port/database (or mariadb://); ?socket=/path for a Unix socket. Read by the rules
    and the code of every URL capmark takes (config.mysql_url_parts): the user part ends at the last '@', every
    part is %-decoded, the port is from 1 to 65535."""
    parts = mysql_url_parts(dsn, what)
    host, port = parts.hosts[0] if parts.hosts else ("", None)
    return MysqlDsn(url=dsn, host=host or "localhost", port=port or DEFAULT_PORT, user=parts.user or "root",
                    password=parts.password or "", database=parts.database or DATABASE,
                    unix_socket=dict(parts.params).get("socket", ""))


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


def error_text(err: BaseException) -> str:
    """A driver error as users read it: "MySQL error 2013: Lost connection to server during query", never the
    driver's (code, message) tuple; any URL in the message masked."""
    args = err.args
    code = args[0] if args and isinstance(args[0], int) else None
    message = str(args[1] if code is not None and len(args) > 1 else (args[0] if len(args) == 1 else err)).strip()
    line = redact_text(message.splitlines()[0] if message else type(err).__name__)
    return f"MySQL error {code}: {line}" if code is not None else line


def explain_connect_error(err: Exception, target: MysqlDsn) -> CapmarkError:
    """One sentence with the fix for a failed connection; never echoes the password."""
    code = err.args[0] if err.args and isinstance(err.args[0], int) else None
    # the server's message, with any URL in it masked: the password's text may occur in it as something else
    text = redact_text(str(err.args[1]) if len(err.args) > 1 else str(err))
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


# Bad environment, not a fault of capmark's: what to install, and the system library the driver builds against.
NO_DRIVER = ("A mysql:// or mariadb:// URL needs the MySQL/MariaDB driver, and {why}; install it with pip install "
             "'capmark[mysql]' (it builds against the MySQL client library: on Debian or Ubuntu run apt-get install "
             "libmariadb-dev pkg-config first).")


def require_driver() -> None:
    """mysqlclient is imported only when a MySQL/MariaDB URL is used, so a PostgreSQL-only install need not have the
    MySQL extra; its absence, or a client library it cannot load, is said in one sentence with the fix."""
    try:
        import MySQLdb  # noqa: F401 - imported to learn whether it can be
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("MySQLdb"):  # a module missing inside the driver is an unexpected fault
            raise
        raise CapmarkError(NO_DRIVER.format(why="it is not installed")) from None
    except ImportError as err:  # installed, but its C library does not load (libmariadb removed or of another ABI)
        detail = redact_text(str(err).splitlines()[0] if str(err) else type(err).__name__)
        raise CapmarkError(NO_DRIVER.format(why=f"its client library does not load ({detail})")) from None


def connect(dsn: str, *, application_name: str = "capmark", autocommit: bool = True,
            timeout_s: float | None = None) -> Any:
    """A mysqlclient connection. MySQL has no application_name that a client can set through this driver, so capmark
    tells its own sessions apart by their connection ids."""
    require_driver()
    import MySQLdb

    target = parse(dsn)
    # open-ended: MySQLdb.connect's keyword options, which differ between its versions
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
