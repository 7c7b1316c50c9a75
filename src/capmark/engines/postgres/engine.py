"""PostgreSQL behind the engine interface: psycopg 3 connections, its statistics views, libpq prepared statements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from capmark.engines import postgres as pg
from capmark.engines.base import (
    LOOKUP_PATHS,
    ActivitySample,
    DataSize,
    DbCounters,
    Delta,
    Engine,
    LockHolder,
    TargetInfo,
)
from capmark.engines.postgres import activity, datamodel, hostfiles, locks, maintenance, stats, waits
from capmark.engines.postgres import advice as postgres_advice
from capmark.engines.postgres import counters as pgcounters
from capmark.engines.postgres.rows import one_row
from capmark.engines.postgres.session import ClientSession, compiled_lookups
from capmark.results import WaitClass, WaitKey

CONTROL_CLIENT_CHECK = "2s"  # how often the server checks that capmark's control connection is still there


class PostgresEngine:
    name = "postgresql"
    label = "PostgreSQL"
    schemes: tuple[str, ...] = ("postgresql", "postgres")
    error: type[Exception] = psycopg.Error
    backend_is_process = True  # every connection is served by a server process of its own
    reads_commit = True  # a login and every statistics read is a transaction in xact_commit
    advice = postgres_advice.ADVICE  # what to try per bottleneck signature, in the engine's own terms
    server_side = True
    log_label = "WAL"

    server_role = "client backends"

    def connect(self, dsn: str, *, application_name: str = "capmark", autocommit: bool = True,
                timeout_s: float | None = None) -> Any:
        if timeout_s is not None:  # a quick probe: the driver's own error, not the sentence for a first connection
            return psycopg.connect(dsn, connect_timeout=max(1, int(timeout_s)), application_name=application_name,
                                   autocommit=autocommit)
        return pg.connect(dsn, autocommit=autocommit, application_name=application_name)

    def prepare_control(self, conn: Any) -> None:
        """If capmark is killed (SIGKILL) inside a long statement such as the data setup, the server notices the
        closed socket and cancels the statement instead of finishing it for nobody. A lock another session holds
        on a table capmark needs stops the run after locks.LOCK_WAIT_LIMIT_S, naming that session, instead of
        stretching it for as long as the other transaction lasts."""
        conn.execute("select set_config('client_connection_check_interval', %s, false)", (CONTROL_CLIENT_CHECK,))
        locks.bound_waits(conn)

    def execute(self, conn: Any, sql: str) -> None:
        with locks.bounded(conn, "to prepare a test"):
            conn.execute(sql)

    def server_started(self, conn: Any) -> str:
        return str(one_row(conn.execute("select pg_postmaster_start_time()"))[0])

    def connection_room(self, conn: Any) -> tuple[int, int]:
        """max_connections, and the client backends connected now."""
        max_conn = int(one_row(conn.execute("select current_setting('max_connections')"))[0])
        used = int(one_row(conn.execute("select count(*) from pg_stat_activity "
                                        "where backend_type = 'client backend'"))[0])
        return max_conn, used

    def terminated(self, err: BaseException) -> bool:
        return isinstance(err, psycopg.errors.AdminShutdown)

    def error_text(self, err: BaseException) -> str:
        """psycopg's message is the server's, its first line the sentence (DETAIL and HINT follow on their own)."""
        text = str(err).strip()
        return text.splitlines()[0] if text else type(err).__name__

    def describe(self, conn: Any, dsn: str, *, embedded: bool) -> TargetInfo:
        return pg.describe(conn, dsn, embedded=embedded)

    def server_process(self, conn: Any, dsn: str) -> tuple[int | None, str]:
        return pg.local_postmaster(conn)

    def backend_pid(self, conn: Any) -> int:
        return int(conn.info.backend_pid)

    def is_broken(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken)

    def is_cancel(self, err: BaseException) -> bool:
        return isinstance(err, psycopg.errors.QueryCanceled)

    def cancel(self, conn: Any, dsn: str) -> None:
        conn.cancel_safe(timeout=2)

    def cancel_reason(self, conn: Any) -> str:
        """Why the server cancelled a statement capmark did not cancel: statement_timeout, or someone else."""
        try:
            timeout = one_row(conn.execute("select current_setting('statement_timeout')"))[0]
        except psycopg.Error:
            return "the server cancelled a statement"
        if timeout in ("0", "0ms"):
            return ("the server cancelled a statement (statement_timeout is off: another session or an administrator "
                    "cancelled it)")
        return (f"the server cancelled a statement (statement_timeout = {timeout}); raise statement_timeout for "
                "capmark's role or database")

    def setup_datamodel(self, conn: Any, size: DataSize, say: Callable[[str], None]) -> float:
        with locks.bounded(conn, "on a table of schema capmark to set up its data model"):
            return datamodel.setup(conn, size, say=say)

    def warm_cache(self, conn: Any, tables: list[str], say: Callable[[str], None]) -> None:
        with locks.bounded(conn, f"on {', '.join(f'capmark.{t}' for t in tables)} to warm the buffer cache"):
            datamodel.warm_cache(conn, tables, say=say)

    def install_procedures(self, conn: Any, ddl: list[str]) -> None:
        """RunsProcedures (engines/base.py): PostgreSQL runs the catalogue's units as PL/pgSQL procedures."""
        with locks.bounded(conn, "to install its server-side procedures"):
            datamodel.install_procedures(conn, ddl)

    # WatchesLocks (engines/base.py), no member of Engine: what keeps a step's jobs waiting on a lock, and cancelling
    # the jobs' statements by their backends (the driver's overrun watch, driver/step.py).
    def lock_blockers(self, conn: Any, pids: list[int]) -> list[LockHolder]:
        return locks.lock_blockers(conn, pids)

    def cancel_backends(self, conn: Any, pids: list[int]) -> None:
        locks.cancel_backends(conn, pids)

    def client_statement(self, name: str, postgres_sql: str) -> str | None:
        return postgres_sql  # the catalogue is written in PostgreSQL's SQL

    def session_settings(self, settings: dict[str, str]) -> dict[str, str] | str:
        return settings

    def preparation(self, statements: tuple[str, ...]) -> tuple[str, ...] | str:
        return statements

    def checkpoint(self, conn: Any) -> str:
        return "" if maintenance.checkpoint(conn) else maintenance.CHECKPOINT_REFUSED

    def background_work(self, conn: Any) -> list[str]:
        return maintenance.busy_capmark_tables(conn)

    def lookup_path(self) -> str:
        return LOOKUP_PATHS[compiled_lookups()]

    def session(self, conn: Any, statements: dict[str, str]) -> ClientSession:
        return ClientSession(conn, statements)

    def set_session(self, conn: Any, settings: dict[str, str]) -> None:
        for name, value in settings.items():
            conn.execute("select set_config(%s, %s, false)", (name, value))

    def snapshot(self, conn: Any, info: TargetInfo, backend_pids: list[int] | None = None,
                 all_statements: bool = False) -> Delta:
        return stats.snapshot(conn, info, backend_pids, all_statements)

    def delta(self, before: Delta, after: Delta) -> Delta:
        return stats.delta(before, after)

    def statements_rule(self, all_statements: bool) -> str:
        return stats.statements_rule(all_statements)

    def tracks_statements(self, info: TargetInfo) -> bool:
        return stats.tracks_statements(info)

    def nested_statements(self, conn: Any, info: TargetInfo) -> dict[str, str] | str:
        return stats.nested_statements(info, stats.tracks_statements(info) and pg.is_superuser(conn))

    def flush_own_stats(self, conn: Any, info: TargetInfo) -> None:
        stats.flush_own_stats(conn, info)

    def host_file_reader(self, dsn: str, connect: Callable[..., Any]) -> hostfiles.SqlReader:
        """The database host's /proc through pg_read_binary_file, on a session of its own (collect/hosts.py's
        ReadsHostFiles: a PostgreSQL extra, no member of Engine)."""
        return hostfiles.open_reader(dsn, connect)

    def counters(self, delta: Delta) -> DbCounters:
        return pgcounters.counters(delta)

    def sample_activity(self, conn: Any, info: TargetInfo, job_pids: list[int],
                        own_pids: list[int]) -> ActivitySample:
        return activity.sample(conn, job_pids, own_pids)

    def wait_class(self, key: WaitKey) -> WaitClass:
        return waits.wait_class(key)


POSTGRESQL: Engine = PostgresEngine()
