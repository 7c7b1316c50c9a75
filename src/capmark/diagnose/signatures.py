"""Bottleneck signatures (Avritzer et al.'s method, the CITI report's and Shallahamer's database patterns): each
detector looks at a test's steps and returns a finding with its evidence, or None. Thresholds are set so that clean
runs on a noisy 2-vCPU VM stay quiet (see tests/diagnose/)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from capmark.diagnose.features import DemandTrend, Mismatch, StepView, TestView
from capmark.measure.validity import full_seconds
from capmark.results import WaitClass

Detector = Callable[[TestView], "Finding | None"]


@dataclass(frozen=True)
class Chart:
    """The evidence of a finding as series: against the steps' jobs, or against the seconds of one step's window."""

    kind: str  # jobs | time
    x: list[float]
    series: dict[str, list[float | None]]  # by label, one value per x (None: not measured there)


@dataclass(frozen=True)
class TimeRange:
    """Where in a step's window a time-series finding shows."""

    jobs: int  # the step's
    from_s: float  # seconds of the window
    to_s: float


@dataclass(kw_only=True)
class Finding:
    key: str
    name: str
    confidence: float  # 0..1
    steps: list[int]  # job counts the finding rests on
    evidence: list[str]
    meaning: str
    to_try: list[str]
    chart: Chart | None = None
    time_ranges: list[TimeRange] = field(default_factory=list)
    severity: str = "problem"  # problem: something to act on | info: expected behaviour worth knowing
    level: str = field(init=False)  # high | medium | low, from the confidence

    def __post_init__(self) -> None:
        self.level = "high" if self.confidence >= 0.75 else "medium" if self.confidence >= 0.5 else "low"

    def to_json(self) -> dict[str, object]:
        """Its fields as JSON (docs/json.md): a finding without a chart has an empty one."""
        return {**asdict(self), "chart": asdict(self.chart) if self.chart is not None else {}}


def _jobs_chart(steps: list[StepView], **series: list[float | None]) -> Chart:
    return Chart("jobs", [s.jobs for s in steps], series)


def _rise(first: float | None, last: float | None) -> float | None:
    return (last / first - 1) if first and last is not None and first > 0 else None


def _peak(steps: list[StepView]) -> StepView:
    return max(steps, key=lambda s: s.throughput)


# --- 2. retrograde throughput / poor SMP scalability ----------------------------------------------------

def retrograde(t: TestView) -> Finding | None:
    steps = t.valid_steps
    if len(steps) < 3:
        return None
    peak = _peak(steps)
    after = [s for s in steps if s.jobs > peak.jobs]
    if not after or after[-1].throughput > 0.85 * peak.throughput:
        return None
    drop = 1 - after[-1].throughput / peak.throughput
    if _time_slicing_only(peak, after, drop):
        return None  # the oversubscription signature reports it, as information within the default plan
    evidence = [f"throughput peaks at {peak.throughput:,.0f}/s with {peak.jobs} jobs and falls {drop:.0%} to "
                f"{after[-1].throughput:,.0f}/s at {after[-1].jobs} jobs"]
    conf = 0.6 + min(0.3, drop)
    cpu = _rise(peak.cpu_per_unit_s, after[-1].cpu_per_unit_s)
    if cpu is not None and cpu > 0.2:
        evidence.append(f"CPU per unit rises {cpu:.0%} from the peak to the last step")
        conf += 0.1
    if len(steps) >= 4:
        from capmark.model import usl

        try:
            fit = usl.fit([s.jobs for s in steps], [s.throughput for s in steps])
            if fit.kappa > 0 and (math.isnan(fit.se_kappa) or fit.kappa > 2 * fit.se_kappa):
                evidence.append(f"USL coherency kappa = {fit.kappa:.5f} (> 2 standard errors): the cost of keeping "
                                f"shared data coherent grows with the square of the jobs")
        except Exception:  # noqa: BLE001 - a fit that does not converge is simply no evidence
            pass
    return Finding(key="retrograde", name="Retrograde throughput (poor SMP scalability)", confidence=min(conf, 0.95),
                   steps=[peak.jobs] + [s.jobs for s in after], evidence=evidence,
                   meaning="More concurrency makes the system do less work: jobs spend more and more of their time "
                   "coordinating (locks, cache-line transfers, spinning) instead of working.",
                   to_try=["run at the peak concurrency (a connection pool sized to it)", "look for hot rows, hot index "
                    "pages or a shared counter every unit touches", "check the wait profile of the last steps"],
                   chart=_jobs_chart(steps, throughput=[s.throughput for s in steps],
                               cpu_per_unit_us=[(s.cpu_per_unit_s or 0) * 1e6 for s in steps]))


