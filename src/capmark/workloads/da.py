"""DA family: analytics, an aggregate after a full scan."""

from __future__ import annotations

from capmark.workloads.base import ParamSpec, Workload, kpms, procedure_sql
from capmark.workloads.sto import EVICT_BLOCKS, EVICT_SQL

DA_KPMS = kpms("rows_per_s", "scan_mb_per_s", drop=("wal_mb_per_s", "commits_per_s"))

DA_ROWSTORE = Workload(
    name="da-rowstore", family="DA",
    description="Aggregate (group by) after a full scan of a cached table, with dop parallel workers.",
    unit="query", throughput_label="qps", txn_types=("aggregate",), procedure="slice_da_rowstore",
    procedure_sql=procedure_sql(
        "slice_da_rowstore", "",
        "perform grp, count(*), sum(qty), avg(price) from capmark.item group by grp;\n      {rec}"),
    params=(ParamSpec("dop", 0, "parallel workers per query (max_parallel_workers_per_gather)", minimum=0, maximum=8),),
    kpms=DA_KPMS, warm=("item",), per_unit=lambda p, s: {"rows": s.items},
    session=lambda p: {"max_parallel_workers_per_gather": str(p["dop"]), "parallel_setup_cost": "0",
                       "parallel_tuple_cost": "0", "min_parallel_table_scan_size": "0"})

DA_STORAGE = Workload(
    name="da-storage", family="DA",
    description="The same aggregate after a full scan of the block table read from storage (evicted from shared "
                "buffers before every query where the server allows), with dop parallel workers.",
    unit="query", throughput_label="qps", txn_types=("aggregate",), procedure="slice_da_storage",
    procedure_sql=procedure_sql(
        "slice_da_storage", "evicted boolean;",
        f"{EVICT_BLOCKS}\n"
        "      perform grp, count(*), sum(length(payload)) from capmark.sto_block group by grp;\n      {rec}"),
    params=DA_ROWSTORE.params, kpms=kpms("rows_per_s", "scan_mb_per_s", "device_mb_per_s", "os_cache_read_pct",
                                         drop=("wal_mb_per_s", "commits_per_s")),
    per_unit=lambda p, s: {"rows": s.sto_rows}, session=DA_ROWSTORE.session, helpers_sql=(EVICT_SQL,))

WORKLOADS = (DA_ROWSTORE, DA_STORAGE)
