"""PostgreSQL behind the engine interface: psycopg 3 connections, its statistics views, libpq prepared statements."""

from __future__ import annotations

from typing import Any

import psycopg

from capmark.engines import postgres as pg
from capmark.engines.base import ActivitySample, DbCounters, Delta, TargetInfo
from capmark.engines.postgres import activity, stats
from capmark.engines.postgres import counters as pgcounters
from capmark.engines.postgres.session import ClientSession
from capmark.engines.rows import one_row


class PostgresEngine:
    name = "postgresql"
    label = "PostgreSQL"
    schemes = ("postgresql", "postgres")
    error: type[Exception] = psycopg.Error
    server_side = True
    log_label = "WAL"

    def connect(self, dsn: str, *, application_name: str = "capmark", autocommit: bool = True) -> Any:
        return pg.connect(dsn, autocommit=autocommit, application_name=application_name)

    def describe(self, conn: Any, dsn: str, *, embedded: bool) -> TargetInfo:
        return pg.describe(conn, dsn, embedded=embedded)

    def check_privileges(self, conn: Any) -> None:
        pg.check_privileges(conn)

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

    def flush_own_stats(self, conn: Any, info: TargetInfo) -> None:
        stats.flush_own_stats(conn, info)

    def counters(self, delta: Delta) -> DbCounters:
        return pgcounters.counters(delta)

    def sample_activity(self, conn: Any, info: TargetInfo, job_pids: list[int],
                        own_pids: list[int]) -> ActivitySample:
        return activity.sample(conn, job_pids, own_pids)


POSTGRESQL = PostgresEngine()
