"""Plain data of the second path: what `capmark observe` collected from a server it did not load, interval by interval.

An observation is stored in the results folder like a run (its own kind). Everything after the collector (workload
rules, the peak, the baseline model, what-if) reads only these records, so a planner can re-cut workloads or pick
another peak long after the collection ended, without the server.

Counters are deltas over one interval, in seconds and bytes (blocks are kept as blocks, with the block size once on
the observation). Who did the work is a SessionKey: the rules that group sessions into workloads are applied at
analysis time, never at collection time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# 1: the first format (November 2026)
OBSERVATION_FORMAT = 1
OBSERVATION_KIND = "observation"  # the kind in the store's run table, beside ordinary runs
OTHER_STATEMENTS = "other"  # query id of the sum of the statements that were not among an interval's top N
NO_QUERY = ""  # an activity sample whose session had no query id (idle, or a utility statement not tracked)
# Interval.database's rows of each user's statements by command over the interval ({user, command, calls}), where
# the engine's statement statistics do not know the user (MySQL)
STATEMENT_USERS = "statement_users"


class IntervalStatus(StrEnum):
    """Whether an interval's deltas can be trusted: a broken one is kept (with its reason) but never analysed."""

    OK = "ok"
    BROKEN = "broken"  # a restart, a statistics reset, a counter that went backwards, a lost connection


@dataclass(frozen=True, kw_only=True)
class SessionKey:
    """Whom a server process was serving, as pg_stat_activity (or performance_schema.threads) names it. Background
    processes have an empty user and application and their own backend_type (checkpointer, walwriter, ...)."""

    database: str = ""
    user: str = ""
    application: str = ""
    client: str = ""  # client address; "" for a Unix socket or a background process
    backend_type: str = "client backend"

    @property
    def is_background(self) -> bool:
        return self.backend_type != "client backend"


@dataclass(frozen=True, kw_only=True)
class StatementDelta:
    """One statement's pg_stat_statements counters over one interval (the sum of the rest where query_id is
    OTHER_STATEMENTS). Times in seconds; blocks in blocks."""

    query_id: str
    database: str
    user: str
    toplevel: bool = True
    calls: float = 0.0
    exec_time_s: float = 0.0
    plan_time_s: float = 0.0
    rows: float = 0.0
    shared_blks_hit: float = 0.0
    shared_blks_read: float = 0.0
    shared_blks_dirtied: float = 0.0
    shared_blks_written: float = 0.0
    local_blks_hit: float = 0.0
    local_blks_read: float = 0.0
    local_blks_dirtied: float = 0.0
    local_blks_written: float = 0.0
    temp_blks_read: float = 0.0
    temp_blks_written: float = 0.0
    blk_read_time_s: float = 0.0
    blk_write_time_s: float = 0.0
    wal_records: float = 0.0
    wal_fpi: float = 0.0
    wal_bytes: float = 0.0
    text: str | None = None  # only with --store-query-text, at most 300 characters
    # the statement's command ("update", "select", ...) where the engine's statistics do not know its user
    # (MySQL's digests): the analysis splits it by the users' counts of that command (statement_users)
    command: str = ""


@dataclass(frozen=True, kw_only=True)
class ActivityCell:
    """How many activity samples of one interval found a session of `session` in this state: the ASH-like profile,
    aggregated so that a day of 1 Hz samples stays small. wait_class is a results.WaitClass value ("cpu" for an
    active session in no wait, "client" for an idle one); wait_event is the engine's own name ("" for none)."""

    session: SessionKey
    query_id: str  # NO_QUERY where the sample had none
    state: str  # active, idle, idle in transaction, ... (the engine's words)
    # idle inside an explicit transaction (BEGIN ... COMMIT), waiting for its client's next statement: how a
    # workload's explicit transactions are recognised (a running statement's transaction start cannot tell: in
    # autocommit, planning at Bind already starts the transaction before Execute starts the statement)
    in_transaction: bool
    wait_class: str
    wait_event: str
    samples: int


@dataclass(frozen=True, kw_only=True)
class SessionUse:
    """CPU and IO of the server processes that served `session` during one interval, each process's /proc delta
    between two samples charged to the session it was serving at the later one (the way a run charges CPU by role).
    Processes that started or ended inside the interval are charged from their first or up to their last sample."""

    session: SessionKey
    cpu_user_s: float
    cpu_system_s: float
    read_bytes: float  # /proc/<pid>/io read_bytes: what reached the device
    write_bytes: float
    processes: int  # distinct server processes seen serving it


