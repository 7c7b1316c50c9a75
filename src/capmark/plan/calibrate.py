"""Calibrate the model of a test from measured steps and validate it against every step.

Everything comes from the stored demands of the calibration step(s) (default: the lowest valid
step): the CPU per unit of the database host (where its CPU was not measured and the user stated its cores, an
estimate from the wait samples), each device's busy time per unit, and for commits
the WAL flush: flushes per unit, the elapsed time of one flush (pg_stat_io / pg_stat_wal write and
fsync time) and the device busy time it causes. A flush's elapsed time beyond its device time is
CPU (the system calls and lock handling), which batching saves as well; that is why the CPU per
commit falls with load. What the stations do not explain of the measured response time at
calibration becomes a delay, so the model reproduces its calibration step exactly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, NotRequired, TypedDict, final

from capmark.errors import CapmarkError
from capmark.measure import kpm, noise, record
from capmark.measure.demands import Component, devices, disk_key, host_busy_s, step_demands, wait_sampled_cpu_s
from capmark.model import usl
from capmark.plan import cpuscaling
from capmark.plan.dbhost import (
    CORES_QUOTA,
    CORES_STATED,
    DatabaseHost,
    cores_for,
    driver_runs_on_host,
    estimate_note,
    has_host_cpu,
    no_host_cpu_sentence,
    stated_cores_note,
)
from capmark.plan.dbmodel import (
    CLOSED_MODEL,
    CPU_ESTIMATED,
    CPU_MEASURED,
    SPREAD_CPU,
    SPREAD_DEVICES,
    SPREAD_FLUSH_CPU,
    SPREAD_FLUSH_DEVICE,
    WAL_FLUSH,
    DbModel,
    Prediction,
    TypeFigures,
    device_station,
    solve,
    solve_open,
)
from capmark.plan.iothrottle import IoThrottle, reads_utilization_pct, throttled_stations
from capmark.plan.mix import type_demands
from capmark.plan.predict import CurveJson, curve
from capmark.plan.simulate import SIM_MODEL
from capmark.plan.simulate import solver as solver_for
from capmark.results import StepResult, TestResult, WaitClass

# The calibration's fixed point (flush requests <-> batch size, delay <-> cycle time): rounds of each, and how far
# its last delay correction may still move the cycle time for the calibration to count as settled (a tenth of a
# per cent: well below the run-to-run noise of any measured throughput)
CALIBRATION_ROUNDS = 4
DELAY_ROUNDS = 3
CALIBRATION_SETTLED = 1e-3
# With the flush requests known, the delay alone is fitted, by a secant in at most SECANT_ROUNDS solutions; before
# its root is bracketed a step moves the delay by at most GAP_STEP_LIMIT times the gap: where the batch sits at its
# limit the gap hardly changes with the delay, and a secant there would leap far past the root
SECANT_ROUNDS = 12
GAP_STEP_LIMIT = 4.0

# From this busy fraction on, commits usually find a flush in progress and batch up: synchronisation shapes the load
BUSY_FLUSHER = 0.5
MIN_FLUSHES_PER_UNIT = 0.005  # below this the flushes are background housekeeping, not the workload's commits


def _db_cpu(d: dict[str, float | None], components: dict[str, Component]) -> float:
    """The CPU components of a step's demands but the driver's."""
    return sum(v for k, v in d.items() if components[k].group == "cpu" and v is not None and k != "cpu_driver_s")


def flushes(step: StepResult) -> tuple[float, float | None]:
    """WAL flushes per unit and the elapsed time of one flush (None without WAL IO timing)."""
    wio = kpm.wal_io(step)
    if not wio or not wio.get("fsyncs") or not step.units or wio["fsyncs"] / step.units < MIN_FLUSHES_PER_UNIT:
        return 0.0, None
    elapsed = (wio["write_ms"] + wio["fsync_ms"]) / 1000 / wio["fsyncs"]
    return wio["fsyncs"] / step.units, elapsed if elapsed > 0 else None


@dataclass(kw_only=True)
class _StepParameters:
    """What one calibration step gives the model, per unit: CPU outside flushes, data devices' busy time outside
    flushes, the WAL device, flush requests and one flush's CPU and device time, the client tier, and the
    latency shape (p95 and p99 over the mean)."""

    cpu: float
    devices: dict[str, float]
    wal_device: str | None
    f: float
    flush_cpu: float
    flush_device: float
    client: float
    p95: float
    p99: float


def _step_parameters(step: StepResult, host: DatabaseHost) -> _StepParameters:
    """The demands of one calibration step. The database host's CPU is the measured one where the host was
    measured, else the wait-sampled estimate (the caller has checked that the user stated the cores); the
    driver's CPU is host CPU where it ran on the database host, else a client tier delay."""
    d, components = step_demands(step)
    measured = has_host_cpu(step)
    on_host = driver_runs_on_host(step, host)
    driver = d.get("cpu_driver_s") or 0.0
    host_cpu = _db_cpu(d, components) if measured else (wait_sampled_cpu_s(step) or 0.0)
    # on a cluster, the nodes on the database host spent host CPU and the others a client tier delay
    here = (step.driver_cpu["database_host_s"] / step.units if "database_host_s" in step.driver_cpu and step.units
            else driver if on_host else 0.0)
    cpu = host_cpu + here
    busy = {dev: v for dev in step.os.get("disks") or {} if (v := d.get(disk_key(dev, "busy_s"))) is not None}
    writes: dict[str, str] = {}
    if host.io_throttle:  # the throttle is the device: its time, not the fast disk's behind it
        busy, writes = throttled_stations(step.os.get("disks") or {}, host.io_throttle, step.units or 0, busy)
    f, flush_s = flushes(step)
    wal_dev = None
    flush_dev = flush_cpu = 0.0
    if f > 0 and busy:
        disk = max((k for k in busy if k not in writes.values()), key=lambda k: d.get(disk_key(k, "flushes")) or 0.0)
        wal_dev = writes.get(disk, disk)
        flush_dev = busy[wal_dev] / f if flush_s is None else min(busy[wal_dev] / f, flush_s)
        flush_cpu = max(0.0, flush_s - flush_dev) if flush_s is not None else 0.0
        busy[wal_dev] = max(0.0, busy[wal_dev] - f * flush_dev)
    elif f > 0 and flush_s is not None:
        flush_cpu = flush_s  # no device visible (remote database): the whole flush counts as its own time
    # the measured CPU holds the flushes' CPU, which the flush server carries; wait samples never count a
    # flush as CPU (the session waits on the WAL meanwhile), so the estimate holds none of it
    in_flushes = f * flush_cpu if measured else 0.0
    lat = step.latency.summary()
    # the shape relative to the mean the model is pinned to: an open loop's response from the units' actual start
    # (its percentiles count from the intended start, so the shape carries the schedule lag's tail)
    mean = response_from_start_s(step) if offered_rate(step) else lat["mean_s"] or 0.0
    return _StepParameters(cpu=max(0.0, cpu - in_flushes), devices=busy, wal_device=wal_dev, f=f, flush_cpu=flush_cpu,
                           flush_device=flush_dev, client=max(0.0, driver - here),
                           p95=(lat["p95_s"] or mean) / mean if mean else 1.0,
                           p99=(lat["p99_s"] or mean) / mean if mean else 1.0)


