"""The workload catalogue as users see it: each workload's unit, key metrics and parameters, and the suites."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from capmark.analysis.document import Document
from capmark.engines import registry as engines
from capmark.measure.kpm import COLUMNS, unit_of
from capmark.workloads import registry
from capmark.workloads.base import COMMON_KPMS, ParamValue, Workload


class ParamEntry(TypedDict):
    """One parameter of a workload: its default, the values it takes, and what it does."""

    name: str
    default: ParamValue
    allowed: str
    help: str


@dataclass(kw_only=True)
class WorkloadEntry:
    name: str
    family: str
    unit: str
    throughput_unit: str
    description: str
    key_metrics: list[str]  # the throughput unit, latency, and the KPM columns the family adds to the common ones
    kpms: list[str]
    client_side: bool
    transaction_types: list[str]
    params: list[ParamEntry]
    # per engine: "" where the workload runs there, else why it cannot mean the same (its defaults' settings)
    engines: dict[str, str]


@dataclass(kw_only=True)
class Catalogue(Document):
    """Every workload capmark can run, and the suites (`capmark list`)."""

    SCHEMA = "capmark.workloads/1"
    workloads: list[WorkloadEntry]
    suites: dict[str, list[str]]


def _key_metrics(w: Workload) -> list[str]:
    extra = [f"{COLUMNS[k].label} [{unit_of(COLUMNS[k], w.throughput_label)}]" for k in w.kpms
             if k not in COMMON_KPMS and k in COLUMNS]
    return [w.throughput_label, "ms (p50/p95/p99)", *extra]


def catalogue() -> Catalogue:
    entries = [WorkloadEntry(name=w.name, family=w.family, unit=w.unit, throughput_unit=w.throughput_label,
                             description=w.description, key_metrics=_key_metrics(w), kpms=list(w.kpms),
                             client_side=w.client_side, transaction_types=list(w.txn_types),
                             params=[ParamEntry(name=p.name, default=p.default, allowed=p.allowed(), help=p.help)
                                     for p in w.params],
                             engines={e.name: registry.unavailable(w, e, w.resolve_params({}))
                                      for e in engines.all_engines()})
               for w in registry.WORKLOADS.values()]
    return Catalogue(workloads=entries, suites={k: list(v) for k, v in registry.SUITES.items()})