@dataclass(frozen=True, kw_only=True)
class DeviceDelta:
    """One block device's counters over one interval (/proc/diskstats or node_exporter)."""

    name: str
    reads: float
    writes: float
    read_bytes: float
    write_bytes: float
    busy_s: float  # time with at least one request in flight (io_ticks)
    read_time_s: float
    write_time_s: float


@dataclass(frozen=True, kw_only=True)
class HostDelta:
    """The database host over one interval. cpu_s is CPU seconds by mode summed over all cores (user, nice, system,
    idle, iowait, irq, softirq, steal); busy = everything but idle and iowait."""

    cpu_s: dict[str, float]
    devices: list[DeviceDelta]
    memory: dict[str, int]  # a reading at the interval's end (MemTotal, MemAvailable, Cached, ...), bytes
    run_queue: float | None  # mean runnable processes over the interval's samples (procs_running), None unknown
    pressure: dict[str, float]  # PSI some avg10 by resource (cpu, io, memory) at the end, percent

    @property
    def busy_s(self) -> float:
        return sum(v for k, v in self.cpu_s.items() if k not in ("idle", "iowait"))

    @property
    def total_s(self) -> float:
        return sum(self.cpu_s.values())


@dataclass(frozen=True, kw_only=True)
class RoundTrips:
    """The collector's own round trips to the server over one interval: an empty statement, which the server answers
    without planning or executing anything, timed from the collector. What an application's statement spends outside the
    server's statistics (the network or loopback, waking the backend and the client) is in it; what the statement
    does at the server is not."""

    probes: int
    mean_s: float
    p50_s: float
    p90_s: float
    max_s: float


@dataclass(frozen=True, kw_only=True)
class Interval:
    """One interval's deltas. A broken interval keeps its reason and may lack any of the deltas."""

    ordinal: int
    start: float  # epoch seconds, the collector's clock at the first snapshot
    end: float
    status: IntervalStatus = IntervalStatus.OK
    reason: str = ""
    statements: list[StatementDelta] = field(default_factory=list)
    statements_total: int = 0  # distinct statements that changed, before the top N was kept
    activity: list[ActivityCell] = field(default_factory=list)
    sessions: list[SessionUse] = field(default_factory=list)
    activity_samples: int = 0  # how many times pg_stat_activity was sampled in the interval
    # The transactions capmark's own sessions committed in the interval (sampling, reading, host counters through
    # SQL), which pg_stat_database counts with the applications'; None: not counted (stored by an older capmark).
    collector_transactions: int | None = None
    host: HostDelta | None = None
    round_trips: RoundTrips | None = None  # None: not probed (stored by an older capmark, or no probe succeeded)
    # The engine's own views as they are (pg_stat_database per database, pg_stat_io, pg_stat_wal, checkpointer,
    # bgwriter), kept as deltas for re-analysis.
    # open-ended: their columns differ by version
    database: dict[str, Any] = field(default_factory=dict)

    @property
    def length_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, kw_only=True)
class ObservationEvent:
    """Something that happened to the collection: a restart, a statistics reset, a reconnect, a missing source."""

    at: float
    kind: str  # restart, reset, backwards, disconnected, reconnected, missing
    text: str  # one sentence for the report


@dataclass(frozen=True, kw_only=True)
class ObservationSettings:
    interval_s: float
    sample_hz: float
    top_statements: int
    store_query_text: bool
    host_metrics: str  # where the host's counters came from: local, sql, node_exporter, none
    planned_s: float | None  # --for; None: until Ctrl-C or SIGTERM


@dataclass(kw_only=True)
class Observation:
    """A whole observation as the analysis reads it. `target` and `host` are what the collector learnt once at the
    start: the server (engine, version, settings) and the host (cores, memory, devices, where counters came from)."""

    observation_id: str
    created_at: str
    status: str  # running, ended, killed, failed
    reason: str
    settings: ObservationSettings
    # open-ended: TargetInfo and host facts as whichever capmark version stored them
    target: dict[str, Any]
    host: dict[str, Any]  # open-ended: as target
    block_size: int = 8192
    host_cores: int | None = None  # the database host's cores, never the analysing machine's
    statements_available: bool = True  # pg_stat_statements (or performance_schema digests) could be read
    intervals: list[Interval] = field(default_factory=list)
    events: list[ObservationEvent] = field(default_factory=list)
    format: int = OBSERVATION_FORMAT

    def usable(self) -> list[Interval]:
        return [i for i in self.intervals if i.status is IntervalStatus.OK]