def _check_host_cpu(test: TestResult, chosen: list[StepResult], host: DatabaseHost) -> list[StepResult]:
    """The calibration steps without the host's CPU, which the wait samples stand in for where the user stated
    the cores; a CapmarkError where they may not (no --cores) or cannot (no wait samples)."""
    unmeasured = [s for s in chosen if not has_host_cpu(s)]
    if unmeasured and host.stated_cores is None:
        raise CapmarkError(no_host_cpu_sentence(f"Test {test.workload}", host))
    blind = [s.jobs for s in unmeasured if wait_sampled_cpu_s(s) is None]
    if blind:
        at = ", ".join(map(str, blind))
        raise CapmarkError(f"Test {test.workload} has neither the database host's CPU nor wait samples to estimate it "
                           f"from at {at} job{'s' if blind != [1] else ''} (the sampler did not run); measure the host's "
                           "CPU with `--host-metrics sql` or `--node-exporter URL`.")
    return unmeasured


def offered_rate(step: StepResult) -> float:
    """The step's open-loop arrival rate over all its jobs (units/s; 0 for a closed loop): its jobs then only
    carry the arrivals, and neither their count nor jobs / throughput is the load."""
    return float(step.pacing.get("rate") or 0.0)


def response_from_start_s(step: StepResult) -> float:
    """The step's mean response time from each unit's actual start. An open loop's latency counts from the
    intended start, so it holds the wait of an arrival for its own job to be free (schedule lag), which is the load
    generator's queue and no station of the database host."""
    mean = step.latency.summary()["mean_s"] or 0.0
    lag = step.schedule_lag.summary()["mean_s"] if step.schedule_lag is not None and step.schedule_lag.total else None
    return max(0.0, mean - (lag or 0.0))


def _busy_cores(step: StepResult) -> float:
    busy = host_busy_s(step)
    return busy / step.elapsed_s if busy is not None and step.elapsed_s > 0 else 1.0


def _commit_waits(step: StepResult, flush_requests: float) -> float:
    """Commits per unit that found another job's flush in progress: the flush requests times the chance, from
    the flusher's measured busy fraction (pg_stat_io's write and fsync time over the window)."""
    wio = kpm.wal_io(step)
    if not flush_requests or not wio or step.elapsed_s <= 0:
        return 0.0
    busy = (wio["write_ms"] + wio["fsync_ms"]) / 1000 / step.elapsed_s
    # an open loop's arrivals are independent of one another, as in the open model (not its load generator's jobs)
    return flush_requests * cpuscaling.waiting_share(busy, math.inf if offered_rate(step) else step.jobs)


def _flush_requests(valid: list[StepResult]) -> float:
    """Flush requests per unit before batching: the lowest valid step's flushes (one job batches nothing)."""
    lowest = min(s.jobs for s in valid)
    return statistics.fmean(flushes(s)[0] for s in valid if s.jobs == lowest)


def _cpu_scaling(valid: list[StepResult], cores: int, host: DatabaseHost, requests: float) -> cpuscaling.CpuScaling:
    """CPU per unit against busy cores and commit waits over the valid steps with at most as many jobs as cores
    (where the CPU was measured), whatever steps the rest of the model is calibrated on."""
    points = [cpuscaling.CpuPoint(s.jobs, _busy_cores(s), _step_parameters(s, host).cpu,
                                  _commit_waits(s, requests))
              for s in valid if s.jobs <= cores and has_host_cpu(s)]
    scaling = cpuscaling.fit(points, cores)
    if host.probe_growth is not None and scaling.note and not scaling.wait_cpu_s and not scaling.growth:
        # the steps could not show how the CPU scales (one core, one job count, too little spread): the host's own
        # probe can, and a what-if that changes the cores needs it
        return cpuscaling.CpuScaling(host.probe_growth, scaling.points,
                                     f"{scaling.note}; taken from the host's CPU probe instead ({host.probe_words})")
    return scaling


def _to_one_busy_core(step: StepResult, p: _StepParameters, scaling: cpuscaling.CpuScaling, requests: float) -> None:
    """The step's CPU per unit as one busy core would spend it with no commit waits: what the model holds."""
    p.cpu = max(0.0, p.cpu - scaling.wait_cpu_s * _commit_waits(step, requests))
    at_one = scaling.per_unit(1.0, _busy_cores(step))
    p.cpu, p.flush_cpu = p.cpu / at_one, p.flush_cpu / at_one


def demand_spread(valid: list[StepResult], cores: int, host: DatabaseHost, scaling: cpuscaling.CpuScaling,
                  requests: float) -> dict[str, float] | None:
    """How far each demand the model holds as one value moved across the valid steps within the cores (and their
    repetitions): its largest deviation from the mean, as a share of the mean, for the CPU per unit, the devices'
    busy per unit, and one flush's CPU and device time. The CPU per unit is first taken to one busy core by the
    growth and the commit-wait CPU fitted through these very steps, which two steps fit exactly: its spread counts
    only with three steps or more (repetitions, or more job counts within the cores). None where no demand has a
    spread to go by."""
    within = [s for s in valid if s.jobs <= cores]
    params = [_step_parameters(s, host) for s in within]
    for s, p in zip(within, params, strict=True):
        _to_one_busy_core(s, p, scaling, requests)
    flushing = [p for p in params if p.f > 0]
    cpu_has_spread = len(within) >= 3
    spreads = {}
    for name, values in ((SPREAD_CPU, [p.cpu for p in params] if cpu_has_spread else []),
                         (SPREAD_DEVICES, [sum(p.devices.values()) for p in params]),
                         (SPREAD_FLUSH_CPU, [p.flush_cpu for p in flushing]),
                         (SPREAD_FLUSH_DEVICE, [p.flush_device for p in flushing])):
        mean = statistics.fmean(values) if len(values) >= 2 else 0.0
        if mean > 0:
            spreads[name] = max(abs(v - mean) for v in values) / mean
    return spreads or None


