"""TP family: short OLTP transactions, one commit each."""

from __future__ import annotations

import random
from typing import Any

from capmark.workloads.base import DataSize, ParamSpec, Workload, procedure_sql

_LIGHT_UNIT = """
      k := 1 + floor(random() * n)::int;
      if random() * 100 < upd then
        begin
          select balance into bal from capmark.account where id = k for update;
          update capmark.account set balance = balance + 1, updated = now() where id = k;
        exception when others then
          o_errors[2] := o_errors[2] + 1;
        end;
        commit;
        {rec1}
      else
        select balance into bal from capmark.account where id = k;
        commit;
        {rec0}
      end if;"""


def _light_client(session: Any, rng: random.Random, params: dict[str, int], size: DataSize) -> int:
    k = int(rng.random() * size.accounts) + 1
    if rng.random() * 100 < params["update_pct"]:
        session.begin()
        session.run("tp_light_lock", k)
        session.run("tp_light_update", k)
        session.commit()
        return 1
    session.run("tp_light_read", k)
    return 0


TP_LIGHT = Workload(
    name="tp-light",
    family="TP",
    description="Light OLTP: read 1 row via index; update_pct % of transactions lock and update it; 1 commit each.",
    unit="transaction",
    throughput_label="tps",
    txn_types=("read", "update"),
    procedure="slice_tp_light",
    procedure_sql=procedure_sql(
        "slice_tp_light",
        declare="k int; bal numeric; n int := (p_params->>'accounts')::int; "
                "upd int := (p_params->>'update_pct')::int;",
        unit=_LIGHT_UNIT,
        ntypes=2,
    ),
    client_statements={
        "tp_light_read": "select balance from capmark.account where id = $1",
        "tp_light_lock": "select balance from capmark.account where id = $1 for update",
        "tp_light_update": "update capmark.account set balance = balance + 1, updated = now() where id = $1",
    },
    client_unit=_light_client,
    params=(ParamSpec("update_pct", 20, 0, 100, "percent of transactions that update the row they read"),),
    writes=True,
)