# Time-slicing more runnable jobs than cores costs CPU per unit (context switches, caches refilled by the other
# job on the core): measured on a 2-core VM from 2 to 4 jobs, CPU-bound PL/pgSQL lookups lose 9-20 % and the
# cache-hungry report queries 22-27 % (CPU per unit up 37 %). A drop within that, with the CPUs already saturated
# at the peak and no more than the default plan's 2 x cores, is oversubscription, not poor SMP scalability; the
# bound leaves 8 points above the largest drop measured. Beyond it, or with idle CPUs at the peak (jobs waiting
# on each other), it is retrograde.
TIME_SLICING_DROP = 0.35
SATURATED_BUSY_PCT = 95.0


def _time_slicing_only(peak: StepView, after: list[StepView], drop: float) -> bool:
    cores = peak.cores
    return bool(cores and peak.jobs >= cores and (peak.cpu_busy_pct or 0.0) >= SATURATED_BUSY_PCT
                and all(s.jobs <= PLANNED_OVERSUBSCRIPTION * cores for s in after) and drop <= TIME_SLICING_DROP)


# --- 3. CPU misconfiguration -----------------------------------------------------------------------------

def cpu_misconfiguration(t: TestView) -> Finding | None:
    loaded = [s for s in t.valid_steps if s.cores and s.jobs >= s.cores and s.cpu_busy_pct is not None]
    if len(loaded) < 1:
        return None
    cores = loaded[0].cores
    busy_cores = []
    for s in loaded:
        if s.per_cpu_busy_pct:
            busy_cores.append(sum(1 for c in s.per_cpu_busy_pct if c >= 60))
            if min(s.per_cpu_busy_pct) > 20:
                return None
        else:
            busy_cores.append(round((s.cpu_busy_pct or 0) / 100 * cores))
    k = max(busy_cores)
    plateau = statistics.fmean(s.cpu_busy_pct or 0 for s in loaded)
    if k >= cores or k == 0 or abs(plateau - 100 * k / cores) > 12:
        return None
    iowait = max(s.cpu_iowait_pct or 0 for s in loaded)
    if iowait > 20:
        return None
    idle_cpu = [statistics.fmean(s.per_cpu_busy_pct[i] for s in loaded if s.per_cpu_busy_pct)
                for i in range(len(loaded[0].per_cpu_busy_pct))] if loaded[0].per_cpu_busy_pct else []
    evidence = [f"with {', '.join(str(s.jobs) for s in loaded)} jobs (>= {cores} cores) the host's CPU stays at "
                f"{plateau:.0f} % = {k}/{cores} of its cores"]
    if idle_cpu:
        evidence.append("busy % per core: " + ", ".join(f"cpu{i} {v:.0f}" for i, v in enumerate(idle_cpu)))
    return Finding(key="cpu_misconfiguration", name="CPU misconfiguration (cores left idle)",
                   confidence=0.85 if idle_cpu else 0.6,
                   steps=[s.jobs for s in loaded], evidence=evidence,
                   meaning=f"Enough work is offered to keep all {cores} cores busy, but only {k} of them work: the database "
                   "(or a container, cgroup or affinity setting) is restricted to part of the machine.",
                   to_try=["check CPU affinity (taskset -p), cgroup cpu limits (cpu.max) and the container's CPU quota",
                    "check the hypervisor's vCPU allocation"],
                   chart=_jobs_chart(loaded, **{f"cpu{i} busy %": [s.per_cpu_busy_pct[i] if i < len(s.per_cpu_busy_pct)
                                                              else None for s in loaded]
                                          for i in range(len(loaded[0].per_cpu_busy_pct))}))


# --- 4. software serialization --------------------------------------------------------------------------