def calibrate(test: TestResult, from_jobs: list[int] | None = None, host: DatabaseHost | None = None) -> DbModel:
    """The model of a test from its calibration step(s). `host` is what the run recorded of the database host
    (database_host(run)) and the cores the user stated; without it, the steps' own measurements only."""
    host = host or DatabaseHost()
    valid = [s for s in test.steps if record.of(s, test.per_unit).valid]
    if not valid:
        why = "; ".join(f"at {s.jobs} job{'s' if s.jobs != 1 else ''} {record.of(s).problems[0]}" for s in test.steps)
        raise CapmarkError(f"Test {test.workload} has no valid step to calibrate on ({why}).")
    if from_jobs:
        chosen = [s for s in valid if s.jobs in from_jobs]
        if not chosen:
            have = ", ".join(str(s.jobs) for s in valid)
            raise CapmarkError(f"Test {test.workload} has no valid step with {from_jobs} jobs to calibrate on; "
                               f"valid steps have {have} jobs.")
    else:  # every valid repetition of the lowest valid job count: its parameters are averaged below
        lowest = min(s.jobs for s in valid)
        chosen = [s for s in valid if s.jobs == lowest]
    unmeasured = _check_host_cpu(test, chosen, host)
    cores = cores_for(chosen[0], host, f"Test {test.workload}")
    params = [_step_parameters(s, host) for s in chosen]
    mean = statistics.fmean
    requests = _flush_requests(valid)
    scaling = _cpu_scaling(valid, cores.count, host, requests) if not unmeasured else cpuscaling.CpuScaling(
        0.0, (), "the database host's CPU was estimated, not measured: capacity taken as linear in the busy cores")
    for s, p in zip(chosen, params, strict=True):
        _to_one_busy_core(s, p, scaling, requests)
    names = sorted({k for p in params for k in p.devices})
    wal_devs = [p.wal_device for p in params if p.wal_device]
    model = DbModel(
        workload=test.workload, unit=test.unit, cores=cores.count,
        cpu_s=mean(p.cpu for p in params),
        devices={k: mean(p.devices.get(k, 0.0) for p in params) for k in names},
        wal_device=max(set(wal_devs), key=wal_devs.count) if wal_devs else None,
        flush_requests=mean(p.f for p in params), flush_cpu_s=mean(p.flush_cpu for p in params),
        flush_device_s=mean(p.flush_device for p in params), delay_s=0.0,
        client_s=mean(p.client for p in params), think_s=chosen[0].pacing.get("think_s", 0.0),
        p95_over_mean=mean(p.p95 for p in params), p99_over_mean=mean(p.p99 for p in params),
        calibrated_from=sorted({s.jobs for s in chosen}), cores_from=cores.origin, core_speed=cores.speed,
        cpu_from=CPU_ESTIMATED if unmeasured else CPU_MEASURED, cpu_growth=scaling.growth,
        wait_cpu_s=scaling.wait_cpu_s,
        cpu_scaling=scaling.fitted(cores.count))
    if cores.origin == CORES_STATED:
        model.notes.append(stated_cores_note(host, chosen[0]))
    if cores.origin == CORES_QUOTA:
        model.notes.append(f"the server was limited to {host.cpu_quota:g} cores' worth of CPU time: the model takes "
                           f"it as {cores.count} core{'s' if cores.count != 1 else ''} at {cores.speed:.0%} of a "
                           "core's speed, and a what-if's CPU speed is relative to that")
    if host.io_throttle and any(host.io_throttle.applies_to(k) for k in names):
        model.notes.append(f"the server's disk IO was throttled ({host.io_throttle.words()}): the model serves it at "
                           "those rates, reads and writes each at a station of their own, and a what-if's disk speed "
                           "is relative to them")
    if unmeasured:
        model.notes.append(estimate_note([s.jobs for s in unmeasured], len(unmeasured) < len(chosen)))
    if model.flush_requests > 0 and not model.flush_cpu_s and not model.flush_device_s:
        model.notes.append("WAL flush time is not measured (track_wal_io_timing off): group commit not modelled")
        model.flush_requests = 0.0
    anchors = [Anchor.of(s, p.f) for s, p in zip(chosen, params, strict=True)]
    if any(a.rate for a in anchors):
        model.calibrated_rate = statistics.fmean(a.rate for a in anchors if a.rate)
    # one job batches nothing: its flushes per unit are the requests (the same at any load), which steps above the
    # cores alone cannot tell from the delay; steps that include one job fit them as they fit the delay (a workload
    # whose units change as it runs, such as stress-mixed's deletes, commits less at 2 jobs than at 1)
    known = (requests if min(s.jobs for s in valid) == 1 and min(s.jobs for s in chosen) > 1
             and model.flush_requests > 0 else None)
    model = fit_flushes_and_delay(model, anchors, known_requests=known)
    at_lowest = [s for s in chosen if s.jobs == min(model.calibrated_from)]
    model.types = type_demands(at_lowest, model.flush_requests, model.flush_cpu_s + model.flush_device_s)
    if model.types:
        model.type_reference = (solve_open(model, model.calibrated_rate) if model.calibrated_rate
                                else solve(model, at_lowest[0].jobs)).parts
    if model.delay_s < 0:
        model.notes.append(f"the measured response time is {-model.delay_s * 1e6:.1f} us per unit shorter than the "
                           "stations add up to at calibration: CPU and IO overlap, or background processes' IO, "
                           "charged to every unit, ran beside the units (calibrated as a negative delay)")
    if not from_jobs and not unmeasured:
        _fit_oversubscription(model, valid, host, scaling, requests)
    if not unmeasured:
        model.demand_spread = demand_spread(valid, cores.count, host, scaling, requests)
    model.notes.extend(assumption_notes(valid, cores.count, host, unmeasured=bool(unmeasured),
                                        oversubscription_modelled=bool(model.probe_jobs)))
    return model


