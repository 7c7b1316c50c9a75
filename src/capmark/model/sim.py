"""A small discrete-event simulation engine: the second solver, for what mean-value analysis averages away.

MVA assumes product form: arrivals spread over time, no synchronisation. Group commit breaks that — a
flush releases its whole batch at once and they hit the CPU together — so the simulation plays the
network event by event instead. It is hand-written on heapq rather than built on a framework: a
callback per event costs about a microsecond, a generator-based process several, and a calibration
simulates millions of events.

The pieces: Simulator (the clock and the event heap), Fcfs (a first-come-first-served queue with one or
more servers), ProcessorSharing (m cores shared the way an OS shares them: each of n running jobs gets
min(1, m/n) of a core), GroupCommit (one flusher at a time; a commit rides on the next flush that
starts after its record is written), closed_network (a single-chain closed network for cross-checks)
and mean_interval (the confidence interval over independent replications).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

from capmark.errors import CapmarkError

Callback = Callable[[Any], None]
CONFIDENCE = 0.95  # the level of every interval the simulation reports


class Simulator:
    """The clock and the future-event heap. Events are (time, sequence, callback, argument); the sequence
    keeps equal times in scheduling order, so a seeded run repeats exactly."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = 0
        self.stopped = False

    def at(self, time: float, fn: Callback, arg: Any = None) -> None:
        self._seq += 1
        heappush(self._heap, (time, self._seq, fn, arg))

    def after(self, delay: float, fn: Callback, arg: Any = None) -> None:
        self.at(self.now + delay, fn, arg)

    def run(self, until: float = math.inf) -> None:
        """Process events until `until`, the heap is empty or a callback sets `stopped`."""
        heap = self._heap
        while heap and not self.stopped:
            time, _, fn, arg = heappop(heap)
            if time > until:
                heappush(heap, (time, 0, fn, arg))
                break
            self.now = time
            fn(arg)


class _BusyStation:
    """What both kinds of station share: busy time integrated since the last reset, as utilization per server.
    A subclass keeps `servers` and `busy_time` and brings busy_time up to now in _account()."""

    servers: int
    busy_time: float

    def _account(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Start measuring busy time afresh (after warm-up)."""
        self._account()
        self.busy_time = 0.0

    def utilization(self, elapsed: float) -> float:
        self._account()
        return self.busy_time / (self.servers * elapsed) if elapsed > 0 else 0.0


class Fcfs(_BusyStation):
    """A first-come-first-served queue with `servers` identical servers; busy_time integrates busy servers."""

    def __init__(self, sim: Simulator, servers: int = 1) -> None:
        self.sim, self.servers = sim, servers
        self.busy = 0  # servers at work now
        self.queue: deque[tuple[float, Callback, Any]] = deque()
        self.busy_time = 0.0
        self._since = 0.0

    def _account(self) -> None:
        now = self.sim.now
        self.busy_time += self.busy * (now - self._since)
        self._since = now

    def request(self, service: float, fn: Callback, arg: Any = None) -> None:
        """Serve `service` seconds, then call fn(arg)."""
        if self.busy < self.servers:
            self._account()
            self.busy += 1
            self.sim.after(service, self._done, (fn, arg))
        else:
            self.queue.append((service, fn, arg))

    def _done(self, job: tuple[Callback, Any]) -> None:
        if self.queue:  # the freed server takes the next in line; the busy count stays
            service, fn, arg = self.queue.popleft()
            self.sim.after(service, self._done, (fn, arg))
        else:
            self._account()
            self.busy -= 1
        job[0](job[1])


class ProcessorSharing(_BusyStation):
    """m cores shared by n jobs: each gets min(1, m/n) of a core, so remaining work falls at that rate.

    All jobs progress alike, so one virtual clock (work served per job so far) suffices: a job finishes
    when the clock reaches its arrival reading plus its work. Whenever n changes the next completion is
    rescheduled; completions scheduled before carry an old generation number and are ignored."""

    def __init__(self, sim: Simulator, servers: int = 1, growth: float = 0.0) -> None:
        self.sim, self.servers, self.growth = sim, servers, growth
        self.jobs: list[tuple[float, int, Callback, Any]] = []  # (virtual finish, sequence, fn, arg)
        self.virtual = 0.0
        self.busy_time = 0.0  # integral of min(n, m): core-seconds at work
        self._since = 0.0
        self._gen = 0
        self._seq = 0

    def _account(self) -> None:
        now = self.sim.now
        dt = now - self._since
        n = len(self.jobs)
        if dt > 0 and n:
            self.virtual += dt * self._rate(n)
            self.busy_time += min(n, self.servers) * dt
        self._since = now

    def _rate(self, n: int) -> float:
        """Work served per job per second with n jobs: a core each up to m, shared beyond; each busy core
        beyond the first slows every core by `growth` (capmark.plan.cpuscaling)."""
        busy = min(n, self.servers)
        return busy / n / (1 + self.growth * (busy - 1))

    def _reschedule(self) -> None:
        self._gen += 1
        jobs = self.jobs
        if jobs:
            self.sim.at(self.sim.now + (jobs[0][0] - self.virtual) / self._rate(len(jobs)), self._complete, self._gen)

    def request(self, work: float, fn: Callback, arg: Any = None) -> None:
        """Do `work` seconds of one core's work, then call fn(arg)."""
        self._account()
        self._seq += 1
        heappush(self.jobs, (self.virtual + work, self._seq, fn, arg))
        self._reschedule()

    def _complete(self, gen: int) -> None:
        if gen != self._gen:
            return
        self._account()
        finish, _, fn, arg = heappop(self.jobs)
        self.virtual = max(self.virtual, finish)  # no drift from rounding in the rate
        self._reschedule()
        fn(arg)


class GroupCommit:
    """One flusher at a time, as PostgreSQL's WAL writer lock allows. A commit whose record is already
    covered by the flush in progress cannot exist here (its record is written when it commits), so a commit
    arriving during a flush waits for the next one, which takes every record written until it starts;
    a commit arriving while no flush runs starts one at once. `flush(done)` does the flush's work and
    calls done(None) when it has finished."""

    def __init__(self, sim: Simulator, flush: Callable[[Callback], None]) -> None:
        self.sim, self._flush = sim, flush
        self.flushing = False
        self._batch: list[tuple[Callback, Any]] = []
        self._next: list[tuple[Callback, Any]] = []
        self.flushes = 0
        self.commits = 0
        self.busy_time = 0.0
        self._started = 0.0

    def commit(self, fn: Callback, arg: Any = None) -> None:
        """Write a commit record and return (call fn(arg)) once a flush has made it durable."""
        if self.flushing:
            self._next.append((fn, arg))
        else:
            self._start([(fn, arg)])

    def _start(self, batch: list[tuple[Callback, Any]]) -> None:
        self.flushing = True
        self._batch = batch
        self._started = self.sim.now
        self._flush(self._done)

    def _done(self, _: Any = None) -> None:
        self.flushes += 1
        self.commits += len(self._batch)
        self.busy_time += self.sim.now - self._started
        released = self._batch
        if self._next:
            batch, self._next = self._next, []
            self._start(batch)
        else:
            self.flushing = False
        for fn, arg in released:
            fn(arg)

    def reset(self) -> None:
        """Count afresh (after warm-up); a flush in progress counts from now."""
        self.flushes = self.commits = 0
        self.busy_time = 0.0
        if self.flushing:
            self._started = self.sim.now

    def utilization(self, elapsed: float) -> float:
        busy = self.busy_time + (self.sim.now - self._started if self.flushing else 0.0)
        return busy / elapsed if elapsed > 0 else 0.0


@dataclass(kw_only=True)
class Interval:
    """Mean of independent replications and its two-sided confidence interval (Student's t)."""

    mean: float
    low: float
    high: float
    values: list[float] = field(default_factory=list)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Replications are independent and their means near normal, so mean +- t(n-1) s / sqrt(n)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean=mean, low=-math.inf, high=math.inf, values=list(values))
    from scipy.stats import t as student_t  # loaded on first use: a command starts without scipy

    half = student_t.ppf((1 + confidence) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean=mean, low=mean - half, high=mean + half, values=list(values))


