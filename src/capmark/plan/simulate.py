"""The calibrated database model solved by discrete-event simulation: the second solver, which sees synchronisation.

MVA (dbmodel.solve) spreads every arrival over time. Group commit does not: a flush releases its whole batch
at once, and they meet at the CPU together, while the next flush gathers the commits that arrived during
this one. The simulation plays that out. Each of N jobs cycles through

    think (exponential, mean think_s) -> client tier and calibrated delay (fixed) -> CPU (exponential work
    cpu_s, processor sharing over the cores) -> each data device (FCFS, exponential) -> its commits

A unit makes floor(q) or floor(q) + 1 commits (q = flush_requests, the fraction as a probability, so the mean
is q). Commits go through the group-commit flusher (capmark.model.sim.GroupCommit): one flush at a time;
a commit arriving during a flush waits for the next, which takes every record written until it starts, and
once released spends the CPU of that wait (wait_cpu_s: woken, the lock handed over; plan/cpuscaling.py). The
cores slow down with the number busy as calibrated (cpu_growth).
A flush is flush_cpu_s of CPU work, sharing the cores with the backends (the flushing backend needs a core
too), then flush_device_s on the WAL device, queueing behind its other IO. Flush work is fixed, not
exponential: a WAL write and fsync of a few pages varies little, and it is what the group-commit submodel
assumes.

A negative calibrated delay (CPU and IO that overlap in reality, counted twice by the stations) first shortens
the think time; what think time cannot absorb is subtracted from each response time at the end, and then the
simulated throughput is lower than the model's (the simulation does not overlap CPU and IO) — a note says so.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from capmark.errors import CapmarkError
from capmark.model.sim import Fcfs, GroupCommit, Interval, ProcessorSharing, Simulator, mean_interval
from capmark.plan.dbmodel import (
    MAX_JOBS_SOLVED,
    WAL_FLUSH,
    Config,
    DbModel,
    Prediction,
    _demands,
    _no_queue_response,
    _stations,
)

SIM_MODEL = "discrete-event simulation: CPU processor sharing over m cores + FCFS devices + delays, WAL flush as " \
            "group commit with one flusher"
REPLICATIONS = 4  # independent runs: enough for a t-interval (3 degrees of freedom) at a quarter of the cost of 16
UNITS = 20_000  # measured units per replication: a throughput interval of about +-1 % on the calibration loads
WARMUP_UNITS = 1_000  # discarded first: every job has cycled many times, queues have left the empty start
# Above this many jobs a replication would cost seconds (events grow with jobs x units); the MVA answers there.
MAX_SIM_JOBS = 2_000
# The simulation has settled when its replications agree: the 95 % interval of throughput and mean response time
# within this fraction of the mean either side. The defaults give about 1 %; a figure beyond 5 % is a guess.
SIM_PRECISION = 0.05


@dataclass(frozen=True, kw_only=True)
class _Run:
    """What one replication measured after its warm-up."""

    throughput: float
    response_time_s: float
    responses: npt.NDArray[np.float64]  # every unit's response time
    utilizations: dict[str, float]
    flushes: float  # per unit
    commits: int


class _Replication:
    """One seeded run of the closed network; the numbers it reports cover the units after warm-up only."""

    def __init__(self, model: DbModel, cfg: Config, jobs: int, think_s: float, seed: int) -> None:
        self.rng = random.Random(seed)
        d = _demands(model, cfg)
        self.sim = sim = Simulator()
        self.cpu = ProcessorSharing(sim, cfg.cores, model.cpu_growth)
        self.devices = {name: Fcfs(sim) for name, demand in d.devices.items() if demand > 0 or name == d.wal_station}
        self.device_demands = [(self.devices[name], demand) for name, demand in d.devices.items() if demand > 0]
        self.wal = self.devices[d.wal_station] if d.wal_station else None
        self.flush_cpu, self.flush_device = d.flush_cpu, d.flush_device
        self.commit = GroupCommit(sim, self._flush)
        self.cpu_s = d.cpu
        self.wait_cpu = d.wait_cpu  # CPU of a commit that waited for another's flush (plan/cpuscaling.py)
        q = model.flush_requests
        self.whole_commits, self.extra_commit = int(q), q - int(q)
        fixed = model.client_s + model.delay_s
        think = think_s + min(0.0, fixed)  # a negative delay first shortens the think time ...
        self.think_mean = max(0.0, think)
        self.fixed = max(0.0, fixed)
        self.shift = min(0.0, think)  # ... and what is left comes off each response time
        self.jobs = jobs
        self.responses: list[float] = []
        self.start = [0.0] * jobs
        self.commits_left = [0] * jobs
        self.done = 0
        self.t0 = 0.0

    def _flush(self, done: Callable[[Any], None]) -> None:
        if self.flush_cpu > 0:
            self.cpu.request(self.flush_cpu, self._flush_io, done)
        else:
            self._flush_io(done)

    def _flush_io(self, done: Callable[[Any], None]) -> None:
        if self.wal is not None and self.flush_device > 0:
            self.wal.request(self.flush_device, done)
        else:
            done(None)

    def _think(self, job: int) -> None:
        t = self.rng.expovariate(1 / self.think_mean) if self.think_mean > 0 else 0.0
        self.sim.after(t + self.fixed, self._begin, job)

    def _begin(self, job: int) -> None:
        self.start[job] = self.sim.now - self.fixed
        if self.cpu_s > 0:
            self.cpu.request(self.rng.expovariate(1 / self.cpu_s), self._device, (job, 0))
        else:
            self._device((job, 0))

    def _device(self, step: tuple[int, int]) -> None:
        job, k = step
        if k < len(self.device_demands):
            dev, demand = self.device_demands[k]
            dev.request(self.rng.expovariate(1 / demand), self._device, (job, k + 1))
            return
        self.commits_left[job] = self.whole_commits + (self.rng.random() < self.extra_commit)
        self._committed(job)

    def _committed(self, job: int) -> None:
        if self.commits_left[job] > 0:
            self.commits_left[job] -= 1
            if self.wait_cpu > 0 and self.commit.flushing:  # it waits for another's flush: woken, it pays CPU
                self.commit.commit(self._woken, job)
            else:
                self.commit.commit(self._committed, job)
            return
        self.done += 1
        if self.done > self.warmup:
            self.responses.append(self.sim.now - self.start[job])
            if self.done == self.warmup + self.units:
                self.sim.stopped = True
        elif self.done == self.warmup:
            self.t0 = self.sim.now
            self.cpu.reset()
            for device in self.devices.values():
                device.reset()
            self.commit.reset()
        self._think(job)

    def _woken(self, job: int) -> None:
        self.cpu.request(self.wait_cpu, self._committed, job)

    def run(self, units: int, warmup: int) -> _Run:
        self.units, self.warmup = units, warmup
        for job in range(self.jobs):
            self._think(job)
        self.sim.run()
        if not self.sim.stopped:  # the events ran out before the units: the figures would cover a part of the run
            raise CapmarkError(f"The simulation stopped after {self.done:,} of {warmup + units:,} units with no event "
                               "left to play; check that the model has a positive demand or think time.")
        elapsed = self.sim.now - self.t0
        util = {"CPU": self.cpu.utilization(elapsed)}
        util.update({name: dev.utilization(elapsed) for name, dev in self.devices.items()})
        if self.whole_commits or self.extra_commit:
            util[WAL_FLUSH] = self.commit.utilization(elapsed)
        r = np.asarray(self.responses) + self.shift
        return _Run(throughput=units / elapsed, response_time_s=float(r.mean()), responses=r, utilizations=util,
                    flushes=self.commit.flushes / units, commits=self.commit.commits)


def simulate(model: DbModel, jobs: float, think_s: float | None = None, config: Config | None = None,
             seed: int = 1, replications: int = REPLICATIONS, units: int = UNITS,
             warmup: int = WARMUP_UNITS) -> Prediction:
    """Closed load, like dbmodel.solve, by simulation: `replications` independent seeded runs of `units` units
    each after `warmup`; percentiles from the pooled response times, 95 % intervals from the replications."""
    if not jobs >= 1:
        raise CapmarkError(f"A closed load needs at least 1 job, got {jobs:g}.")
    if jobs > min(MAX_JOBS_SOLVED, MAX_SIM_JOBS):
        raise CapmarkError(f"{jobs:g} jobs is beyond what the simulation plays out in reasonable time "
                           f"({MAX_SIM_JOBS:,}); use the MVA solver (--solver mva) for that many.")
    cfg = config or Config(model.cores)
    z = model.think_s if think_s is None else think_s
    n = int(round(jobs))
    runs = [_Replication(model, cfg, n, z, seed * 1_000_003 + i).run(units, warmup) for i in range(replications)]
    x = mean_interval([r.throughput for r in runs])
    rt = mean_interval([r.response_time_s for r in runs])
    pooled = np.concatenate([r.responses for r in runs])
    p95, p99 = (max(0.0, float(v)) for v in np.percentile(pooled, [95, 99]))
    util = {k: float(np.mean([r.utilizations[k] for r in runs])) for k in runs[0].utilizations}
    q = model.flush_requests
    flushes = float(np.mean([r.flushes for r in runs])) if q > 0 else None
    commits = sum(r.commits for r in runs)
    batch = commits / sum(r.flushes * units for r in runs) if q > 0 and commits else None
    d = _demands(model, cfg)
    stations = _stations(d, flushes or 0.0, cfg.cores, model.cpu_growth)
    r0 = _no_queue_response(model, d)
    top = max(util, key=lambda k: util[k])
    notes = []
    spread = max(_relative_half_width(x), _relative_half_width(rt))
    settled = bool(spread <= SIM_PRECISION)  # a numpy bool (the interval is numpy's) is no JSON value
    if not settled:
        notes.append(f"the simulation's {replications} replications disagree: the 95 % interval is +-{spread:.0%} of "
                     f"the mean (settled within +-{SIM_PRECISION:.0%}); simulate more units or replications")
    if z + model.client_s + model.delay_s < 0:
        notes.append(f"the calibrated delay is negative ({model.delay_s * 1e6:.1f} us: CPU and IO overlap) and larger "
                     "than the think time; the simulation takes the rest off each response time but cannot shorten "
                     "the cycle, so its throughput is lower than the model's by that overlap")
    return Prediction(
        model=SIM_MODEL, calibrated_from=list(model.calibrated_from), jobs=jobs, offered_rate=None, think_s=z,
        saturated=False, throughput=x.mean, response_time_s=rt.mean, p95_s=p95, p99_s=p99, utilizations=util,
        bottleneck=top, stretch=rt.mean / r0 if r0 > 0 else None,
        headroom=(0.8 / util[top] - 1) if util[top] > 0 else None, flushes_per_unit=flushes, batch=batch,
        demands_s={s.name: s.total_demand for s in stations}, converged=settled, rounds=replications,
        method=f"discrete-event simulation, {replications} replications of {units:,} units",
        interval={"throughput": (float(x.low), float(x.high)),
                  "response_time_s": (float(rt.low), float(rt.high))}, notes=notes)


def _relative_half_width(interval: Interval) -> float:
    """The interval's half width over its mean (infinite for one replication or a zero mean)."""
    return interval.half_width / abs(interval.mean) if interval.mean else math.inf


def solver(name: str) -> Callable[..., Prediction]:
    """The closed solver a command was asked for: 'mva' (dbmodel.solve) or 'sim' (simulate)."""
    from capmark.plan.dbmodel import solve

    if name == "mva":
        return solve
    if name == "sim":
        return simulate
    raise CapmarkError(f"The solver '{name}' is not known; use mva (mean-value analysis) or sim (simulation).")
