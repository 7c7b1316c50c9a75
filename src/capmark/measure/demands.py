"""Service demands per unit of work, from a stored step: what each unit costs every resource.

The method of the CITI PeopleSoft report (sections 2 and 4): take the deltas of a step, divide by the units done, and
split CPU into client backends, each background role, capmark's sampler, the driver (client tier) and
the remainder no process accounts for (OS overhead, and other programs: those are measured beside it),
disk into busy time and operations per device, and database IO and WAL by who did them. Every value
is per unit; keys name their unit when it is not seconds or bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from capmark.collect.os import ROLES
from capmark.collect.procfs import SECTOR_BYTES
from capmark.engines import registry
from capmark.measure.kpm import counters, log_label, wal_io, wal_io_per_commit, workload_commits
from capmark.results import StepResult, TestResult, WaitClass, wait_counts

BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum", "io workers", "postmaster",
              "other", "exited processes")


@dataclass(frozen=True, kw_only=True)
class Component:
    key: str
    label: str
    group: str  # cpu | disk | dbio | wal | network | os
    unit: str  # display unit of the per-unit value
    scale: float = 1.0  # stored value x scale = displayed value
    time: bool = False  # a time demand (seconds): shares within its group add up
    reason: str = ""  # why the component could not be measured ("n/a: ..."); its values are then None


def host_busy_s(step: StepResult) -> float | None:
    """CPU seconds the host was busy in the window (every state but idle and iowait), or None if not local."""
    secs = step.os.get("cpu_seconds")
    if not secs:
        return None
    return float(sum(secs.values()) - secs.get("idle", 0.0) - secs.get("iowait", 0.0))


def driver_on_host(step: StepResult) -> bool:
    """capmark's own process ran on the database host, so its CPU was host CPU. The host metrics source records
    it; runs stored before the sources measured the host only when the database ran beside capmark."""
    recorded = step.os.get("driver_on_host")
    return bool(recorded) if recorded is not None else host_busy_s(step) is not None


def driver_cpu_s(step: StepResult) -> float | None:
    """CPU seconds of capmark's driver process over the window, or None where it was not measured."""
    if not step.driver_cpu:
        return None
    return float(step.driver_cpu.get("user_s", 0.0) + step.driver_cpu.get("sys_s", 0.0))


REMAINDER_LABEL = "CPU OS overhead of the database host (remainder: host busy less every measured process)"
# where other programs' CPU was not measured (runs stored before it was), the remainder holds it too
REMAINDER_LABEL_WITH_OTHERS = ("CPU of the database host not attributed to any process (OS overhead and other "
                               "programs; remainder)")
HOST_BUSY_LABEL = "CPU database host busy (total)"
# Which host the driver's CPU was spent on: the database host (where it counts as host CPU) or another one.
DRIVER_LABEL_ON_HOST = "CPU capmark driver (client tier, on the database host)"
DRIVER_LABEL_ELSEWHERE = "CPU capmark driver (client tier, on the load host: not database host CPU)"
DRIVER_LABEL_UNKNOWN = "CPU capmark driver (client tier)"
DRIVER_LABEL_CLUSTER = ("CPU capmark driver (client tier, on the cluster's nodes; only the part on the database host "
                        "counts as its CPU)")


def driver_database_host_s(step: StepResult) -> float:
    """The driver's CPU that was the database host's: all of it where capmark ran there, none where it ran
    elsewhere, and on a cluster the part of the nodes that run the database host's kernel."""
    if "database_host_s" in step.driver_cpu:
        return float(step.driver_cpu["database_host_s"])
    return (driver_cpu_s(step) or 0.0) if driver_on_host(step) else 0.0


def _driver_label(step: StepResult) -> str:
    if "database_host_s" in step.driver_cpu:
        return DRIVER_LABEL_CLUSTER
    if step.os.get("driver_on_host") is None and host_busy_s(step) is None:
        return DRIVER_LABEL_UNKNOWN  # the database host was not measured: where the driver ran is not known
    return DRIVER_LABEL_ON_HOST if driver_on_host(step) else DRIVER_LABEL_ELSEWHERE


