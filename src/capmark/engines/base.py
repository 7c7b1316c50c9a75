"""What the rest of capmark needs from a database target, independent of the engine."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, runtime_checkable

from capmark.errors import CapmarkError
from capmark.results import WaitClass, WaitKey


@dataclass
class Capability:
    """One optional instrument: available or not, and why not."""

    available: bool
    reason: str = ""


@dataclass
class TargetInfo:
    """Plain description of a connected target, stored with every run."""

    engine: str
    version: str
    version_num: int
    dsn_redacted: str
    embedded: bool
    local: bool
    local_reason: str = ""
    data_directory: str | None = None
    postmaster_pid: int | None = None
    settings: dict[str, str] = field(default_factory=dict)
    capabilities: dict[str, Capability] = field(default_factory=dict)
    # pg_stat_statements qualified by the schema its extension lives in (capmark's own on the embedded server)
    statements_view: str = "pg_stat_statements"
    host_metrics: str = ""  # which source measured the database host: local, sql, node-exporter or none

    def has(self, name: str) -> bool:
        cap = self.capabilities.get(name)
        return bool(cap and cap.available)

    def why_not(self, name: str) -> str:
        cap = self.capabilities.get(name)
        return cap.reason if cap else f"{name} is not known to capmark for this engine"


@dataclass(frozen=True)
class DataSize:
    """Sizes of the shared data model at a scale, passed to both execution modes."""

    items: int
    accounts: int
    booking_accounts: int  # accounts that have bookings (25 each)
    call_customers: int  # customers that have call records (125 each)
    ring_rows: int  # rows of the WAL ring per job
    sto_rows: int  # rows of the STO block table (~8 per block)
    # pgbench's scale factor for its own tables (`pgbench -i -s`); 1, pgbench's smallest, unless a size says otherwise
    pgbench_scale: int = 1

    def as_params(self) -> dict[str, int]:
        return {"items": self.items, "accounts": self.accounts, "booking_accounts": self.booking_accounts,
                "call_customers": self.call_customers, "ring_rows": self.ring_rows, "sto_rows": self.sto_rows,
                "pgbench_scale": self.pgbench_scale}


@dataclass(frozen=True, kw_only=True)
class DbCounters:
    """What the database counted over a window, in engine-neutral terms, computed from a stored statistics delta.

    Each engine maps its own views onto these (PostgreSQL: pg_stat_database, pg_stat_wal, pg_stat_io; MySQL and
    MariaDB: SHOW GLOBAL STATUS and INNODB_METRICS), so that KPMs, demands, models and signatures need no engine
    names. None: this engine or version does not count it. "Log" is the write-ahead log: PostgreSQL's WAL, InnoDB's
    redo log.
    """

    commits: float | None = None  # transactions committed in the database (capmark's own statistics ones included)
    logical_reads: float | None = None  # page requests: found in the buffer cache or read
    physical_reads: float | None = None  # page requests the buffer cache missed (read from the OS or storage)
    read_ios: float | None = None  # read operations on data files (one may read several pages)
    read_bytes: float | None = None  # bytes read from data files
    read_time_ms: float | None = None  # time spent reading data files
    page_bytes: int = 8192  # the engine's page (block) size
    io_operations: bool = False  # read_ios and data_writes count IO operations (which may span pages), not pages
    data_writes: dict[str, float] | None = None  # pages written to data files, by writer (who did the writing)
    data_written_bytes: float | None = None  # bytes written to data files, extensions included
    data_extends: float | None = None  # pages added to data files
    data_extend_bytes: float | None = None
    data_time_ms: dict[str, float | None] | None = None  # data file read/write/extend/fsync time, by kind
    io_time_ms: float | None = None  # every IO time the database timed (data files, and the log where counted with them)
    log_bytes: float | None = None  # log generated
    log_records: float | None = None
    log_full_pages: float | None = None  # full-page images in the log (PostgreSQL)
    log_writes: float | None = None  # write calls to the log
    log_fsyncs: float | None = None  # flushes of the log to stable storage: the group-commit server's visits
    log_write_ms: float | None = None
    log_fsync_ms: float | None = None
    log_written_bytes: float | None = None  # log bytes written to disk (may exceed log_bytes: partial pages)

    @property
    def log_io_measured(self) -> bool:
        """The log's writes and flushes were counted (their times may still be unmeasured)."""
        return self.log_writes is not None and self.log_fsyncs is not None


