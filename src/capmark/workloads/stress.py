"""Stress (the load generator of the CITI Technical Report 98-3): short requests of one or two statements, and their mix."""

from __future__ import annotations

import random
from typing import Any

from capmark.errors import CapmarkError
from capmark.workloads import units as u
from capmark.workloads.base import DataSize, ParamSpec, Workload, kpms, procedure_sql, weighted_mix

STRESS_KPMS = kpms("wal_kb_per_txn")
STATEMENTS = {
    "query": "select id, val, payload from capmark.stress_item where id = $1",
    "insert": "insert into capmark.stress_item values (nextval('capmark.stress_seq'), $1, repeat('s', 60))",
    "update": "update capmark.stress_item set val = val + 1 where id = $1",
    "delete": "delete from capmark.stress_item where id = $1",
}
# Deletes remove rows for good and inserts add rows beyond the model's ids, so the table drifts from run to run
# and later runs would do less work per request (a query or delete of a missing id finds nothing). Before each
# stress test the table is put back as set up: ids 1..items (capmark.meta), nothing beyond, the sequence after
# them; the rows' val column is left as it is (it changes no request's work).
RESTORE_SQL = (
    """do $$
declare n bigint := (select items from capmark.meta);
begin
  delete from capmark.stress_item where id > n;
  insert into capmark.stress_item select g, g % 1000, repeat('s', 60) from generate_series(1, n) g
    where not exists (select 1 from capmark.stress_item s where s.id = g);
  perform setval('capmark.stress_seq', n + 1, false);
end $$""",
    "vacuum capmark.stress_item",  # the deleted and re-inserted rows leave no dead tuples for the steps
)
UNITS = {"query": u.STRESS_QUERY, "insert": u.STRESS_INSERT, "update": u.STRESS_UPDATE, "delete": u.STRESS_DELETE}


def _client(kind: str):
    def run(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        arg = int(rng.random() * 1000) if kind == "insert" else int(rng.random() * size.items) + 1
        session.run(kind, arg)
        return 0
    return run


def _request(kind: str) -> Workload:
    unit = UNITS[kind]
    proc = f"slice_stress_{kind}"
    return Workload(
        name=f"stress-{kind}", family="Stress", description=f"Stress {kind} requests on the stress table; "
        "1 commit each.", unit="request", throughput_label="rps", txn_types=(kind,), procedure=proc,
        procedure_sql=procedure_sql(proc, unit.declare, unit.body, batch=4),
        client_statements={kind: STATEMENTS[kind]}, client_unit=_client(kind), kpms=STRESS_KPMS,
        writes=kind != "query", warm=("stress_item",), prepare_sql=RESTORE_SQL)


def _mixed_client(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
    x = rng.random() * 100
    edge = 0
    for i, kind in enumerate(UNITS):
        edge += params[f"pct_{kind}"]
        if x < edge or i == len(UNITS) - 1:
            _client(kind)(session, rng, params, size)
            return i
    return 0


def check_weights(params: dict) -> None:
    if sum(params[f"pct_{k}"] for k in UNITS) != 100:
        raise CapmarkError("The stress-mixed weights pct_query + pct_insert + pct_update + pct_delete must add up "
                           "to 100.")


def _mixed_procedure() -> str:
    decl, body = weighted_mix([(f"pct_{kind}", unit) for kind, unit in UNITS.items()])
    return procedure_sql("slice_stress_mixed", decl, body, ntypes=4, batch=4)


# the mix's branches are in UNITS order: query, insert, update, delete
STRESS_MIXED = Workload(
    name="stress-mixed", family="Stress",
    description="Stress mix: 10 % query, 60 % update, 25 % insert, 5 % delete (weights configurable).",
    unit="request", throughput_label="rps", txn_types=tuple(UNITS), procedure="slice_stress_mixed",
    procedure_sql=_mixed_procedure(), client_statements=STATEMENTS, client_unit=_mixed_client,
    params=tuple(ParamSpec(f"pct_{k}", d, f"percent of {k} requests", minimum=0, maximum=100)
                 for k, d in (("query", 10), ("insert", 25), ("update", 60), ("delete", 5))),
    kpms=STRESS_KPMS, writes=True, warm=("stress_item",), check=check_weights, prepare_sql=RESTORE_SQL)

WORKLOADS = (*(_request(k) for k in UNITS), STRESS_MIXED)