HOST_CPU_KEY = "cpu_database_host_s"
HOST_CPU_LABEL_NODE_EXPORTER = "CPU of the database host (node_exporter has no per-process CPU)"
HOST_CPU_LABEL = "CPU of the database host (its processes were not measured)"


def _host_cpu_label(step: StepResult) -> str:
    return HOST_CPU_LABEL_NODE_EXPORTER if step.os.get("source") == "node-exporter" else HOST_CPU_LABEL


def other_programs_cpu_s(step: StepResult) -> float | None:
    """CPU seconds of the host's other programs over the window, where the step measured them."""
    others = (step.interference or {}).get("processes")
    return None if others is None else float(others.get("cpu_s") or 0.0)


def _cpu(role: str) -> str:
    return "cpu_" + role.replace(" ", "_") + "_s"


def disk_key(device: str, figure: str) -> str:
    """The key of one device's figure (busy_s, reads, writes, flushes, read_bytes, write_bytes) in step_demands.
    Readers build it with this from the device's name, never take a key apart."""
    return f"disk_{device}_{figure}"


def step_demands(step: StepResult) -> tuple[dict[str, float | None], dict[str, Component]]:
    """Per-unit demands of one step, and the description of every component present."""
    units = step.units or 0
    out: dict[str, float | None] = {}
    comps: dict[str, Component] = {}

    def put(key: str, value: float | None, *, label: str, group: str, unit: str, scale: float = 1.0,
            time: bool = False) -> None:
        out[key] = value / units if value is not None and units else None
        comps[key] = Component(key=key, label=label, group=group, unit=unit, scale=scale, time=time)

    # CPU: every process of the instance by role, the driver, and what no process accounts for
    busy = host_busy_s(step)
    attributed = None
    if step.process_cpu:
        attributed = 0.0
        # the roles the host source reported: PostgreSQL's always (one that did nothing shows as 0), or a
        # one-process server's
        for role in ROLES if set(step.process_cpu) <= set(ROLES) else list(step.process_cpu):
            r = step.process_cpu.get(role, {})
            value = r.get("user_s", 0.0) + r.get("sys_s", 0.0)
            attributed += value
            put(_cpu(role), value, label=f"CPU {role}", group="cpu", unit="ms", scale=1e3, time=True)
    driver = driver_cpu_s(step)
    put("cpu_driver_s", driver, label=_driver_label(step), group="cpu", unit="ms", scale=1e3, time=True)
    on_host = driver_on_host(step)
    driver_here = driver_database_host_s(step)  # the driver's CPU is host CPU only where it runs there
    others = other_programs_cpu_s(step)
    if busy is not None and attributed is not None and (driver is not None or not on_host):
        # a remainder, not a measurement: host busy less the instance's processes, the driver where it runs on
        # the host and (where they were measured) the other programs on the host; what is left is the kernel's
        # own work, and the CPU of programs that started and ended inside the window
        put("cpu_os_overhead_s", busy - attributed - driver_here - (others or 0.0),
            label=REMAINDER_LABEL if others is not None else REMAINDER_LABEL_WITH_OTHERS, group="cpu", unit="ms",
            scale=1e3, time=True)
        put("cpu_host_busy_s", busy, label=HOST_BUSY_LABEL, group="os", unit="ms", scale=1e3)
    elif busy is not None and attributed is None:
        # the host's CPU without its processes (a node_exporter sees no processes): the database's CPU is the
        # host's busy time, less the driver where it runs there; no remainder exists without processes
        put(HOST_CPU_KEY, busy - driver_here, label=_host_cpu_label(step), group="cpu", unit="ms", scale=1e3, time=True)
        put("cpu_host_busy_s", busy, label=HOST_BUSY_LABEL, group="os", unit="ms", scale=1e3)
    if others is not None:
        put("host_other_programs_cpu_s", others, label="CPU of other programs on the database host (measured, not part "
            "of the workload)", group="os", unit="ms", scale=1e3)

    # disks of the data directory
    for dev, d in (step.os.get("disks") or {}).items():
        put(disk_key(dev, "busy_s"), d.get("io_ms", 0) / 1000, label=f"{dev} busy", group="disk", unit="ms", scale=1e3,
            time=True)
        put(disk_key(dev, "reads"), d.get("reads", 0), label=f"{dev} reads", group="disk", unit="ops")
        put(disk_key(dev, "writes"), d.get("writes", 0), label=f"{dev} writes", group="disk", unit="ops")
        put(disk_key(dev, "flushes"), d.get("flushes", 0), label=f"{dev} flushes", group="disk", unit="ops")
        put(disk_key(dev, "read_bytes"), d.get("sectors_read", 0) * SECTOR_BYTES, label=f"{dev} read", group="disk",
            unit="kB", scale=1 / 1024)
        put(disk_key(dev, "write_bytes"), d.get("sectors_written", 0) * SECTOR_BYTES, label=f"{dev} written", group="disk",
            unit="kB", scale=1 / 1024)

    # database IO by who did it
    db = counters(step)
    if db.data_writes is not None:
        for who, blocks in db.data_writes.items():
            put(f"db_writes_{who.replace(' ', '_')}_blocks", blocks, label=f"data blocks written by {who}",
                group="dbio", unit="blocks")
    if db.io_operations:
        put("db_reads_blocks", db.read_ios, label="data reads (IOs)", group="dbio", unit="IOs")
    else:
        put("db_reads_blocks", db.physical_reads, label="data blocks read", group="dbio", unit="blocks")
    if db.data_extends is not None:
        put("db_extends_blocks", db.data_extends, label="data extends", group="dbio", unit="blocks")
    for kind, ms in (db.data_time_ms or {}).items():
        put(f"db_{kind}_time_s", ms / 1000 if ms is not None else None, label=f"data {kind} time", group="dbio",
            unit="ms", scale=1e3, time=True)

    # the write-ahead log (PostgreSQL's WAL, InnoDB's redo log)
    log = log_label(step)
    put("wal_bytes", db.log_bytes, label=f"{log} generated", group="wal", unit="kB", scale=1 / 1024)
    if db.log_records is not None:
        put("wal_records", db.log_records, label=f"{log} records", group="wal", unit="records")
    if db.log_full_pages is not None:
        put("wal_fpi", db.log_full_pages, label=f"{log} full-page images", group="wal", unit="images")
    wio = wal_io(step)
    if wio:
        put("wal_writes", wio["writes"], label=f"{log} writes", group="wal", unit="writes")
        put("wal_fsyncs", wio["fsyncs"], label=f"{log} fsyncs", group="wal", unit="fsyncs")
        put("wal_write_time_s", db.log_write_ms / 1000 if db.log_write_ms is not None else None,
            label=f"{log} write time", group="wal", unit="ms", scale=1e3, time=True)
        put("wal_fsync_time_s", db.log_fsync_ms / 1000 if db.log_fsync_ms is not None else None,
            label=f"{log} fsync time", group="wal", unit="ms", scale=1e3, time=True)
    written = wal_written_bytes(step)
    put("wal_written_bytes", written, label=f"{log} written to disk", group="wal", unit="kB", scale=1 / 1024)

    # network tier: the job connections' traffic (round trips are counted by the client-side driver)
    if step.round_trips:
        put("client_round_trips", step.round_trips, label="round trips", group="network", unit="trips")
    _network(step, put, comps)
    return out, comps


