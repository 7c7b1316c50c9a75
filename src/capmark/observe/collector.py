"""`capmark observe`: a passive, read-only collector of a PostgreSQL server's interval deltas and activity.

It connects once as 'capmark observe', learns the server and the host, then samples pg_stat_activity and the server
processes' /proc at --sample-hz and, at each interval's end, reads the cumulative counters and hands the interval to
the sink (the store), which commits it at once. A restart, a statistics reset, counters going backwards or a lost
connection make that interval broken (kept, with its reason, never differenced across); after a lost connection it
reconnects with backoff and goes on. Ctrl-C or SIGTERM ends it cleanly: the interval in progress is closed and kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import psycopg

from capmark.collect import hosts
from capmark.collect.hostsource import HostSource, NoHost
from capmark.config import env_dsn, redact_dsn
from capmark.engines import postgres as pg
from capmark.engines import registry
from capmark.engines.base import Delta, TargetInfo
from capmark.engines.postgres import embedded
from capmark.engines.postgres import observe as reader
from capmark.engines.postgres.stats import flush_own_stats
from capmark.errors import CapmarkError
from capmark.observations import (
    Interval,
    IntervalStatus,
    Observation,
    ObservationEvent,
    ObservationSettings,
)
from capmark.observe import deltas
from capmark.observe.host import HostReading, ProcessSampler, devices_of, host_delta, read_host
from capmark.observe.round_trips import PROBES_PER_SAMPLE, RoundTripLog
from capmark.observe.sessions import SessionTracker
from capmark.observe.spec import ObserveSpec

# Reconnecting after a lost connection: the first try at once, then waits doubling up to this, for as long as the
# observation lasts (a server being restarted or failed over is back in seconds to minutes).
RECONNECT_FIRST_WAIT_S = 1.0
RECONNECT_MAX_WAIT_S = 30.0
# The interval in progress when the observation ends is kept if it holds at least this much (a shorter tail holds
# less than one activity sample and rounding of the views' timestamps).
MIN_TAIL_S = 0.5


class Sink(Protocol):
    """Where the observation goes (observation_store.ObservationStore): each call is committed before it returns."""

    def begin(self, observation: Observation) -> None: ...

    def save_interval(self, interval: Interval) -> None: ...

    def save_event(self, event: ObservationEvent) -> None: ...

    def finish(self, status: str, reason: str) -> None: ...


@dataclass
class ProgressState:
    elapsed_s: float
    intervals: int
    broken: int
    host_busy_pct: float | None
    busiest: str
    notice: str = ""  # a reconnect in progress, in words


class Progress(Protocol):
    def say(self, message: str) -> None: ...

    def update(self, state: ProgressState) -> None: ...


class QuietProgress:
    def say(self, message: str) -> None:
        pass

    def update(self, state: ProgressState) -> None:
        pass


@dataclass
class Reading:
    """One reading of the server's cumulative counters and the host's, at an interval's edge."""

    taken_at: float
    epoch: reader.ServerEpoch
    statements: dict[reader.StatementKey, reader.StatementRow]
    views: Delta
    host: HostReading | None
    own_transactions: int  # the collector's own transactions (its sessions') counted when the views were read


@dataclass
class Observed:
    """What an observation left: its record (without the intervals, which are in the store), where, and how many
    intervals it stored (and of those, broken)."""

    observation: Observation
    intervals: int
    broken: int
    folder: str = ""