@dataclass
class ActivitySample:
    """One look at the server's sessions during a step, in engine-neutral terms (the sampler counts these)."""

    waits: list[str] = field(default_factory=list)  # per job session: "CPU", "Client:idle...", or "type:event"
    others: list[tuple[str | None, str, str]] = field(default_factory=list)  # other clients: (state, program, user)
    checkpoint_busy: bool = False  # a checkpoint was being written
    autovacuum: bool = False  # autovacuum (or the engine's background cleanup) ran
    transactions: int = 0  # transactions the sample itself committed (they count among the commits)


# One row of a statistics view, column -> value, as read and as stored with a step.
# open-ended: the views and their columns are the engine's own and differ by engine and version
Row = dict[str, Any]
Delta = dict[str, list[Row]]  # view -> its rows (after - before in the numeric columns), as stored with a step


class ClientSession(Protocol):
    """One connection's named statements, run by the client-side driver with as little work per call as possible."""

    round_trips: int

    def run(self, name: str, *params: int | str) -> Any: ...

    def begin(self) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    @property
    def in_transaction(self) -> bool: ...


# CAPMARK_LOOKUPS=python runs every one-key lookup through the Python path even where an engine's compiled loop was
# built; =apart runs each job's compiled loop in its own thread, and =together a process's jobs' loops from one of
# its threads, wherever the client runs (by default that depends on it: driver/crew.py); to compare the paths
# (benchmarks/)
LOOKUPS_ENV = "CAPMARK_LOOKUPS"


LOOKUP_PATHS = {True: "compiled loop", False: "Python"}  # Engine.lookup_path's words, by whether the loop runs


def python_lookups_asked() -> bool:
    return os.environ.get(LOOKUPS_ENV, "") == "python"


def lookups_together_asked() -> bool | None:
    """True or False where CAPMARK_LOOKUPS says whether a process's jobs run their loops together; None: it does
    not say."""
    return {"apart": False, "together": True}.get(os.environ.get(LOOKUPS_ENV, ""))


class KeyLookups(Protocol):
    """An engine's compiled loop of one-key lookups on a session's connection (see RunsKeyLookups)."""

    def run(self, key_max: int, end: float, durations: Any, ends: Any, start: int, limit: int,
            arrivals: Any = None) -> tuple[int, Exception | None, float]: ...

    @property
    def runs_together(self) -> bool:
        """Whether run_together can run this loop's batches beside others of its kind, from one thread."""
        ...


# One loop's part in run_together: (the loop, its durations, its end times, from which index, at most how many)
LookupBatch = tuple[KeyLookups, Any, Any, int, int]


class CompiledKeyLookups:
    """An engine's compiled loop (its _lookups.Lookup) on a session's connection: each lookup, and a failed one, is a
    round trip of the session; a failure comes back as the engine driver's own exception (to_error). Where the
    engine's module can drive several connections from one thread (together: its run_together), run_together does."""

    def __init__(self, session: Any, compiled: Any, to_error: Callable[..., Exception],
                 together: Callable[..., list[tuple[int, Any, float]]] | None = None) -> None:
        self._session = session
        self._compiled = compiled
        self._to_error = to_error
        self._together = together

    @property
    def runs_together(self) -> bool:
        return self._together is not None

    def run(self, key_max: int, end: float, durations: Any, ends: Any, start: int, limit: int,
            arrivals: Any = None) -> tuple[int, Exception | None, float]:
        """Up to `limit` lookups, keys uniform over 1..key_max, until perf_counter passes `end` before one starts;
        durations and end times (perf_counter seconds) go to the float64 arrays from index `start`. Returns how
        many completed, the driver's error of the one that failed if one did, and when that one started. With
        `arrivals` (a float64 array of `limit` perf_counter times, rising), the i-th lookup waits for its arrival,
        its duration counts from it, and the arrival is replaced by when the lookup started; an arrival at or after
        `end` ends the batch."""
        return self._outcome(*self._compiled.run(key_max, end, durations, ends, start, limit, arrivals))

    def _outcome(self, done: int, error: Any, failed_at: float) -> tuple[int, Exception | None, float]:
        self._session.round_trips += done
        if error is None:
            return done, None, 0.0
        self._session.round_trips += 1
        return done, self._to_error(*error), failed_at