# The job connections' counters as StepResult.network stores them, with their component key, label and unit.
NETWORK_COUNTERS = (
    ("bytes_sent", "net_bytes_sent", "network bytes sent by the client", "B"),
    ("bytes_received", "net_bytes_received", "network bytes received by the client", "B"),
    ("segments_out", "net_segments_out", "TCP segments sent by the client", "segments"),
    ("segments_in", "net_segments_in", "TCP segments received by the client", "segments"),
    ("retransmits", "net_retransmits", "TCP segments retransmitted by the client", "segments"),
)
NETWORK_NA_KEY = "net_traffic"
NETWORK_NA_LABEL = "network bytes, segments and retransmits"


def _network(step: StepResult, put: Callable[..., None], comps: dict[str, Component]) -> None:
    """Bytes and segments per unit over the job connections' sockets; where the step could not read them (a Unix
    socket, an old kernel) one row says why. Runs stored before the network was measured have neither."""
    net = step.network or {}
    if not net:
        return
    if "reason" in net:
        put(NETWORK_NA_KEY, None, label=NETWORK_NA_LABEL, group="network", unit="")
        comps[NETWORK_NA_KEY] = Component(key=NETWORK_NA_KEY, label=NETWORK_NA_LABEL, group="network", unit="",
                                          reason=net["reason"])
        return
    for field, key, label, unit in NETWORK_COUNTERS:
        put(key, net.get(field), label=label, group="network", unit=unit)


