"""Service demands per workload and resource, by three estimators shown side by side (their agreement is the check).

A demand is the busy time one unit of a workload costs a resource: CPU seconds (of one core) on the CPU, busy seconds
on a device or on the WAL flush.

(a) measured: the CPU the workload's own server processes used (per-process /proc deltas charged through the
    activity samples) over its units. The host's interrupt time (irq, softirq), charged to no process, follows the
    processes' user time split. Device busy time follows bytes: a device's busy time splits into a read part and a
    write part (by its read and write times); the read part goes to the workloads by the bytes their processes read,
    the write part by the blocks they dirtied and the WAL of their row changes (the checkpointer and WAL writer write
    those on their behalf; the WAL flush is split the same way, as only a commit that changed rows waits for it).
    CPU and device time no database process explains is shown as unattributed, never spread.
(b) statements: the same CPU pool split by the workloads' shares of pg_stat_statements' execution time, and the
    device pool by their shares of the statements' blocks and WAL. Execution time includes waiting (locks, IO, the
    WAL flush), so this over-charges the CPU of workloads that wait.
(c) regression: non-negative least squares of the host's busy cores (and each device's utilisation) per interval
    on the workloads' rates, with an intercept for the background (Zhang, Cherkasova and Smirni's regression-based
    method), and bootstrap intervals by resampling the intervals. It needs the rates to vary across the intervals;
    where they move together its intervals are wide and say so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from capmark.capacity.workloads import COLLECTOR, SYSTEM, Attribution, WorkloadUse
from capmark.observations import Interval, Observation

Estimator = Literal["measured", "statements", "regression"]
ESTIMATORS: tuple[Estimator, ...] = ("measured", "statements", "regression")
ResourceKind = Literal["cpu", "device", "wal_flush"]
CPU = "cpu"
WAL_FLUSH = "wal_flush"
BUSY_DEVICE = 0.05  # a device busy less than 5 % of the peak's time queues nothing worth modelling
BOOTSTRAP_SAMPLES = 200  # enough for 90 % percentile bounds to settle to about a percent of their width
BOOTSTRAP_SEED = 29  # fixed: the same observation always gives the same intervals
BOUNDS = (5.0, 95.0)  # the bootstrap's percentile interval
INTERRUPT_MODES = ("irq", "softirq")  # host CPU time charged to no process
# The line through the unattributed CPU of the intervals (fit_unattributed_cpu) needs intervals at different loads: a
# line through fewer points, or through a load that hardly moved, has an intercept the intervals' noise (a few
# hundredths of a core each) sets rather than the clients.
MIN_FIT_INTERVALS = 6
MIN_LOAD_SPAN = 1 / 3  # the workloads' busy cores vary by at least a third of their busiest interval's


@dataclass(kw_only=True)
class UnattributedFit:
    """The host's CPU that no database process explains, interval by interval, as a line in the modelled workloads'
    own busy cores: a part that stays as it is when the load grows (clients' timers and polling, monitoring agents,
    the kernel's housekeeping) and a part that grows with it (the clients' work per transaction)."""

    fixed_cores: float  # the line's intercept, cores
    per_core: float  # its slope: cores per busy core of the workloads
    intervals: int
    low_cores: float  # the workloads' busy cores in the quietest and the busiest interval fitted
    high_cores: float


def fit_unattributed_cpu(observation: Observation, attribution: Attribution) -> UnattributedFit | None:
    """A robust line (Theil and Sen: the median of the pairwise slopes, so that an interval where a client started or
    stopped half-way does not tilt it) through the usable intervals' unattributed CPU against the modelled
    workloads' CPU, or None where the intervals are too few or their load too even to tell a fixed part from a
    growing one. The unattributed CPU of an interval is the host's busy less every process's CPU and the interrupt
    time (which the processes carry, as in the measured estimator)."""
    modelled = set(attribution.modelled)
    ours: list[float] = []
    unexplained: list[float] = []
    for i in observation.usable():
        use = attribution.intervals.get(i.ordinal)
        if use is None or i.host is None or i.length_s <= 0:
            continue
        charged = sum(w.cpu_s for w in use.workloads.values())
        if charged <= 0:
            continue  # no per-process CPU in this interval: nothing to tell the unexplained part by
        interrupts = sum(i.host.cpu_s.get(m, 0.0) for m in INTERRUPT_MODES)
        ours.append(sum(w.cpu_s for n, w in use.workloads.items() if n in modelled) / i.length_s)
        unexplained.append((i.host.busy_s - charged - interrupts) / i.length_s)
    if len(ours) < MIN_FIT_INTERVALS or max(ours) <= 0 or (max(ours) - min(ours)) < MIN_LOAD_SPAN * max(ours):
        return None
    from scipy.stats import theilslopes  # loaded on first use: a command starts without scipy

    slope, intercept, *_ = theilslopes(unexplained, ours)
    return UnattributedFit(fixed_cores=float(intercept), per_core=float(slope), intervals=len(ours),
                           low_cores=min(ours), high_cores=max(ours))


def with_interrupts(use: dict[str, WorkloadUse], interrupts: float) -> dict[str, float]:
    """Each workload's processes' CPU seconds with the share of the host's interrupt time (charged to no process)
    that its user time carries among all the processes': the measured estimator's CPU."""
    user_total = sum(w.cpu_user_s for w in use.values())
    return {n: w.cpu_s + (interrupts * w.cpu_user_s / user_total if user_total > 0 else 0.0) for n, w in use.items()}


# The CPU a unit costs moves with how busy the host is. On a virtual machine a process woken on an idle core pays for
# the core's return from its idle state, and the busier the host, the more wake-ups find a core already running; on
# the production emulator of the tests the processes took 1.50 to 1.62 times the CPU for 1.728 times the rates. The
# cost per unit of the intervals, against the host's CPU utilisation, is a line the model carries (CostByBusy).
MIN_BUSY_SPAN = 0.15  # the intervals' host utilisation spans at least this much (a fraction of the host)
MIN_LOAD_SHARE = 0.25  # an interval whose workloads did less than this share of their mean CPU work is left out: its
# cost is a ratio of two small numbers, and a few hundredths of a core of noise move it by a fifth
TURNOVER = 1.5  # an interval whose client processes number this many times the observation's median is left out: the
# CPU of connections starting and ending (about 3 ms each on the embedded server) is no unit's, and an interval where
# one set of pgbench clients ended and the next began cost a third more per unit
COST_SLOPE_CONFIDENCE = 0.90  # the line is carried only where this interval of its slope excludes no change
COST_RANGE = (0.5, 2.0)  # the line's cost at an idle and at a full host, against the window's: outside, not used


@dataclass(kw_only=True)
class CostByBusy:
    """The CPU cost of a unit of the modelled workloads as a line in the host's CPU utilisation, relative to its cost
    in the calibration window: factor(u) = 1 + per_busy x (u - at_busy). per_busy < 0: the cost falls as the host
    fills (idle wake-ups shared by more work); > 0: it rises (cores that slow each other down)."""

    per_busy: float
    low: float  # the slope's COST_SLOPE_CONFIDENCE interval, relative as per_busy
    high: float
    at_busy: float  # the window's host CPU utilisation
    intervals: int
    low_busy: float  # the host's utilisation in the quietest and the busiest interval fitted
    high_busy: float

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0

    def factor(self, busy: float) -> float:
        """The cost at host utilisation `busy` (clamped to 0..1) over the window's."""
        return 1 + self.per_busy * (min(1.0, max(0.0, busy)) - self.at_busy)


