"""MySQL and MariaDB behind the engine interface: mysqlclient connections, SHOW GLOBAL STATUS and INNODB_METRICS,
server-side prepared statements."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from capmark.engines.base import LOOKUP_PATHS, ActivitySample, DataSize, DbCounters, Delta, Engine, TargetInfo
from capmark.engines.mysql import activity, catalogue, connection, datamodel, describe, stats, waits
from capmark.engines.mysql import advice as mysql_advice
from capmark.engines.mysql import queries as q
from capmark.engines.mysql.session import MysqlSession, compiled_lookups
from capmark.results import WaitClass, WaitKey

# MySQL's error for a statement that the server stopped: KILL QUERY, or max_execution_time (ER_QUERY_INTERRUPTED)
ER_QUERY_INTERRUPTED = 1317
ER_STATEMENT_TIMEOUT = 3024  # MySQL 8: max_execution_time exceeded
ER_MARIADB_STATEMENT_TIMEOUT = 1969  # MariaDB: max_statement_time exceeded
ER_CONNECTION_KILLED = 1927  # MariaDB: "Connection was killed"
ER_SERVER_SHUTDOWN = 1053
# Undo records purge may still have to go through before a test counts as settled: a busy server keeps a few
# thousand in flight, while the history a write test leaves behind runs to hundreds of thousands.
PURGE_BACKLOG = 5_000


def _driver_error() -> type[Exception]:
    try:
        import MySQLdb
    except ImportError:  # the MySQL extra is not installed: nothing of MySQL's can be raised either
        return _NoDriverError
    return MySQLdb.Error


def _code(err: BaseException) -> int | None:
    """The server's error number of a driver error (its first argument)."""
    code = err.args[0] if err.args else None
    return code if isinstance(code, int) else None


class _NoDriverError(Exception):
    """Stands for the driver's errors where mysqlclient is not installed."""


