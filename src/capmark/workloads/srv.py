"""SRV family: CPU and memory, every block in the buffer cache."""

from __future__ import annotations

import random
from typing import Any

from capmark.workloads import client as c
from capmark.workloads import units as u
from capmark.workloads.base import DataSize, PerUnit, Workload, kpms, mix, procedure_sql
from capmark.workloads.scripts import ScriptOptions, ScriptRecipe, ScriptSource

SRV_KPMS = kpms("scan_mb_per_s")
NO_PARALLEL = {"max_parallel_workers_per_gather": "0"}


def _client_lookup(statement: str, size_of: str) -> c.ClientFn:
    if size_of:
        return c.KeyLookup(statement, size_of)

    def run(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        session.run(statement)
        return 0
    return run


def _pgbench_source(txn_type: str, statement: str, size_of: str) -> ScriptSource:
    """The lookup as a pgbench script: the same uniform key over the same rows (pgbench gets the data model's sizes
    as -D definitions)."""
    draw = f"\\set key random(1, :{size_of})\n" if size_of else ""
    return ScriptSource(txn_type, f"{txn_type} as a pgbench script", f"{draw}{statement.replace('$1', ':key')};\n")


def _pgbench_recipe(*sources: ScriptSource) -> ScriptRecipe:
    return ScriptRecipe(sources, ScriptOptions(query_mode="prepared", zero_seed_is_fresh=True))


def _srv(name: str, description: str, unit: u.Unit, batch: int, *, statement: str | None = None,
         size_of: str = "", rows: int | None = None, per_unit: PerUnit | None = None) -> Workload:
    proc = "slice_" + name.replace("-", "_")
    return Workload(
        name=name, family="SRV", description=description, unit="query", throughput_label="qps",
        txn_types=("query",), procedure=proc,
        procedure_sql=procedure_sql(proc, unit.declare, unit.body, batch=batch),
        client_statements={name: statement} if statement else {},
        client_unit=_client_lookup(name, size_of) if statement else None,
        kpms=SRV_KPMS, warm=("item", "booking", "callrec"),
        per_unit=per_unit or ((lambda p, s: {"rows": rows}) if rows else None),
        session=lambda p: NO_PARALLEL,
        pgbench_recipe=_pgbench_recipe(_pgbench_source("query", statement, size_of)) if statement else None,
    )


SRV_QUERY1 = _srv("srv-query1", "Select 1 row via primary key, all data cached: maximum query rate, minimum latency.",
                  u.QUERY1, 32, statement="select id, grp, qty, price, name from capmark.item where id = $1",
                  size_of="items", rows=1)
SRV_QUERY25 = _srv("srv-query25", "Select ~25 rows via index range (an account's bookings), all data cached.",
                   u.QUERY25, 8,
                   statement="select seq, amount, booked_at, memo from capmark.booking where account_id = $1",
                   size_of="booking_accounts", rows=25)
SRV_REPORT = _srv("srv-report", "Online report: ~125 rows via index (a customer's call records); logical reads/s.",
                  u.REPORT, 2,
                  statement="select seq, started_at, duration_s, cost, callee from capmark.callrec "
                            "where customer_id = $1",
                  size_of="call_customers", rows=125)
SRV_SCAN = _srv("srv-scan", "Full scan of a cached table (items), no parallel workers; MB/s of buffer cache scanned.",
                u.SCAN, 1, statement="select count(*), sum(qty) from capmark.item",
                per_unit=lambda p, s: {"rows": s.items})

_MIX_DECL, _MIX_BODY = mix([(1, u.QUERY1), (1, u.QUERY25), (1, u.REPORT), (1, u.SCAN)])
_MIX_CLIENT = c.weighted([(1, (w.client_statements, _client_lookup(w.name, size_of))) for w, size_of in
                          ((SRV_QUERY1, "items"), (SRV_QUERY25, "booking_accounts"), (SRV_REPORT, "call_customers"),
                           (SRV_SCAN, ""))])
SRV_MIXED = Workload(
    name="srv-mixed", family="SRV",
    description="srv-query1, srv-query25, srv-report and srv-scan, equally weighted.",
    unit="query", throughput_label="qps", txn_types=("query1", "query25", "report", "scan"),
    procedure="slice_srv_mixed", procedure_sql=procedure_sql("slice_srv_mixed", _MIX_DECL, _MIX_BODY, ntypes=4),
    kpms=SRV_KPMS, warm=("item", "booking", "callrec"), session=lambda p: NO_PARALLEL, **c.fields(_MIX_CLIENT),
    pgbench_recipe=_pgbench_recipe(*(_pgbench_source(txn_type, w.client_statements[w.name], size_of)
                                     for txn_type, w, size_of in (("query1", SRV_QUERY1, "items"),
                                                                  ("query25", SRV_QUERY25, "booking_accounts"),
                                                                  ("report", SRV_REPORT, "call_customers"),
                                                                  ("scan", SRV_SCAN, "")))),
)

WORKLOADS = (SRV_QUERY1, SRV_QUERY25, SRV_REPORT, SRV_SCAN, SRV_MIXED)
