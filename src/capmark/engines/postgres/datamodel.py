"""The shared data model in schema capmark, sized by --scale; set up once per scale, in one transaction.

One model serves every family: items (SRV lookups and scans), accounts with their bookings (TP,
~25 rows per account), customers' call records (~125 rows per customer), a WAL ring (WAL workloads
update rows of about 1 kB in place), a load table (DL), the Stress table and a block table for STO; and
pgbench's four tables, made and filled as `pgbench -i` makes them, for pgbench's built-in workloads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import psycopg

from capmark.engines.base import DataSize
from capmark.engines.postgres import check_privileges
from capmark.engines.postgres.rows import one_row
from capmark.errors import CapmarkError

MODEL_VERSION = 4  # 4: pgbench's tables (a model of version 3 lacks them, so it is rebuilt)
RING_JOBS = 32  # jobs beyond this share WAL ring slots (job % RING_JOBS)
SEQUENCES = ("dl_row_seq", "stress_seq")

# pgbench's rows per unit of its scale factor (pgbench.c: nbranches, ntellers, naccounts): --scale N is pgbench's -s N
PGBENCH_BRANCHES = 1
PGBENCH_TELLERS = 10
PGBENCH_ACCOUNTS = 100_000
# pgbench -i declares the table options with fillfactor 100 (its default -F) on every table but history
PGBENCH_FILLFACTOR = 100
# From this scale pgbench -i makes aid bigint (SCALE_32BIT_THRESHOLD); capmark's largest --scale stays below it,
# so aid is int as pgbench makes it at every scale capmark accepts.
PGBENCH_BIGINT_SCALE = 20_000


def _pgbench_tables(scale: int) -> dict[str, tuple[str, str | None, list[str]]]:
    """pgbench's tables as PostgreSQL 18's `pgbench -i -I dtGvp -s scale` makes them: its columns (filler is NULL but
    in accounts, where it is blank-padded), fillfactor declared on all but history, rows generated on the server,
    primary keys added after the fill; in schema capmark instead of public."""
    ff = f" with (fillfactor={PGBENCH_FILLFACTOR})"
    return {
        "pgbench_branches": (
            "create table capmark.pgbench_branches (bid int not null, bbalance int, filler char(88))" + ff,
            f"insert into capmark.pgbench_branches (bid, bbalance) select bid, 0 "
            f"from generate_series(1, {PGBENCH_BRANCHES * scale}) as bid",
            ["alter table capmark.pgbench_branches add primary key (bid)"]),
        "pgbench_tellers": (
            "create table capmark.pgbench_tellers (tid int not null, bid int, tbalance int, filler char(84))" + ff,
            f"insert into capmark.pgbench_tellers (tid, bid, tbalance) select tid, (tid - 1) / {PGBENCH_TELLERS} + 1, 0 "
            f"from generate_series(1, {PGBENCH_TELLERS * scale}) as tid",
            ["alter table capmark.pgbench_tellers add primary key (tid)"]),
        "pgbench_accounts": (
            "create table capmark.pgbench_accounts (aid int not null, bid int, abalance int, filler char(84))" + ff,
            f"insert into capmark.pgbench_accounts (aid, bid, abalance, filler) "
            f"select aid, (aid - 1) / {PGBENCH_ACCOUNTS} + 1, 0, '' "
            f"from generate_series(1, {PGBENCH_ACCOUNTS * scale}) as aid",
            ["alter table capmark.pgbench_accounts add primary key (aid)"]),
        "pgbench_history": (
            "create table capmark.pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, "
            "filler char(22))",
            None,
            []),
    }


# table -> (DDL, fill statement or None, statements after the fill: secondary indexes, primary keys, sequences)
def _tables(size: DataSize) -> dict[str, tuple[str, str | None, list[str]]]:
    return {
        "item": (
            "create table capmark.item (id int primary key, grp int not null, qty int not null, "
            "price numeric(10,2) not null, name text not null, pad text not null)",
            # bigint products: g * 7919 overflows int from g = 271,197 (scale 3)
            f"insert into capmark.item select g, g % 1000, (g::bigint * 7919) % 100, "
            f"((g::bigint * 31) % 10000) / 100.0, "
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
        **_pgbench_tables(size.pgbench_scale),
    }


# table -> (column, its expected maximum at a size): the largest key of a filled table that no workload inserts into
# or deletes from, read from the end of its primary key (one index probe, whatever the table's size). A table that
# was emptied or cut short shows here; tables the workloads grow or shrink (dl_row, stress_item, pgbench_history) are
# only checked to exist (the stress tests put stress_item back as set up before each test).
def _key_probes(size: DataSize) -> dict[str, tuple[str, int]]:
    return {"item": ("id", size.items), "account": ("id", size.accounts),
            "booking": ("account_id", size.booking_accounts), "callrec": ("customer_id", size.call_customers),
            "wal_ring": ("job", RING_JOBS - 1), "sto_block": ("id", size.sto_rows),
            "pgbench_branches": ("bid", PGBENCH_BRANCHES * size.pgbench_scale),
            "pgbench_tellers": ("tid", PGBENCH_TELLERS * size.pgbench_scale),
            "pgbench_accounts": ("aid", PGBENCH_ACCOUNTS * size.pgbench_scale)}


# sequence -> the table whose statements create it (rebuilding the table makes it anew)
SEQUENCE_OF_TABLE = {"dl_row_seq": "dl_row", "stress_seq": "stress_item"}


def damage(conn: psycopg.Connection, size: DataSize) -> dict[str, str]:
    """What the bookkeeping row promises but the schema lacks: table -> what is wrong with it, in words (empty when
    everything is in place). Cheap: a catalogue lookup per object and one index probe per filled table."""
    out: dict[str, str] = {}
    probes = _key_probes(size)
    for table in _tables(size):
        if not _exists(conn, table):
            out[table] = f"capmark.{table} is missing"
        elif table in probes:
            column, expected = probes[table]
            found = one_row(conn.execute(f"select max({column}) from capmark.{table}"))[0]
            if found is None:
                out[table] = f"capmark.{table} is empty"
            elif found != expected:
                out[table] = f"capmark.{table} holds {column} up to {found:,} instead of {expected:,}"
    for sequence, table in SEQUENCE_OF_TABLE.items():
        if table not in out and not _exists(conn, sequence):
            out[table] = f"capmark.{sequence} is missing"
    return out


def _exists(conn: psycopg.Connection, name: str) -> bool:
    return bool(one_row(conn.execute("select to_regclass(%s) is not null", (f"capmark.{name}",)))[0])


def plan(conn: psycopg.Connection, size: DataSize) -> list[str]:
    """What setup would create, as sentences; empty when the model is already in place at this size."""
    if _meta(conn) == (MODEL_VERSION, size.items, size.pgbench_scale):
        return []
    out = ["schema capmark and table capmark.meta (model bookkeeping)"]
    for table, (_ddl, fill, indexes) in _tables(size).items():
        out.append(f"table capmark.{table}" + (" (filled)" if fill else " (empty)")
                   + (f" with {len(indexes)} index(es)/sequence(s)" if indexes else ""))
    return out


def _meta(conn: psycopg.Connection) -> tuple[int, int, int] | None:
    row = conn.execute("select to_regclass('capmark.meta') is not null").fetchone()
    if not row or not row[0]:
        return None
    try:
        with conn.transaction():
            got = conn.execute("select model_version, items, pgbench_scale from capmark.meta").fetchone()
    except psycopg.Error:  # a meta table of an older model
        return None
    return tuple(got) if got else None


def setup(conn: psycopg.Connection, size: DataSize, say: Callable[[str], None] = print) -> float:
    """Create or rebuild the data model in one transaction, or only the tables of a model in place that went missing
    since; returns the seconds it took (0 when everything was in place)."""
    check_privileges(conn)
    todo = plan(conn, size)
    if not todo:
        return _repair(conn, size, say)
    tables = _tables(size)
    refuse_if_others_depend(conn, ["meta", *tables], list(SEQUENCES))
    say("capmark will create in schema capmark: " + "; ".join(todo) + ".")
    started = time.monotonic()
    with _as_owner(conn), conn.transaction():
        _ensure_schema(conn)
        _drop(conn, "table", "meta")
        conn.execute("create table capmark.meta (model_version int, items int, pgbench_scale int)")
        _build(conn, tables, list(SEQUENCES))
        conn.execute("insert into capmark.meta values (%s, %s, %s)", (MODEL_VERSION, size.items, size.pgbench_scale))
    _analyze(conn, tables)
    return time.monotonic() - started


def _repair(conn: psycopg.Connection, size: DataSize, say: Callable[[str], None]) -> float:
    """Rebuild, alone and in one transaction, the tables of a model in place that were dropped or emptied since (a
    user's DROP or TRUNCATE: the bookkeeping row still promises them), saying so; the rest is kept as it is."""
    damaged = damage(conn, size)
    if not damaged:
        return 0.0
    tables = {name: spec for name, spec in _tables(size).items() if name in damaged}
    sequences = [seq for seq, table in SEQUENCE_OF_TABLE.items() if table in tables]
    refuse_if_others_depend(conn, list(tables), sequences)
    say(f"capmark's data model is incomplete ({'; '.join(damaged.values())}): capmark rebuilds "
        f"{', '.join(f'capmark.{t}' for t in tables)}.")
    started = time.monotonic()
    with _as_owner(conn), conn.transaction():
        _build(conn, tables, sequences)
    _analyze(conn, tables)
    return time.monotonic() - started


def _build(conn: psycopg.Connection, tables: dict[str, tuple[str, str | None, list[str]]],
           sequences: list[str]) -> None:
    """Drop and make anew these tables (with their indexes) and sequences, inside the caller's transaction."""
    for sequence in sequences:
        _drop(conn, "sequence", sequence)
    for table, (ddl, fill, after) in tables.items():
        _drop(conn, "table", table)
        conn.execute(ddl)
        if fill:
            conn.execute(fill)
        for statement in after:
            conn.execute(statement)


def _analyze(conn: psycopg.Connection, tables: Iterable[str]) -> None:
    for table in tables:
        conn.execute(f"vacuum analyze capmark.{table}")


@contextmanager
def _as_owner(conn: psycopg.Connection) -> Iterator[None]:
    """A role that may not drop capmark's tables (another role built them) gets one sentence saying whom to ask."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as err:
        user = one_row(conn.execute("select current_user"))[0]
        raise CapmarkError(f"The role '{user}' may not rebuild capmark's data model ({_first_line(err)}); connect "
                           "as the owner of the tables in schema capmark, or ask their owner to drop them.") from None


def _ensure_schema(conn: psycopg.Connection) -> None:
    """CREATE SCHEMA only when it is missing: even with IF NOT EXISTS it needs CREATE on the database, which a
    role working in a schema its DBA created for it need not have (check_privileges vouched for the rest)."""
    if not one_row(conn.execute("select count(*) from pg_namespace where nspname = 'capmark'"))[0]:
        conn.execute("create schema capmark")


def _drop(conn: psycopg.Connection, kind: str, name: str) -> None:
    """Drop one of capmark's objects without CASCADE, so that PostgreSQL itself refuses to take anything that
    depends on it along (refuse_if_others_depend names such objects beforehand)."""
    try:
        with conn.transaction():
            conn.execute(f"drop {kind} if exists capmark.{name}")
    except psycopg.errors.DependentObjectsStillExist as err:
        detail = (err.diag.message_detail or "").replace("\n", "; ")
        raise CapmarkError(f"capmark cannot rebuild its {kind} capmark.{name} because other objects depend on "
                           f"it ({detail}); drop or change them, then run again.") from None


# Objects that depend on capmark's tables or sequences but are not part of them: views and rules, foreign keys,
# columns of their row type, defaults using a sequence, SQL functions; and sequences owned by one of the tables'
# columns, which DROP TABLE removes even without CASCADE.
_DEPENDENTS_SQL = """
with ours as (
    select c.oid, c.reltype from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'capmark' and c.relname = any(%s))
select distinct o.type || ' ' || o.identity as what
from pg_depend d
cross join lateral (select case when d.classid = 'pg_rewrite'::regclass  -- a view's rule: name the view
                                then 'pg_class'::regclass else d.classid end as classid,
                           coalesce((select r.ev_class from pg_rewrite r
                                     where d.classid = 'pg_rewrite'::regclass and r.oid = d.objid), d.objid) as objid
                   ) dependent
cross join lateral pg_identify_object(dependent.classid, dependent.objid, 0) o
where ((d.refclassid = 'pg_class'::regclass and d.refobjid in (select oid from ours))
       or (d.refclassid = 'pg_type'::regclass and d.refobjid in (select reltype from ours)))
  and (d.deptype = 'n'
       or (d.deptype = 'a' and d.classid = 'pg_class'::regclass
           and (select relkind from pg_class s where s.oid = d.objid) = 'S'))
  and not (d.classid = 'pg_class'::regclass and d.objid in (select oid from ours))
order by what
"""


def refuse_if_others_depend(conn: psycopg.Connection, tables: list[str], sequences: list[str]) -> None:
    """Before rebuilding: refuse when an object capmark did not make depends on its tables or sequences (a
    user's view on capmark.item, say), naming it, instead of dropping it with them."""
    rows = conn.execute(_DEPENDENTS_SQL, ([*tables, *sequences],)).fetchall()
    if rows:
        names = ", ".join(row[0] for row in rows)
        raise CapmarkError(f"capmark must rebuild its tables in schema capmark, but {names} "
                           f"depend{'s' if len(rows) == 1 else ''} on them; drop or move "
                           f"{'it' if len(rows) == 1 else 'them'} (capmark drops nothing of yours), then run again.")


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def install_procedures(conn: psycopg.Connection, ddl: list[str]) -> None:
    with conn.transaction():
        for statement in ddl:
            conn.execute(statement)


def warm_cache(conn: psycopg.Connection, tables: list[str], say: Callable[[str], None] = print) -> None:
    """Load tables and their indexes into shared buffers so SRV workloads start from a warm cache."""
    has_prewarm = one_row(conn.execute(
        "select count(*) from pg_available_extensions where name = 'pg_prewarm'"))[0]
    installed = one_row(conn.execute("select count(*) from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
                                     "where e.extname = 'pg_prewarm' and n.nspname = 'capmark'"))[0]
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