@dataclass
class Collector:
    spec: ObserveSpec
    dsn: str
    sink: Sink
    progress: Progress
    info: TargetInfo
    conn: Any
    host: HostSource
    devices: list[str]
    statements: bool
    observation: Observation
    stop: threading.Event = field(default_factory=threading.Event)
    tracker: SessionTracker = field(default_factory=SessionTracker)
    round_trips: RoundTripLog = field(default_factory=RoundTripLog)
    intervals: int = 0
    broken: int = 0
    busiest: str = ""
    notice: str = ""
    end: float | None = None  # monotonic time --for ends at
    # The transactions the collector's own session committed: the server counts them with the applications' in
    # pg_stat_database, and the analysis takes them out. Each sample, each round-trip probe, each publish and each
    # reading is one; the first use of the prepared sampling statement commits one more, in the first reading, before
    # any interval, and psycopg prepares nothing else by itself on these sessions (_connect), which would commit one
    # more uncounted.
    own_transactions: int = 0

    def __post_init__(self) -> None:
        self.procs = ProcessSampler(self.host)
        self.started = time.monotonic()

    # --- readings -------------------------------------------------------------------------------------------
    def own_pids(self) -> list[int]:
        return [self.conn.info.backend_pid, *self.host.own_pids()]

    def sample(self) -> None:
        try:
            rows = reader.sample_activity(self.conn, self.own_pids())
        finally:
            self.own_transactions += 1
        procs, postmaster = self.procs.read([r.pid for r in rows])
        self.tracker.add(rows, procs, postmaster)
        for _ in range(PROBES_PER_SAMPLE):
            try:
                self.round_trips.add(reader.time_round_trip(self.conn))
            finally:
                self.own_transactions += 1  # the server counts an empty statement as a committed transaction

    def read(self) -> Reading:
        # every transaction of the collector's sessions so far lands in this reading: without publishing, a
        # session's counts reach the views up to a second late, in the next interval
        self.own_transactions += flush_own_stats(self.conn, self.info)
        self.host.publish_statistics(self.info)
        own = self.own_transactions + self.host.transactions()
        with self.conn.transaction():  # one snapshot of the statistics for every view (stats_fetch_consistency)
            self.conn.execute("select pg_stat_clear_snapshot()")
            views = reader.read_views(self.conn, self.info)
            statements = reader.read_statements(self.conn, self.info, self.spec.store_query_text) \
                if self.statements else {}
            epoch = reader.read_epoch(self.conn, self.info, self.statements, views)
        self.own_transactions += 1
        host = read_host(self.host, self.devices) if not isinstance(self.host, NoHost) else None
        return Reading(time.time(), epoch, statements, views, host, own)

    # --- intervals ------------------------------------------------------------------------------------------
    def interval(self, before: Reading, after: Reading) -> Interval:
        cells, uses, samples = self.tracker.take()
        run_queue = self.procs.take_run_queue()
        host = host_delta(before.host, after.host, run_queue) if before.host and after.host else None
        base = Interval(ordinal=self.intervals + 1, start=before.taken_at, end=after.taken_at, activity=cells,
                        sessions=uses, activity_samples=samples, host=host, round_trips=self.round_trips.take(),
                        collector_transactions=after.own_transactions - before.own_transactions)
        broke = deltas.epoch_break(before.epoch, after.epoch)
        changed: dict[reader.StatementKey, dict[str, float]] = {}
        views: Delta = {}
        if broke is None:
            evicted = before.epoch.statements_dealloc != after.epoch.statements_dealloc
            changed, broke = deltas.statement_deltas(before.statements, after.statements, evicted=evicted)
        if broke is None:
            views, broke = deltas.views_delta(before.views, after.views)
        if broke is not None:
            self.event(broke.kind, f"Interval {self.intervals + 1} is broken: {broke.text}.")
            return dataclasses.replace(base, status=IntervalStatus.BROKEN, reason=broke.text)
        top = deltas.top_statements(changed, after.statements, self.spec.top_statements)
        return dataclasses.replace(base, statements=top, statements_total=len(changed), database=views)

    def store(self, interval: Interval) -> None:
        self.sink.save_interval(interval)
        self.intervals += 1
        self.broken += interval.status is IntervalStatus.BROKEN
        self.busiest = self.tracker.busiest() or self.busiest
        self.show()

    def event(self, kind: str, text: str) -> None:
        self.sink.save_event(ObservationEvent(at=time.time(), kind=kind, text=text))

    def show(self) -> None:
        self.progress.update(ProgressState(time.monotonic() - self.started, self.intervals, self.broken,
                                           self.procs.busy_pct, self.busiest, self.notice))

    # --- the loop -------------------------------------------------------------------------------------------
    def run(self) -> tuple[str, str]:
        """Collect until --for elapses or a signal; the final status and reason."""
        end = self.end = self.started + self.spec.planned_s if self.spec.planned_s is not None else None
        period = 1.0 / self.spec.sample_hz
        before = self._first_reading()
        next_sample = time.monotonic() + period
        boundary = time.monotonic() + self.spec.interval_s
        while True:
            now = time.monotonic()
            wake = min(next_sample, boundary, end if end is not None else boundary)
            if self.stop.wait(max(0.0, wake - now)):
                break
            now = time.monotonic()
            last = end is not None and now >= end
            try:
                if now >= next_sample or now >= boundary or last:
                    self.sample()
                    next_sample = max(next_sample + period, now + period / 2)
                if now >= boundary or last:
                    after = self.read()
                    self.store(self.interval(before, after))
                    before = after
                    boundary += self.spec.interval_s
                else:
                    self.show()
            except psycopg.Error as err:
                recovered = self._recover(before, err)
                if recovered is None:
                    if self.stop.is_set():
                        return "ended", "ended by Ctrl-C or SIGTERM while reconnecting"
                    return "ended", (f"the planned {_duration(self.spec.planned_s or 0)} elapsed while reconnecting "
                                     "to the server")
                before = recovered
                boundary = time.monotonic() + self.spec.interval_s
                next_sample = time.monotonic() + period
            if last:
                return "ended", f"the planned {_duration(self.spec.planned_s or 0)} elapsed"
        self._tail(before)
        return "ended", "ended by Ctrl-C or SIGTERM"

    def _first_reading(self) -> Reading:
        self.sample()
        return self.read()

    def _tail(self, before: Reading) -> None:
        """The interval in progress when a signal came, closed and kept."""
        if time.time() - before.taken_at < MIN_TAIL_S:
            return
        with contextlib.suppress(psycopg.Error):
            self.sample()
            self.store(self.interval(before, self.read()))

    def _recover(self, before: Reading, err: psycopg.Error) -> Reading | None:
        """After a failed reading: the broken interval stored, a new connection (when the old one is gone) and a
        new first reading; None when a signal ended the observation meanwhile."""
        lost = bool(self.conn.closed or self.conn.broken)
        text = _first_line(err)
        reason = (f"the connection to the server was lost ({text})" if lost
                  else f"a statistics view could not be read ({text})")
        self.event("disconnected" if lost else "unreadable", f"{reason[0].upper()}{reason[1:]}.")
        with contextlib.suppress(psycopg.Error):
            self.conn.rollback()
        reading = self._reconnect() if lost else self._retry_reading()
        if reading is None:
            self._store_broken(before, time.time(), reason)
            return None
        if reading.epoch.started_at != before.epoch.started_at:
            self.event("restart", f"The server restarted (its postmaster started at {reading.epoch.started_at}).")
            reason += "; the server restarted"
        self._store_broken(before, reading.taken_at, reason)
        return reading

    def _store_broken(self, before: Reading, end: float, reason: str) -> None:
        cells, uses, samples = self.tracker.take()
        self.procs.take_run_queue()
        self.round_trips.take()  # probes across a break time the reconnecting, not the server
        self.store(Interval(ordinal=self.intervals + 1, start=before.taken_at, end=end, status=IntervalStatus.BROKEN,
                            reason=reason, activity=cells, sessions=uses, activity_samples=samples))

    def _retry_reading(self) -> Reading | None:
        try:
            return self._first_reading()
        except psycopg.Error:
            return self._reconnect()

    def _reconnect(self) -> Reading | None:
        wait = RECONNECT_FIRST_WAIT_S
        tries = 0
        while not self.stop.is_set():
            tries += 1
            with contextlib.suppress(Exception):
                self.conn.close()
            try:
                self.conn = _connect(self.dsn)
                if isinstance(self.host, hosts.ProcHost) and self.host.name == "sql":
                    with contextlib.suppress(Exception):
                        self.host.close()
                    self.host = hosts.sql_source(self.dsn)
                    self.procs.host = self.host
                self.tracker.last.clear()
                reading = self._first_reading()
                self.notice = ""
                self.event("reconnected", f"Reconnected to the server after {tries} attempt{'s' * (tries > 1)}.")
                return reading
            except (CapmarkError, psycopg.Error) as err:
                self.notice = f"connection lost ({_first_line(err)}); reconnecting in {wait:.0f} s"
                self.show()
            if self.end is not None and time.monotonic() + wait >= self.end:
                break  # --for ends before the next try
            if self.stop.wait(wait):
                break
            wait = min(wait * 2, RECONNECT_MAX_WAIT_S)
        return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0].rstrip(".") if text else type(err).__name__


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@contextlib.contextmanager
def _signals_end(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM set `stop` (the loop ends at its next wait, between readings); a second one interrupts."""
    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    try:
        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: the caller sets `stop`
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _target(spec: ObserveSpec, progress: Progress) -> tuple[str, bool]:
    dsn = spec.dsn or env_dsn()
    if dsn:
        return dsn, False
    progress.say(f"Observing the embedded PostgreSQL in {spec.data_dir or embedded.default_data_dir()}.")
    return embedded.start(spec.data_dir, say=progress.say), True


def _connect(dsn: str) -> Any:
    engine = registry.for_dsn(dsn)
    if engine.name != "postgresql":
        raise CapmarkError(f"capmark observe supports PostgreSQL for now, not {engine.label}; name a PostgreSQL server "
                           "with --dsn.")
    conn = pg.connect(dsn, application_name=reader.OBSERVE_APPLICATION)
    conn.prepare_threshold = None  # see Collector.own_transactions
    return conn


def _statements_readable(conn: Any, info: TargetInfo, progress: Progress) -> bool:
    if not info.has("pg_stat_statements"):
        progress.say(reader.statements_hint(info))
        return False
    try:
        reader.read_statements(conn, info, with_text=False)
        return True
    except psycopg.errors.InsufficientPrivilege:
        role = conn.execute("select current_user").fetchone()[0]
        progress.say(f"The role '{role}' may not read pg_stat_statements, so no statement is collected; a database "
                     f"administrator runs GRANT {reader.MONITOR_ROLE} TO {role}.")
        return False


def observe(spec: ObserveSpec, sink: Sink, progress: Progress | None = None, stop: threading.Event | None = None,
            observation_id: str = "") -> Observed:
    """Observe until --for elapses or Ctrl-C / SIGTERM; the sink holds every finished interval as it ends. Nothing is
    stored when the server cannot be reached or read (CapmarkError)."""
    progress = progress or QuietProgress()
    spec.check()
    dsn, is_embedded = _target(spec, progress)
    conn = _connect(dsn)
    host: HostSource | None = None
    collector: Collector | None = None
    try:
        info = pg.describe(conn, dsn, embedded=is_embedded)
        role, all_stats, readable = reader.role_facts(conn)
        if not readable:
            raise CapmarkError(f"The role '{role}' may not read the server's statistics views; a database administrator "
                               f"runs GRANT {reader.MONITOR_ROLE} TO {role}.")
        notes = []
        if not all_stats:
            notes.append(f"The role '{role}' is not a member of {reader.MONITOR_ROLE}, so other roles' statements and "
                         f"sessions are hidden; a database administrator runs GRANT {reader.MONITOR_ROLE} TO {role}.")
        statements = _statements_readable(conn, info, progress)
        if not statements:
            notes.append(reader.statements_hint(info))
        host = hosts.choose(spec.host_metrics, dsn, conn, info.data_directory, pg.connect, spec.node_exporter, None,
                            spec.node_exporter_token)
        info.host_metrics = host.name
        data_device, device_note = host.data_device(info.data_directory)
        devices = devices_of(host, data_device)
        for note in notes:
            if note.startswith("The role"):
                progress.say(note)
        if isinstance(host, NoHost):
            notes.append(f"Host counters are not collected: {host.reason}.")
            progress.say(notes[-1])
        observation = Observation(
            observation_id=observation_id, created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            status="running", reason="",
            settings=ObservationSettings(interval_s=spec.interval_s, sample_hz=spec.sample_hz,
                                         top_statements=spec.top_statements, store_query_text=spec.store_query_text,
                                         host_metrics=host.name, planned_s=spec.planned_s),
            target={**asdict(info), "dsn_redacted": redact_dsn(dsn),
                    "started_at": str(conn.execute("select pg_postmaster_start_time()").fetchone()[0]),
                    "collector_query_ids": reader.own_query_ids(conn, info, spec.store_query_text)},
            host={**asdict(host.facts), "devices": devices, "data_device": data_device, "device_note": device_note,
                  "postmaster_pid": getattr(host, "postmaster_pid", None)},
            block_size=reader.block_size(conn), host_cores=host.facts.cores, statements_available=statements)
        stop = stop or threading.Event()
        collector = Collector(spec=spec, dsn=dsn, sink=sink, progress=progress, info=info, conn=conn, host=host,
                              devices=devices, statements=statements, observation=observation, stop=stop)
        with _signals_end(stop):
            sink.begin(observation)
            for note in notes:
                collector.event("missing", note)
            try:
                status, reason = collector.run()
            except KeyboardInterrupt:
                status, reason = "ended", "ended by a second Ctrl-C or SIGTERM; the interval in progress was not kept"
            except Exception as err:
                sink.finish("failed", _first_line(err))
                raise
            sink.finish(status, reason)
            observation.status, observation.reason = status, reason
        return Observed(observation, collector.intervals, collector.broken)
    finally:
        later = (collector.conn, collector.host) if collector is not None else ()
        for closing in (conn, host, *later):
            if closing is not None:
                with contextlib.suppress(Exception):
                    closing.close()
