"""What the signatures look at, per step: plain numbers taken once from a stored step.

Signatures work on these views only, so they can be tested on step data shaped like the figures of the AT&T
performance-signatures paper as well as on real runs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from capmark.engines import registry
from capmark.engines.base import Engine
from capmark.measure import kpm, record
from capmark.measure.demands import demands_of_test, devices, host_busy_s, per_commit, run_queue
from capmark.measure.reconcile import reconcile
from capmark.measure.validity import full_seconds
from capmark.results import StepResult, TestResult, WaitClass, WaitKey, wait_shares

Classify = Callable[[WaitKey], WaitClass]  # an engine's wait_class


@dataclass(frozen=True)
class ProcessMemory:
    """One instance process at one memory sample."""

    role: str  # checkpointer, client backends, ...
    bytes: int  # its private memory (RSS less shared pages) where sampled, else its RSS


@dataclass(frozen=True)
class MemoryPoint:
    """The instance's processes' memory at one instant of the window."""

    t: float  # seconds into the window
    processes: dict[str, ProcessMemory]  # by pid (as stored: text)


@dataclass(frozen=True)
class Mismatch:
    """Two instruments that disagree on the same figure (a reconciliation pair, measure/reconcile.py)."""

    name: str  # which pair, e.g. "database reads vs device reads"
    ratio: float | None  # the database's side over the other side
    sentence: str  # what the disagreement means, for the user


@dataclass(frozen=True)
class DemandTrend:
    """A service demand component whose value per unit changes with load (a row of the demand table)."""

    key: str  # the component's key, e.g. cpu_client_backends_s
    label: str
    group: str  # cpu | disk | dbio | wal | network | os
    time: bool  # a time per unit, not a count or bytes that describe one
    direction: str  # rises | falls
    change_pct: float | None  # from the first to the last step
    note: str  # the trend in words
    share_pct: float | None = None  # of its group's time (None where it is no time, or nothing measured it)


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
    # how far the host's CPU per unit moved within the step, second by second (largest over smallest, less 1), while
    # the load stood still: a host whose speed swings (another tenant) moves it too. None: too few units a second
    cpu_per_unit_swing: float | None = None
    ctxt_per_unit: float | None = None
    run_queue_waiting: float | None = None
    devices: dict[str, dict[str, float | None]] = field(default_factory=dict)  # utilization_pct, queue_length, ...
    buffer_hit_pct: float | None = None
    reads_per_unit: float | None = None
    # share of the active samples (the client's left out) per neutral class: cpu, io_read, log_flush, lock, ...
    waits: dict[WaitClass, float] = field(default_factory=dict)
    # the engine's own wait keys ("Lock:transactionid", "Lock:InnoDB lock wait"), the most frequent first, with
    # their share of the active samples, and their classes: what the user looks up
    top_waits: list[tuple[str, float]] = field(default_factory=list)
    top_classes: dict[str, WaitClass] = field(default_factory=dict)
    # the jobs' sessions the sampler saw, the client's time included: a step whose jobs it saw only on the client
    # (waits empty) was sampled and waited on nothing in the server, which is not the same as not sampled
    samples_seen: int = 0
    wal_fsyncs_per_commit: float | None = None
    flush_share_of_commit: float | None = None  # WAL write + fsync time / commit latency
    commits_per_unit: float | None = None  # the workload's own commits (capmark's taken out) per unit of work
    series_units: list[int] = field(default_factory=list)
    background: list[dict[str, float]] = field(default_factory=list)  # per second: checkpoint, autovacuum
    memory_series: list[MemoryPoint] = field(default_factory=list)
    instance_rss: float | None = None  # bytes, all instance processes at the end
    ram: float | None = None  # bytes
    mismatches: list[Mismatch] = field(default_factory=list)  # reconciliation pairs that disagree
    elapsed_s: float = 0.0


@dataclass
class TestView:
    __test__ = False  # not a pytest class

    workload: str
    unit: str
    steps: list[StepView]
    varies: list[DemandTrend] = field(default_factory=list)  # the demands that change with load

    @property
    def valid_steps(self) -> list[StepView]:
        return [s for s in self.steps if s.valid]


TOP_WAITS = 5


def _waits(step: StepResult, classify: Classify
           ) -> tuple[dict[WaitClass, float], list[tuple[str, float]], dict[str, WaitClass]]:
    """The classes' shares of the active samples, and the most frequent waits (not CPU) in the engine's names."""
    classes = {k: classify(WaitKey.of(k)) for k in step.waits}
    active = {k: v for k, v in step.waits.items() if classes[k] is not WaitClass.CLIENT and v > 0}
    n = sum(active.values())
    if not n:
        return {}, [], {}
    top = sorted(((k, v / n) for k, v in active.items() if classes[k] is not WaitClass.CPU),
                 key=lambda kv: -kv[1])[:TOP_WAITS]
    return wait_shares(step.waits, classify), top, {k: classes[k] for k, _ in top}


def engine_of(test: TestResult) -> Engine:
    """The engine a stored test was measured on, from its steps' statistics (runs stored before a second engine
    existed are PostgreSQL's); where the run is at hand, registry.named(run.target["engine"]) says the same."""
    delta = next((s.db_delta for s in test.steps if s.db_delta), {})
    return registry.of_delta(delta)


