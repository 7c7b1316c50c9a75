"""Plain data between the stages: what a run measured, stored as is and re-analysed without a database."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any, TypedDict

from capmark.histogram import LatencyHistogram, merge_all


# open-ended: a record's stored form, keyed by its field names
def _fields_dict(record: Any, skip: tuple[str, ...]) -> dict[str, Any]:
    """A record's fields as plain data (dicts, lists, tuples, scalars), without the fields in `skip`, which the caller
    stores in a form of its own. dataclasses.asdict converted those first and threw them away (a test's steps), and
    deep-copies every scalar of the statistics snapshots: 0.3 s of each 1.5 s test went to it."""
    return {f.name: _plain(getattr(record, f.name)) for f in fields(record) if f.name not in skip}


# Values _plain returns as they are, checked by exact type first: the statistics snapshots hold millions of them, and
# the generic checks below (is_dataclass above all) cost 0.1 s of each stored step.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """asdict's conversion without its copies: the result is written out, never changed, so scalars and strings
    are shared with the record."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, dict):
        return {k: v if type(v) in _SCALARS else _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _SCALARS else _plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    return value


@dataclass(frozen=True)
class WaitKey:
    """A key of StepResult.waits as a structure: its kind (the database's wait-event type; "CPU" for a session
    not waiting, "Client" for one idle on its client) and the event (or the session state). The stored form is
    "kind:event" (or "CPU"): of() reads it and `key` writes it, so no other code takes a key apart."""

    kind: str
    event: str = ""

    @classmethod
    def of(cls, key: str) -> WaitKey:
        kind, _, event = key.partition(":")
        return cls(kind, event)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.event}" if self.event else self.kind


class WaitClass(StrEnum):
    """What a sampled session was doing, in terms every engine shares. Each engine maps its own wait events onto
    these (Engine.wait_class), so that what reads the samples (diagnosis, reports) names no engine's events."""

    CPU = "cpu"  # running or runnable: in no wait
    IO_READ = "io_read"  # reading data pages or files from the OS or the device
    IO_WRITE = "io_write"  # writing, extending or syncing data files
    LOG_FLUSH = "log_flush"  # the commit: writing and flushing the log (WAL, redo log, binary log), or queueing for it
    LOCK = "lock"  # a lock or latch another session holds (rows, tables, shared structures in memory)
    CLIENT = "client"  # idle on its client, or on the network to it: not the database's time
    OTHER = "other"  # anything else (sleeps, replication, parallel-query coordination, events not known)


def wait_counts(waits: Mapping[str, int], classify: Callable[[WaitKey], WaitClass]) -> dict[WaitClass, int]:
    """How many session samples found each class (those on the client included): the counts behind the shares, for
    a reader that needs samples rather than a share of the active ones. Arguments as for wait_shares."""
    counts: dict[WaitClass, int] = {}
    for key, count in waits.items():
        if count > 0:
            cls = classify(WaitKey.of(key))
            counts[cls] = counts.get(cls, 0) + count
    return counts


def wait_shares(waits: Mapping[str, int], classify: Callable[[WaitKey], WaitClass]) -> dict[WaitClass, float]:
    """Each class's share of the active samples: those on the client (WaitClass.CLIENT) are left out, so the shares
    add up to 1; empty when no sample was active. `waits` is StepResult.waits, `classify` the engine's wait_class."""
    shares = {cls: float(count) for cls, count in wait_counts(waits, classify).items() if cls is not WaitClass.CLIENT}
    active = sum(shares.values())
    return {cls: count / active for cls, count in shares.items()} if active else {}


@dataclass(frozen=True)
class Latency:
    """A latency distribution in seconds (None where no unit completed): never only an average."""

    count: int
    mean_s: float | None
    p50_s: float | None
    p90_s: float | None
    p95_s: float | None
    p99_s: float | None
    max_s: float | None

    @classmethod
    def of(cls, histogram: LatencyHistogram) -> Latency:
        s = histogram.summary()
        return cls(histogram.total, s["mean_s"], s["p50_s"], s["p90_s"], s["p95_s"], s["p99_s"], s["max_s"])


@dataclass(frozen=True)
class HostCpu:
    """The database host's CPU over the window, in % of all its cores (user includes nice)."""

    cores: int
    busy_pct: float
    user_pct: float
    sys_pct: float
    idle_pct: float
    iowait_pct: float


@dataclass(frozen=True)
class Traffic:
    """What went over the wire between the jobs and the server in the window (None where not measured)."""

    round_trips: int
    bytes_sent: float | None
    bytes_received: float | None


MEASURES_VERSION = 1  # the record's own layout; a stored record of another version is rebuilt from the raw step


@dataclass(frozen=True)
class Measures:
    """What a step measured, in one typed, engine-neutral record built once when the step ends (measure/record.py)
    and stored with it; every later stage reads this, and the raw counters stored beside it can rebuild it."""

    version: int
    units: int  # completed units of work in the window
    errors: int
    elapsed_s: float
    throughput: float  # units per second
    latency: Latency
    latency_by_type: dict[str, Latency]  # keyed by the workload's own transaction types (open-ended names)
    host_cpu: HostCpu | None  # None where the database host was not measured
    traffic: Traffic
    waits: dict[WaitClass, float]  # each class's share of the sampled active sessions (the engine maps its events)
    wait_samples: int  # how many session samples the shares rest on
    # the KPM catalogue's columns (capmark.measure.kpm.COLUMNS) -> value in the column's unit, None where n/a;
    # a table keyed by the catalogue, not by this record's fields, since each workload reports its own subset
    kpm: dict[str, float | None]
    unavailable: dict[str, str]  # KPM column -> why it is n/a
    problems: tuple[str, ...]  # why the step is not fit to calibrate a model on; empty when it is

    @property
    def valid(self) -> bool:
        return not self.problems

    @classmethod
    # open-ended: the stored record as parsed JSON (asdict of this class), not yet checked; the store names damage
    def from_dict(cls, d: dict[str, Any]) -> Measures:
        return cls(**{**d, "latency": Latency(**d["latency"]),
                      "latency_by_type": {k: Latency(**v) for k, v in d["latency_by_type"].items()},
                      "host_cpu": HostCpu(**d["host_cpu"]) if d.get("host_cpu") else None,
                      "traffic": Traffic(**d["traffic"]), "problems": tuple(d["problems"]),
                      "waits": {WaitClass(k): v for k, v in d["waits"].items()}})


@dataclass
class StepResult:
    ordinal: int
    jobs: int
    status: str  # ok | failed | interrupted
    started_at: str
    elapsed_s: float
    txn_types: list[str]
    histograms: dict[str, LatencyHistogram]
    errors: dict[str, int]
    series_units: list[int] = field(default_factory=list)  # completed units per second of the window
    series_errors: list[int] = field(default_factory=list)
    # The raw material below is the engine's and the host's own counters, stored as read so that a later capmark
    # can rebuild `measures` from it; their keys differ by engine, engine version, host source and capmark version,
    # so they stay open dicts that only measure/ and the collectors read.
    # open-ended: the engine's statistics views as read at the window's start (keys and columns differ by engine)
    db_before: dict[str, Any] = field(default_factory=dict)
    # open-ended: the engine's statistics views as read at the window's end
    db_after: dict[str, Any] = field(default_factory=dict)
    # open-ended: per view, the rows' counter differences over the window (engine.delta; its views and columns)
    db_delta: dict[str, Any] = field(default_factory=dict)
    # open-ended: the host source's CPU, disk and memory counters before/after and their deltas (differ by source)
    os: dict[str, Any] = field(default_factory=dict)
    process_cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    # the driver's CPU seconds (user_s, sys_s, database_host_s, ...) and its processes, each on its own
    # open-ended: what it holds differs by driver (threads, worker processes, a Ray cluster's nodes)
    driver_cpu: dict[str, Any] = field(default_factory=dict)
    waits: dict[str, int] = field(default_factory=dict)
    wait_samples: int = 0
    # open-ended: the host source's 1 s readings (run queue, CPU, per-CPU), as many fields as the source reads
    os_series: list[dict[str, Any]] = field(default_factory=list)
    round_trips: int = 0
    # the job connections' traffic in the window, summed (collect/netinfo.py): transport, connections and
    # bytes_sent, bytes_received, segments_out, segments_in, retransmits, or the reason they are n/a;
    # open-ended: the kernel's socket counters as read (by transport and kernel); empty in runs stored before
    network: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pacing: dict[str, float] = field(default_factory=dict)  # client side: think_s, rate (0 = closed loop)
    schedule_lag: LatencyHistogram | None = None  # open loop: how late units started
    background_series: list[dict[str, float]] = field(default_factory=list)  # per second: checkpoint, autovacuum
    # open-ended: per interval, the rss of every instance process by pid (the pids and roles of that run)
    memory_series: list[dict[str, Any]] = field(default_factory=list)
    # open-ended: other sessions and programs seen in the window, as the engine and the host source describe them
    interference: dict[str, Any] = field(default_factory=dict)
    # open-ended: capmark's own instruments by name (its transactions, eviction, statements, overrun, cluster)
    instruments: dict[str, Any] = field(default_factory=dict)
    repeat: int = 1  # which repetition of the step plan (--repeat) measured it, from 1; runs stored before: 1
    # the typed record of what the step measured (measure/record.py), built when it ended; None in runs stored
    # before it existed (results format < 2), which get it built on loading. Its key figures (measures.kpm) are
    # the step's only ones: the store writes them to the step table's kpm column and reads that column only to
    # build the record of an older run.
    measures: Measures | None = None

    @property
    def units(self) -> int:
        return sum(h.total for h in self.histograms.values())

    @property
    def latency(self) -> LatencyHistogram:
        return merge_all(self.histograms.values())

    @property
    def measured(self) -> Measures:
        """The step's record: every step the runner finished or the store loaded has one."""
        if self.measures is None:
            raise ValueError(f"step {self.ordinal} has no Measures record; capmark.measure.record.of(step) builds it")
        return self.measures

    # open-ended: the stored form, JSON (this class's fields; the raw material above as read)
    def to_dict(self) -> dict[str, Any]:
        d = _fields_dict(self, skip=("histograms", "schedule_lag"))
        d["histograms"] = {k: h.to_dict() for k, h in self.histograms.items()}
        d["schedule_lag"] = self.schedule_lag.to_dict() if self.schedule_lag else None
        return d

    @classmethod
    # open-ended: the stored form as parsed JSON, checked field by field by the store before it gets here
    def from_dict(cls, d: dict[str, Any]) -> StepResult:
        d = dict(d)
        d["histograms"] = {k: LatencyHistogram.from_dict(h) for k, h in d["histograms"].items()}
        if d.get("schedule_lag"):
            d["schedule_lag"] = LatencyHistogram.from_dict(d["schedule_lag"])
        if d.get("measures"):  # a record of another layout is left out: the store builds it anew from the raw step
            d["measures"] = Measures.from_dict(d["measures"]) if d["measures"].get("version") == MEASURES_VERSION \
                else None
        return cls(**d)


class KneeRecord(TypedDict):
    """Where automatic stepping stopped and why (measure/stepping.Knee as stored)."""

    jobs: int | None  # the measured step at the knee (None: the bound came first)
    rule: str  # "throughput flat" | "response time" | "bound"
    stopped_at: int  # the most jobs measured
    text: str


class Stepping(TypedDict, total=False):
    """How a test's steps were chosen, stored in its header (a key is absent in runs stored before it existed)."""

    repeat: int  # runs of the step plan (--repeat)
    auto: bool  # --jobs auto: stepped until the knee
    max_jobs: int | None  # the bound of auto stepping
    knee: KneeRecord  # where auto stepping stopped (only after auto stepping)


@dataclass
class TestResult:
    __test__ = False  # not a pytest class

    ordinal: int
    workload: str
    family: str
    description: str
    unit: str
    throughput_label: str
    mode: str
    params: dict[str, int | str]  # the workload's parameter values (workloads.base.ParamValue)
    kpms: list[str]
    per_unit: dict[str, float] = field(default_factory=dict)  # what one unit stands for: rows, ops
    steps: list[StepResult] = field(default_factory=list)
    status: str = "ok"  # ok | failed | interrupted
    reason: str = ""  # why the test is not ok, in words for the user
    quiesce_s: float = 0.0  # settling before the first step: CHECKPOINT, idle data device, no vacuum on capmark's tables
    # how the steps were chosen (empty in runs stored before repetitions and auto stepping existed)
    stepping: Stepping = field(default_factory=lambda: Stepping())
    # what the test did besides its steps: its own data loaded, the variant it measured, checks after it
    notes: list[str] = field(default_factory=list)

    # open-ended: the stored form, JSON (this class's fields)
    def to_dict(self) -> dict[str, Any]:
        d = self.header_dict()
        d["steps"] = [s.to_dict() for s in self.steps]
        return d

    # open-ended: the stored form without the steps, which the store keeps row by row
    def header_dict(self) -> dict[str, Any]:
        return _fields_dict(self, skip=("steps",))

    @classmethod
    # open-ended: the stored form as parsed JSON, checked field by field by the store before it gets here
    def from_dict(cls, d: dict[str, Any]) -> TestResult:
        d = dict(d)
        steps = [StepResult.from_dict(s) for s in d.pop("steps", [])]
        return cls(**d, steps=steps)


@dataclass
class RunResult:
    run_id: str
    created_at: str
    folder: str
    status: str  # running | complete | failed | interrupted; on loading also killed | abandoned (see store.py)
    # open-ended: the run's settings as the capmark that measured it stored them (config.RunSpec of that version)
    spec: dict[str, Any]
    # open-ended: facts about the platform (OS, CPU, memory, cluster), as many as the host source could read
    environment: dict[str, Any]
    # open-ended: engines.base.TargetInfo of the capmark that measured it, with devices and started_at
    target: dict[str, Any]
    tests: list[TestResult] = field(default_factory=list)
    setup_notes: list[str] = field(default_factory=list)
    setup_s: float = 0.0
    reason: str = ""  # why the run is not complete, in words for the user
    pid: int | None = None  # the measuring process, so that a later command can tell a killed run
    host: str = ""
    heartbeat_at: str = ""  # last sign of life: written at every test and step

    def test(self, name: str) -> TestResult | None:
        return next((t for t in self.tests if t.workload == name), None)
