"""The shared data model in schema capmark, sized by --scale; set up once per scale, in one transaction.

One model serves every family: items (SRV lookups and scans), accounts with their bookings (TP,
~25 rows per account), customers' call records (~125 rows per customer), a WAL ring (WAL workloads
update rows of about 1 kB in place), a load table (DL), the Stress table and a block table for STO.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from capmark.engines.postgres import check_privileges
from capmark.workloads.base import DataSize

ROWS_PER_SCALE = 100_000
MODEL_VERSION = 3
RING_JOBS = 32  # jobs beyond this share WAL ring slots (job % RING_JOBS)


def size_for(scale: int) -> DataSize:
    return DataSize(items=ROWS_PER_SCALE * scale, accounts=ROWS_PER_SCALE * scale,
                    booking_accounts=10_000 * scale, call_customers=2_000 * scale, ring_rows=1_000,
                    sto_rows=200_000 * scale)


# table -> (DDL, fill statement or None, secondary indexes)
def _tables(size: DataSize) -> dict[str, tuple[str, str | None, list[str]]]:
    return {
        "item": (
            "create table capmark.item (id int primary key, grp int not null, qty int not null, "
            "price numeric(10,2) not null, name text not null, pad text not null)",
            f"insert into capmark.item select g, g % 1000, (g * 7919) % 100, ((g * 31) % 10000) / 100.0, "
            f"'item ' || g, repeat('x', 80) from generate_series(1, {size.items}) g",
            ["create index item_grp_idx on capmark.item (grp)"]),
        "account": (
            "create table capmark.account (id int primary key, branch int not null, balance numeric(14,2) not null, "
            "updated timestamptz not null, pad text not null)",
            f"insert into capmark.account select g, g % 100, 0, now(), repeat('y', 80) "
            f"from generate_series(1, {size.accounts}) g",
            []),
        "booking": (
            "create table capmark.booking (account_id int not null, seq int not null, amount numeric(12,2) not null, "
            "booked_at timestamptz not null, memo text not null, primary key (account_id, seq))",
            f"insert into capmark.booking select a, s, ((a * 13 + s * 7) % 100000) / 100.0, "
            f"timestamp '2026-01-01' + (s || ' days')::interval, 'booking ' || s "
            f"from generate_series(1, {size.booking_accounts}) a, generate_series(1, 25) s",
            []),
        "callrec": (
            "create table capmark.callrec (customer_id int not null, seq int not null, started_at timestamptz not null, "
            "duration_s int not null, cost numeric(10,4) not null, callee text not null, "
            "primary key (customer_id, seq))",
            f"insert into capmark.callrec select c, s, timestamp '2026-01-01' + (s || ' minutes')::interval, "
            f"(c * s) % 3600, ((c + s) % 1000) / 1000.0, '+41 44 ' || lpad((c * 125 + s)::text, 7, '0') "
            f"from generate_series(1, {size.call_customers}) c, generate_series(1, 125) s",
            []),
        "wal_ring": (
            "create table capmark.wal_ring (job int not null, id int not null, payload text not null, "
            "primary key (job, id)) with (fillfactor = 40)",
            f"insert into capmark.wal_ring select j, i, repeat(md5((j * 100000 + i)::text), 30) "
            f"from generate_series(0, {RING_JOBS - 1}) j, generate_series(1, {size.ring_rows}) i",
            []),
        "dl_row": (
            "create table capmark.dl_row (id bigint not null, k1 int not null, k2 int not null, "
            "payload text not null)",
            None,
            ["create unique index dl_row_id_idx on capmark.dl_row (id)",
             "create index dl_row_k1_idx on capmark.dl_row (k1)",
             "create index dl_row_k2_idx on capmark.dl_row (k2)",
             "create sequence capmark.dl_row_seq cache 1000"]),
        "sto_block": (  # ~8 rows of ~900 bytes per 8 kB block: ~200 MB per scale unit
            "create table capmark.sto_block (id int primary key, grp int not null, payload text not null)",
            f"insert into capmark.sto_block select g, g % 1000, repeat(md5(g::text), 28) "
            f"from generate_series(1, {size.sto_rows}) g",
            []),
        "stress_item": (
            "create table capmark.stress_item (id bigint primary key, val int not null, payload text not null)",
            f"insert into capmark.stress_item select g, g % 1000, repeat('s', 60) from generate_series(1, {size.items}) g",
            [f"create sequence capmark.stress_seq start {size.items + 1} cache 1000"]),
    }


def plan(conn: psycopg.Connection, size: DataSize) -> list[str]:
    """What setup would create, as sentences; empty when the model is already in place at this size."""
    if _meta(conn) == (MODEL_VERSION, size.items):
        return []
    out = ["schema capmark and table capmark.meta (model bookkeeping)"]
    for table, (_ddl, fill, indexes) in _tables(size).items():
        out.append(f"table capmark.{table}" + (" (filled)" if fill else " (empty)")
                   + (f" with {len(indexes)} index(es)/sequence(s)" if indexes else ""))
    return out


def _meta(conn: psycopg.Connection) -> tuple[int, int] | None:
    row = conn.execute("select to_regclass('capmark.meta') is not null").fetchone()
    if not row or not row[0]:
        return None
    try:
        with conn.transaction():
            got = conn.execute("select model_version, items from capmark.meta").fetchone()
    except psycopg.Error:  # a meta table of an older model
        return None
    return tuple(got) if got else None


def setup(conn: psycopg.Connection, size: DataSize, say: Callable[[str], None] = print) -> float:
    """Create or rebuild the data model in one transaction; returns the seconds it took (0 when reused)."""
    check_privileges(conn)
    todo = plan(conn, size)
    if not todo:
        return 0.0
    say("capmark will create in schema capmark: " + "; ".join(todo) + ".")
    started = time.monotonic()
    tables = _tables(size)
    with conn.transaction():
        conn.execute("create schema if not exists capmark")
        conn.execute("drop table if exists capmark.meta")
        conn.execute("create table capmark.meta (model_version int, items int)")
        conn.execute("drop sequence if exists capmark.dl_row_seq, capmark.stress_seq")
        for table, (ddl, fill, indexes) in tables.items():
            conn.execute(f"drop table if exists capmark.{table} cascade")
            conn.execute(ddl)
            if fill:
                conn.execute(fill)
            for idx in indexes:
                conn.execute(idx)
        conn.execute("insert into capmark.meta values (%s, %s)", (MODEL_VERSION, size.items))
    for table in tables:
        conn.execute(f"vacuum analyze capmark.{table}")
    return time.monotonic() - started


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
