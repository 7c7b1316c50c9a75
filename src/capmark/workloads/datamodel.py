"""The shared data model in schema capmark, sized by --scale; setup is idempotent and transactional."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from capmark.engines.postgres import check_privileges
from capmark.workloads.base import DataSize

ROWS_PER_SCALE = 100_000
MODEL_VERSION = 1


def size_for(scale: int) -> DataSize:
    return DataSize(items=ROWS_PER_SCALE * scale, accounts=ROWS_PER_SCALE * scale)


TABLES = {
    "item": """create table capmark.item (
        id int primary key, grp int not null, qty int not null, price numeric(10,2) not null,
        name text not null, pad text not null)""",
    "account": """create table capmark.account (
        id int primary key, branch int not null, balance numeric(14,2) not null,
        updated timestamptz not null, pad text not null)""",
}

FILL = {
    "item": """insert into capmark.item
        select g, g %% 1000, (g * 7919) %% 100, ((g * 31) %% 10000) / 100.0, 'item ' || g, repeat('x', 80)
        from generate_series(1, %(rows)s) g""",
    "account": """insert into capmark.account
        select g, g %% 100, 0, now(), repeat('y', 80) from generate_series(1, %(rows)s) g""",
}

INDEXES = {"item": ["create index item_grp_idx on capmark.item (grp)"]}


def plan(conn: psycopg.Connection, size: DataSize) -> list[str]:
    """What setup would create, as sentences; empty when the model is already in place at this size."""
    meta = _meta(conn)
    if meta == (MODEL_VERSION, size.items, size.accounts):
        return []
    rows = {"item": size.items, "account": size.accounts}
    out = [] if meta is not None else ["schema capmark and table capmark.meta (run bookkeeping)"]
    for table in TABLES:
        out.append(f"table capmark.{table} with {rows[table]:,} rows"
                   + (f" and {len(INDEXES[table])} secondary index(es)" if table in INDEXES else ""))
    return out


def _meta(conn: psycopg.Connection) -> tuple[int, int, int] | None:
    row = conn.execute("select to_regclass('capmark.meta') is not null").fetchone()
    if not row or not row[0]:
        return None
    got = conn.execute("select model_version, items, accounts from capmark.meta").fetchone()
    return tuple(got) if got else None


def setup(conn: psycopg.Connection, size: DataSize, say: Callable[[str], None] = print) -> bool:
    """Create or resize the data model in one transaction (no half-built schema on failure)."""
    check_privileges(conn)
    todo = plan(conn, size)
    if not todo:
        return False
    say("capmark will create in schema capmark: " + "; ".join(todo) + ".")
    with conn.transaction():
        conn.execute("create schema if not exists capmark")
        conn.execute("create table if not exists capmark.meta (model_version int, items int, accounts int)")
        for table, ddl in TABLES.items():
            conn.execute(f"drop table if exists capmark.{table}")
            conn.execute(ddl)
            rows = size.items if table == "item" else size.accounts
            conn.execute(FILL[table], {"rows": rows})
            for idx in INDEXES.get(table, []):
                conn.execute(idx)
        conn.execute("delete from capmark.meta")
        conn.execute("insert into capmark.meta values (%s, %s, %s)", (MODEL_VERSION, size.items, size.accounts))
    for table in TABLES:
        conn.execute(f"vacuum analyze capmark.{table}")
    return True


def install_procedures(conn: psycopg.Connection, ddl: list[str]) -> None:
    with conn.transaction():
        for statement in ddl:
            conn.execute(statement)


def warm_cache(conn: psycopg.Connection, tables: list[str], say: Callable[[str], None] = print) -> None:
    """Load tables and their indexes into shared buffers so SRV workloads start from a warm cache."""
    has_prewarm = conn.execute(
        "select count(*) from pg_available_extensions where name = 'pg_prewarm'").fetchone()[0]
    installed = conn.execute("select count(*) from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
                             "where e.extname = 'pg_prewarm' and n.nspname = 'capmark'").fetchone()[0]
    if has_prewarm and not installed:
        say("capmark will create extension pg_prewarm in schema capmark (to warm the buffer cache).")
        try:
            with conn.transaction():
                conn.execute("create extension if not exists pg_prewarm schema capmark")
        except psycopg.Error:
            has_prewarm = 0
    for table in tables:
        relations = [r[0] for r in conn.execute(
            "select indexrelid::regclass::text from pg_index where indrelid = %s::regclass",
            (f"capmark.{table}",)).fetchall()] + [f"capmark.{table}"]
        for rel in relations:
            if has_prewarm:
                conn.execute("select capmark.pg_prewarm(%s::regclass)", (rel,))
        if not has_prewarm:
            conn.execute(f"select count(*) from capmark.{table}")