def fit_cost_by_busy(observation: Observation, attribution: Attribution, demands: dict[str, float], cores: int,
                     at_busy: float) -> CostByBusy | None:
    """A robust line (Theil and Sen) through the usable intervals' CPU cost per unit against the host's utilisation,
    or None where the intervals are too few or the host's busy too even to tell. An interval's cost is the modelled
    workloads' own CPU (with the interrupt time their user time carries, as the measured estimator charges it) over
    what their units there cost at the window's `demands` (CPU seconds per unit), so a change of mix is no change of
    cost."""
    window_work = sum(attribution.over(list(attribution.intervals))[n].units * d for n, d in demands.items()
                      if n in attribution.modelled)
    total_s = sum(i.length_s for i in observation.usable() if i.ordinal in attribution.intervals)
    if window_work <= 0 or total_s <= 0:
        return None
    mean_work = window_work / total_s  # CPU seconds per second of the modelled work over the observation
    busy: list[float] = []
    cost: list[float] = []
    clients = {i.ordinal: sum(u.processes for u in i.sessions if not u.session.is_background)
               for i in observation.usable()}
    usual = statistics.median(clients.values()) if clients else 0
    for i in observation.usable():
        use = attribution.intervals.get(i.ordinal)
        if use is None or i.host is None or i.length_s <= 0 or clients[i.ordinal] > TURNOVER * usual:
            continue
        if sum(w.cpu_user_s for w in use.workloads.values()) <= 0:
            continue  # no per-process CPU in this interval
        charged = with_interrupts(use.workloads, sum(i.host.cpu_s.get(m, 0.0) for m in INTERRUPT_MODES))
        own = sum(c for n, c in charged.items() if n in demands)
        expected = sum(w.units * demands[n] for n, w in use.workloads.items() if n in demands)
        if expected < MIN_LOAD_SHARE * mean_work * i.length_s:
            continue
        busy.append(i.host.busy_s / i.length_s / cores)
        cost.append(own / expected)
    if len(busy) < MIN_FIT_INTERVALS or max(busy) - min(busy) < MIN_BUSY_SPAN:
        return None
    from scipy.stats import theilslopes  # loaded on first use: a command starts without scipy

    slope, intercept, low, high = theilslopes(cost, busy, alpha=COST_SLOPE_CONFIDENCE)
    at = intercept + slope * at_busy
    if at <= 0:
        return None
    return CostByBusy(per_busy=float(slope / at), low=float(low / at), high=float(high / at), at_busy=at_busy,
                      intervals=len(busy), low_busy=min(busy), high_busy=max(busy))