def wait_sampled_cpu_s(step: StepResult) -> float | None:
    """CPU seconds per unit of the jobs' database sessions, estimated from the wait samples where the host's CPU
    was not measured (the active session history method): the share of the jobs' samples that found their
    session on CPU, times the time the jobs were sampled over (jobs x window), per unit. It sees the client
    backends only (not background processes, not the kernel's work outside them), and a session waiting for a
    core looks the same as one running, so it is an estimate, and fair only where the CPU is not saturated."""
    counts = wait_counts(step.waits, registry.of_delta(step.db_delta).wait_class)
    samples = sum(counts.values())  # the jobs' sessions on the client too: they are sampled over jobs x window
    if not samples or not step.units or not step.elapsed_s:
        return None
    return counts.get(WaitClass.CPU, 0) / samples * step.jobs * step.elapsed_s / step.units


def devices(step: StepResult) -> dict[str, dict[str, float | None]]:
    """Per device over the window: utilization, average service time per operation, average queue length."""
    out = {}
    el_ms = (step.elapsed_s or 0) * 1000
    for dev, d in (step.os.get("disks") or {}).items():
        ops = d.get("reads", 0) + d.get("writes", 0)
        out[dev] = {"utilization_pct": 100 * d.get("io_ms", 0) / el_ms if el_ms else None,
                    "service_ms": d.get("io_ms", 0) / ops if ops else None,
                    "queue_length": d.get("weighted_io_ms", 0) / el_ms if el_ms else None,
                    "iops": ops / step.elapsed_s if step.elapsed_s else None}
    return out


def wal_written_bytes(step: StepResult) -> float | None:
    return counters(step).log_written_bytes


def per_commit(step: StepResult) -> dict[str, float | None]:
    """WAL figures per commit of the workload (the group-commit view) and commit latency vs flush time.

    Commits are the database's, less capmark's own; a unit may commit more or less than once (a slice call
    adds its own commit), so these are per commit, not per unit."""
    commits = workload_commits(step) or 0.0
    wal = counters(step).log_bytes
    written = wal_written_bytes(step)
    return {
        "commits": commits,
        "commits_per_unit": commits / step.units if step.units else None,
        "wal_bytes_per_commit": wal / commits if wal is not None and commits else None,
        **wal_io_per_commit(step, commits),
        "commit_latency_ms": step.latency.mean_s * 1000 if step.latency.mean_s else None,
        "wal_written_over_generated": written / wal if written is not None and wal else None,
    }


def sampler_cost(step: StepResult) -> dict[str, float | None]:
    """What capmark's own sampling cost the server in the window: its session's CPU per second of the window
    (kept out of the client backends) and its transactions (kept out of the commits). None without a sampler."""
    transactions = (step.instruments or {}).get("capmark_transactions", {}).get("sampler")
    if not transactions:
        return {"cpu_ms_per_s": None, "transactions": transactions}
    role = (step.process_cpu or {}).get("capmark sampler")
    cpu = role.get("user_s", 0.0) + role.get("sys_s", 0.0) if role else step.driver_cpu.get("sampler_backend_s")
    el = step.elapsed_s or 0.0
    return {"cpu_ms_per_s": cpu * 1000 / el if cpu is not None and el else None, "transactions": transactions}


def run_queue(step: StepResult) -> dict[str, float | None]:
    """The OS run queue counts running processes too (Shallahamer, OraPub): waiting = runnable - busy CPUs."""
    series = step.os_series
    if not series or not step.os.get("cores"):
        return {"runnable": None, "busy_cpus": None, "waiting": None}
    runnable = sum(s["procs_running"] for s in series) / len(series)
    busy_cpus = sum(s.get("cpu_busy_pct", 0.0) for s in series) / len(series) / 100 * step.os["cores"]
    return {"runnable": runnable, "busy_cpus": busy_cpus, "waiting": max(0.0, runnable - busy_cpus)}