def software_serialization(t: TestView) -> Finding | None:
    steps = t.valid_steps
    loaded = [s for s in steps if s.cores and s.jobs >= 2 * s.cores and s.cpu_busy_pct is not None]
    if len(steps) < 3 or not loaded:
        return None
    cores = loaded[0].cores
    plateau = max(s.cpu_busy_pct or 0 for s in loaded)
    if plateau > 75:
        return None
    io = max((d.get("utilization_pct") or 0) for s in loaded for d in s.devices.values()) if any(
        s.devices for s in loaded) else 0.0
    iowait = max(s.cpu_iowait_pct or 0 for s in loaded)
    if io > 50 or iowait > 15:
        return None
    if any(s.per_cpu_busy_pct and min(s.per_cpu_busy_pct) < 15 for s in loaded):
        return None  # a core left idle is the misconfiguration signature, not this one
    peak = _peak(steps)
    last = steps[-1]
    flat_or_falling = last.throughput <= 1.1 * min((s.throughput for s in steps if s.jobs >= cores), default=0) \
        or last.throughput < peak.throughput
    if not flat_or_falling:
        return None
    cpu = _rise(steps[0].cpu_per_unit_s, last.cpu_per_unit_s)
    locks = [s.waits.get(WaitClass.LOCK, 0.0) for s in loaded]
    evidence = [f"CPU busy stays at or below {plateau:.0f} % with {', '.join(str(s.jobs) for s in loaded)} jobs on "
                f"{cores} cores, while devices are at most {io:.0f} % busy and iowait {iowait:.0f} %",
                f"throughput peaks at {peak.throughput:,.0f}/s with {peak.jobs} jobs; {last.throughput:,.0f}/s at "
                f"{last.jobs}"]
    if cpu is not None:
        evidence.append(f"CPU per unit changes {cpu:+.0%} from {steps[0].jobs} to {last.jobs} jobs")
    if max(locks) > 0.3:
        top = next((w for s in loaded for w in _lock_waits(s)), None)
        evidence.append(f"{max(locks):.0%} of the jobs' samples wait on a lock" + (f" (top: {top[0]})" if top else ""))
    conf = 0.55 + (0.15 if cpu is not None and cpu > 0.1 else 0) + (0.2 if max(locks) > 0.3 else 0)
    return Finding(key="software_serialization", name="Software serialization", confidence=min(conf, 0.95),
                   steps=[s.jobs for s in loaded],
                   evidence=evidence,
                   meaning="Work is offered to every core, but one code path lets only one job through at a time (a global "
                   "lock, a single-threaded server component), so the CPU idles while jobs queue for it.",
                   to_try=["find the serializing resource in the wait profile",
                    "shorten or split the critical section; avoid one global lock or counter per transaction"],
                   chart=_jobs_chart(steps, cpu_busy_pct=[s.cpu_busy_pct for s in steps],
                               throughput=[s.throughput for s in steps]))


# --- 5. single-threaded IO --------------------------------------------------------------------------------

def single_threaded_io(t: TestView) -> Finding | None:
    steps = [s for s in t.valid_steps if s.cpu_iowait_pct is not None and s.devices]
    hits = []
    for s in steps:
        user_sys = (s.cpu_user_pct or 0) + (s.cpu_sys_pct or 0)
        queue = max((d.get("queue_length") or 0) for d in s.devices.values())
        if (s.cpu_iowait_pct or 0) >= 30 and user_sys <= 30 and queue < 1.0 and s.jobs > 1:
            hits.append((s, queue))
    if not hits:
        return None
    s, queue = hits[-1]
    return Finding(key="single_threaded_io", name="Single-threaded IO", confidence=0.6 + 0.1 * min(3, len(hits)),
                   steps=[h[0].jobs for h in hits],
                   evidence=[f"at {s.jobs} jobs iowait is {s.cpu_iowait_pct:.0f} % of CPU time while user + system is "
                    f"{(s.cpu_user_pct or 0) + (s.cpu_sys_pct or 0):.0f} %",
                    f"the device queue holds {queue:.2f} requests on average: never more than one IO in service"],
                   meaning="Jobs wait on IO, but the IO is issued one request at a time: the device could do more in "
                   "parallel; something in the software path serializes it (one writer process, a lock around IO).",
                   to_try=["look for the serializing writer (the log flush, a single writer of dirty pages)",
                    "raise the engine's IO concurrency where it applies"],
                   chart=_jobs_chart(steps, iowait_pct=[s.cpu_iowait_pct for s in steps],
                               device_queue=[max((d.get("queue_length") or 0) for d in s.devices.values())
                                             for s in steps]))


# --- 6. lock / latch contention -----------------------------------------------------------------------------

def _lock_waits(s: StepView) -> list[tuple[str, float]]:
    """The step's most frequent waits that are locks or latches, in the engine's own names."""
    return [(k, v) for k, v in s.top_waits if s.top_classes.get(k) is WaitClass.LOCK]


