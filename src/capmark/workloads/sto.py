"""STO family: physical IO for real.

Reads must miss both caches. Shared buffers: on PostgreSQL 18 the block table's buffers are evicted
(pg_buffercache_evict_relation) at the start of every slice, or of every scan for sto-read; elsewhere
the table must be larger than shared buffers (grow --scale). The OS page cache: the embedded server
reads data files with O_DIRECT (debug_io_direct=data) where the file system allows it; otherwise the
report says so and estimates the share of reads the OS cache served (database reads vs device reads).
"""

from __future__ import annotations

from typing import TypedDict

import psycopg

from capmark.engines.postgres.rows import one_row
from capmark.workloads.base import Workload, kpms, percent, procedure_sql

STO_KPMS = kpms("db_read_iops", "db_read_ms", "device_iops", "device_mb_per_s", "device_read_ms",
                "os_cache_read_pct", drop=("wal_mb_per_s", "commits_per_s"))

EVICT_SQL = """
create or replace function capmark.sto_evict(rel regclass) returns boolean language plpgsql as $$
begin
  -- pg_buffercache_evict_relation exists from PostgreSQL 18, in the schema pg_buffercache was created in
  perform capmark.pg_buffercache_evict_relation(rel);
  return true;
exception when undefined_function or insufficient_privilege or invalid_schema_name then
  return false;
end $$;"""

# Without eviction a step still reads from storage when the table is large enough for shared buffers not to
# hold it: a sequential scan of a table over a quarter of shared buffers goes through a small ring of buffers
# (PostgreSQL's bulk-read strategy), so nearly every block is read again; a random read misses with
# probability 1 - buffers / table, so a table 4 x shared buffers sends three reads in four to storage.
SCAN_RING_FRACTION = 0.25
RANDOM_MISS_FACTOR = 4.0
SCANS = ("sto-read", "da-storage")  # workloads whose units scan the whole block table
BLOCK_TABLE = "capmark.sto_block"

_N = "n_sto int := (p_params->>'sto_rows')::int;"
EVICT_BLOCKS = "evicted := capmark.sto_evict('capmark.sto_block');"

STO_READ = Workload(
    name="sto-read", family="STO", description="Sequential scan of the block table from storage: MB/s, IOPS.",
    unit="scan", throughput_label="scans/s", txn_types=("scan",), procedure="slice_sto_read",
    procedure_sql=procedure_sql("slice_sto_read", "c bigint; evicted boolean;",
                                f"{EVICT_BLOCKS}\n"
                                "      select count(*) + sum(grp) into c from capmark.sto_block;\n      {rec}"),
    kpms=kpms("scan_mb_per_s", "db_read_iops", "db_read_ms", "device_iops", "device_mb_per_s", "device_read_ms",
              "os_cache_read_pct", drop=("wal_mb_per_s", "commits_per_s")),
    helpers_sql=(EVICT_SQL,), session=lambda p: {"max_parallel_workers_per_gather": "0"},
    per_unit=lambda p, s: {"rows": s.sto_rows})

STO_RANDOM = Workload(
    name="sto-random", family="STO",
    description="Random index reads (write_pct % also update the row) on the block table, from storage: IOPS, "
                "IO time.",
    unit="transaction", throughput_label="tps", txn_types=("read", "write"), procedure="slice_sto_random",
    procedure_sql=procedure_sql(
        "slice_sto_random", f"k int; v int; evicted boolean; {_N} wp int := (p_params->>'write_pct')::int;",
        """
      k := 1 + floor(random() * n_sto)::int;
      if random() * 100 < wp then
        update capmark.sto_block set grp = grp + 1 where id = k;
        commit;
        {rec1}
      else
        select grp into v from capmark.sto_block where id = k;
        commit;
        {rec0}
      end if;""", ntypes=2, prologue=EVICT_BLOCKS),
    params=(percent("write_pct", 0, "percent of transactions that update the row they read"),),
    kpms=STO_KPMS, writes=True, helpers_sql=(EVICT_SQL,))

