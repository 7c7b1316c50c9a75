"""Read-only readers of a PostgreSQL 14-18 server for `capmark observe`: pg_stat_statements per statement, the
cumulative views (pg_stat_database, pg_stat_io, pg_stat_wal, checkpointer, background writer), pg_stat_activity and
what identifies a counting epoch (the postmaster's start, the statistics' resets).

Nothing here creates, sets or writes anything on the server: every statement is a SELECT.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq

from capmark.engines.base import Delta, Row, TargetInfo
from capmark.engines.deltas import plain
from capmark.engines.postgres.hostfiles import SqlReader
from capmark.engines.postgres.stats import FLUSH_SQL, KEYS, _rows

OBSERVE_APPLICATION = "capmark observe"  # the collector's own session: left out of the activity it samples
QUERY_TEXT_CHARS = 300  # as runs store a statement's text
# pg_stat_statements' times are in milliseconds; the observation's in seconds
MS = 1e-3
# PostgreSQL 17 split the statements' block times into shared, local and temp (blk_read_time was shared + local)
SPLIT_BLOCK_TIMES = 170000
# Gauges of the cumulative views: a value at the reading, not a count (a delta of them means nothing)
GAUGES = frozenset({"numbackends", "datid", "op_bytes"})
MONITOR_ROLE = "pg_monitor"


@dataclass(frozen=True)
class StatementKey:
    query_id: str
    user_oid: int
    database_oid: int
    toplevel: bool


@dataclass
class StatementRow:
    """One pg_stat_statements entry's counters as read (cumulative), in StatementDelta's units and names."""

    database: str
    user: str
    counters: dict[str, float]
    text: str | None = None
    command: str = ""  # see StatementDelta.command (MySQL's digests only)


@dataclass
class ServerEpoch:
    """What changes when the counters start again: the postmaster's start and each statistics reset."""

    started_at: str
    statements_reset: str | None = None  # pg_stat_statements_info.stats_reset
    statements_dealloc: int | None = None  # entries evicted (pg_stat_statements.max reached) so far
    resets: dict[str, str] = field(default_factory=dict)  # "view key" -> stats_reset of that row


def _times(version_num: int) -> tuple[str, str]:
    if version_num >= SPLIT_BLOCK_TIMES:
        return ("shared_blk_read_time + local_blk_read_time", "shared_blk_write_time + local_blk_write_time")
    return "blk_read_time", "blk_write_time"


# The text of a statement that only begins or ends a transaction holds no data, and it is how the analysis tells a
# workload's commits (the unit of work of a workload that runs explicit transactions): kept even without
# --store-query-text.
TRANSACTION_CONTROL = r"^\s*(begin|start\s+transaction|commit|end|rollback|abort)(\s+(work|transaction))?\s*;?\s*$"
TRANSACTION_CONTROL_TEXT = re.compile(TRANSACTION_CONTROL, re.IGNORECASE)  # the same rule, for checking stored texts


def statements_sql(view: str, version_num: int, with_text: bool) -> str:
    """Every statement of every database and role the session may see, with StatementDelta's counters."""
    read_time, write_time = _times(version_num)
    text = (f"left(s.query, {QUERY_TEXT_CHARS})" if with_text
            else f"case when s.query ~* '{TRANSACTION_CONTROL}' then s.query end")
    return f"""
        select s.queryid::text, s.userid::bigint, s.dbid::bigint, s.toplevel,
               coalesce(d.datname::text, s.dbid::text), coalesce(r.rolname::text, s.userid::text),
               s.calls::float8, s.total_exec_time * {MS}, s.total_plan_time * {MS}, s.rows::float8,
               s.shared_blks_hit::float8, s.shared_blks_read::float8, s.shared_blks_dirtied::float8,
               s.shared_blks_written::float8, s.local_blks_hit::float8, s.local_blks_read::float8,
               s.local_blks_dirtied::float8, s.local_blks_written::float8, s.temp_blks_read::float8,
               s.temp_blks_written::float8, ({read_time}) * {MS}, ({write_time}) * {MS}, s.wal_records::float8,
               s.wal_fpi::float8, s.wal_bytes::float8, {text}
        from {view} s left join pg_database d on d.oid = s.dbid left join pg_roles r on r.oid = s.userid
        where s.queryid is not null"""


