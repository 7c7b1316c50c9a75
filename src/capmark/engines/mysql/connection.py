"""Connections to MySQL and MariaDB through mysqlclient (libmariadb / libmysqlclient), with readable errors."""

from __future__ import annotations

from dataclasses import dataclass
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