class LatencyRealism(TypedDict):
    """A step's latency in ms, and whether its mean misleads (it sits far above the median)."""

    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_over_median: float | None
    skewed: bool


SKEWED = 1.5  # a mean 50 % above the median is pulled by a tail: the median and percentiles describe the step


def latency_realism(step: StepResult) -> LatencyRealism:
    """Mean vs median vs tail; the mean alone misleads when it sits far from the median (Shallahamer, OraPub)."""
    lat = step.latency.summary()
    ms = {k: v * 1000 if v is not None else None for k, v in lat.items()}
    mean, p50 = lat["mean_s"], lat["p50_s"]
    skew = mean / p50 if mean and p50 else None
    return LatencyRealism(mean_ms=ms["mean_s"], p50_ms=ms["p50_s"], p90_ms=ms["p90_s"], p95_ms=ms["p95_s"],
                          p99_ms=ms["p99_s"], max_ms=ms["max_s"], mean_over_median=skew,
                          skewed=bool(skew and skew > SKEWED))


class StatementCost(TypedDict):
    """One of the statements that took the most time in a step (pg_stat_statements), per call."""

    query: str  # its text, cut to 120 characters
    calls: int
    mean_ms: float
    rows_per_call: float
    shared_blks_hit_per_call: float
    shared_blks_read_per_call: float
    shared_blks_dirtied_per_call: float
    shared_blks_written_per_call: float
    wal_bytes_per_call: float


# pg_stat_statements' columns shown per call
_PER_CALL = ("total_exec_time", "rows", "shared_blks_hit", "shared_blks_read", "shared_blks_dirtied",
             "shared_blks_written", "wal_bytes")


def top_statements(step: StepResult, n: int = 5) -> list[StatementCost]:
    rows = [r for r in step.db_delta.get("statements", []) if (r.get("calls") or 0) > 0]
    rows.sort(key=lambda r: r.get("total_exec_time") or 0.0, reverse=True)
    out = []
    for r in rows[:n]:
        calls = r["calls"]
        each = {column: float(r.get(column) or 0) / calls for column in _PER_CALL}
        out.append(StatementCost(query=(r.get("query") or "")[:120], calls=calls, mean_ms=each["total_exec_time"],
                                 rows_per_call=each["rows"], shared_blks_hit_per_call=each["shared_blks_hit"],
                                 shared_blks_read_per_call=each["shared_blks_read"],
                                 shared_blks_dirtied_per_call=each["shared_blks_dirtied"],
                                 shared_blks_written_per_call=each["shared_blks_written"],
                                 wal_bytes_per_call=each["wal_bytes"]))
    return out


class TrendRecord(TypedDict):
    """A Trend as a component row holds it."""

    key: str
    direction: str
    change_pct: float | None
    note: str


@dataclass
class Trend:
    key: str
    direction: str  # rises | falls | steady
    change_pct: float | None  # last step vs first step
    note: str

    def record(self) -> TrendRecord:
        return TrendRecord(key=self.key, direction=self.direction, change_pct=self.change_pct, note=self.note)


def trend(jobs: list[int], values: list[float | None], label: str, threshold_pct: float = 20.0,
          floor: float = 0.0) -> Trend:
    """Does a demand change with load? A trend over the steps, not only spread: the fitted change from the
    first to the last step (least squares on log2 jobs) and whether the steps agree on its direction.
    Components that never reach `floor` are too small to call."""
    pts = [(math.log2(j), v) for j, v in zip(jobs, values, strict=True) if v is not None]
    if len(pts) < 2 or max(abs(v) for _, v in pts) <= floor:
        return Trend(label, "steady", None, "")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    first = my + slope * (xs[0] - mx)
    last = my + slope * (xs[-1] - mx)
    if first <= 0:
        return Trend(label, "steady", None, "")
    change = (last / first - 1) * 100
    steps = [b - a for a, b in zip(ys, ys[1:], strict=False)]
    agree = sum(1 for s in steps if s * slope > 0) >= max(1, len(steps) - 1)
    if abs(change) < threshold_pct or not agree:
        return Trend(label, "steady", change, "")
    direction = "rises" if change > 0 else "falls"
    size = "to near zero" if last <= 0 else f"by {abs(change):.0f} %"
    return Trend(label, direction, change, f"{label} {direction} {size} from {jobs[0]} to {jobs[-1]} jobs")


