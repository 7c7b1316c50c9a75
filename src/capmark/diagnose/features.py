"""What the signatures look at, per step: plain numbers taken once from a stored step.

Signatures work on these views only, so they can be tested on step data shaped like the figures of the AT&T
performance-signatures paper as well as on real runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from capmark.measure import kpm
from capmark.measure.demands import demands_of_test, devices, host_busy_s, per_commit, run_queue
from capmark.measure.reconcile import reconcile
from capmark.measure.validity import problems
from capmark.results import StepResult, TestResult, WaitKey

WAIT_CLASSES = ("CPU", "LWLock", "Lock", "IO", "IPC", "BufferPin", "Activity", "Timeout", "Extension")


@dataclass
class StepView:
    jobs: int
    throughput: float
    rt_mean_s: float
    rt_p95_s: float = 0.0
    valid: bool = True
    problems: list[str] = field(default_factory=list)
    cores: int = 0
    cpu_busy_pct: float | None = None
    cpu_user_pct: float | None = None
    cpu_sys_pct: float | None = None
    cpu_iowait_pct: float | None = None
    per_cpu_busy_pct: list[float] = field(default_factory=list)
    cpu_per_unit_s: float | None = None  # host busy CPU per unit
    ctxt_per_unit: float | None = None
    run_queue_waiting: float | None = None
    devices: dict[str, dict[str, float | None]] = field(default_factory=dict)  # utilization_pct, queue_length, ...
    buffer_hit_pct: float | None = None
    reads_per_unit: float | None = None
    waits: dict[str, float] = field(default_factory=dict)  # share of active samples per class (CPU, LWLock, ...)
    top_waits: list[tuple[str, float]] = field(default_factory=list)  # event, share of active samples
    wal_fsyncs_per_commit: float | None = None
    flush_share_of_commit: float | None = None  # WAL write + fsync time / commit latency
    commits_per_unit: float | None = None  # the workload's own commits (capmark's taken out) per unit of work
    series_units: list[int] = field(default_factory=list)
    background: list[dict[str, float]] = field(default_factory=list)  # per second: checkpoint, autovacuum
    memory_series: list[dict[str, Any]] = field(default_factory=list)
    instance_rss: float | None = None  # bytes, all instance processes at the end
    ram: float | None = None  # bytes
    mismatches: list[dict[str, Any]] = field(default_factory=list)  # reconciliation pairs that disagree
    elapsed_s: float = 0.0


@dataclass
class TestView:
    __test__ = False  # not a pytest class

    workload: str
    unit: str
    steps: list[StepView]
    varies: list[dict[str, Any]] = field(default_factory=list)  # demand trends: label, direction, change_pct, note

    @property
    def valid_steps(self) -> list[StepView]:
        return [s for s in self.steps if s.valid]


def _waits(step: StepResult) -> tuple[dict[str, float], list[tuple[str, float]]]:
    keys = {k: WaitKey.of(k) for k in step.waits}
    active = {k: v for k, v in step.waits.items() if keys[k].kind != "Client"}
    n = sum(active.values())
    if not n:
        return {}, []
    classes: dict[str, float] = {}
    for key, count in active.items():
        cls = keys[key].kind
        classes[cls if cls in WAIT_CLASSES else "other"] = classes.get(cls, 0.0) + count / n
    top = sorted(((k, v / n) for k, v in active.items() if k != "CPU"), key=lambda kv: -kv[1])[:5]
    return classes, top


def step_view(step: StepResult, per_unit: dict[str, float] | None = None) -> StepView:
    values, _ = kpm.of(step, per_unit)
    lat = step.latency.summary()
    units = step.units or 0
    busy = host_busy_s(step)
    classes, top = _waits(step)
    pc = per_commit(step) if step.db_delta else {}
    commits = pc.get("commits") or 0
    flush_ms = pc.get("wal_flush_ms_per_commit")
    mem_end = step.os.get("memory_end") or {}
    rss = step.os.get("rss_by_role_end") or {}
    reads = kpm.counters(step).physical_reads
    why = problems(step)
    return StepView(
        jobs=step.jobs, throughput=values["throughput"], rt_mean_s=lat["mean_s"] or 0.0, rt_p95_s=lat["p95_s"] or 0.0,
        problems=why, valid=not why, cores=int(step.os.get("cores") or 0),
        cpu_busy_pct=values.get("cpu_busy_pct"), cpu_user_pct=values.get("cpu_user_pct"),
        cpu_sys_pct=values.get("cpu_sys_pct"), cpu_iowait_pct=values.get("cpu_iowait_pct"),
        per_cpu_busy_pct=[c.get("busy", 0.0) for c in step.os.get("per_cpu_pct") or []],
        cpu_per_unit_s=busy / units if busy is not None and units else None,
        ctxt_per_unit=(step.os.get("ctxt") or 0) / units if step.os.get("ctxt") is not None and units else None,
        run_queue_waiting=run_queue(step)["waiting"], devices=devices(step),
        buffer_hit_pct=values.get("buffer_hit_pct"), reads_per_unit=reads / units if reads is not None and units else None,
        waits=classes, top_waits=top, wal_fsyncs_per_commit=pc.get("wal_fsyncs_per_commit") if commits else None,
        flush_share_of_commit=(flush_ms / 1000 / lat["mean_s"]) if flush_ms and lat["mean_s"] else None,
        commits_per_unit=commits / units if units else None,
        series_units=list(step.series_units), background=list(step.background_series),
        memory_series=list(step.memory_series), instance_rss=float(sum(rss.values())) if rss else None,
        ram=float(mem_end["MemTotal"]) if mem_end.get("MemTotal") else None,
        mismatches=[p for p in reconcile(step) if p["agree"] is False], elapsed_s=step.elapsed_s)


def test_view(test: TestResult) -> TestView:
    ok = [s for s in test.steps if s.status == "ok" and s.units]
    varies = []
    if len(ok) >= 3:
        completed = copy.copy(test)
        completed.steps = ok
        # the trend's own "key" is its label: the component's key must win
        varies = [{**r["trend"], "label": r["label"], "key": r["key"], "group": r["group"],
                   "share_pct": r.get("share_pct"), "time": r["time"]}
                  for r in demands_of_test(completed)["components"] if r["trend"]["note"]]
    return TestView(test.workload, test.unit, [step_view(s, test.per_unit) for s in ok], varies)