def lock_contention(t: TestView) -> Finding | None:
    # Only the lock class counts: queueing for the log's latches (PostgreSQL's WALWrite, InnoDB's log_sys, the binary
    # log's group commit) is the log flush class, which commit_bound reports as group commit, not a hot spot.
    # a step whose jobs the sampler saw only on the client (a lone job is mostly there) waited on no lock: 0
    steps = [s for s in t.valid_steps if s.waits or s.samples_seen]
    if len(steps) < 2:
        return None
    share = [s.waits.get(WaitClass.LOCK, 0.0) for s in steps]
    if share[-1] < 0.3 or share[-1] < share[0] + 0.15:
        return None
    last = steps[-1]
    top = [f"{k} {v:.0%}" for k, v in _lock_waits(last)][:3]
    evidence = [f"lock and latch waits grow from {share[0]:.0%} of the jobs' samples at {steps[0].jobs} jobs to "
                f"{share[-1]:.0%} at {last.jobs} jobs" + (f" (top: {', '.join(top)})" if top else "")]
    ctx = _rise(steps[0].ctxt_per_unit, last.ctxt_per_unit)
    cpu = _rise(steps[0].cpu_per_unit_s, last.cpu_per_unit_s)
    if ctx is not None and ctx > 0.2:
        evidence.append(f"context switches per unit rise {ctx:.0%}")
    if cpu is not None and cpu > 0.1:
        evidence.append(f"CPU per unit rises {cpu:.0%}")
    return Finding(key="lock_contention", name="Lock / latch contention",
                   confidence=min(0.95, 0.5 + share[-1] / 2 + (0.1 if ctx and ctx > 0.2 else 0)),
                   steps=[s.jobs for s in steps], evidence=evidence,
                   meaning="Jobs queue for the same locks or latches more and more as they are added: the data or a shared "
                   "structure has a hot spot.",
                   to_try=["find the hot rows or pages (the top wait events)", "spread updates over more rows, "
                    "shorten transactions, or lower the concurrency to the knee"],
                   chart=_jobs_chart(steps, lock_wait_share_pct=[v * 100 for v in share],
                               throughput=[s.throughput for s in steps]))


# --- 7. poor caching ----------------------------------------------------------------------------------------

# The cache is the problem where the busy device is busy reading what the database missed, whatever the hit ratio:
# a random read through a B-tree hits 3-10 cached index pages per missed heap page, so its hit ratio stays above
# 90 % while the device does the work (sto-random measured 91 % hits, 0.34 misses per unit, 23,000 reads/s that
# were all of the device's 23,300 IOPS, 57 % busy, 28 % iowait).
POOR_HIT_PCT = 90.0  # below this share of block requests served from shared buffers, the cache is the problem
BUSY_DEVICE_PCT = 50.0  # a device at least this busy is where the misses go
READ_SHARE = 0.5  # the database's reads are at least this share of the busy device's IOPS: reading, not writing


def _reads_keep_the_device_busy(s: StepView, busiest: dict[str, float | None]) -> bool:
    iops = busiest.get("iops") or 0.0
    reads_per_s = (s.reads_per_unit or 0.0) * (s.throughput or 0.0)
    return iops > 0 and reads_per_s >= READ_SHARE * iops


def poor_caching(t: TestView) -> Finding | None:
    hits = []
    for s in t.valid_steps:
        busiest: dict[str, float | None] = (max(s.devices.values(), key=lambda d: d.get("utilization_pct") or 0)
                                            if s.devices else {})
        util = busiest.get("utilization_pct") or 0
        if s.buffer_hit_pct is None or util < BUSY_DEVICE_PCT:
            continue
        if s.buffer_hit_pct >= POOR_HIT_PCT and not _reads_keep_the_device_busy(s, busiest):
            continue
        if s.instance_rss and s.ram and s.instance_rss > 0.5 * s.ram:
            continue
        hits.append((s, util))
    if not hits:
        return None
    s, util = hits[-1]
    mem = f"; the instance's processes use {s.instance_rss / s.ram:.0%} of RAM" if s.instance_rss and s.ram else ""
    return Finding(key="poor_caching", name="Poor caching (IO bound with memory to spare)",
                   confidence=0.8 if s.instance_rss else 0.6,
                   steps=[h[0].jobs for h in hits],
                   evidence=[f"at {s.jobs} jobs the buffer hit ratio is {s.buffer_hit_pct:.1f} % and the busiest device "
                    f"is {util:.0f} % busy{mem}",
                    f"{s.reads_per_unit or 0:.1f} blocks read from outside shared buffers per unit"],
                   meaning="The working set does not fit the database cache, so units read from the device although the "
                   "machine has memory left: every miss becomes device time.",
                   to_try=["a larger buffer cache", "add or fix indexes so "
                    "fewer pages are touched", "partition or archive cold data"],
                   chart=_jobs_chart(t.valid_steps, buffer_hit_pct=[s.buffer_hit_pct for s in t.valid_steps],
                               device_busy_pct=[max((d.get("utilization_pct") or 0) for d in s.devices.values())
                                                if s.devices else None for s in t.valid_steps]))