@dataclass(kw_only=True)
class Estimate:
    """Seconds of the resource per unit of the workload; low/high: the bootstrap's 90 % interval (regression)."""

    value: float
    low: float = math.nan
    high: float = math.nan


@dataclass(kw_only=True)
class WorkloadDemand:
    name: str
    rate: float  # units per second in the window
    measured: Estimate | None
    statements: Estimate | None
    regression: Estimate | None

    def of(self, estimator: Estimator) -> Estimate | None:
        return {"measured": self.measured, "statements": self.statements, "regression": self.regression}[estimator]


@dataclass(kw_only=True)
class ResourceDemands:
    """One resource in the window: how busy it was, who used it, and what no workload explains.

    Busy figures are in servers busy (CPU: cores busy on average; a device or the WAL flush: its utilisation)."""

    resource: str  # cpu, wal_flush, or the device's name
    kind: ResourceKind
    servers: int  # cores for the CPU, 1 otherwise
    measured_busy: float  # servers busy on average over the window
    background: dict[str, float]  # servers busy by SYSTEM, COLLECTOR and unattributed (the measured estimator)
    regression_background: Estimate | None  # the regression's intercept, servers busy
    workloads: list[WorkloadDemand]
    notes: list[str] = field(default_factory=list)

    @property
    def measured_utilisation(self) -> float:
        return self.measured_busy / self.servers

    def demand(self, name: str, estimator: Estimator) -> float | None:
        for w in self.workloads:
            if w.name == name:
                e = w.of(estimator)
                return None if e is None else e.value
        return None

    def background_busy(self, estimator: Estimator) -> float:
        """Servers busy with no modelled workload's work, as the estimator sees it."""
        if estimator == "regression" and self.regression_background is not None:
            return self.regression_background.value
        if estimator == "statements":
            return self.background.get(SYSTEM, 0.0) + self.background.get(COLLECTOR, 0.0) + \
                self.background.get("unattributed", 0.0)
        return sum(self.background.values())


@dataclass(kw_only=True)
class DemandTable:
    """Every modelled resource's demands over one window."""

    ordinals: list[int]
    length_s: float
    resources: list[ResourceDemands]
    notes: list[str] = field(default_factory=list)

    def resource(self, name: str) -> ResourceDemands | None:
        return next((r for r in self.resources if r.resource == name), None)


def wal_flush_s(interval: Interval) -> float | None:
    """Seconds the WAL spent in fsync over the interval: pg_stat_wal's wal_sync_time (PostgreSQL 14-17) or pg_stat_io's
    WAL fsync_time (18), both in milliseconds and both zero unless track_wal_io_timing is on. None: not collected.
    The collector stores the views' delta rows under Interval.database["wal"] and ["io"]."""
    wal = interval.database.get("wal", interval.database.get("pg_stat_wal"))
    rows = [wal] if isinstance(wal, dict) else wal if isinstance(wal, list) else []
    times = [float(r["wal_sync_time"]) for r in rows if isinstance(r, dict) and r.get("wal_sync_time") is not None]
    if times:
        return sum(times) / 1000.0
    io = interval.database.get("io", interval.database.get("pg_stat_io"))
    if isinstance(io, list):
        fsync = [float(r.get("fsync_time") or 0.0) for r in io if isinstance(r, dict) and r.get("object") == "wal"]
        if fsync:
            return sum(fsync) / 1000.0
    return None


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def estimate(observation: Observation, attribution: Attribution, ordinals: Sequence[int],
             cores: int) -> DemandTable:
    """The demand table over the given intervals (the peak window): CPU, each busy device, the WAL flush."""
    by_ordinal = {i.ordinal: i for i in observation.usable()}
    intervals = [by_ordinal[o] for o in ordinals]
    length = sum(i.length_s for i in intervals)
    use = attribution.over(ordinals)
    modelled = [n for n in attribution.modelled if use[n].units > 0]
    rates = {n: use[n].units / length for n in modelled}
    notes = []
    dropped = [n for n in attribution.modelled if use[n].units <= 0]
    if dropped:
        notes.append(f"{', '.join(dropped)} did no unit of work in the window; their time, if any, is background")
    resources = [_cpu(intervals, use, attribution, modelled, rates, length, cores)]
    resources += _devices(observation, intervals, use, attribution, modelled, rates, length)
    wal = _wal(intervals, use, modelled, rates, length)
    if wal is not None:
        resources.append(wal)
    elif observation.target.get("engine") == "mysql":
        notes.append("the redo log's flush time is not collected from MySQL or MariaDB: the commits' wait for it "
                     "stays in each workload's residual delay")
    else:
        notes.append("the WAL flush time was not measured (track_wal_io_timing is off, or the collector had no "
                     "WAL statistics): the commits' wait for it stays in each workload's residual delay")
    return DemandTable(ordinals=list(ordinals), length_s=length, resources=resources, notes=notes)


