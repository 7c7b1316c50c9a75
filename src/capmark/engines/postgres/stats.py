"""Snapshots of PostgreSQL's cumulative statistics views, taken before and after each step."""

from __future__ import annotations

from typing import Any

import psycopg

from capmark.engines import deltas
from capmark.engines.base import Delta, Row, TargetInfo
from capmark.engines.deltas import plain, total

# view -> columns identifying a row (rows are matched on these when taking deltas)
KEYS: dict[str, tuple[str, ...]] = {
    "database": ("datname",),
    "io": ("backend_type", "object", "context"),
    "wal": (),
    "bgwriter": (),
    "checkpointer": (),
    "statements": ("queryid", "userid", "toplevel"),
    "lsn": (),
    "backend_io": ("backend_type", "object", "context"),
    "backend_wal": (),
    "tables": ("relname",),
}


def _rows(conn: psycopg.Connection, sql: str, params: Any = None) -> list[Row]:
    cur = conn.execute(sql, params)
    names = [c.name for c in cur.description or []]
    return [{n: plain(v) for n, v in zip(names, row, strict=True)} for row in cur.fetchall()]


# Top statements keep up to 300 characters of each statement's text. On a shared server that would copy other
# applications' SQL (on PostgreSQL <= 15 a utility statement can carry a password), and pg_stat_statements
# knows no session, only role and database. So by default only statements run by capmark's role in this
# database that name schema capmark (every workload statement and procedure call does), or are a bare
# begin/commit/rollback, are kept: sound even when the role is shared with other applications (a superuser).
OWN_STATEMENTS = ("s.userid = (select oid from pg_roles where rolname = current_user) "
                  "and (s.query ~* '\\mcapmark\\.' or lower(s.query) in ('begin', 'commit', 'rollback'))")


def statements_rule(all_statements: bool) -> str:
    """The rule that chose which statements' text was stored, in words for the report."""
    if all_statements:
        return ("Top statements: every role's statements in this database were stored (--all-statements), "
                "including other applications' SQL text.")
    return ("Top statements: only statements run by capmark's role in this database that name schema capmark "
            "(or begin, commit, rollback) were stored; --all-statements stores every role's.")


def tracks_statements(info: TargetInfo) -> bool:
    """pg_stat_statements is loaded and its extension created: every snapshot holds the top statements."""
    return info.has("pg_stat_statements")


def nested_statements(info: TargetInfo, superuser: bool) -> dict[str, str] | str:
    """The session setting under which pg_stat_statements also counts the statements inside the server-side
    procedures (a superuser's setting; the embedded server tracks only top-level ones), or why it cannot."""
    if tracks_statements(info) and superuser:
        return {"pg_stat_statements.track": "all"}
    return "Nested statements are not tracked: needs pg_stat_statements and a superuser."


def snapshot(conn: psycopg.Connection, info: TargetInfo, backend_pids: list[int] | None = None,
             all_statements: bool = False) -> Delta:
    """One consistent reading of every view this server has; missing views are simply absent.

    The reading is one transaction that publishes its own statistics as it ends (PostgreSQL 15+), so that
    it adds exactly one transaction to the counters it brackets, whichever side of a window it is on.
    """
    with conn.transaction():
        snap = _read_views(conn, info, backend_pids, all_statements)
        flush_own_stats(conn, info)
    return snap


def _read_views(conn: psycopg.Connection, info: TargetInfo, backend_pids: list[int] | None,
                all_statements: bool) -> Delta:
    conn.execute("select pg_stat_clear_snapshot()")
    snap: Delta = {
        "database": _rows(conn, "select * from pg_stat_database where datname = current_database()"),
        "wal": _rows(conn, "select * from pg_stat_wal"),
        "bgwriter": _rows(conn, "select * from pg_stat_bgwriter"),
        "lsn": _rows(conn, "select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') as wal_lsn_bytes"),
    }
    snap["tables"] = _rows(conn, """
        select relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd, seq_scan, seq_tup_read, idx_scan,
               idx_tup_fetch, n_live_tup, n_dead_tup
        from pg_stat_user_tables where schemaname = 'capmark'""")
    if info.has("pg_stat_io"):
        snap["io"] = _rows(conn, "select * from pg_stat_io")
    if info.has("pg_stat_checkpointer"):
        snap["checkpointer"] = _rows(conn, "select * from pg_stat_checkpointer")
    if info.has("pg_stat_statements"):
        snap["statements"] = _rows(conn, f"""
            select s.*, left(s.query, 300) as query from {info.statements_view} s
            where s.dbid = (select oid from pg_database where datname = current_database())
              and s.query not like '%%pg_stat%%' and s.query not like '%%pg_current_wal_lsn%%'
              {"" if all_statements else "and " + OWN_STATEMENTS}""")
    if info.has("per_backend_stats") and backend_pids:
        snap["backend_io"] = _rows(conn, "select b.* from unnest(%s::int[]) p, pg_stat_get_backend_io(p) b",
                                   (backend_pids,))
        snap["backend_wal"] = _rows(conn, "select b.* from unnest(%s::int[]) p, pg_stat_get_backend_wal(p) b",
                                    (backend_pids,))
    return snap


# pg_stat_force_next_flush() alone may publish nothing: a backend publishes only when some relation or
# fixed-numbered statistic is pending, and its transaction counts wait for that. Reading a catalog row makes
# one pending, so the statement publishes everything this backend counted, its own transaction included.
FLUSH_SQL = "select pg_stat_force_next_flush() from pg_catalog.pg_database where datname = current_database()"


def flush_own_stats(conn: psycopg.Connection, info: TargetInfo) -> int:
    """Make this backend publish its pending statistics now (PostgreSQL 15+), so the snapshot sees them; the
    transactions that took (0 or 1), for a caller that counts its own."""
    if not info.has("force_flush"):
        return 0
    conn.execute(FLUSH_SQL)
    return 1


def delta(before: Delta, after: Delta) -> Delta:
    """after - before for every numeric column, matching rows of each view by its key columns."""
    return deltas.delta(before, after, KEYS)


__all__ = ["KEYS", "delta", "flush_own_stats", "nested_statements", "snapshot", "statements_rule", "total",
           "tracks_statements"]