# --- 8. commit bound / group commit ---------------------------------------------------------------------------

# A unit waits for a commit only when (nearly) every unit commits: a query of a server-side loop that commits
# once a second never waits for the flush, and its few commits make per-commit figures meaningless.
MIN_COMMITS_PER_UNIT = 0.5


def commit_bound(t: TestView) -> Finding | None:
    measured = [(s, fsyncs) for s in t.valid_steps if (fsyncs := s.wal_fsyncs_per_commit)
                and (s.commits_per_unit or 0.0) >= MIN_COMMITS_PER_UNIT]
    if len(measured) < 2:
        return None
    steps = [s for s, _ in measured]
    (first, first_fsyncs), (last, last_fsyncs) = measured[0], measured[-1]
    shares = [s.flush_share_of_commit for s in steps if s.flush_share_of_commit is not None]
    falls = last_fsyncs < 0.7 * first_fsyncs
    dominant = bool(shares) and shares[0] >= 0.3
    if not (falls and dominant) and not (dominant and first_fsyncs > 0.5 and shares[0] >= 0.5):
        return None
    evidence = [f"WAL write + fsync take {shares[0]:.0%} of the commit latency at {first.jobs} job(s)"]
    if falls:
        evidence.append(f"WAL fsyncs per commit fall from {first_fsyncs:.2f} at {first.jobs} jobs to "
                        f"{last_fsyncs:.2f} at {last.jobs}: group commit, one flush now serves "
                        f"{first_fsyncs / last_fsyncs:.1f}x as many commits")
    return Finding(key="commit_bound", name="Commit bound (WAL flush, group commit)", confidence=0.9 if falls else 0.6,
                   steps=[s.jobs for s in steps], evidence=evidence,
                   meaning="Commit latency is mostly the WAL flush to the device; with more jobs one flush serves several "
                   "commits, so throughput grows while the device does fewer, larger flushes.",
                   to_try=["a device with faster flushes (lower fsync latency: NVMe, battery-backed cache)",
                    "batch work into fewer transactions"],
                   chart=_jobs_chart(steps, fsyncs_per_commit=[fsyncs for _, fsyncs in measured],
                               flush_share_pct=[(s.flush_share_of_commit or 0) * 100 for s in steps]))


# --- 9. varying service demand ----------------------------------------------------------------------------------

# A component under a tenth of its group's time (the driver's CPU in server mode, the sampler's) can double
# without changing what a unit costs: leave it to the demand table.
MIN_VARYING_SHARE_PCT = 10.0


def host_swing_pct(t: TestView) -> float:
    """The most the host's CPU per unit moved within one step while its load stood still, in percent: a change of
    a CPU demand across the steps no larger than this is the host's speed moving, not the load."""
    swings = [s.cpu_per_unit_swing for s in t.steps if s.cpu_per_unit_swing is not None]
    return max(swings, default=0.0) * 100


def varying_demand(t: TestView) -> Finding | None:
    # service demands are times per unit; counts and bytes (flushes, reads) describe them and have signatures
    # of their own (group commit, poor caching)
    swing = host_swing_pct(t)
    big = [v for v in t.varies if v.group in ("cpu", "disk", "wal", "dbio") and v.change_pct is not None
           and v.time and abs(v.change_pct) >= 25
           and v.key != "cpu_os_overhead_s"  # a remainder, often near zero
           and (v.share_pct is None or v.share_pct >= MIN_VARYING_SHARE_PCT)
           and not (v.group == "cpu" and abs(v.change_pct) <= swing)]
    if not big:
        return None
    big.sort(key=lambda v: -abs(v.change_pct or 0.0))
    meaning = ("What one unit costs changes with concurrency, so a model calibrated on one step mispredicts the "
               "others (the CITI PeopleSoft report's central problem); falling demands usually mean batching (group "
               "commit, "
               "write combining), rising ones contention.")
    slicing = _cpu_rise_from_time_slicing(t, big)
    if slicing:
        meaning += (" Here only CPU rises, and only where more jobs than cores share saturated CPUs, within the "
                    f"default plan's {PLANNED_OVERSUBSCRIPTION} x the cores: time-slicing (context switches, caches "
                    "refilled) costs that much, so it is information, not a fault.")
    return Finding(key="varying_demand", name="Service demand varies with load", confidence=0.7 if len(big) > 1 else 0.6,
                   steps=[s.jobs for s in t.steps], evidence=[v.note for v in big[:5]], meaning=meaning,
                   to_try=["calibrate on the steps nearest the load you plan for", "read the demand table "
                    "(capmark demands) for the components named here"],
                   severity="info" if slicing else "problem")