COUNTERS = ("calls", "exec_time_s", "plan_time_s", "rows", "shared_blks_hit", "shared_blks_read",
            "shared_blks_dirtied", "shared_blks_written", "local_blks_hit", "local_blks_read", "local_blks_dirtied",
            "local_blks_written", "temp_blks_read", "temp_blks_written", "blk_read_time_s", "blk_write_time_s",
            "wal_records", "wal_fpi", "wal_bytes")


def read_statements(conn: psycopg.Connection, info: TargetInfo, with_text: bool) -> dict[StatementKey, StatementRow]:
    rows = conn.execute(statements_sql(info.statements_view, info.version_num, with_text), prepare=True).fetchall()
    out: dict[StatementKey, StatementRow] = {}
    for row in rows:
        key = StatementKey(row[0], int(row[1]), int(row[2]), bool(row[3]))
        out[key] = StatementRow(row[4], row[5], dict(zip(COUNTERS, (float(v or 0.0) for v in row[6:25]), strict=True)),
                                row[25])
    return out


def _info_view(info: TargetInfo) -> str:
    return info.statements_view.removesuffix("pg_stat_statements") + "pg_stat_statements_info"


def read_epoch(conn: psycopg.Connection, info: TargetInfo, statements: bool, views: Delta) -> ServerEpoch:
    """The postmaster's start, pg_stat_statements' last reset and evictions, and every stats_reset the views hold."""
    started = conn.execute("select pg_postmaster_start_time()").fetchone()
    epoch = ServerEpoch(started_at=str(plain(started[0])) if started else "")
    if statements:
        row = conn.execute(f"select dealloc, stats_reset from {_info_view(info)}").fetchone()
        if row:
            epoch.statements_dealloc, epoch.statements_reset = int(row[0]), str(plain(row[1]))
    for view, rows in views.items():
        for view_row in rows:
            if "stats_reset" in view_row:  # null until the first reset
                key = " ".join(str(view_row.get(k)) for k in KEYS.get(view, ()))
                epoch.resets[f"{view} {key}".strip()] = str(view_row["stats_reset"] or "")
    return epoch


def read_views(conn: psycopg.Connection, info: TargetInfo) -> Delta:
    """The cumulative views of the whole server as they are now (every database; the views this version has)."""
    out: Delta = {
        "database": _rows(conn, "select * from pg_stat_database"),
        "wal": _rows(conn, "select * from pg_stat_wal"),
        "bgwriter": _rows(conn, "select * from pg_stat_bgwriter"),
    }
    if info.has("pg_stat_io"):
        out["io"] = _rows(conn, "select * from pg_stat_io")
    if info.has("pg_stat_checkpointer"):
        out["checkpointer"] = _rows(conn, "select * from pg_stat_checkpointer")
    return out


VIEW_KEYS = KEYS


ACTIVITY_SQL = """
    select pid, coalesce(datname::text, ''), coalesce(usename::text, ''), coalesce(application_name, ''),
           coalesce(host(client_addr), ''), coalesce(backend_type, ''), coalesce(state, ''),
           coalesce(wait_event_type, ''), coalesce(wait_event, ''), coalesce(query_id::text, ''),
           state like 'idle in transaction%%', leader_pid
    from pg_stat_activity where pid <> all(%s)"""


@dataclass(frozen=True)
class ActivityRow:
    pid: int
    database: str
    user: str
    application: str
    client: str
    backend_type: str
    state: str
    wait_event_type: str
    wait_event: str
    query_id: str
    in_transaction: bool
    leader_pid: int | None


def sample_activity(conn: psycopg.Connection, own_pids: list[int]) -> list[ActivityRow]:
    """Every server process pg_stat_activity shows but the collector's own sessions."""
    rows = conn.execute(ACTIVITY_SQL, (own_pids,), prepare=True).fetchall()
    return [ActivityRow(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], bool(r[10]),
                        int(r[11]) if r[11] is not None else None) for r in rows]