def _fit_oversubscription(model: DbModel, valid: list[StepResult], host: DatabaseHost, scaling: cpuscaling.CpuScaling,
                          requests: float) -> None:
    """More runnable jobs than cores cost CPU per unit (time slices starting with a cold cache), which steps up to
    the cores cannot show: the lowest valid job count above the cores is the probe that measures it. A probe step
    whose CPU per unit rose is used (and then never scored); one that did not rise stays an ordinary step."""
    closed = [s for s in valid if not offered_rate(s)]  # an open loop's jobs wait for arrivals: not runnable
    above = sorted({s.jobs for s in closed if s.jobs > model.cores and has_host_cpu(s)})
    if not above:
        return
    probe = [s for s in closed if s.jobs == above[0]]
    measured = statistics.fmean(max(0.0, _step_parameters(s, host).cpu - scaling.wait_cpu_s * _commit_waits(s, requests))
                                for s in probe)
    at_cores = model.cpu_s * scaling.per_unit(1.0, model.cores)
    over = cpuscaling.fit_oversubscription(at_cores, measured, above[0], model.cores)
    if over > 0:
        model.cpu_oversubscription, model.probe_jobs = over, [above[0]]
        model.notes.append(f"CPU per unit at {above[0]} jobs is {measured / at_cores - 1:+.0%} of that at the "
                           f"{model.cores} cores' (more runnable jobs than cores: time slices starting with a cold "
                           f"cache); the model takes it from that step, which is a probe and not scored, and lets it "
                           f"grow towards {1 + over:.2f} x as the runnable jobs grow")


# Where the measured steps show an assumption of the model failing, calibrate, whatif and size say so beside the
# figures. CPU per unit varies 2-5 % between steps on a shared host, so a rise beyond the cores is named only above
# this; lock waits below this share of the active time do not limit throughput much; a device this busy has no room
# left, and the model serves its requests one at a time.
RISING_DEMAND = 0.15
LOCK_SHARE = 0.10
BUSY_DEVICE_PCT = 90.0


def assumption_notes(valid: list[StepResult], cores: int, host: DatabaseHost, *, unmeasured: bool = False,
                     oversubscription_modelled: bool = False) -> list[str]:
    """One line per assumption of the model that the measured steps visibly break."""
    notes = []
    by_jobs = sorted(valid, key=lambda s: s.jobs)
    closed = [s for s in by_jobs if not offered_rate(s)]  # an open loop's jobs are not all runnable
    within = [s for s in closed if s.jobs <= cores and has_host_cpu(s)]
    beyond = [s for s in closed if s.jobs > cores and has_host_cpu(s)]
    if within and beyond and not unmeasured and not oversubscription_modelled:
        base, top = _step_parameters(within[-1], host).cpu, _step_parameters(beyond[-1], host).cpu
        if base > 0 and top / base - 1 > RISING_DEMAND:
            notes.append(f"CPU per unit rises {top / base - 1:.0%} from {within[-1].jobs} to {beyond[-1].jobs} jobs "
                         f"(more runnable jobs than the {cores} cores: time slicing and cache pressure), which the "
                         "model does not hold: its predictions beyond the cores are optimistic")
    locks = [(s.jobs, record.of(s).waits.get(WaitClass.LOCK, 0.0)) for s in by_jobs]
    if locks and locks[-1][1] >= LOCK_SHARE and locks[-1][1] > locks[0][1]:
        notes.append(f"lock waits take {locks[-1][1]:.0%} of the active time at {locks[-1][0]} jobs "
                     f"({locks[0][1]:.0%} at {locks[0][0]}): row-lock contention is not a station of this model, so "
                     "it over-predicts throughput where they grow")
    if by_jobs:
        for name, figures in devices(by_jobs[-1]).items():
            busy = figures.get("utilization_pct")
            if busy is not None and busy >= BUSY_DEVICE_PCT:
                notes.append(f"device {name} is {busy:.0f} % busy at {by_jobs[-1].jobs} jobs: the model serves its "
                             "requests one at a time, so where it serves several at once the model under-predicts it")
    return notes


@dataclass(frozen=True, kw_only=True)
class Anchor:
    """What a calibration step pins the model to: its jobs, its measured cycle time (jobs / throughput) and its
    measured WAL flushes per unit. An open-loop step (rate > 0, its measured throughput) pins the model's open
    solution instead, and its cycle is its response time from the units' actual start."""

    jobs: int
    cycle_s: float
    flushes_per_unit: float
    rate: float = 0.0

    @classmethod
    def of(cls, step: StepResult, flushes_per_unit: float) -> Anchor:
        if offered_rate(step):
            return cls(jobs=step.jobs, cycle_s=response_from_start_s(step), flushes_per_unit=flushes_per_unit,
                       rate=step.units / step.elapsed_s)
        return cls(jobs=step.jobs, cycle_s=step.jobs / (step.units / step.elapsed_s), flushes_per_unit=flushes_per_unit)

    def label(self) -> str:
        return f"{self.rate:,.0f} units/s" if self.rate else f"{self.jobs} job(s)"