def _cpu_rise_from_time_slicing(t: TestView, varying: list[DemandTrend]) -> bool:
    """Every varying demand is CPU that rises, the CPUs were saturated wherever the jobs outnumbered the cores,
    and the plan stayed within the default's 2 x the cores."""
    steps = t.valid_steps
    cores = steps[0].cores if steps else 0
    crowded = [s for s in steps if cores and s.jobs > cores]
    return bool(crowded) and all(v.group == "cpu" and (v.change_pct or 0.0) > 0 for v in varying) and all(
        s.jobs <= PLANNED_OVERSUBSCRIPTION * cores and (s.cpu_busy_pct or 0.0) >= SATURATED_BUSY_PCT for s in crowded)


# --- 10. bottleneck switch -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resource:
    """A resource a step keeps busy: the CPU (no device) or one data device. Compared and looked up as itself;
    `label` is only for the reader."""

    device: str | None = None

    @property
    def label(self) -> str:
        return "CPU" if self.device is None else f"disk {self.device}"


CPU = Resource()


def _busiest(s: StepView) -> tuple[Resource, float] | None:
    res = {r: _util(s, r) for r in (CPU, *(Resource(k) for k in s.devices))}
    busy = {r: v for r, v in res.items() if v is not None}
    if not busy:
        return None
    top = max(busy, key=lambda r: busy[r])
    return top, busy[top]


def bottleneck_switch(t: TestView) -> Finding | None:
    seq = [(s, top) for s in t.valid_steps if (top := _busiest(s)) is not None and top[1] >= 40]
    for (a, ba), (b, bb) in zip(seq, seq[1:], strict=False):
        if ba[0] != bb[0]:
            other_a = _util(a, bb[0])
            other_b = _util(b, ba[0])
            if other_a is None or other_b is None or ba[1] - other_a < 10 or bb[1] - other_b < 10:
                continue
            return Finding(key="bottleneck_switch", name="Bottleneck switch", confidence=0.75, steps=[a.jobs, b.jobs],
                           evidence=[f"at {a.jobs} jobs the busiest resource is {ba[0].label} ({ba[1]:.0f} %), at {b.jobs} "
                            f"jobs {bb[0].label} ({bb[1]:.0f} %)"],
                           meaning="The resource that limits changes with load (the CITI PeopleSoft report: disk to CPU "
                           "between 6 and 7 "
                           "clients): tuning the first one stops paying at the switch.",
                           to_try=["plan capacity for both resources", "use the model (capmark whatif) to see which one "
                            "limits at the planned load"],
                           chart=_jobs_chart(t.valid_steps, cpu_busy_pct=[s.cpu_busy_pct for s in t.valid_steps],
                                       **{f"{r.label} busy %": [_util(s, r) for s in t.valid_steps]
                                          for r in dict.fromkeys((ba[0], bb[0])) if r != CPU}))
    return None


def _util(s: StepView, resource: Resource) -> float | None:
    if resource.device is None:
        return s.cpu_busy_pct
    d = s.devices.get(resource.device)
    return d.get("utilization_pct") if d else None


# --- 11. background interference ---------------------------------------------------------------------------------