def _floor(comp: Component) -> float:
    """Below this per-unit value a component is noise: 1 us of time, 0.05 operations, 100 bytes."""
    if comp.time:
        return 1e-6
    if comp.unit in ("kB", "B"):
        return 100.0
    return 0.05


class _Component(TypedDict):
    key: str
    label: str
    group: str  # cpu | disk | dbio | wal | network | os
    unit: str
    scale: float  # stored value x scale = displayed value
    time: bool
    values: list[float | None]
    mean: float | None
    std: float | None
    trend: TrendRecord


# The keys a row may lack are declared in a class of their own, not as NotRequired: with postponed annotations
# Python (before 3.14) cannot tell NotRequired keys at run time, where the JSON outlines (analysis/schemas.py) read them.
class ComponentRow(_Component, total=False):
    """One demand component over a test's steps: its per-unit value at each step (in the order of the jobs), their
    mean and standard deviation, its share of its group's time and its trend with load."""

    reason: str  # only where the component could not be measured
    share_pct: float | None  # only on a time demand some step measured


class DemandTable(TypedDict):
    """A test's demands, per step in the order of `jobs` (the JSON document's fields, docs/json.md)."""

    workload: str
    unit: str
    log_label: str  # what the engine calls its write-ahead log ("WAL", "redo log"): the wal rows' name
    jobs: list[int]
    components: list[ComponentRow]
    per_commit: list[dict[str, float | None]]
    run_queue: list[dict[str, float | None]]
    sampler: list[dict[str, float | None]]
    devices: list[dict[str, dict[str, float | None]]]
    latency: list[LatencyRealism]
    statements: list[list[StatementCost]]
    varies: list[str]


def demands_of_test(test: TestResult) -> DemandTable:
    """The demand table of a test: every component per step, with mean, standard deviation, share and trend."""
    per_step = [step_demands(s) for s in test.steps]
    comps: dict[str, Component] = {}
    for _, c in per_step:
        comps.update(c)
    jobs = [s.jobs for s in test.steps]
    rows: list[ComponentRow] = []
    for key, comp in comps.items():
        values = [d.get(key) for d, _ in per_step]
        present = [v for v in values if v is not None]
        if not present and not comp.reason:
            continue
        mean = sum(present) / len(present) if present else None
        std = math.sqrt(sum((v - mean) ** 2 for v in present) / len(present)) if mean is not None else None
        row = ComponentRow(key=key, label=comp.label, group=comp.group, unit=comp.unit, scale=comp.scale,
                           time=comp.time, values=values, mean=mean, std=std,
                           trend=trend(jobs, values, comp.label, floor=_floor(comp)).record())
        if comp.reason:
            row["reason"] = comp.reason
        rows.append(row)
    for group in {r["group"] for r in rows}:
        timed = [(r, m) for r in rows if r["group"] == group and r["time"] and (m := r["mean"]) is not None]
        group_total = sum(m for _, m in timed)
        for r, m in timed:
            r["share_pct"] = 100 * m / group_total if group_total > 0 else None
    return DemandTable(workload=test.workload, unit=test.unit,
                       log_label=log_label(test.steps[0]) if test.steps else registry.named(None).log_label,
                       jobs=jobs, components=rows,
                       per_commit=[per_commit(s) for s in test.steps], run_queue=[run_queue(s) for s in test.steps],
                       sampler=[sampler_cost(s) for s in test.steps],
                       devices=[devices(s) for s in test.steps],
                       latency=[latency_realism(s) for s in test.steps],
                       statements=[top_statements(s) for s in test.steps],
                       varies=[r["trend"]["note"] for r in rows if r["trend"]["note"]])
