"""DIAG family: workloads that reproduce one bottleneck signature each on purpose, so that the diagnosis
can be shown (and tested) on a real database: a global lock around most of the work, and a few hot rows."""

from __future__ import annotations

import random
from typing import Any

from capmark.workloads.base import DataSize, ParamSpec, Unit, Workload, kpms, procedure_sql
from capmark.workloads.units import TABLES

SERIAL_WORK = ParamSpec("serial_work", 3000, "integers summed while holding the global lock", minimum=0,
                        maximum=1_000_000)
PARALLEL_WORK = ParamSpec("parallel_work", 500, "integers summed before taking the lock", minimum=0,
                          maximum=1_000_000)
HOT_ROWS = ParamSpec("hot_rows", 4, "how many account rows every update picks from", minimum=1, maximum=1_000_000)


def _int(name: str) -> str:
    return f"{name} int := (p_params->>'{name}')::int;"


SERIAL = Unit(f"x bigint; {_int('serial_work')} {_int('parallel_work')}", """
      select sum(g) into x from generate_series(1, parallel_work) g;
      perform pg_advisory_xact_lock(7331);
      select sum(g) into x from generate_series(1, serial_work) g;
      commit;
      {rec}""")

HOT = Unit(f"k int; {_int('hot_rows')}", """
      k := 1 + floor(random() * hot_rows)::int;
      begin
        update capmark.account set balance = balance + 1 where id = k;
      exception when others then
        o_errors[{err}] := o_errors[{err}] + 1;
      end;
      commit;
      {rec}""")

# Client side (and so on MySQL/MariaDB, which runs the catalogue from the client): tp-light's update on one of the hot
# rows, then the commit in a round trip of its own, so that the row stays locked while the commit travels (InnoDB
# releases a row lock before it flushes the commit, so an autocommit update holds it only for its CPU time)
HOT_STATEMENTS = {"account_update": f"update capmark.account set {TABLES['account'].update} where id = $1"}


def _hot_update(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
    session.begin()
    session.run("account_update", 1 + int(rng.random() * int(params["hot_rows"])))
    session.commit()
    return 0


DIAG_SERIAL = Workload(
    name="diag-serial", family="DIAG",
    description="CPU work, most of it under one global advisory lock; read only, one commit (software "
                "serialization).",
    unit="transaction", throughput_label="tps", txn_types=("transaction",), procedure="slice_diag_serial",
    procedure_sql=procedure_sql("slice_diag_serial", SERIAL.declare, SERIAL.body),
    params=(SERIAL_WORK, PARALLEL_WORK), kpms=kpms())
DIAG_HOT = Workload(
    name="diag-hot", family="DIAG",
    description="Update one of hot_rows account rows and commit (lock contention on a few hot rows).",
    unit="transaction", throughput_label="tps", txn_types=("transaction",), procedure="slice_diag_hot",
    procedure_sql=procedure_sql("slice_diag_hot", HOT.declare, HOT.body), params=(HOT_ROWS,),
    client_statements=HOT_STATEMENTS, client_unit=_hot_update,
    kpms=kpms("wal_kb_per_txn"), writes=True, warm=("account",))

WORKLOADS = (DIAG_SERIAL, DIAG_HOT)