def _cpu(intervals: list[Interval], use: dict[str, WorkloadUse], attribution: Attribution, modelled: list[str],
         rates: dict[str, float], length: float, cores: int) -> ResourceDemands:
    host_busy = sum(i.host.busy_s for i in intervals if i.host is not None)
    interrupts = sum(i.host.cpu_s.get(m, 0.0) for i in intervals if i.host is not None for m in INTERRUPT_MODES)
    charged = {n: w.cpu_s for n, w in use.items()}
    have_sessions = sum(charged.values()) > 0
    notes = []
    measured: dict[str, float] = {}
    background: dict[str, float] = {}
    if have_sessions:
        with_kernel = with_interrupts(use, interrupts)
        measured = with_kernel
        unexplained = host_busy - sum(with_kernel.values())
        background = {SYSTEM: with_kernel.get(SYSTEM, 0.0) / length, COLLECTOR: with_kernel.get(COLLECTOR, 0.0) / length,
                      "unattributed": max(0.0, unexplained) / length}
        for n in attribution.modelled:
            if n not in modelled:
                background[SYSTEM] += with_kernel.get(n, 0.0) / length
        if unexplained < 0:
            notes.append(f"the database's processes were charged {-unexplained / length:.2f} cores more than the host "
                         "measured busy (their sampling and the host's counters disagree)")
        pool = sum(with_kernel[n] for n in modelled)
    else:
        notes.append("no per-process CPU was collected: the measured estimator has nothing to charge; the statements "
                     "estimator splits all the host's busy time")
        pool = host_busy
        background = {"unattributed": 0.0}
    exec_total = sum(use[n].exec_time_s for n in modelled)
    rows = []
    reg, intercept = _regression([i.host.busy_s / i.length_s if i.host else math.nan for i in intervals],
                                 intervals, attribution, modelled)
    for n in modelled:
        units = use[n].units
        m = Estimate(value=measured[n] / units) if have_sessions else None
        s = Estimate(value=pool * _ratio(use[n].exec_time_s, exec_total) / units) if exec_total > 0 else None
        rows.append(WorkloadDemand(name=n, rate=rates[n], measured=m, statements=s, regression=reg.get(n)))
    return ResourceDemands(resource=CPU, kind="cpu", servers=cores, measured_busy=host_busy / length,
                           background=background, regression_background=intercept, workloads=rows, notes=notes)