def fit_flushes_and_delay(model: DbModel, anchors: list[Anchor], rounds: int = CALIBRATION_ROUNDS,
                          delay_rounds: int = DELAY_ROUNDS, known_requests: float | None = None) -> DbModel:
    """Flush requests before batching = measured flushes x predicted batch; the delay closes the gap to the
    measured cycle time; both depend on each other, so rounds of both. Where the requests are known
    (`known_requests`: a step of one job, which batches nothing, measured them) only the delay is fitted
    (fit_delay): above the cores several pairs of requests and delay give the same cycle and flushes (wal-lat1
    anchored at 8 jobs: 0.55 requests a unit with a delay of +331 us, where each unit commits once). Should the
    last delay correction still move the cycle by more than CALIBRATION_SETTLED, or a solution on the way not
    settle, the model says so in a note (its figures then rest on an unsettled calibration)."""
    mean = statistics.fmean
    unsettled: set[Anchor] = set()
    saturated: set[Anchor] = set()

    def solved(m: DbModel, a: Anchor) -> Prediction:
        p = solve_open(m, a.rate) if a.rate else solve(m, a.jobs)
        if not p.converged:
            unsettled.add(a)
        if p.response_time_s is None:
            saturated.add(a)
        return p

    def gap(m: DbModel, a: Anchor) -> float:
        return a.cycle_s - (solved(m, a).response_time_s or 0.0) - (0.0 if a.rate else m.think_s)

    def fit_delay(m: DbModel) -> tuple[DbModel, float]:
        """With the requests fixed, the delay that closes the mean gap in up to SECANT_ROUNDS: a secant through the
        last two delays tried, kept inside the bracket once there is one (halved where it would leave it); before
        that a step moves the delay by at most GAP_STEP_LIMIT times the gap. The plain `delay += gap` of the rounds
        below converges slowly where the batch sits at its limit and the gap hardly moves (4 of 14 calibrations
        above the cores unsettled after 12 corrections). The model, and the gap its delay leaves."""
        lower: tuple[float, float] | None = None  # a delay whose gap is positive (the delay is too short), and its gap
        upper: tuple[float, float] | None = None  # one whose gap is negative
        last: tuple[float, float] | None = None
        for _ in range(SECANT_ROUNDS):
            g = mean(gap(m, a) for a in anchors)
            if g >= 0:
                lower = (m.delay_s, g)
            else:
                upper = (m.delay_s, g)
            # the gap's own size before there are two points: a longer delay lengthens the response by a little
            # less than itself, as the queues it spares shorten
            to = m.delay_s + (g if last is None or last[1] == g else g * (m.delay_s - last[0]) / (last[1] - g))
            if lower and upper and not min(lower[0], upper[0]) < to < max(lower[0], upper[0]):
                to = (lower[0] + upper[0]) / 2
            elif not (lower and upper) and abs(to - m.delay_s) > GAP_STEP_LIMIT * abs(g):
                to = m.delay_s + GAP_STEP_LIMIT * g
            last = (m.delay_s, g)
            m = replace(m, delay_s=to)
        return m, mean(gap(m, a) for a in anchors)

    correction = 0.0
    tried = f"{rounds} x {delay_rounds} rounds"
    if known_requests is not None:
        model, correction = fit_delay(replace(model, flush_requests=known_requests))
        tried = f"{SECANT_ROUNDS} rounds"
    else:
        for _ in range(rounds):
            batches = [solved(model, a).batch or 1.0 for a in anchors]
            model = replace(model, flush_requests=mean(a.flushes_per_unit * b for a, b in zip(anchors, batches,
                                                                                               strict=True)))
            for _ in range(delay_rounds):
                correction = mean(gap(model, a) for a in anchors)
                model = replace(model, delay_s=model.delay_s + correction)
    cycle = mean(a.cycle_s for a in anchors)
    if abs(correction) > CALIBRATION_SETTLED * cycle:
        model.notes.append(f"the calibration did not settle in {tried} (its last delay "
                           f"correction was {correction * 1e6:+.2f} us, {abs(correction) / cycle:.1%} of the cycle); "
                           "predictions carry that much doubt")
    if unsettled:
        closed = sorted(a.jobs for a in unsettled if not a.rate)
        opened = sorted(a.rate for a in unsettled if a.rate)
        where = ([f"{', '.join(map(str, closed))} job(s)"] if closed else []) + \
            [f"{', '.join(f'{r:,.0f}' for r in opened)} units/s"] * bool(opened)
        model.notes.append(f"the model's fixed point did not settle at {' and '.join(where)} while calibrating; the "
                           "calibration rests on those rough solutions")
    if saturated:
        model.notes.append("the model saturates at the measured load of "
                           f"{', '.join(sorted(a.label() for a in saturated))}, which the host carried: its demands "
                           "are too high for that load, and its predictions are not to be trusted")
    return model


Figure = Literal["throughput", "response_time_s", "p95_s"]  # the figures whose errors the verdict scores


class MeasuredPoint(TypedDict):
    """What a job count measured: throughput, mean and tail response times, CPU and device busy, WAL flushes."""

    throughput: float | None
    response_time_s: float | None
    p95_s: float | None
    p99_s: float | None
    cpu_busy_pct: float | None
    flushes_per_unit: float | None
    device_util_pct: dict[str, float | None]  # by the device's station (device_station)


class Interval(TypedDict):
    """A measured figure's 95 % confidence half-width (in the figure's unit), how it was found and from how many."""

    half_width: float
    method: str
    n: int


class MeasuredIntervals(TypedDict):
    throughput: Interval | None
    response_time_s: Interval | None
    p95_s: Interval | None


class FigureErrors(TypedDict):
    """The model's error against the measurement, in per cent (None where either is missing)."""

    throughput: float | None
    response_time_s: float | None
    p95_s: float | None


class TypeErrors(FigureErrors):
    p99_s: float | None


class FigureKinds(TypedDict):
    """Per figure: WITHIN_NOISE, MODEL_ERROR or NO_INTERVAL."""

    throughput: str
    response_time_s: str
    p95_s: str


class MeasuredAndModel(TypedDict):
    measured: float | None
    model: float | None


class TypePoint(TypedDict):
    throughput: float
    response_time_s: float
    p95_s: float
    p99_s: float


class TypeRow(TypedDict):
    """One transaction type of a mix at a job count: measured, the model's class, and the errors."""

    measured: TypePoint
    model: TypeFigures
    error_pct: TypeErrors


class ModelPoint(TypedDict):
    """The model's solution at a job count, as the validation table shows it."""

    jobs: float | None
    offered_rate: float | None
    converged: bool
    rounds: int
    throughput: float | None
    response_time_s: float | None
    p95_s: float | None
    p99_s: float | None
    cpu_busy_pct: float
    utilizations: dict[str, float]
    bottleneck: str
    by_type: dict[str, TypeFigures]
    flushes_per_unit: float | None
    batch: float | None
    stretch: float | None
    method: str
    interval: dict[str, list[float]] | None  # (low, high) per figure, from the simulation's replications
    notes: list[str]


class StepRow(TypedDict):
    """One job count: measured (the mean over its valid repetitions) against the model."""

    jobs: int
    valid: bool
    invalid_because: list[str]
    calibration: bool  # the model was calibrated on it
    repetitions: int
    repetitions_used: int
    repetitions_left_out: dict[str, list[str]]  # by repetition number: why
    measured: MeasuredPoint
    measured_interval: MeasuredIntervals
    model: ModelPoint
    error_pct: FigureErrors
    error_kind: FigureKinds
    cpu_error_points: float | None
    device_error_points: dict[str, float]
    batch: MeasuredAndModel
    flush_time_s: MeasuredAndModel
    by_type: dict[str, TypeRow]
    mva: NotRequired[ModelPoint]  # with the simulation: MVA's solution beside it
    solver_note: NotRequired[str | None]  # with the simulation: where MVA falls outside its interval, which to trust


