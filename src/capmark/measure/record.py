"""A step's Measures record (capmark.results.Measures), built once from its raw material.

The runner builds it when a step ends and stores it with the step; the store builds it on loading a run stored
before the record existed (results format < 2), taking the key figures that run stored. Every later stage reads the
record, so the step's validity, its latency distribution and its key figures are decided in one place.
"""

from __future__ import annotations

from capmark.engines import registry
from capmark.measure import kpm
from capmark.measure.validity import problems
from capmark.results import MEASURES_VERSION, HostCpu, Latency, Measures, StepResult, Traffic, wait_shares


def build(step: StepResult, per_unit: dict[str, float] | None = None, stored: kpm.Stored | None = None) -> Measures:
    """The record of a step; its key figures as the step stored them where it did (`stored`, the kpm column of a
    run measured by an earlier capmark, which keeps the figures it reported), else computed from the raw counters."""
    values, reasons = kpm.of(step, per_unit, stored)
    throughput = values.get("throughput")
    if throughput is None:
        raise ValueError("its key figures hold no throughput")
    network = step.network or {}
    return Measures(
        version=MEASURES_VERSION, units=step.units, errors=sum(step.errors.values()), elapsed_s=step.elapsed_s,
        throughput=float(throughput), latency=Latency.of(step.latency),
        latency_by_type={name: Latency.of(h) for name, h in step.histograms.items()},
        host_cpu=_host_cpu(step), traffic=Traffic(step.round_trips, _number(network.get("bytes_sent")),
                                                  _number(network.get("bytes_received"))),
        waits=wait_shares(step.waits, registry.of_delta(step.db_delta).wait_class), wait_samples=step.wait_samples,
        kpm=values, unavailable=reasons, problems=tuple(problems(step)))


def of(step: StepResult, per_unit: dict[str, float] | None = None) -> Measures:
    """The step's record: as stored, else built now and kept on the step (a step assembled in memory)."""
    if step.measures is None or step.measures.version != MEASURES_VERSION:
        step.measures = build(step, per_unit)
    return step.measures


def _host_cpu(step: StepResult) -> HostCpu | None:
    cpu = (step.os or {}).get("cpu_pct")
    if not cpu:
        return None
    return HostCpu(cores=int(step.os.get("cores") or 0), busy_pct=cpu["busy"], user_pct=cpu["user"] + cpu["nice"],
                   sys_pct=cpu["system"], idle_pct=cpu["idle"], iowait_pct=cpu["iowait"])


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