def run_together(batches: Sequence[LookupBatch], key_max: int, end: float) -> list[tuple[int, Exception | None, float]]:
    """Unpaced batches of several loops of one engine at once, from the calling thread: each loop's as its run()
    would give it (same keys, same end), but one thread waits on all their connections instead of one thread on
    each, as pgbench's threads drive their clients. Every loop must be able to (runs_together), all of one engine."""
    compiled = [loop for loop, *_ in batches if isinstance(loop, CompiledKeyLookups)]
    if len(compiled) != len(batches):
        raise ValueError("run_together needs compiled loops")
    together = {loop._together for loop in compiled}
    if len(together) != 1 or None in together:
        raise ValueError("run_together needs loops of one engine that can run together")
    (run,) = together
    assert run is not None
    outcomes = run([(loop._compiled, *rest) for loop, (_, *rest) in zip(compiled, batches, strict=True)], key_max,
                   end)
    return [loop._outcome(*outcome) for loop, outcome in zip(compiled, outcomes, strict=True)]


@runtime_checkable
class RunsKeyLookups(Protocol):
    """A client session that can run a one-key lookup unit (workloads.client.KeyLookup) many at a time in compiled
    code: the driver's Python work per lookup would otherwise cost more than the lookup's own client work."""

    def key_lookups(self, name: str, seed: int) -> KeyLookups | None: ...