class AbsStats(TypedDict):
    median_abs_pct: float | None
    max_abs_pct: float | None


class NoiseCounts(TypedDict):
    within_noise: int
    model_error: int
    no_interval: int
    model_error_median_abs_pct: float | None


class NoiseSeparation(TypedDict):
    throughput: NoiseCounts
    response_time_s: NoiseCounts


class Verdict(TypedDict):
    """The model's errors over the scored steps (valid, not calibration steps)."""

    throughput: AbsStats
    response_time_s: AbsStats
    p95_s: AbsStats
    cpu_busy_max_points: float | None
    cpu_busy_median_points: float | None
    steps_scored: list[int]
    response_time_s_by_type: AbsStats
    p95_s_by_type: AbsStats
    noise: NoiseSeparation


@final  # so that a key only the fit has tells the two apart
class UslNote(TypedDict):
    """Why there is no USL beside the queueing model."""

    note: str


UslFitted = TypedDict("UslFitted", {  # functional form: one key is the Python keyword lambda
    "sigma": float, "kappa": float, "lambda": float, "r_squared": float, "peak_concurrency": float,
    "peak_throughput": float, "jobs": list[int], "predicted": list[float], "error_pct": list[float],
    "median_abs_pct": float, "model_median_abs_pct": float, "better": str, "summary": str})
UslFitted.__doc__ = "The USL fitted to the valid steps beside the queueing model: which is closer, and where each misses."


class Validation(TypedDict):
    """A test's calibrated model, validated against every job count, with the USL and the curve beyond."""

    workload: str
    unit: str
    model: str
    solver: str
    calibrated_from_jobs: list[int]
    calibration: DbModel
    p95_note: str
    interval_note: str
    steps: list[StepRow]
    verdict: Verdict
    usl: UslNote | UslFitted
    prediction: CurveJson


def _err(model: float | None, measured: float | None) -> float | None:
    return (model / measured - 1) * 100 if model is not None and measured else None


def measured_point(step: StepResult, per_unit: dict[str, float] | None = None,
                   throttle: IoThrottle | None = None) -> MeasuredPoint:
    """The step's figures as the model is judged on them: an open loop's mean response time from the units' actual
    start (the model holds no load generator's queue; its tail percentiles still count from the intended start);
    a throttled disk as busy as its throttle held it."""
    values = record.of(step, per_unit).kpm
    f, _ = flushes(step)
    mean_s = response_from_start_s(step) if offered_rate(step) else (values["rt_mean_ms"] or 0) / 1000
    return MeasuredPoint(throughput=values["throughput"], response_time_s=mean_s,
                         p95_s=(values["rt_p95_ms"] or 0) / 1000, p99_s=(values["rt_p99_ms"] or 0) / 1000,
                         cpu_busy_pct=values["cpu_busy_pct"], flushes_per_unit=f or None,
                         device_util_pct={device_station(k): _device_util_pct(step, k, v["utilization_pct"], throttle)
                                          for k, v in devices(step).items()})


def _device_util_pct(step: StepResult, device: str, measured: float | None, throttle: IoThrottle | None) -> float | None:
    """A disk's utilization; a throttled disk's (its reads' station) as busy as the throttle held its reads."""
    if throttle is None or not throttle.applies_to(device) or not step.elapsed_s:
        return measured
    return reads_utilization_pct((step.os.get("disks") or {})[device], throttle, step.elapsed_s)


def _abs_stats(values: list[float | None]) -> AbsStats:
    errs = sorted(abs(v) for v in values if v is not None)
    return AbsStats(median_abs_pct=statistics.median(errs) if errs else None, max_abs_pct=errs[-1] if errs else None)


def solver_disagreement(sim: Prediction, mva: Prediction) -> str | None:
    """A sentence where MVA's throughput or response time lies outside the simulation's 95 % interval: which to
    trust. The simulation plays out synchronisation (a flush releases its batch at once, the batch meets at the
    CPU); MVA averages it away, which matters where the flush server is busy."""
    if not sim.interval:
        return None
    outside = []
    for key, what in (("throughput", "throughput"), ("response_time_s", "response time")):
        low, high = sim.interval[key]
        value = getattr(mva, key)
        if value is not None and not low <= value <= high:
            ref = getattr(sim, key)
            outside.append(f"{what} {(value / ref - 1) * 100:+.1f} %")
    if not outside:
        return None
    flush = sim.utilizations.get(WAL_FLUSH, 0.0)
    trust = (f"trust the simulation here: the WAL flush server is {flush * 100:.0f} % busy, so group-commit batches and "
             "the CPU bursts after each flush shape the result, which mean-value analysis averages away"
             if flush >= BUSY_FLUSHER else
             "the flush server is not busy, so synchronisation matters little; the gap is the two solvers' different "
             "approximations (multi-core CPU sharing, the group-commit submodel), and either is as good a guide")
    if sim.notes:  # the negative delay the simulation could not take off the cycle
        trust += ("; part of the throughput gap is the CPU and IO overlap the simulation cannot play out (see the "
                  "note below), which MVA keeps")
    return f"MVA differs from the simulation beyond its 95 % interval ({', '.join(outside)}); {trust}"


def _mean_or_none(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]


def _mean_point(points: list[MeasuredPoint]) -> MeasuredPoint:
    """The measured point of a job count: the mean over its repetitions (None where one of them has none)."""
    mean = _mean_or_none
    devs = set.intersection(*(set(p["device_util_pct"]) for p in points))
    return MeasuredPoint(throughput=mean([p["throughput"] for p in points]),
                         response_time_s=mean([p["response_time_s"] for p in points]),
                         p95_s=mean([p["p95_s"] for p in points]), p99_s=mean([p["p99_s"] for p in points]),
                         cpu_busy_pct=mean([p["cpu_busy_pct"] for p in points]),
                         flushes_per_unit=mean([p["flushes_per_unit"] for p in points]),
                         device_util_pct={k: mean([p["device_util_pct"][k] for p in points]) for k in sorted(devs)})


# the measured figures whose interval tells model error from measurement noise, and their KPM (in ms)
NOISE_KPMS: dict[Figure, tuple[str, float]] = {"throughput": ("throughput", 1.0), "response_time_s": ("rt_mean_ms", 1e-3),
                                               "p95_s": ("rt_p95_ms", 1e-3)}
