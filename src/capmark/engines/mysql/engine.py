"""MySQL and MariaDB behind the engine interface: mysqlclient connections, SHOW GLOBAL STATUS and INNODB_METRICS,
server-side prepared statements."""

from __future__ import annotations

import contextlib
from typing import Any

from capmark.engines.base import DbCounters, Delta, TargetInfo
from capmark.engines.mysql import connection, describe
from capmark.engines.mysql.session import MysqlSession

# MySQL's error for a statement that the server stopped: KILL QUERY, or max_execution_time (ER_QUERY_INTERRUPTED)
ER_QUERY_INTERRUPTED = 1317
ER_STATEMENT_TIMEOUT = 3024  # MySQL 8: max_execution_time exceeded
ER_MARIADB_STATEMENT_TIMEOUT = 1969  # MariaDB: max_statement_time exceeded


def _driver_error() -> type[Exception]:
    try:
        import MySQLdb
    except ImportError:  # the MySQL extra is not installed: nothing of MySQL's can be raised either
        return _NoDriverError
    return MySQLdb.Error


class _NoDriverError(Exception):
    """Stands for the driver's errors where mysqlclient is not installed."""


class MysqlEngine:
    name = "mysql"
    label = "MySQL/MariaDB"
    schemes = connection.SCHEMES
    server_side = False
    log_label = "redo log"

    @property
    def error(self) -> type[Exception]:  # type: ignore[override]
        return _driver_error()

    def connect(self, dsn: str, *, application_name: str = "capmark", autocommit: bool = True) -> Any:
        return connection.connect(dsn, application_name=application_name, autocommit=autocommit)

    def describe(self, conn: Any, dsn: str, *, embedded: bool) -> TargetInfo:
        return describe.describe(conn, dsn, embedded=embedded)

    def check_privileges(self, conn: Any) -> None:
        describe.check_privileges(conn)

    def backend_pid(self, conn: Any) -> int:
        return int(conn.thread_id())

    def is_broken(self, conn: Any) -> bool:
        try:
            conn.ping()
        except Exception:  # noqa: BLE001 - any failure to answer a ping means the same: gone
            return True
        return False

    def is_cancel(self, err: BaseException) -> bool:
        code = err.args[0] if err.args else None
        return code in (ER_QUERY_INTERRUPTED, ER_STATEMENT_TIMEOUT, ER_MARIADB_STATEMENT_TIMEOUT)

    def cancel(self, conn: Any, dsn: str) -> None:
        """Stop the connection's running statement from a second connection (the protocol has no cancel request)."""
        with contextlib.suppress(Exception):
            killer = connection.connect(dsn, application_name="capmark cancel")
            try:
                killer.query(b"KILL QUERY %d" % conn.thread_id())
            finally:
                killer.close()

    def cancel_reason(self, conn: Any) -> str:
        return ("the server stopped a statement that capmark did not stop (KILL QUERY by another session, or "
                "max_statement_time / max_execution_time); raise that limit for capmark's user")

    def session(self, conn: Any, statements: dict[str, str]) -> MysqlSession:
        return MysqlSession(conn, statements, literal_using=describe.is_mariadb(conn.get_server_info()))

    def set_session(self, conn: Any, settings: dict[str, str]) -> None:
        for name, value in settings.items():
            conn.query(f"SET SESSION {name} = {value}".encode())

    def snapshot(self, conn: Any, info: TargetInfo, backend_pids: list[int] | None = None,
                 all_statements: bool = False) -> Delta:
        from capmark.engines.mysql import stats
        return stats.snapshot(conn, info, backend_pids, all_statements)

    def delta(self, before: Delta, after: Delta) -> Delta:
        from capmark.engines.mysql import stats
        return stats.delta(before, after)

    def flush_own_stats(self, conn: Any, info: TargetInfo) -> None:
        """MySQL's counters are live: nothing waits to be published."""

    def counters(self, delta: Delta) -> DbCounters:
        from capmark.engines.mysql import stats
        return stats.counters(delta)


MYSQL = MysqlEngine()
