"""DL family: data load through the buffer cache, and bulk load bypassing WAL and indexes."""

from __future__ import annotations

from capmark.workloads import client as c
from capmark.workloads import units as u
from capmark.workloads.base import ParamSpec, Workload, kpms, procedure_sql

DL_KPMS = kpms("rows_per_s", "extend_mb_per_s", "wal_kb_per_txn",
               drop=("logical_reads_per_s", "physical_reads_per_s"))
ROWS_CHOICES = (1, 2, 3, 4, 5, 10, 20, 25, 50, 100)
DIRECT_ROWS = 10_000

_buffer = u.load("rpi")
DL_BUFFER = Workload(
    name="dl-buffer", family="DL",
    description="Insert generated rows through the buffer cache into a table with 1 unique and 2 non-unique "
                "indexes; one commit per insert.",
    unit="insert", throughput_label="inserts/s", txn_types=("insert",), procedure="slice_dl_buffer",
    procedure_sql=procedure_sql("slice_dl_buffer", "rpi int := (p_params->>'rows_per_insert')::int;", _buffer.body,
                                batch=2),
    params=(ParamSpec("rows_per_insert", 1, "rows per INSERT statement", choices=ROWS_CHOICES),),
    kpms=DL_KPMS, writes=True, prepare_sql=("truncate capmark.dl_row",),
    per_unit=lambda p, s: {"rows": int(p["rows_per_insert"])},
    **c.fields(c.load("rows_per_insert")))

# each job loads into its own unlogged, index-free table, emptied at the start of every slice
_DIRECT_PROLOGUE = """
  j := (p_params->>'job')::int % 32;
  execute format('create unlogged table if not exists capmark.dl_direct_%s '
                 '(id int, k1 int, k2 int, payload text)', j);
  execute format('truncate capmark.dl_direct_%s', j);
  ins := format('insert into capmark.dl_direct_%s select g, (random() * 1000000)::int, (random() * 1000)::int, '
                'repeat(''d'', 100) from generate_series(1, %s) g', j, """ + str(DIRECT_ROWS) + """);"""

DL_DIRECT = Workload(
    name="dl-direct", family="DL",
    description=f"Bulk load: INSERT ... SELECT of {DIRECT_ROWS:,} rows into an unlogged table without indexes "
                "(no WAL, no index maintenance); one commit per load.",
    unit="load", throughput_label="loads/s", txn_types=("load",), procedure="slice_dl_direct",
    procedure_sql=procedure_sql("slice_dl_direct", "j int; ins text;", "execute ins;\n      commit;\n      {rec}",
                                prologue=_DIRECT_PROLOGUE),
    kpms=DL_KPMS, writes=True, per_unit=lambda p, s: {"rows": DIRECT_ROWS})

WORKLOADS = (DL_BUFFER, DL_DIRECT)
