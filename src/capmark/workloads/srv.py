"""SRV family: CPU and memory with every block in the buffer cache."""

from __future__ import annotations

import random
from typing import Any

from capmark.workloads.base import DataSize, Workload, procedure_sql

_QUERY1_UNIT = """
      k := 1 + floor(random() * n)::int;
      select id, grp, qty, price, name into r from capmark.item where id = k;
      {rec0}"""


def _query1_client(session: Any, rng: random.Random, params: dict[str, int], size: DataSize) -> int:
    session.run("srv_query1", int(rng.random() * size.items) + 1)
    return 0


SRV_QUERY1 = Workload(
    name="srv-query1",
    family="SRV",
    description="Select 1 row via primary key, all data cached: maximum query rate, minimum response time.",
    unit="query",
    throughput_label="qps",
    txn_types=("query",),
    procedure="slice_srv_query1",
    procedure_sql=procedure_sql(
        "slice_srv_query1",
        declare="k int; r record; n int := (p_params->>'items')::int;",
        unit=_QUERY1_UNIT,
        batch=32,
    ),
    client_statements={"srv_query1": "select id, grp, qty, price, name from capmark.item where id = $1"},
    client_unit=_query1_client,
    extra={"warm": ["item"]},
)