class Engine(Protocol):
    """A database engine: what every engine does for measure, driver and runner (connect, prepare and run a unit,
    read its counters, map its waits, describe the server). Adding an engine is one subpackage under capmark.engines
    that provides this, plus its SQL; nothing above the engines names an engine. What only some engines can do is
    an optional protocol below (RunsProcedures, WatchesLocks) or beside its user (collect.hosts.ReadsHostFiles),
    asked for with isinstance."""

    name: str  # stored as TargetInfo.engine: "postgresql", "mysql"
    label: str  # for users: "PostgreSQL", "MySQL/MariaDB"
    schemes: tuple[str, ...]  # DSN URL schemes it serves
    error: type[Exception]  # base class of its driver's errors
    server_side: bool  # runs the catalogue's units as server-side procedures (and is RunsProcedures)
    log_label: str  # what users call its write-ahead log: "WAL", "redo log"
    advice: dict[str, list[str]]  # bottleneck signature -> what to try, naming the engine's settings and views
    reads_commit: bool  # capmark's own logins and statistics reads count as committed transactions
    backend_is_process: bool  # a connection's backend_pid is an OS process of its own (not a thread's id)

    server_role: str  # the role a one-process server's CPU is reported under (backend_is_process False)

    def connect(self, dsn: str, *, application_name: str = "capmark", autocommit: bool = True,
                timeout_s: float | None = None) -> Any: ...

    def prepare_control(self, conn: Any) -> None: ...

    def execute(self, conn: Any, sql: str) -> None: ...

    def server_started(self, conn: Any) -> str: ...

    def connection_room(self, conn: Any) -> tuple[int, int]: ...

    def terminated(self, err: BaseException) -> bool: ...

    def error_text(self, err: BaseException) -> str:
        """The driver's error in one line of the user's words (the server's message, never a driver's tuple)."""
        ...

    def describe(self, conn: Any, dsn: str, *, embedded: bool) -> TargetInfo: ...

    def server_process(self, conn: Any, dsn: str) -> tuple[int | None, str]:
        """The server's main process (PostgreSQL's postmaster, mysqld) when it runs on this machine, in this PID
        namespace, else None and why not (remote, or in another container), in words."""
        ...

    def backend_pid(self, conn: Any) -> int: ...

    def is_broken(self, conn: Any) -> bool: ...

    def is_cancel(self, err: BaseException) -> bool: ...

    def cancel(self, conn: Any, dsn: str) -> None: ...

    def cancel_reason(self, conn: Any) -> str: ...

    def setup_datamodel(self, conn: Any, size: DataSize, say: Callable[[str], None]) -> float: ...

    def warm_cache(self, conn: Any, tables: list[str], say: Callable[[str], None]) -> None: ...

    def client_statement(self, name: str, postgres_sql: str) -> str | None: ...

    def session_settings(self, settings: dict[str, str]) -> dict[str, str] | str: ...

    def preparation(self, statements: tuple[str, ...]) -> tuple[str, ...] | str: ...

    def checkpoint(self, conn: Any) -> str:
        """Write the dirty pages of earlier work now, where the engine has a command for it: '' when done (or when it
        has nothing to ask for), else the sentence saying why not (the role may not)."""
        ...

    def background_work(self, conn: Any) -> list[str]: ...

    def session(self, conn: Any, statements: dict[str, str]) -> ClientSession: ...

    def lookup_path(self) -> str:
        """How this process runs a client-side one-key lookup (workloads.client.KeyLookup): "compiled loop" or
        "Python" (the loop not built, not usable with this driver, or CAPMARK_LOOKUPS=python)."""
        ...

    def set_session(self, conn: Any, settings: dict[str, str]) -> None: ...

    def snapshot(self, conn: Any, info: TargetInfo, backend_pids: list[int] | None = None,
                 all_statements: bool = False) -> Delta: ...

    def delta(self, before: Delta, after: Delta) -> Delta: ...

    def flush_own_stats(self, conn: Any, info: TargetInfo) -> None: ...

    def statements_rule(self, all_statements: bool) -> str: ...

    def tracks_statements(self, info: TargetInfo) -> bool:
        """The target keeps statistics by statement (PostgreSQL's pg_stat_statements, MySQL's statement digests),
        which every snapshot stores under the rule statements_rule names."""
        ...

    def nested_statements(self, conn: Any, info: TargetInfo) -> dict[str, str] | str:
        """The session settings under which those statistics also count the statements inside server-side
        procedures (--nested-statements), or why they cannot."""
        ...

    def counters(self, delta: Delta) -> DbCounters: ...

    def sample_activity(self, conn: Any, info: TargetInfo, job_pids: list[int],
                        own_pids: list[int]) -> ActivitySample: ...

    def wait_class(self, key: WaitKey) -> WaitClass:
        """The neutral class (CPU, IO read or write, log flush, lock, client, other) of one of this engine's wait
        keys as its sampler stores them in StepResult.waits."""
        ...


@runtime_checkable
class RunsProcedures(Protocol):
    """An engine that runs the catalogue's units as server-side procedures (PostgreSQL's PL/pgSQL); its server_side
    says so. Not every engine can, so this is no member of Engine: procedures_of() asks for it."""

    def install_procedures(self, conn: Any, ddl: list[str]) -> None: ...


def procedures_of(engine: Engine) -> RunsProcedures:
    """The engine as one that installs server-side procedures, or one sentence: it runs its workloads client-side."""
    if not engine.server_side or not isinstance(engine, RunsProcedures):
        raise CapmarkError(f"capmark runs {engine.label} workloads client-side only; drop --mode server.")
    return engine


class LockHolder(TypedDict):
    """A session that keeps a step's jobs waiting on a lock, as the step's overrun watch stores it."""

    pid: int
    application_name: str
    user: str
    state: str
    xact_start: str | None  # ISO time, local zone
    query_start: str | None
    query: str  # shortened, secrets masked
    describe: str  # the session in words, for the step's sentence
    relations: list[str]  # the tables it is waited on for
    jobs: list[int]  # the jobs it blocks, numbered from 1


@runtime_checkable
class WatchesLocks(Protocol):
    """An engine that names who holds the lock a step's jobs wait on and can cancel their statements by backend (the
    driver's overrun watch, driver/step.py); an engine without it leaves the jobs to the barrier's timeout."""

    def lock_blockers(self, conn: Any, pids: list[int]) -> list[LockHolder]: ...

    def cancel_backends(self, conn: Any, pids: list[int]) -> None: ...