def background_interference(t: TestView) -> Finding | None:
    """A time-series signature: every completed step counts, also those unfit to calibrate a model on."""
    best = None
    for s in t.steps:
        units = full_seconds(s.series_units)
        if len(units) < 6 or not s.background:
            continue
        med = statistics.median(units)
        if med <= 0:
            continue
        bg = {int(b["t"]) - 1: max(b.get("checkpoint", 0), b.get("autovacuum", 0)) for b in s.background}
        dips = [i for i, u in enumerate(units) if u < 0.7 * med]
        active = [i for i in range(len(units)) if bg.get(i, 0) > 0]
        if len(dips) < 2 or not active:
            continue
        aligned = [i for i in dips if bg.get(i, 0) > 0 or bg.get(i - 1, 0) > 0]
        base = len(active) / len(units)
        share = len(aligned) / len(dips)
        if share >= 0.6 and share > 1.5 * base:
            worst = min(units[i] for i in dips) / med
            cand = (share, s, dips, aligned, worst, bg)
            if best is None or share > best[0]:
                best = cand
    if best is None:
        return None
    share, s, dips, aligned, worst, bg = best
    kinds = {k for b in s.background for k in ("checkpoint", "autovacuum") if b.get(k, 0) > 0}
    series_median = statistics.median(s.series_units)
    return Finding(key="background_interference", name="Background interference (" + " / ".join(sorted(kinds)) + ")",
                   confidence=min(0.95, 0.5 + share / 2), steps=[s.jobs],
                   evidence=[f"at {s.jobs} jobs {len(dips)} seconds ran below 70 % of the median throughput (worst "
                    f"{worst:.0%}); {len(aligned)} of them coincide with " + " or ".join(sorted(kinds)) + " activity"],
                   meaning="Background work (writing a checkpoint, vacuuming) competes with the workload for the device "
                   "and CPU and shows up as latency spikes in the time series.",
                   to_try=["spread the background writing", "schedule heavy maintenance off peak"],
                   chart=Chart("time", list(range(1, len(s.series_units) + 1)),
                               {"units/s": list(s.series_units),
                                "background (0-1) x median": [bg.get(i, 0) * series_median
                                                              for i in range(len(s.series_units))]}),
                   time_ranges=[TimeRange(s.jobs, min(dips) + 1, max(dips) + 1)])


# --- 12. oversubscription -------------------------------------------------------------------------------------------

# The default plan's last step is 2 x the cores (config.default_jobs): saturation up to there is what the plan
# sets out to show; far beyond it, the user planned a concurrency the system can only queue.
PLANNED_OVERSUBSCRIPTION = 2


def oversubscription(t: TestView) -> Finding | None:
    steps = t.valid_steps
    if not steps or not steps[0].cores:
        return None
    cores = steps[0].cores
    at = [s for s in steps if s.jobs >= cores]
    beyond = [s for s in steps if s.jobs >= 2 * cores]
    if not at or not beyond:
        return None
    ref = at[0]
    last = beyond[-1]
    if last.jobs <= ref.jobs:
        return None
    best = max((s for s in at if s.jobs < last.jobs), key=lambda s: s.throughput, default=ref)
    gain = last.throughput / best.throughput - 1
    r_rise = last.rt_mean_s / ref.rt_mean_s if ref.rt_mean_s else 0
    jobs_ratio = last.jobs / ref.jobs
    if gain > 0.15 or r_rise < 0.6 * jobs_ratio:
        return None
    planned = last.jobs <= PLANNED_OVERSUBSCRIPTION * cores
    meaning = ("Beyond the saturation point extra jobs only queue: throughput is flat and response time grows "
               "in proportion to the jobs (peakmarks).")
    if planned:
        meaning += (f" The default plan goes on to {PLANNED_OVERSUBSCRIPTION} x the cores on purpose, to show "
                    "where the system saturates: every workload that keeps the CPUs busy does this, so it is "
                    "information, not a fault.")
    return Finding(key="oversubscription", name="Oversubscription (more jobs than the system can serve)", confidence=0.7,
                   steps=sorted({ref.jobs, *(s.jobs for s in beyond)}),
                   evidence=[f"from {ref.jobs} to {last.jobs} jobs throughput changes {gain:+.0%} while the mean response "
                    f"time grows {r_rise:.1f}x"],
                   meaning=meaning,
                   to_try=["cap concurrency near the knee with a connection pool", "size for the response time you "
                    "need (capmark size)"],
                   chart=_jobs_chart(steps, throughput=[s.throughput for s in steps],
                               response_ms=[s.rt_mean_s * 1000 for s in steps]),
                   severity="info" if planned else "problem")


# --- 13. instrumentation mismatch --------------------------------------------------------------------------------------