WITHIN_NOISE, MODEL_ERROR, NO_INTERVAL = "measurement noise", "model error", "no interval"


def _interval(spread: noise.JobNoise, name: Figure) -> Interval | None:
    """The measured interval of a figure the model predicts, in the figure's unit (seconds for times)."""
    key, scale = NOISE_KPMS[name]
    got = spread.best(key)
    if got is None or got.half_width is None:
        return None
    return Interval(half_width=got.half_width * scale, method=got.method, n=got.n)


def _intervals(spread: noise.JobNoise) -> MeasuredIntervals:
    return MeasuredIntervals(throughput=_interval(spread, "throughput"),
                             response_time_s=_interval(spread, "response_time_s"), p95_s=_interval(spread, "p95_s"))


def _error_kind(model: float | None, measured: float | None, interval: Interval | None) -> str:
    """A model figure inside the measured interval misses by no more than the measurement itself varies."""
    if interval is None or model is None or measured is None:
        return NO_INTERVAL
    return WITHIN_NOISE if abs(model - measured) <= interval["half_width"] else MODEL_ERROR


def _noise_counts(scored: list[StepRow], k: Figure) -> NoiseCounts:
    kinds = [r["error_kind"][k] for r in scored]
    errs = [abs(e) for r in scored if r["error_kind"][k] == MODEL_ERROR and (e := r["error_pct"][k]) is not None]
    return NoiseCounts(within_noise=kinds.count(WITHIN_NOISE), model_error=kinds.count(MODEL_ERROR),
                       no_interval=kinds.count(NO_INTERVAL),
                       model_error_median_abs_pct=statistics.median(errs) if errs else None)


def _separation(scored: list[StepRow]) -> NoiseSeparation:
    """Per figure: how many steps the model misses by less than the measured interval (noise), how many by more
    (model error), how many have no interval, and the median error over the model-error steps."""
    return NoiseSeparation(throughput=_noise_counts(scored, "throughput"),
                           response_time_s=_noise_counts(scored, "response_time_s"))


def validate(test: TestResult, from_jobs: list[int] | None = None, up_to: int | None = None,
             progress: Callable[[str], None] | None = None, host: DatabaseHost | None = None,
             solver: str = "mva") -> Validation:
    """Measured vs model for every job count (the mean over its valid repetitions, with its interval), the
    verdict, the USL as an empirical second model, and the model's prediction up to `up_to` jobs (default:
    twice the most measured). With solver 'sim' the job counts are simulated (with 95 % intervals) and compared
    with MVA as well; the calibration itself and the prediction curve stay MVA's (the curve solves many loads,
    which the simulation would take long over)."""
    if progress:
        progress(f"{test.workload}: calibrating")
    model = calibrate(test, from_jobs, host)
    solve_closed = solver_for(solver)
    rows: list[StepRow] = []
    for spread in noise.analyse(test.steps, [k for _, (k, _) in NOISE_KPMS.items()], test.per_unit):
        mine = [s for s in test.steps if s.jobs == spread.jobs]
        use = [s for s in mine if noise.repeat_of(s) in spread.used] or mine
        why = [] if spread.used else list(dict.fromkeys(w for s in mine for w in record.of(s).problems))
        left_out = {str(noise.repeat_of(s)): list(record.of(s).problems) for s in mine
                    if noise.repeat_of(s) not in spread.used}
        measured = _mean_point([measured_point(s, test.per_unit, (host or DatabaseHost()).io_throttle) for s in use])
        think = use[0].pacing.get("think_s", 0.0)
        if offered_rate(use[0]):  # an open loop: the open model at its arrival rate (the simulation is closed only)
            p, mva_p = solve_open(model, offered_rate(use[0])), None
        else:
            if progress and solver == "sim":
                progress(f"{test.workload}: simulating {spread.jobs} job{'s' if spread.jobs != 1 else ''}")
            p = solve_closed(model, spread.jobs, think)
            mva_p = solve(model, spread.jobs, think) if solver == "sim" else None
        measured_devices = dict.fromkeys([*model.devices, *([model.wal_device] if model.wal_device else [])])
        dev_model = {station: p.utilizations[station] * 100 for station in map(device_station, measured_devices)
                     if station in p.utilizations}
        interval = _intervals(spread)
        row = StepRow(
            jobs=spread.jobs, valid=not why, invalid_because=why,
            calibration=spread.jobs in model.calibrated_from or spread.jobs in model.probe_jobs,
            repetitions=len(mine), repetitions_used=len(use) if not why else 0,
            repetitions_left_out=left_out if spread.used else {},
            measured=measured, measured_interval=interval, model=_point(p),
            error_pct=FigureErrors(throughput=_err(p.throughput, measured["throughput"]),
                                   response_time_s=_err(p.response_time_s, measured["response_time_s"]),
                                   p95_s=_err(p.p95_s, measured["p95_s"])),
            error_kind=FigureKinds(
                throughput=_error_kind(p.throughput, measured["throughput"], interval["throughput"]),
                response_time_s=_error_kind(p.response_time_s, measured["response_time_s"],
                                            interval["response_time_s"]),
                p95_s=_error_kind(p.p95_s, measured["p95_s"], interval["p95_s"])),
            cpu_error_points=(p.cpu_busy_pct - measured["cpu_busy_pct"]
                              if measured["cpu_busy_pct"] is not None else None),
            device_error_points={k: dev_model[k] - v for k, v in measured["device_util_pct"].items()
                                 if v is not None and k in dev_model},
            batch=MeasuredAndModel(measured=(model.flush_requests / f) if (f := measured["flushes_per_unit"]) else None,
                                   model=p.batch),
            flush_time_s=MeasuredAndModel(measured=_mean_or_none([flushes(s)[1] for s in use]),
                                          model=(mva_p or p).flush_s),
            by_type=_type_rows(use, (mva_p or p).by_type))
        if mva_p is not None:
            row["mva"] = _point(mva_p)
            row["solver_note"] = solver_disagreement(p, mva_p)
        rows.append(row)
    scored = [r for r in rows if r["valid"] and not r["calibration"]]
    cpu_pts = [abs(e) for r in scored if (e := r["cpu_error_points"]) is not None]
    verdict = Verdict(
        throughput=_abs_stats([r["error_pct"]["throughput"] for r in scored]),
        response_time_s=_abs_stats([r["error_pct"]["response_time_s"] for r in scored]),
        p95_s=_abs_stats([r["error_pct"]["p95_s"] for r in scored]),
        cpu_busy_max_points=max(cpu_pts) if cpu_pts else None,
        cpu_busy_median_points=statistics.median(cpu_pts) if cpu_pts else None,
        steps_scored=[r["jobs"] for r in scored],
        response_time_s_by_type=_abs_stats([t["error_pct"]["response_time_s"] for r in scored
                                            for t in r["by_type"].values()]),
        p95_s_by_type=_abs_stats([t["error_pct"]["p95_s"] for r in scored for t in r["by_type"].values()]),
        noise=_separation(scored))
    return Validation(
        workload=test.workload, unit=test.unit, model=SIM_MODEL if solver == "sim" else CLOSED_MODEL, solver=solver,
        calibrated_from_jobs=model.calibrated_from, calibration=model,
        p95_note="p95/p99 = the calibration step's latency shape for the unqueued part + a tail for each queueing "
                 "delay the model adds: Erlang for the CPU queue, one to two flushes for a commit's flush wait, "
                 "exponential (x3.0 / x4.6) for devices; a mix's p95/p99 combines its types'",
        interval_note="measured figures are means over the valid repetitions of a job count; ± is their 95 % "
                      "confidence half-width (" + "; ".join(f"{k}: {v}" for k, v in noise.METHODS.items())
                      + "); a model figure inside it counts as measurement noise, not model error",
        steps=rows, verdict=verdict,
        usl=UslNote(note="the USL relates throughput to jobs, and an open loop's throughput is the rate that arrived")
        if any(offered_rate(s) for s in test.steps) else usl_comparison(rows),
        prediction=curve(model, up_to or 2 * max(s.jobs for s in test.steps), progress=progress).to_dict())


