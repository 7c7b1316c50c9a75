"""Jobs: one thread and one connection each, running units until told to stop, in phases.

Phases are separated by a barrier shared with the step runner: warm-up, then a pause in which the
runner snapshots every counter, then the measured window, then another pause for the closing
snapshot. Jobs publish their statistics before each pause so that the snapshots are complete.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from capmark.driver.crew import LookupCrew, crews_wanted
from capmark.driver.sampling import SliceSampling
from capmark.engines import registry
from capmark.engines.base import ClientSession, KeyLookups, LookupBatch, RunsKeyLookups, TargetInfo
from capmark.engines.postgres.rows import one_row
from capmark.errors import CapmarkError
from capmark.histogram import LatencyHistogram, bucket_bounds
from capmark.workloads.base import ClientUnit, DataSize, ParamValue, Workload, slice_call
from capmark.workloads.client import KeyLookup


@dataclass
class Tally:
    """What one job did in the measured window."""

    histograms: list[LatencyHistogram]
    errors: list[int]
    series_units: dict[int, int] = field(default_factory=dict)
    series_errors: dict[int, int] = field(default_factory=dict)
    round_trips: int = 0
    lag: LatencyHistogram = field(default_factory=LatencyHistogram)  # open loop: actual - intended start
    sampling: SliceSampling = field(default_factory=SliceSampling)  # server side: which units were timed
    unit_stats: Any = None  # client side: the window's share of the workload's own statistics (client_stats)

    def add_second(self, second: int, units: int, errors: int) -> None:
        self.series_units[second] = self.series_units.get(second, 0) + units
        if errors:
            self.series_errors[second] = self.series_errors.get(second, 0) + errors


@dataclass(frozen=True)
class Pacing:
    """Client-side pacing: think time between units (closed loop) or Poisson arrivals (open loop)."""

    think_s: float = 0.0  # mean of an exponential think time after each unit
    rate_per_job: float = 0.0  # arrivals per second for this job; 0 = closed loop

    @property
    def active(self) -> bool:
        return self.think_s > 0 or self.rate_per_job > 0


@dataclass
class Schedule:
    """Wall-clock plan of a step, filled in by the runner before releasing the jobs into each phase."""

    warmup_end: float = 0.0
    measure_start: float = 0.0
    measure_end: float = 0.0


# What a step's jobs are doing, by the number of phase boundaries (barrier waits) they have passed; a failure says
# which, e.g. "job 3 failed while measuring: ..."
PHASES = ("before the warm-up", "in the warm-up", "in the pause before the measured window", "while measuring",
          "after the measured window")


def phase_after(boundaries: int) -> str:
    return PHASES[min(max(boundaries, 0), len(PHASES) - 1)]


def error_text(err: BaseException, engine: Any = None) -> str:
    """A job's error in one line of the user's words: the engine's own reading of its driver's errors (MySQL's
    "MySQL error 2013: ..." rather than the driver's (code, message) tuple), else the error's first line."""
    if engine is not None and isinstance(err, engine.error):
        return str(engine.error_text(err))
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class Job(threading.Thread):
    def __init__(self, index: int, conn: Any, workload: Workload, params: dict[str, ParamValue],
                 size: DataSize, mode: str, info: TargetInfo, barrier: threading.Barrier,
                 schedule: Schedule, stop: threading.Event, pacing: Pacing | None = None) -> None:
        super().__init__(name=f"capmark-job-{index}", daemon=True)
        self.index = index
        self.conn = conn
        self.workload = workload
        self.params = {**params, "job": index}  # client units may keep per-job state (e.g. a WAL ring slot)
        self.size = size
        self.mode = mode
        self.info = info
        self.barrier = barrier
        self.schedule = schedule
        self.stop_event = stop
        self.pacing = pacing or Pacing()
        self.failure: str | None = None
        self.boundaries = 0  # phase boundaries passed (see PHASES)
        # called in the pause before the window and after it, when no job of the step is working
        self.on_window: Callable[[], None] | None = None
        ntypes = len(workload.txn_types)
        self.tally = Tally([LatencyHistogram() for _ in range(ntypes)], [0] * ntypes)
        self.engine = registry.named(info.engine)
        self.session = self.engine.session(conn, workload.client_statements) if mode == "client" else None
        self.lookups: KeyLookups | Literal[False] | None = None  # the engine's compiled lookup loop, once asked for
        self.crew: LookupCrew | None = None  # the jobs of its process it runs its lookups with (crew_up)
        # keying and think times: each job is one user at a terminal, whose next transaction (type, and when it
        # is due) carries over from the warm-up into the window
        self.users = workload.user_model(params, mode)
        self._pending: tuple[int, float] | None = None
        self.rng = random.Random(index * 7919 + int(time.time()))
        slice_params = {**size.as_params(), "job": index, **params}
        self._call = (slice_call(workload.procedure).encode(), json.dumps(slice_params))

    # --- phases -------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._next_phase()  # all connected: start together
            self._run_until(self.schedule.warmup_end, measure=False)
            self.engine.flush_own_stats(self.conn, self.info)
            self._next_phase()  # runner takes the opening snapshot
            if self.on_window:  # every job of the step is paused here: a quiet instant
                self.on_window()
            self._next_phase()
            self._run_until(self.schedule.measure_end, measure=True)
            self.engine.flush_own_stats(self.conn, self.info)
            self._next_phase()  # runner takes the closing snapshot
            if self.on_window:
                self.on_window()
        except threading.BrokenBarrierError:
            pass
        except Exception as err:  # a job must never take the step down silently
            self.failure = f"job {self.index} failed {phase_after(self.boundaries)}: {error_text(err, self.engine)}"
            self.barrier.abort()
        finally:  # however it ends (a broken barrier too), its crewmates must not wait for it in a phase
            if self.crew is not None:
                self.crew.abort()

    def _next_phase(self) -> None:
        self.barrier.wait()
        self.boundaries += 1

    def _run_until(self, deadline: float, *, measure: bool) -> None:
        if self.mode == "server":
            self._server_slices(deadline, measure)
        elif self.users is not None:
            self._user_units(deadline, measure)
        elif self.pacing.active:
            self._paced_units(deadline, measure)
        else:
            self._client_units(deadline, measure)

    # --- server-side: the database runs the loop, the job only slices time --------------------------
    def _server_slices(self, deadline: float, measure: bool) -> None:
        start = self.schedule.measure_start
        sql, params_json = self._call
        sampling = self.tally.sampling
        job_seconds = (self.schedule.measure_end - start) * (self.barrier.parties - 1) if measure else None
        while not self.stop_event.is_set():
            now = time.time()
            if now >= deadline - 0.002:
                return
            # end each slice on a whole second of the window so the 1 s series needs no interpolation
            if measure:
                second = int((now - start) // 1)
                slice_end = min(deadline, start + second + 1)
            else:
                second = 0
                slice_end = min(deadline, now + 1.0)
            try:
                row = one_row(self.conn.execute(sql, (slice_end - now, params_json, sampling.next_every(job_seconds))))
            except self.engine.error as err:
                if self.engine.is_cancel(err):
                    if self.stop_event.is_set():  # capmark cancelled it: the step is being stopped
                        return
                    raise ServerCancelled(self.engine.cancel_reason(self.conn)) from None
                if self.engine.is_broken(self.conn):
                    raise
                if measure:
                    self.tally.errors[0] += 1
                    self.tally.add_second(second, 0, 1)
                continue
            hist, errors, busy_s, units, timing_s = row
            per_type = sampling.fold(hist, units, busy_s, timing_s, measure)  # scaled to the exact counts
            if not measure:
                continue
            for t, share in enumerate(split_busy_time(per_type, busy_s)):
                self.tally.histograms[t].add_bucket_counts(per_type[t], share)
                self.tally.errors[t] += int(errors[t])
            self.tally.add_second(second, sum(units), int(sum(errors)))

    # --- client-side: the job issues every unit and times it ----------------------------------------
    # Units timed in the window are kept as two floats each and folded into the histograms and the 1 s series
    # this many at a time (vectorised): the per-unit Python work was a third of the driver's instructions.
    FOLD_EVERY = 1 << 16

    def _client_side(self) -> tuple[ClientSession, ClientUnit]:
        """The session and the unit a client-side job runs; the plan refuses server-only workloads in client mode
        before any job starts, so this only stops a caller that skipped that check."""
        if self.session is None or self.workload.client_unit is None:
            raise CapmarkError(f"{self.workload.name} runs server-side only; drop --mode client.")
        return self.session, self.workload.client_unit

    def _compiled_loop(self, session: ClientSession, unit: ClientUnit) -> KeyLookups | None:
        """The engine's compiled loop for this job's unit, where the unit is a one-key lookup and the engine has one
        (asked for once per job)."""
        if self.lookups is None and isinstance(unit, KeyLookup) and isinstance(session, RunsKeyLookups):
            self.lookups = session.key_lookups(unit.statement, self.rng.getrandbits(64)) or False
        return self.lookups or None

    def lookups_together(self) -> KeyLookups | None:
        """The compiled loop this job's whole phase would run (an unpaced one-key lookup), where it can run beside
        other jobs' from one thread (a crew); None otherwise."""
        if self.mode != "client" or self.users is not None or self.pacing.active or self.session is None:
            return None
        unit = self.workload.client_unit
        lookups = self._compiled_loop(self.session, unit) if unit is not None else None
        return lookups if lookups is not None and lookups.runs_together else None

    def _client_units(self, deadline: float, measure: bool) -> None:
        session, unit = self._client_side()
        lookups = self._compiled_loop(session, unit)
        if lookups is not None:
            assert isinstance(unit, KeyLookup)
            self._compiled_lookups(session, lookups, unit, deadline, measure)
            return
        rng, params, size = self.rng, self.params, self.size
        clock = time.perf_counter
        wall0 = time.time()
        perf0 = clock()
        offset = wall0 - perf0 - self.schedule.measure_start  # perf_counter -> second of the window
        end = perf0 + (deadline - wall0)
        stop = self.stop_event
        durations: list[list[float]] = [[] for _ in self.workload.txn_types]
        ends: list[float] = []
        n = 0
        trips0 = session.round_trips
        stats0 = self._unit_stats() if measure else None
        failure = self.engine.error
        while True:
            t0 = clock()
            if t0 >= end or (n & 255 == 0 and stop.is_set()):
                break
            n += 1
            try:
                kind = unit(session, rng, params, size)
            except failure as err:
                self._unit_failed(err, measure, int(t0 + offset))
                continue
            if measure:
                t1 = clock()
                durations[kind].append(t1 - t0)
                ends.append(t1)
                if len(ends) >= self.FOLD_EVERY:
                    self._fold(durations, ends, offset)
        if measure:
            self._fold(durations, ends, offset)
            self.tally.round_trips += session.round_trips - trips0
            self._keep_unit_stats(stats0)

    # Lookups per call of a compiled loop: between calls the job sees its stop flag, as the Python loop does every
    # 256 units. Their timings are folded this many at a time (0.3 ms of numpy for 8,192, 0.04 us a lookup).
    LOOKUP_BATCH = 256
    LOOKUP_FOLD_EVERY = 1 << 13

    def _compiled_lookups(self, session: ClientSession, lookups: KeyLookups, unit: KeyLookup, deadline: float,
                          measure: bool, rate: float = 0.0) -> None:
        """The Python loop's work, with the lookups run and timed in C in batches (KeyLookups); in a crew, with the
        other jobs' of the process from one thread; with a rate, the open loop's: each lookup waits in C for its
        Poisson arrival, and its latency counts from the arrival."""
        wall0, perf0 = time.time(), time.perf_counter()
        end = perf0 + (deadline - wall0)
        part = LookupPart(self, session, lookups, unit.kind, measure, wall0 - perf0 - self.schedule.measure_start)
        if self.crew is not None and not rate:
            self.crew.take_part(part, end)
            return
        key_max = getattr(self.size, unit.size_of)
        arrivals = PoissonArrivals(rate, perf0, self.rng.getrandbits(64)) if rate else None
        going = True
        while going and not self.stop_event.is_set():
            if arrivals is None:
                done, error, failed_at = lookups.run(key_max, end, *part.next_batch()[1:])
            else:
                due = arrivals.next(part.room(), end, self.stop_event)
                if due is None:
                    break  # stopped while waiting for the next arrival
                starts = due.copy()
                _, durations, ends, start, _ = part.next_batch(len(due))
                done, error, failed_at = lookups.run(key_max, end, durations, ends, start, len(due), starts)
                self._paced_batch_ran(arrivals, due, starts, done, error is not None, end, measure)
            going = part.ran(done, error, failed_at)
        part.finish()

    def _paced_batch_ran(self, arrivals: PoissonArrivals, due: np.ndarray, starts: np.ndarray, done: int,
                         failed: bool, end: float, measure: bool) -> None:
        """After a paced batch that completed `done` lookups (and then one failed, or not): the next batch follows
        the last arrival used, and in the window each started lookup's lag goes to the lag histogram, as does the
        backlog of arrivals due before the end that the loop, behind schedule, never started."""
        started = done + failed  # the failed lookup started too, and waited for its arrival like the others
        arrivals.used(started)
        if not measure:
            return
        self.tally.lag.add_durations(np.maximum(starts[:started] - due[:started], 0.0))
        if not failed and started < len(due) and due[started] < end:
            following = float(due[started + 1]) if started + 1 < len(due) else \
                float(due[started]) + self.rng.expovariate(self.pacing.rate_per_job)
            self._record_backlog(float(due[started]), following, end)

    def _fold_timed(self, kind: int, durations: np.ndarray, ends: np.ndarray, offset: float) -> None:
        self.tally.histograms[kind].add_durations(durations)
        self._add_seconds(ends, offset)

    def _add_seconds(self, ends: np.ndarray, offset: float) -> None:
        """Count units in the 1 s series by the second of the window they ended in (perf_counter + offset)."""
        seconds, counts = np.unique((ends + offset).astype(np.int64), return_counts=True)
        for second, count in zip(seconds.tolist(), counts.tolist(), strict=True):
            self.tally.add_second(second, count, 0)

    def _fold(self, durations: list[list[float]], ends: list[float], offset: float) -> None:
        """Move timed units into the histograms and the 1 s series, and empty the lists for more."""
        for kind, values in enumerate(durations):
            self.tally.histograms[kind].add_durations(np.asarray(values))
            values.clear()
        if ends:
            self._add_seconds(np.asarray(ends), offset)
            ends.clear()

    def _unit_stats(self) -> Any:
        stats = self.workload.client_stats
        return stats(self.session) if stats is not None else None

    def _keep_unit_stats(self, before: Any) -> None:
        """The workload's own statistics of the window: what they were at its end less at its start."""
        if before is not None:
            self.tally.unit_stats = self._unit_stats().minus(before)

    BACKLOG_CAP = 1_000_000

    def _record_backlog(self, first: float, following: float, end: float) -> None:
        """Arrivals due before the window ended that never started: each is late by at least end - due, so
        the lag histogram shows how far behind the generator fell instead of the step running on."""
        self.tally.lag.record(end - first)
        due, n = following, 1
        while due < end and n < self.BACKLOG_CAP:
            self.tally.lag.record(end - due)
            due += self.rng.expovariate(self.pacing.rate_per_job)
            n += 1

    def _unit_failed(self, err: Exception, measure: bool, second: int) -> None:
        """A client-side unit failed: a broken connection ends the job, and so does a statement the server
        cancelled (the job would otherwise go on measuring a different workload); anything else is counted
        and skipped."""
        if self.engine.is_broken(self.conn):
            raise err
        assert self.session is not None
        if self.session.in_transaction:
            self.session.rollback()
        if self.engine.is_cancel(err) and not self.stop_event.is_set():
            raise ServerCancelled(self.engine.cancel_reason(self.conn)) from None
        if measure:
            self.tally.errors[getattr(err, "unit_kind", 0)] += 1  # a unit that knows its type says so
            self.tally.add_second(second, 0, 1)

    def _user_units(self, deadline: float, measure: bool) -> None:
        """A terminal user: keying time, the transaction (its response time is all that is timed), think time.
        A pause that reaches past the phase's end carries over into the next phase."""
        users = self.users
        assert users is not None
        session, _ = self._client_side()
        rng, params, stop = self.rng, self.params, self.stop_event
        wall0, perf0 = time.time(), time.perf_counter()
        end = perf0 + (deadline - wall0)
        offset = wall0 - perf0 - self.schedule.measure_start
        trips0 = session.round_trips
        if self._pending is None:
            kind = users.choose(rng)
            self._pending = (kind, perf0 + users.keying_s[kind])
        while not stop.is_set():
            kind, due = self._pending
            now = time.perf_counter()
            if due > now and (stop.wait(min(due, end) - now) or time.perf_counter() < due):
                break  # stopped, or the phase ended first: the user is still keying or thinking
            t0 = time.perf_counter()
            if t0 >= end:
                break
            try:
                counted = users.run(session, rng, params, kind)
            except self.engine.error as err:
                self._unit_failed(err, measure, int(t0 + offset))
                counted = -1
            t1 = time.perf_counter()
            if measure and counted >= 0:
                self.tally.histograms[counted].record(t1 - t0)
                self.tally.add_second(int(t1 + offset), 1, 0)
            following = users.choose(rng)
            self._pending = (following, t1 + users.think(rng, kind) + users.keying_s[following])
        if measure:
            self.tally.round_trips += session.round_trips - trips0

    def _paced_units(self, deadline: float, measure: bool) -> None:
        """Think time or open-loop arrivals. With arrivals, latency counts from the intended start, so a
        late start (the driver or the server falling behind) shows in the latency: no coordinated omission."""
        session, unit = self._client_side()
        lookups = self._compiled_loop(session, unit) if not self.pacing.think_s else None
        if lookups is not None:
            assert isinstance(unit, KeyLookup)
            self._compiled_lookups(session, lookups, unit, deadline, measure, rate=self.pacing.rate_per_job)
            return
        rng, params, size = self.rng, self.params, self.size
        pace, stop = self.pacing, self.stop_event
        wall0, perf0 = time.time(), time.perf_counter()
        end = perf0 + (deadline - wall0)
        start = self.schedule.measure_start
        trips0 = session.round_trips
        stats0 = self._unit_stats() if measure else None
        next_arrival = perf0 + (rng.expovariate(pace.rate_per_job) if pace.rate_per_job else 0.0)
        while not stop.is_set():
            if pace.rate_per_job:
                intended = next_arrival
                next_arrival += rng.expovariate(pace.rate_per_job)
                if intended >= end:
                    break
                if time.perf_counter() >= end:  # behind schedule at the end: the backlog was never offered
                    if measure:
                        self._record_backlog(intended, next_arrival, end)
                    break
                wait = intended - time.perf_counter()
                if wait > 0 and stop.wait(wait):
                    break
                actual = time.perf_counter()
                if measure:
                    self.tally.lag.record(max(0.0, actual - intended))
            else:
                intended = time.perf_counter()
                if intended >= end:
                    break
            try:
                kind = unit(session, rng, params, size)
            except self.engine.error as err:
                self._unit_failed(err, measure, int(wall0 + (intended - perf0) - start))
                continue
            done = time.perf_counter()
            if measure:
                self.tally.histograms[kind].record(done - intended)
                self.tally.add_second(int(wall0 + (done - perf0) - start), 1, 0)
            if pace.think_s and stop.wait(rng.expovariate(1.0 / pace.think_s)):
                break
        if measure:
            self.tally.round_trips += session.round_trips - trips0
            self._keep_unit_stats(stats0)


def crew_up(jobs: list[Job]) -> None:
    """Make the jobs of one process a crew (driver/crew.py) where each would run nothing but unpaced one-key lookups
    in a compiled loop that can run beside the others' and the client has cores of its own (crews_wanted); all of
    them or none, as a crew waits for every member."""
    if len(jobs) < 2 or not crews_wanted(jobs[0].info):
        return
    if any(job.lookups_together() is None for job in jobs):
        return
    unit = jobs[0].workload.client_unit
    assert isinstance(unit, KeyLookup)
    crew = LookupCrew(len(jobs), getattr(jobs[0].size, unit.size_of), jobs[0].stop_event)
    for job in jobs:
        job.crew = crew


class LookupPart:
    """One job's lookups in one phase through the compiled loop (a crew's member): the timings of its batches,
    kept in two float64 arrays and folded into the job's tally LOOKUP_FOLD_EVERY at a time."""

    def __init__(self, job: Job, session: ClientSession, lookups: KeyLookups, kind: int, measure: bool,
                 offset: float) -> None:
        self.job, self.session, self.lookups, self.kind, self.measure = job, session, lookups, kind, measure
        self.offset = offset  # perf_counter -> second of the window
        self.durations, self.ends = np.empty(Job.LOOKUP_FOLD_EVERY), np.empty(Job.LOOKUP_FOLD_EVERY)
        self.filled = 0
        self.limit = 0
        self.round_trips0 = session.round_trips

    def room(self) -> int:
        """How many lookups the next batch may run: a batch, or what the arrays still hold."""
        return min(Job.LOOKUP_BATCH, Job.LOOKUP_FOLD_EVERY - self.filled)

    def next_batch(self, limit: int | None = None) -> LookupBatch:
        self.limit = self.room() if limit is None else limit
        return self.lookups, self.durations, self.ends, self.filled, self.limit

    def ran(self, done: int, error: Exception | None, failed_at: float) -> bool:
        """The batch ran `done` lookups (and then one failed, or not): fold them when the arrays are full or the
        batch stopped short, and count a failure as any unit's (which raises what ends the job). False once the
        phase is over."""
        self.filled += done if self.measure else 0
        if self.filled == Job.LOOKUP_FOLD_EVERY or (self.filled and (error is not None or done < self.limit)):
            self._fold()
        if error is not None:
            self.job._unit_failed(error, self.measure, int(failed_at + self.offset))
            return True
        return done == self.limit

    def finish(self) -> None:
        """The phase is over: the last timings folded, and the window's round trips counted."""
        if self.filled:
            self._fold()
        if self.measure:
            self.job.tally.round_trips += self.session.round_trips - self.round_trips0

    def _fold(self) -> None:
        self.job._fold_timed(self.kind, self.durations[:self.filled], self.ends[:self.filled], self.offset)
        self.filled = 0


class PoissonArrivals:
    """An open loop's arrivals for the compiled loop: one Poisson process, drawn ahead DRAW at a time and handed out
    in batches that reach at most HORIZON_S past their first arrival. The job waits for that first one in Python,
    stop flag in hand: a wait in C cannot be interrupted, so it is kept as short as the Python loop's reaction to a
    stop. Arrivals a batch did not start stay for the next: drawing them anew from the last one started would
    replace the gap that crossed the horizon, longer than most by being the one that crossed it, with an ordinary
    one (3 % more arrivals than the rate at 625 a second per job)."""

    HORIZON_S = 0.05
    DRAW = 1024

    def __init__(self, rate: float, start: float, seed: int) -> None:
        self.mean_gap = 1.0 / rate
        self.last = start  # the latest arrival drawn
        self.draws = np.random.default_rng(seed)
        self.pending = np.empty(0)

    def next(self, limit: int, end: float, stop: threading.Event) -> np.ndarray | None:
        """The next arrivals (perf_counter seconds), at least one and at most `limit`; None once `stop` is set
        while waiting for the first. A first arrival at or after the phase's `end` is handed out at once: the
        loop then ends the phase without waiting for it."""
        if not len(self.pending):
            self.pending = self.last + np.cumsum(self.draws.exponential(self.mean_gap, self.DRAW))
            self.last = float(self.pending[-1])
        due = self.pending[:limit]
        wait = float(due[0]) - self.HORIZON_S - time.perf_counter()
        if due[0] < end and wait > 0 and stop.wait(wait):
            return None
        return due[:max(1, int(np.searchsorted(due, due[0] + self.HORIZON_S)))]

    def used(self, started: int) -> None:
        """The last batch started its first `started` arrivals; the rest are still to come."""
        self.pending = self.pending[started:]


class ServerCancelled(Exception):
    """The server cancelled a job's statement (statement_timeout or another session): the job's measurement ends
    and the step fails, instead of the job stopping silently with the step still counted as ok."""


def split_busy_time(per_type: list[list[int]], busy_s: float) -> list[float]:
    """Share a slice's exact busy time among its transaction types.

    The slice knows only the total (its units run back to back); each type's part is estimated from
    its histogram's bucket midpoints, then scaled so that the parts add up to the exact total.
    """
    if len(per_type) == 1:
        return [busy_s]
    estimates = []
    for counts in per_type:
        est = 0.0
        for i, c in enumerate(counts):
            if c:
                low, high = bucket_bounds(i)
                est += c * (low + high) / 2
        estimates.append(est)
    total = sum(estimates)
    return [busy_s * e / total if total else 0.0 for e in estimates]