class MysqlEngine:
    name = "mysql"
    label = "MySQL/MariaDB"
    schemes: tuple[str, ...] = connection.SCHEMES
    backend_is_process = False  # connections are threads of one server process; their ids are not OS pids
    reads_commit = False  # SHOW STATUS and information_schema reads commit nothing (Handler_commit)
    advice = mysql_advice.ADVICE  # what to try per bottleneck signature, in the engine's own terms
    server_side = False
    log_label = "redo log"

    error: type[Exception] = _driver_error()

    server_role = "server threads"  # sessions and background work alike: threads of one process

    def connect(self, dsn: str, *, application_name: str = "capmark", autocommit: bool = True,
                timeout_s: float | None = None) -> Any:
        return connection.connect(dsn, application_name=application_name, autocommit=autocommit, timeout_s=timeout_s)

    def prepare_control(self, conn: Any) -> None:
        """The server ends a dead client's statement when its socket closes; nothing to arrange."""

    def execute(self, conn: Any, sql: str) -> None:
        q.run(conn, sql)

    def server_started(self, conn: Any) -> str:
        """The server's start, to the second (from its uptime), so that a restart between steps shows."""
        return str(q.scalar(conn, "SELECT DATE_FORMAT(NOW() - INTERVAL VARIABLE_VALUE SECOND, '%Y-%m-%d %H:%i:%s') "
                                  "FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"))

    def connection_room(self, conn: Any) -> tuple[int, int]:
        (max_conn, used), = q.rows(conn, "SELECT @@max_connections, (SELECT VARIABLE_VALUE FROM "
                                         "information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'THREADS_CONNECTED')")
        return int(max_conn), int(used)

    def terminated(self, err: BaseException) -> bool:
        """KILL (CONNECTION) by another session, or a server shutting down (ER_SERVER_SHUTDOWN)."""
        return _code(err) in (ER_CONNECTION_KILLED, ER_SERVER_SHUTDOWN)

    def describe(self, conn: Any, dsn: str, *, embedded: bool) -> TargetInfo:
        return describe.describe(conn, dsn, embedded=embedded)

    def server_process(self, conn: Any, dsn: str) -> tuple[int | None, str]:
        return describe.local_server_pid(conn, connection.parse(dsn).local)

    def backend_pid(self, conn: Any) -> int:
        return int(conn.thread_id())

    def is_broken(self, conn: Any) -> bool:
        try:
            conn.ping()
        except Exception:  # noqa: BLE001 - any failure to answer a ping means the same: gone
            return True
        return False

    def error_text(self, err: BaseException) -> str:
        """The driver's error in words: the server's message with its code, never the (code, message) tuple."""
        return connection.error_text(err)

    def is_cancel(self, err: BaseException) -> bool:
        return _code(err) in (ER_QUERY_INTERRUPTED, ER_STATEMENT_TIMEOUT, ER_MARIADB_STATEMENT_TIMEOUT)

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

    def setup_datamodel(self, conn: Any, size: DataSize, say: Callable[[str], None]) -> float:
        return datamodel.setup(conn, size.as_params(), say)

    def warm_cache(self, conn: Any, tables: list[str], say: Callable[[str], None]) -> None:
        datamodel.warm_cache(conn, tables, say)

    def client_statement(self, name: str, postgres_sql: str) -> str | None:
        return catalogue.client_statement(name, postgres_sql)

    def session_settings(self, settings: dict[str, str]) -> dict[str, str] | str:
        return catalogue.session_settings(settings)

    def preparation(self, statements: tuple[str, ...]) -> tuple[str, ...] | str:
        return catalogue.preparation(statements)

    def checkpoint(self, conn: Any) -> str:
        """InnoDB has no checkpoint command: its page cleaner writes dirty pages in the background, so quiescing waits
        for the data device to fall idle and for purge to catch up."""
        return ""

    def background_work(self, conn: Any) -> list[str]:
        """Purge still working through the history of the previous test's changes."""
        try:
            rows = q.rows(conn, "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")
        except self.error:  # no PROCESS privilege: INNODB_METRICS is not readable, purge cannot be watched
            return []
        backlog = int(rows[0][0]) if rows else 0
        return [f"InnoDB purge ({backlog} undo log records to go)"] if backlog > PURGE_BACKLOG else []

    def lookup_path(self) -> str:
        return LOOKUP_PATHS[compiled_lookups()]

    def session(self, conn: Any, statements: dict[str, str]) -> MysqlSession:
        return MysqlSession(conn, statements, literal_using=describe.is_mariadb(conn.get_server_info()))

    def set_session(self, conn: Any, settings: dict[str, str]) -> None:
        for name, value in settings.items():
            conn.query(f"SET SESSION {name} = {value}".encode())

    def snapshot(self, conn: Any, info: TargetInfo, backend_pids: list[int] | None = None,
                 all_statements: bool = False) -> Delta:
        return stats.snapshot(conn, info, backend_pids, all_statements)

    def delta(self, before: Delta, after: Delta) -> Delta:
        return stats.delta(before, after)

    def statements_rule(self, all_statements: bool) -> str:
        return stats.statements_rule(all_statements)

    def tracks_statements(self, info: TargetInfo) -> bool:
        """performance_schema is on: every snapshot holds the statement digests."""
        return info.has("performance_schema")

    def nested_statements(self, conn: Any, info: TargetInfo) -> dict[str, str] | str:
        """Nothing to set: capmark runs MySQL's units client-side, so every statement is a top-level one, counted in
        its digest whenever performance_schema is on."""
        if not self.tracks_statements(info):
            return f"Nested statements are not tracked: {info.why_not('performance_schema')}."
        return {}

    def flush_own_stats(self, conn: Any, info: TargetInfo) -> None:
        """MySQL's counters are live: nothing waits to be published."""

    def counters(self, delta: Delta) -> DbCounters:
        return stats.counters(delta)

    def sample_activity(self, conn: Any, info: TargetInfo, job_pids: list[int],
                        own_pids: list[int]) -> ActivitySample:
        return activity.sample(conn, job_pids, own_pids, performance_schema=info.has("performance_schema"))

    def wait_class(self, key: WaitKey) -> WaitClass:
        return waits.wait_class(key)


MYSQL: Engine = MysqlEngine()