def _devices(observation: Observation, intervals: list[Interval], use: dict[str, WorkloadUse],
             attribution: Attribution, modelled: list[str], rates: dict[str, float],
             length: float) -> list[ResourceDemands]:
    names = sorted({d.name for i in intervals if i.host for d in i.host.devices})
    out = []
    bs = observation.block_size
    host_read = sum(d.read_bytes for i in intervals if i.host for d in i.host.devices)
    host_write = sum(d.write_bytes for i in intervals if i.host for d in i.host.devices)
    session_read = sum(w.read_bytes for w in use.values())
    session_write = sum(w.write_bytes for w in use.values())
    read_weight = {n: use[n].read_bytes for n in modelled} if session_read > 0 else \
        {n: use[n].blocks_read * bs for n in modelled}
    # the WAL part by the row changes' WAL: a commit's flush writes the WAL before it, read-only WAL rides along
    write_weight = {n: use[n].blocks_dirtied * bs + use[n].changing_wal_bytes for n in modelled}
    # the share of the host's device bytes that the database's processes moved
    db_read = min(1.0, session_read / host_read) if session_read > 0 and host_read > 0 else 1.0
    db_write = min(1.0, session_write / host_write) if session_write > 0 and host_write > 0 else 1.0
    read_total = sum(read_weight.values())
    write_total = sum(write_weight.values())
    for name in names:
        devs = [d for i in intervals if i.host for d in i.host.devices if d.name == name]
        busy = sum(d.busy_s for d in devs)
        if busy / length < BUSY_DEVICE:
            continue
        rt, wt = sum(d.read_time_s for d in devs), sum(d.write_time_s for d in devs)
        rb, wb = sum(d.read_bytes for d in devs), sum(d.write_bytes for d in devs)
        read_part = busy * (_ratio(rt, rt + wt) if rt + wt > 0 else _ratio(rb, rb + wb) if rb + wb > 0 else 0.5)
        write_part = busy - read_part
        ours_read = read_part * db_read
        ours_write = write_part * db_write
        unattributed = busy - ours_read - ours_write
        stmt_weight = {n: (use[n].blocks_read + use[n].blocks_written + use[n].blocks_dirtied) * bs + use[n].wal_bytes
                       for n in modelled}
        stmt_total = sum(stmt_weight.values())
        rows = []
        series = [sum(d.busy_s for d in i.host.devices if d.name == name) / i.length_s if i.host else math.nan
                  for i in intervals]
        reg, intercept = _regression(series, intervals, attribution, modelled)
        for n in modelled:
            units = use[n].units
            part = (ours_read * _ratio(read_weight[n], read_total) if read_total > 0 else 0.0) + \
                (ours_write * _ratio(write_weight[n], write_total) if write_total > 0 else 0.0)
            s = Estimate(value=(ours_read + ours_write) * _ratio(stmt_weight[n], stmt_total) / units) \
                if stmt_total > 0 else None
            rows.append(WorkloadDemand(name=n, rate=rates[n], measured=Estimate(value=part / units), statements=s,
                                       regression=reg.get(n)))
        unexplained = busy - sum(r.measured.value * use[r.name].units for r in rows if r.measured)
        out.append(ResourceDemands(resource=name, kind="device", servers=1, measured_busy=busy / length,
                                   background={"unattributed": max(0.0, max(unattributed, unexplained)) / length},
                                   regression_background=intercept, workloads=rows))
    return out


def _wal(intervals: list[Interval], use: dict[str, WorkloadUse], modelled: list[str], rates: dict[str, float],
         length: float) -> ResourceDemands | None:
    flushes = [wal_flush_s(i) for i in intervals]
    if any(f is None for f in flushes):
        return None
    busy = sum(f for f in flushes if f is not None)
    if busy <= 0:
        return None
    weight = {n: use[n].changing_wal_bytes for n in modelled}
    total = sum(weight.values())
    if total <= 0:
        return None
    rows = [WorkloadDemand(name=n, rate=rates[n], measured=Estimate(value=busy * weight[n] / total / use[n].units),
                           statements=None, regression=None) for n in modelled]
    return ResourceDemands(resource=WAL_FLUSH, kind="wal_flush", servers=1, measured_busy=busy / length,
                           background={}, regression_background=None, workloads=rows,
                           notes=["the WAL flush's time is split by the WAL bytes each workload wrote"])


def _regression(series: list[float], intervals: list[Interval], att: Attribution, modelled: list[str],
                ) -> tuple[dict[str, Estimate], Estimate | None]:
    """NNLS of the busy series on the workloads' rates per interval, with an intercept; bootstrap bounds. Fewer
    intervals than unknowns + 2 give no estimate."""
    if len(intervals) < len(modelled) + 2 or any(math.isnan(v) for v in series):
        return {}, None
    x = np.array([[1.0, *((att.intervals[i.ordinal].workloads[n].units / i.length_s)
                          if n in att.intervals[i.ordinal].workloads else 0.0 for n in modelled)] for i in intervals])
    y = np.array(series)
    from scipy.optimize import nnls  # loaded on first use: a command starts without scipy

    coef, _ = nnls(x, y)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = []
    for _ in range(BOOTSTRAP_SAMPLES):
        pick = rng.integers(0, len(y), len(y))
        c, _ = nnls(x[pick], y[pick])
        draws.append(c)
    low, high = np.percentile(np.array(draws), BOUNDS, axis=0)
    out = {n: Estimate(value=float(coef[k + 1]), low=float(low[k + 1]), high=float(high[k + 1]))
           for k, n in enumerate(modelled)}
    return out, Estimate(value=float(coef[0]), low=float(low[0]), high=float(high[0]))