STO_SCATTER = Workload(
    name="sto-scatter", family="STO",
    description="Random block writes by the foreground: update a random row, then write its dirty block out "
                "from the backend (buffer eviction): blocks/s, IOPS, MB/s.",
    unit="block write", throughput_label="blocks/s", txn_types=("write",), procedure="slice_sto_scatter",
    procedure_sql=procedure_sql(
        "slice_sto_scatter", f"k int; evicted boolean; {_N}",
        f"""
      k := 1 + floor(random() * n_sto)::int;
      update capmark.sto_block set grp = grp + 1 where id = k;
      commit;
      {EVICT_BLOCKS}
      {{rec}}""", prologue=EVICT_BLOCKS),
    kpms=kpms("backend_blocks_per_s", "written_mb_per_s", "device_iops", "device_mb_per_s",
              drop=("wal_mb_per_s", "commits_per_s")),
    writes=True, helpers_sql=(EVICT_SQL,))

WORKLOADS = (STO_READ, STO_RANDOM, STO_SCATTER)


def evicts(workload: Workload) -> bool:
    """Does this workload evict the block table from shared buffers to read it from storage?"""
    return EVICT_SQL in workload.helpers_sql


class Eviction(TypedDict):
    """Whether the step's units read from storage, as the step stores it (instruments.eviction)."""

    evicted: bool  # the block table was evicted from shared buffers before the units
    reason: str  # why not
    table_bytes: int
    shared_buffers_bytes: int
    measures_storage: bool  # most reads still reach storage
    note: str  # for the step's notes ('' when evicted)


def eviction_status(conn: psycopg.Connection, workload: Workload) -> Eviction:
    """Try the eviction the workload relies on, once, before the step; when the server cannot evict, say why
    and whether the step still reads from storage (the table far larger than shared buffers) or not."""
    evicted = bool(one_row(conn.execute("select capmark.sto_evict(%s::regclass)", (BLOCK_TABLE,)))[0])
    table, buffers = one_row(conn.execute(
        "select pg_relation_size(%s::regclass), (select setting::bigint * 8192 from pg_settings "
        "where name = 'shared_buffers')", (BLOCK_TABLE,)))
    if evicted:
        return Eviction(evicted=True, reason="", table_bytes=table, shared_buffers_bytes=buffers, measures_storage=True,
                        note="")
    reason = _why_not_evicted(conn)
    big_enough = table > (SCAN_RING_FRACTION if workload.name in SCANS else RANDOM_MISS_FACTOR) * buffers
    sizes = f"the table ({table / 2**20:.0f} MB) and shared buffers ({buffers / 2**20:.0f} MB)"
    if big_enough:
        note = (f"Shared buffers were not evicted before the units ({reason}); {sizes} are such that most reads "
                "still reach storage, but some are served from shared buffers.")
    else:
        note = (f"Shared buffers were not evicted before the units ({reason}): with {sizes}, this step measures "
                "shared buffers, not storage. Use PostgreSQL 18 with pg_buffercache in schema capmark, or grow "
                "--scale until the table is far larger than shared buffers.")
    return Eviction(evicted=False, reason=reason, table_bytes=table, shared_buffers_bytes=buffers,
                    measures_storage=big_enough, note=note)


def _why_not_evicted(conn: psycopg.Connection) -> str:
    version = int(one_row(conn.execute("select current_setting('server_version_num')"))[0])
    if version < 180000:
        return f"pg_buffercache_evict_relation exists from PostgreSQL 18; this server runs {version // 10000}"
    installed = one_row(conn.execute(
        "select to_regprocedure('capmark.pg_buffercache_evict_relation(regclass)') is not null"))[0]
    if not installed:
        return "the extension pg_buffercache is not installed in schema capmark"
    return "capmark's role may not run pg_buffercache_evict_relation (it needs a superuser)"