@dataclass(frozen=True)
class SimStation:
    """A station of closed_network: 'fcfs' (exponential service, `servers` servers), 'ps' (processor sharing
    over `servers` cores) or 'delay' (no queueing)."""

    name: str
    demand: float
    kind: str = "fcfs"
    servers: int = 1


@dataclass
class ClosedRun:
    throughput: float
    response_time: float
    utilizations: dict[str, float]


def closed_network(stations: Sequence[SimStation], population: int, think: float, *, units: int, warmup: int,
                   seed: int) -> ClosedRun:
    """`population` jobs cycle through exponential think time and every station in order, each with an
    exponential demand: the network exact MVA solves, for checking the engine against it."""
    rng = random.Random(seed)
    exp = rng.expovariate
    sim = Simulator()
    servers: list[Any] = [Fcfs(sim, s.servers) if s.kind == "fcfs" else ProcessorSharing(sim, s.servers)
                          if s.kind == "ps" else None for s in stations]
    done = [0]
    start: dict[int, float] = {}
    total_r = [0.0]
    t0 = [0.0]

    def visit(job: tuple[int, int]) -> None:
        who, k = job
        if k == len(stations):
            finish(who)
            return
        s, srv = stations[k], servers[k]
        work = exp(1 / s.demand) if s.demand > 0 else 0.0
        if srv is None:
            sim.after(work, visit, (who, k + 1))
        else:
            srv.request(work, visit, (who, k + 1))

    def finish(who: int) -> None:
        done[0] += 1
        if done[0] == warmup:
            t0[0] = sim.now
            for srv in servers:
                if srv is not None:
                    srv.reset()
        elif done[0] > warmup:
            total_r[0] += sim.now - start[who]
            if done[0] == warmup + units:
                sim.stopped = True
        sim.after(exp(1 / think) if think > 0 else 0.0, begin, who)

    def begin(who: int) -> None:
        start[who] = sim.now
        visit((who, 0))

    for who in range(population):
        sim.after(exp(1 / think) if think > 0 else 0.0, begin, who)
    sim.run()
    if done[0] < warmup + units:  # the events ran out: the figures would cover part of the run
        raise CapmarkError(f"The simulation stopped after {done[0]:,} of {warmup + units:,} units with no event left "
                           "to play; give it at least one job.")
    elapsed = sim.now - t0[0]
    utils = {s.name: srv.utilization(elapsed) for s, srv in zip(stations, servers, strict=True) if srv is not None}
    return ClosedRun(units / elapsed, total_r[0] / units, utils)