# Below this many units in a second, a second's CPU per unit moves by counting alone (a few units more or less)
MIN_UNITS_PER_SECOND = 100


def _cpu_per_unit_swing(step: StepResult) -> float | None:
    """Largest over smallest of the window's per-second CPU per unit (host busy cores over units), less 1; the
    last second, which often holds units that ended just after the window, left out as the stability check does."""
    cores = step.os.get("cores")
    if not isinstance(cores, int) or cores <= 0:
        return None
    busy = [p.get("cpu_busy_pct") for p in step.os_series]
    per_unit = [b / 100 * cores / u for b, u in zip(busy, full_seconds(step.series_units), strict=False)
                if isinstance(b, int | float) and b > 0 and u >= MIN_UNITS_PER_SECOND]
    return max(per_unit) / min(per_unit) - 1 if len(per_unit) >= 2 else None


def step_view(step: StepResult, per_unit: dict[str, float] | None = None,
              classify: Classify | None = None) -> StepView:
    """classify: the engine's wait_class (default: the engine the step's statistics name)."""
    measured = record.of(step, per_unit)
    values, lat = measured.kpm, measured.latency
    units = measured.units
    busy = host_busy_s(step)
    classes, top, top_classes = _waits(step, classify or registry.of_delta(step.db_delta).wait_class)
    pc = per_commit(step) if step.db_delta else {}
    commits = pc.get("commits") or 0
    flush_ms = pc.get("wal_flush_ms_per_commit")
    mem_end = step.os.get("memory_end") or {}
    rss = step.os.get("rss_by_role_end") or {}
    reads = kpm.counters(step).physical_reads
    why = list(measured.problems)
    return StepView(
        jobs=step.jobs, throughput=measured.throughput, rt_mean_s=lat.mean_s or 0.0, rt_p95_s=lat.p95_s or 0.0,
        problems=why, valid=not why, cores=int(step.os.get("cores") or 0),
        cpu_busy_pct=values.get("cpu_busy_pct"), cpu_user_pct=values.get("cpu_user_pct"),
        cpu_sys_pct=values.get("cpu_sys_pct"), cpu_iowait_pct=values.get("cpu_iowait_pct"),
        per_cpu_busy_pct=[c.get("busy", 0.0) for c in step.os.get("per_cpu_pct") or []],
        cpu_per_unit_s=busy / units if busy is not None and units else None,
        cpu_per_unit_swing=_cpu_per_unit_swing(step),
        ctxt_per_unit=(step.os.get("ctxt") or 0) / units if step.os.get("ctxt") is not None and units else None,
        run_queue_waiting=run_queue(step)["waiting"], devices=devices(step),
        buffer_hit_pct=values.get("buffer_hit_pct"), reads_per_unit=reads / units if reads is not None and units else None,
        waits=classes, top_waits=top, top_classes=top_classes, samples_seen=sum(step.waits.values()),
        wal_fsyncs_per_commit=pc.get("wal_fsyncs_per_commit") if commits else None,
        flush_share_of_commit=(flush_ms / 1000 / lat.mean_s) if flush_ms and lat.mean_s else None,
        commits_per_unit=commits / units if units else None,
        series_units=list(step.series_units), background=list(step.background_series),
        memory_series=[MemoryPoint(float(m["t"]), {pid: ProcessMemory(str(v[0]), int(v[-1])) for pid, v in m["rss"].items()})
                       for m in step.memory_series],  # [role, rss, private], or [role, rss] in runs stored before
        instance_rss=float(sum(rss.values())) if rss else None,
        ram=float(mem_end["MemTotal"]) if mem_end.get("MemTotal") else None,
        mismatches=[Mismatch(p["name"], p["ratio"], p["sentence"]) for p in reconcile(step) if p["agree"] is False],
        elapsed_s=step.elapsed_s)


def test_view(test: TestResult, engine: Engine | None = None) -> TestView:
    """engine: the one the test was measured on (default: engine_of(test))."""
    classify = (engine or engine_of(test)).wait_class
    ok = [s for s in test.steps if s.status == "ok" and s.units]
    varies: list[DemandTrend] = []
    if len(ok) >= 3:
        completed = copy.copy(test)
        completed.steps = ok
        varies = [DemandTrend(key=r["key"], label=r["label"], group=r["group"], time=r["time"],
                              direction=r["trend"]["direction"], change_pct=r["trend"]["change_pct"],
                              note=r["trend"]["note"], share_pct=r.get("share_pct"))
                  for r in demands_of_test(completed)["components"] if r["trend"]["note"]]
    return TestView(test.workload, test.unit, [step_view(s, test.per_unit, classify) for s in ok], varies)
