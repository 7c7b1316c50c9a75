"""tpcc: a TPC-C-like OLTP workload (HammerDB's TPROC-C, BenchBase's tpcc): nine tables sized by warehouses, the
five transactions in the standard mix, server-side as PL/pgSQL functions or client-side as statements, optionally
with the specification's keying and think times. Not an audited TPC result."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from capmark.engines.postgres.engine import POSTGRESQL
from capmark.engines.postgres.rows import one_row
from capmark.workloads.base import DataSize, ParamSpec, ParamValue, UserModel, Workload, kpms
from capmark.workloads.tpcc import checks, client, load, server, spec
from capmark.workloads.tpcc.schema import TABLES
from capmark.workloads.tpcc.statements import STATEMENTS

MAX_WAREHOUSES = 1_000  # about 110 GB: beyond it a load from one machine takes hours
DEFAULT_WAREHOUSES = 1  # about 130 MB and 10 s to load on a 2-core machine: the quick path
WARM_ALWAYS = ("tpcc_item", "tpcc_warehouse", "tpcc_district")  # small and hot in either variant
TPCC_KPMS = kpms("nopm", "tpm", "nopm_per_core", "rollback_pct", "efficiency_pct", "wal_kb_per_txn")


def _on(value: ParamValue) -> bool:
    return value == "on"


def _own_data(control: Any, dsn: str, params: dict[str, ParamValue], say: Callable[[str], None]) -> list[str]:
    """Load the tables unless the warehouse count is in place, then say whether the test is the cached or the
    IO-bound variant: whether the tables and their indexes fit in the server's buffer cache."""
    warehouses = int(params["warehouses"])
    notes = []
    report = load.load(control, dsn, warehouses, say)
    if report is not None:
        say(report.sentence() + ".")
        notes.append(report.sentence())
    data_bytes, cache_bytes = one_row(control.execute(
        "select (select sum(pg_total_relation_size(c.oid)) from pg_class c join pg_namespace n "
        "on n.oid = c.relnamespace where n.nspname = 'capmark' and c.relname = any(%s) and c.relkind = 'r'), "
        "pg_size_bytes(current_setting('shared_buffers'))", (list(TABLES),)))
    variant = "cached" if data_bytes <= cache_bytes else "IO-bound"
    if variant == "cached":  # start warm; an IO-bound variant's tables would only pass through the cache
        POSTGRESQL.warm_cache(control, [t for t in TABLES if t not in WARM_ALWAYS], say)
    notes.append(f"{variant} variant: {warehouses} warehouse{'s take' if warehouses != 1 else ' takes'} "
                 f"{data_bytes / 2**20:,.0f} MB with indexes, shared_buffers is {cache_bytes / 2**20:,.0f} MB"
                 + ("" if variant == "cached" else "; the skewed access keeps the hot rows cached until the data is "
                    "several times the cache: each step's buffer hit % and physical reads say how much reached "
                    "storage"))
    say(f"tpcc: {notes[-1]}.")
    return notes


def _verify(control: Any, params: dict[str, ParamValue]) -> list[str] | None:
    return checks.violations(control) if _on(params["check"]) else None


def _users(params: dict[str, ParamValue]) -> UserModel | None:
    if not _on(params["keying"]):
        return None
    weights = {k: pct / 100 for k, pct in spec.MIX_PCT.items()}
    names = list(spec.MIX_PCT)

    def think(rng: random.Random, kind: int) -> float:  # kind: the type chosen, one of the mix's
        return spec.think_time(rng, names[kind])

    return UserModel(choose=spec.pick_type, keying_s=tuple(spec.KEYING_S[k] for k in names), think=think,
                     run=client.run_type,
                     mean_pause_s=sum(w * (spec.KEYING_S[k] + spec.THINK_MEAN_S[k]) for k, w in weights.items()))


def _per_unit(params: dict[str, ParamValue], size: DataSize) -> dict[str, float]:
    """The warehouse count, and the specification's ceiling on NOPM where keying and think times bound it."""
    warehouses = int(params["warehouses"])
    out = {"warehouses": float(warehouses)}
    if _on(params["keying"]):
        out["max_nopm"] = spec.MAX_NOPM_PER_WAREHOUSE * warehouses
    return out


TPCC = Workload(
    name="tpcc", family="TPC-C-like",
    description="TPC-C-like OLTP (not an audited TPC result): new order 45 %, payment 43 %, order status, delivery "
                "and stock level 4 % each, on 9 tables of about 110 MB per warehouse; NOPM and TPM.",
    unit="transaction", throughput_label="tps", txn_types=spec.TYPES, procedure=server.PROCEDURE,
    procedure_sql=server.SLICE_SQL, helpers_sql=server.HELPERS_SQL,
    client_statements=STATEMENTS, client_unit=client.unit,
    params=(ParamSpec("warehouses", DEFAULT_WAREHOUSES, "warehouses (about 110 MB each); jobs are dealt to them "
                      "round-robin", minimum=1, maximum=MAX_WAREHOUSES),
            ParamSpec("keying", "off", "on: the specification's keying and think times (client-side; each job is "
                      "one terminal user)", choices=("off", "on")),
            ParamSpec("check", "off", "on: check the specification's consistency conditions 1-4 after the test",
                      choices=("off", "on"))),
    kpms=TPCC_KPMS, writes=True, per_unit=_per_unit,
    warm=WARM_ALWAYS,
    own_data=_own_data, verify=_verify, users=_users)

WORKLOADS = (TPCC,)