def time_round_trip(conn: psycopg.Connection) -> float:
    """Seconds for one empty statement to go to the server and back: the server plans and executes nothing for it
    (pg_stat_database still counts it as a committed transaction). libpq's own blocking call keeps the collector's
    Python out of the timing, as far as it can be."""
    start = time.perf_counter()
    result = conn.pgconn.exec_(b"")
    elapsed = time.perf_counter() - start
    if result.status != pq.ExecStatus.EMPTY_QUERY:
        raise psycopg.OperationalError(conn.pgconn.error_message.decode(errors="replace").strip()
                                       or "the server did not answer an empty statement")
    return elapsed


def own_query_ids(conn: psycopg.Connection, info: TargetInfo, with_text: bool) -> list[str]:
    """The query ids of the collector's own reading statements, as the server computes them (EXPLAIN VERBOSE shows
    it), so that the analysis can set the collector's own load apart from the workloads'; statements the server
    gives no id (compute_query_id off) are left out. Each EXPLAIN plans the statement without running it."""
    statements: list[tuple[str, Any]] = [
        (ACTIVITY_SQL, ([0],)), ("select pg_postmaster_start_time()", None),
        ("select * from pg_stat_database", None), ("select * from pg_stat_wal", None),
        ("select * from pg_stat_bgwriter", None), ("select current_setting('block_size')::int", None),
        (FLUSH_SQL, None), (SqlReader.READ_SQL, (["/proc/stat"], [1]))]
    if info.has("pg_stat_io"):
        statements.append(("select * from pg_stat_io", None))
    if info.has("pg_stat_checkpointer"):
        statements.append(("select * from pg_stat_checkpointer", None))
    if info.has("pg_stat_statements"):
        statements += [(statements_sql(info.statements_view, info.version_num, with_text), None),
                       (f"select dealloc, stats_reset from {_info_view(info)}", None)]
    ids = []
    for sql, params in statements:
        try:
            row = conn.execute("explain (verbose, format json) " + sql, params).fetchone()
        except psycopg.Error:
            continue
        identifier = row[0][0].get("Query Identifier") if row and row[0] else None
        if identifier is not None:
            ids.append(str(identifier))
    return ids


def block_size(conn: psycopg.Connection) -> int:
    row = conn.execute("select current_setting('block_size')::int").fetchone()
    return int(row[0]) if row else 8192


def role_facts(conn: psycopg.Connection) -> tuple[str, bool, bool]:
    """The session's role, whether it may read every role's statistics (superuser or pg_monitor, through
    pg_read_all_stats), and whether it may read pg_stat_database at all."""
    role, all_stats = conn.execute("select current_user::text, (select rolsuper from pg_roles where rolname = "
                                   "current_user) or pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')"
                                   ).fetchone() or ("", False)
    try:
        conn.execute("select count(*) from pg_stat_database").fetchone()
        readable = True
    except psycopg.errors.InsufficientPrivilege:
        readable = False
    return str(role), bool(all_stats), readable


def statements_hint(info: TargetInfo) -> str:
    """Why pg_stat_statements cannot be read and what a DBA does about it, as one sentence."""
    why = info.why_not("pg_stat_statements")
    return (f"pg_stat_statements cannot be read ({why}), so no statement is collected; a database administrator "
            "enables it with shared_preload_libraries = 'pg_stat_statements' (a restart) and CREATE EXTENSION "
            "pg_stat_statements in this database, and observation continues meanwhile with activity sampling and "
            "pg_stat_database.")


# open-ended: one pg_stat_* row as the server returns it (columns differ by version)
def row_key(view: str, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(c) for c in KEYS.get(view, ()))


__all__ = ["GAUGES", "MONITOR_ROLE", "OBSERVE_APPLICATION", "ActivityRow", "Row", "ServerEpoch", "StatementKey",
           "StatementRow", "block_size", "own_query_ids", "read_epoch", "read_statements", "read_views", "role_facts",
           "sample_activity", "statements_hint"]