def instrumentation_mismatch(t: TestView) -> Finding | None:
    """A pair must undercount in at least half the valid steps; a database side near zero measures something
    else (the device served other processes), not an undercount."""
    steps = t.valid_steps
    by_pair: dict[str, list[tuple[StepView, Mismatch, float]]] = {}
    for s in steps:
        for p in s.mismatches:
            if p.ratio is not None and 0.05 <= p.ratio < 0.8:
                by_pair.setdefault(p.name, []).append((s, p, p.ratio))
    chosen = {k: v for k, v in by_pair.items() if len(v) >= max(2, (len(steps) + 1) // 2)}
    if not chosen:
        return None
    evidence = []
    for name, hits in chosen.items():
        at, worst, ratio = min(hits, key=lambda h: h[2])
        evidence.append(f"{name}: the database side counts {ratio:.0%} of the other side at "
                        f"{at.jobs} jobs ({len(hits)} of {len(steps)} steps below 80 %). {worst.sentence}")
    jobs = sorted({s.jobs for hits in chosen.values() for s, _, _ in hits})
    return Finding(key="instrumentation_mismatch", name="Instrumentation mismatch",
                   confidence=0.6 + 0.1 * min(3, len(chosen) - 1), steps=jobs,
                   evidence=evidence,
                   meaning="What the database reports undercounts what the OS (or a finer instrument) saw (Shallahamer, "
                   "OraPub): wait "
                   "events and database counters miss work, so demands taken from them alone would be too low.",
                   to_try=["take the demand from the OS side (capmark does, see capmark demands)", "check which processes "
                    "or IO paths the database does not see"])


# --- 1. memory leak (soak) ----------------------------------------------------------------------------------------------

def memory_leak(t: TestView) -> Finding | None:
    for s in t.valid_steps + [x for x in t.steps if not x.valid]:
        series = s.memory_series
        if len(series) < 6:
            continue
        pids = set.intersection(*(set(m.processes) for m in series))
        growing = []
        for pid in pids:
            rss = [m.processes[pid].bytes for m in series]
            steps = list(zip(rss, rss[1:], strict=False))
            up = sum(1 for a, b in steps if b > a)
            never_down = sum(1 for a, b in steps if b >= a - 2**20)  # freed memory would show as a fall
            total = rss[-1] - rss[0]
            if total > max(10 * 2**20, 0.2 * rss[0]) and never_down >= 0.9 * len(steps) and up >= 0.3 * len(steps):
                third = len(rss) // 3
                late = rss[-1] - rss[-1 - third]
                growing.append((pid, series[0].processes[pid].role, rss, total, late / total))
        if not growing:
            continue
        pid, role, rss, total, late_share = max(growing, key=lambda g: g[3])
        levels_off = late_share < 0.1
        units = s.series_units
        collapse = None
        if len(units) >= 10:
            med = statistics.median(units)
            tail = units[-max(2, len(units) // 20):]
            if med > 0 and statistics.fmean(tail) < 0.5 * med:
                collapse = statistics.fmean(tail) / med
        name = "Memory growth that levels off" if levels_off else "Memory leak"
        rises = sum(1 for a, b in zip(rss, rss[1:], strict=False) if b > a)
        evidence = [f"{role} (pid {pid}) private memory grows from {rss[0] / 2**20:.0f} MB to {rss[-1] / 2**20:.0f} MB over "
                    f"{series[-1].t / 60:.1f} min, rising in {rises} of {len(rss) - 1} intervals"]
        evidence.append("the last third of the run added only "
                        f"{late_share:.0%} of the growth: it levels off" if levels_off else
                        f"the last third of the run still added {late_share:.0%} of the growth")
        if collapse is not None:
            evidence.append(f"throughput at the end fell to {collapse:.0%} of its median")
        conf = 0.4 if levels_off else (0.9 if collapse is not None else 0.7)
        return Finding(key="memory_leak", name=name, confidence=conf, steps=[s.jobs], evidence=evidence,
                       meaning="A process keeps allocating memory it does not give back; under a steady load it will "
                       "run out "
                       "of memory and slow down or crash." if not levels_off else
                       "Memory grew and then stopped: caches warming up (catalog, plan, buffer mappings), not a leak.",
                       to_try=["watch the process over a longer soak", "look for per-session caches (prepared statements, "
                        "temporary tables, per-session sort and hash memory) that grow with use"] if not levels_off else
                       ["nothing, unless it reaches a limit"],
                       chart=Chart("time", [m.t for m in series], {f"{role} MB": [r / 2**20 for r in rss]}),
                       time_ranges=[TimeRange(s.jobs, series[0].t, series[-1].t)])
    return None


DETECTORS: list[Detector] = [memory_leak, retrograde, cpu_misconfiguration, software_serialization,
                             single_threaded_io, lock_contention, poor_caching, commit_bound, varying_demand,
                             bottleneck_switch, background_interference, oversubscription, instrumentation_mismatch]