def _type_rows(steps: list[StepResult], model: dict[str, TypeFigures]) -> dict[str, TypeRow]:
    """Per transaction type of a mix: the measured mean, p95 and p99 (means over the repetitions) beside the
    model's class, and the errors."""
    out = {}
    for name, predicted in model.items():
        hists = [s.histograms.get(name) for s in steps]
        if any(h is None or not h.total for h in hists):
            continue
        summaries = [h.summary() for h in hists if h is not None]
        measured = {k: statistics.fmean(x[k] or 0.0 for x in summaries) for k in ("mean_s", "p95_s", "p99_s")}
        point = TypePoint(throughput=statistics.fmean(h.total / s.elapsed_s for h, s in zip(hists, steps, strict=True)
                                                      if h is not None),
                          response_time_s=measured["mean_s"], p95_s=measured["p95_s"], p99_s=measured["p99_s"])
        out[name] = TypeRow(measured=point, model=predicted, error_pct=TypeErrors(
            throughput=_err(predicted["throughput"], point["throughput"]),
            response_time_s=_err(predicted["response_time_s"], point["response_time_s"]),
            p95_s=_err(predicted["p95_s"], point["p95_s"]), p99_s=_err(predicted["p99_s"], point["p99_s"])))
    return out


def _point(p: Prediction) -> ModelPoint:
    return ModelPoint(jobs=p.jobs, offered_rate=p.offered_rate, converged=p.converged, rounds=p.rounds,
                      throughput=p.throughput, response_time_s=p.response_time_s, p95_s=p.p95_s, p99_s=p.p99_s,
                      cpu_busy_pct=p.cpu_busy_pct, utilizations=p.utilizations, bottleneck=p.bottleneck,
                      by_type=p.by_type, flushes_per_unit=p.flushes_per_unit, batch=p.batch, stretch=p.stretch,
                      method=p.method, interval={k: list(v) for k, v in p.interval.items()} if p.interval else None,
                      notes=p.notes)


def usl_comparison(rows: list[StepRow]) -> UslNote | UslFitted:
    """The USL fitted to every valid step beside the queueing model calibrated on the lowest: which is closer
    and where each misses most. The USL interpolates the points it was fitted to; the queueing model
    extrapolates from its calibration step and says why (resources), so equal errors favour the latter."""
    valid = [r for r in rows if r["valid"]]
    if len(valid) < 4:
        return UslNote(note="the USL needs at least 4 valid steps")
    scored = [i for i, r in enumerate(valid) if not r["calibration"]]  # both judged on the same steps
    if not scored:
        return UslNote(note="the USL is compared on valid steps the queueing model was not calibrated on, and every "
                            "valid step is a calibration step")
    measured = [x for r in valid if (x := r["measured"]["throughput"])]
    if len(measured) < len(valid):
        return UslNote(note="the USL needs the measured throughput of every valid step")
    try:
        f = usl.fit([r["jobs"] for r in valid], measured)
    except CapmarkError as err:  # a fit that did not settle is no second model: say why instead
        return UslNote(note=str(err).rstrip("."))
    usl_err = [(f.throughput(r["jobs"]) / x - 1) * 100 for r, x in zip(valid, measured, strict=True)]
    qn_err = [r["error_pct"]["throughput"] for r in valid]
    usl_med = statistics.median(abs(usl_err[i]) for i in scored)
    qn_med = statistics.median(abs(qn_err[i] or 0.0) for i in scored)
    worst_usl = max(scored, key=lambda i: abs(usl_err[i]))
    worst_qn = max(scored, key=lambda i: abs(qn_err[i] or 0))
    better = "queueing model" if qn_med <= usl_med else "USL"
    summary = (f"{better} fits the measured throughput better (median error queueing model {qn_med:.1f} %, USL "
               f"{usl_med:.1f} %); the queueing model misses most at {valid[worst_qn]['jobs']} jobs "
               f"({qn_err[worst_qn]:+.1f} %), the USL at {valid[worst_usl]['jobs']} jobs ({usl_err[worst_usl]:+.1f} %). "
               "The USL is fitted to every valid step and cannot say why it bends; the queueing model is calibrated on its "
               "step(s) only and names the resource that limits.")
    return UslFitted({"sigma": f.sigma, "kappa": f.kappa, "lambda": f.lam, "r_squared": f.r_squared,
                      "peak_concurrency": f.peak_concurrency, "peak_throughput": f.peak_throughput,
                      "jobs": [r["jobs"] for r in valid], "predicted": [f.throughput(r["jobs"]) for r in valid],
                      "error_pct": usl_err, "median_abs_pct": usl_med, "model_median_abs_pct": qn_med,
                      "better": better, "summary": summary})
