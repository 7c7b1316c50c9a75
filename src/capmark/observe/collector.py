"""`capmark observe`: a passive, read-only collector of a server's interval deltas and activity (PostgreSQL, MySQL,
MariaDB; the engine's side is a ServerSource).

It connects once, learns the server and the host, then samples the server's sessions and their processes' (or
threads') /proc at --sample-hz and, at each interval's end, reads the cumulative counters and hands the interval to
the sink (the store), which commits it at once. A restart, a statistics reset, counters going backwards or a lost
connection make that interval broken (kept, with its reason, never differenced across); after a lost connection it
reconnects with backoff and goes on. Ctrl-C or SIGTERM ends it cleanly: the interval in progress is closed and kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from capmark.collect.hostsource import NoHost
from capmark.config import env_dsn
from capmark.engines import registry
from capmark.engines.postgres import embedded
from capmark.errors import CapmarkError
from capmark.observations import Interval, IntervalStatus, Observation, ObservationEvent
from capmark.observe import mysql_source, postgres_source
from capmark.observe.host import HostReading, host_delta, read_host
from capmark.observe.round_trips import PROBES_PER_SAMPLE, RoundTripLog
from capmark.observe.sessions import SessionTracker
from capmark.observe.source import Opened, ServerSource, first_line
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
    """One reading at an interval's edge: the server's counters (the source's own record) and the host's."""

    taken_at: float
    server: Any
    host: HostReading | None


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
    sink: Sink
    progress: Progress
    source: ServerSource
    devices: list[str]
    observation: Observation
    stop: threading.Event = field(default_factory=threading.Event)
    tracker: SessionTracker = field(init=False)
    round_trips: RoundTripLog = field(default_factory=RoundTripLog)
    intervals: int = 0
    broken: int = 0
    busiest: str = ""
    notice: str = ""
    end: float | None = None  # monotonic time --for ends at

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.tracker = SessionTracker(classify=self.source.wait_of)

    # --- readings -------------------------------------------------------------------------------------------
    def sample(self) -> None:
        self.source.sample(self.tracker)
        for _ in range(PROBES_PER_SAMPLE):
            self.round_trips.add(self.source.round_trip())

    def read(self) -> Reading:
        server = self.source.read()
        host = self.source.host
        counters = read_host(host, self.devices) if not isinstance(host, NoHost) else None
        return Reading(time.time(), server, counters)

    # --- intervals ------------------------------------------------------------------------------------------
    def interval(self, before: Reading, after: Reading) -> Interval:
        cells, uses, samples = self.tracker.take()
        run_queue = self.source.procs.take_run_queue()
        host = host_delta(before.host, after.host, run_queue) if before.host and after.host else None
        base = Interval(ordinal=self.intervals + 1, start=before.taken_at, end=after.taken_at, activity=cells,
                        sessions=uses, activity_samples=samples, host=host, round_trips=self.round_trips.take())
        counters, broke = self.source.counters(before.server, after.server)
        if broke is not None or counters is None:
            text = broke.text if broke is not None else "the server's counters could not be read"
            self.event(broke.kind if broke is not None else "unreadable",
                       f"Interval {self.intervals + 1} is broken: {text}.")
            return dataclasses.replace(base, status=IntervalStatus.BROKEN, reason=text)
        return dataclasses.replace(base, statements=counters.statements, statements_total=counters.statements_total,
                                   database=counters.database,
                                   collector_transactions=counters.collector_transactions)

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
                                           self.source.procs.busy_pct, self.busiest, self.notice))

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
            except self.source.errors as err:
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
        with contextlib.suppress(*self.source.errors):
            self.sample()
            self.store(self.interval(before, self.read()))

    def _recover(self, before: Reading, err: BaseException) -> Reading | None:
        """After a failed reading: the broken interval stored, a new connection (when the old one is gone) and a
        new first reading; None when a signal ended the observation meanwhile."""
        lost = self.source.lost()
        text = self.source.error_text(err)
        reason = (f"the connection to the server was lost ({text})" if lost
                  else f"a statistics view could not be read ({text})")
        self.event("disconnected" if lost else "unreadable", f"{reason[0].upper()}{reason[1:]}.")
        self.source.rollback()
        reading = self._reconnect() if lost else self._retry_reading()
        if reading is None:
            self._store_broken(before, time.time(), reason)
            return None
        restart = self.source.restart(before.server, reading.server)
        if restart is not None:
            self.event("restart", restart)
            reason += "; the server restarted"
        self._store_broken(before, reading.taken_at, reason)
        return reading

    def _store_broken(self, before: Reading, end: float, reason: str) -> None:
        cells, uses, samples = self.tracker.take()
        self.source.procs.take_run_queue()
        self.round_trips.take()  # probes across a break time the reconnecting, not the server
        self.store(Interval(ordinal=self.intervals + 1, start=before.taken_at, end=end, status=IntervalStatus.BROKEN,
                            reason=reason, activity=cells, sessions=uses, activity_samples=samples))

    def _retry_reading(self) -> Reading | None:
        try:
            return self._first_reading()
        except self.source.errors:
            return self._reconnect()

    def _reconnect(self) -> Reading | None:
        wait = RECONNECT_FIRST_WAIT_S
        tries = 0
        retried: tuple[type[BaseException], ...] = (CapmarkError, *self.source.errors)
        while not self.stop.is_set():
            tries += 1
            try:
                self.source.reconnect()
                self.tracker.last.clear()
                reading = self._first_reading()
                self.notice = ""
                self.event("reconnected", f"Reconnected to the server after {tries} attempt{'s' * (tries > 1)}.")
                return reading
            except retried as err:
                self.notice = f"connection lost ({self.source.error_text(err)}); reconnecting in {wait:.0f} s"
                self.show()
            if self.end is not None and time.monotonic() + wait >= self.end:
                break  # --for ends before the next try
            if self.stop.wait(wait):
                break
            wait = min(wait * 2, RECONNECT_MAX_WAIT_S)
        return None


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


def _open(spec: ObserveSpec, dsn: str, is_embedded: bool, progress: Progress, observation_id: str) -> Opened:
    engine = registry.for_dsn(dsn)
    if engine.name == "mysql":
        return mysql_source.open_mysql(spec, dsn, progress, observation_id)
    if engine.name != "postgresql":
        raise CapmarkError(f"capmark observe supports PostgreSQL, MySQL and MariaDB, not {engine.label}; name one of "
                           "them with --dsn.")
    return postgres_source.open_postgres(spec, dsn, is_embedded, progress, observation_id)


def observe(spec: ObserveSpec, sink: Sink, progress: Progress | None = None, stop: threading.Event | None = None,
            observation_id: str = "") -> Observed:
    """Observe until --for elapses or Ctrl-C / SIGTERM; the sink holds every finished interval as it ends. Nothing is
    stored when the server cannot be reached or read (CapmarkError)."""
    progress = progress or QuietProgress()
    spec.check()
    dsn, is_embedded = _target(spec, progress)
    opened = _open(spec, dsn, is_embedded, progress, observation_id)
    observation = opened.observation
    try:
        stop = stop or threading.Event()
        collector = Collector(spec=spec, sink=sink, progress=progress, source=opened.source, devices=opened.devices,
                              observation=observation, stop=stop)
        with _signals_end(stop):
            sink.begin(observation)
            for note in opened.notes:
                collector.event("missing", note)
            try:
                status, reason = collector.run()
            except KeyboardInterrupt:
                status, reason = "ended", "ended by a second Ctrl-C or SIGTERM; the interval in progress was not kept"
            except Exception as err:
                sink.finish("failed", first_line(err))
                raise
            sink.finish(status, reason)
            observation.status, observation.reason = status, reason
        return Observed(observation, collector.intervals, collector.broken)
    finally:
        opened.source.close()
