"""The calibrated model of one test and its solution for a load and a configuration.

A unit of work visits the database host's CPU (an m-server station; m = cores) and each data device,
and spends fixed time in delay stations: think time, a client tier not on the host, and the rest of
the measured response time at calibration (lock waits, network; negative when the model counts CPU
and IO that overlap in reality twice). Commits that must flush WAL go through a software server
with one flusher at a time (layered: the flush itself uses CPU and the WAL device) whose batch
size follows the group-commit submodel, so flushes per unit, CPU per unit and device busy per unit
all fall with load as measured (the CITI PeopleSoft report's varying service demands, predicted instead of plugged in).

Closed loads (jobs, think time) are solved with MVA (exact up to EXACT_JOBS jobs, Bard-Schweitzer
with Seidmann's multi-server split above) around a damped fixed point for the batch size;
open loads (an arrival rate, for growth and sizing) with M/M/m for the CPU, M/M/1 for devices and the
infinite-source batch b = a + exp(-a), a = commit arrivals during one flush.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import NotRequired, TypedDict

from capmark.errors import CapmarkError
from capmark.model import mva
from capmark.model.open import erlang_c
from capmark.plan.cpuscaling import CpuScalingFit, demand_table, slowdown, waiting_share
from capmark.plan.groupcommit import flush_state
from capmark.plan.iothrottle import is_writes_station, writes_station

CLOSED_MODEL = "closed MVA: CPU m-server + devices + delays, WAL flush as a layered group-commit server"
OPEN_MODEL = "open network: CPU M/M/m (Erlang C) + devices M/M/1 + delays, WAL flush as a group-commit server"
LN20, LN100 = math.log(20), math.log(100)
WAL_FLUSH = "WAL flush"  # the one-flusher software server
# The percentiles each type's latency distribution is kept at, to combine the types' distributions into the mix's
QUANTILES = (0.5, 0.75, 0.9, 0.95, 0.99)
# A type's CPU service at another load is at least this fraction of its calibrated one (a what-if with a faster
# CPU shortens it; nothing makes it vanish)
MIN_SERVICE_FACTOR = 0.05
SCHED_SLICE_S = 3e-3  # Linux CFS minimum granularity: how long a runnable process keeps a core
# The closed solver's fixed point (batch size <-> flush wait <-> network): rounds move a fraction of the way
# to what the last solution implies; 0.5 circled a limit cycle on measured commit loads, 0.2-0.3 settle in
# 70-130 rounds. Should the residual not halve over DAMPING_WINDOW rounds the step halves (down to MIN_DAMPING).
FIRST_DAMPING = 0.3
MIN_DAMPING = 0.02
DAMPING_WINDOW = 20
CONVERGED = 1e-7  # relative change of batch, flush wait and throughput a round still asks for
MAX_ROUNDS = 500
OPEN_CONVERGED = 1e-9  # relative change of the open model's batch size a round still asks for
OPEN_METHOD = "M/M/m and M/M/1 (Erlang C)"
# Up to this many jobs each round solves the network exactly (its load-dependent CPU costs jobs^2
# steps, about 3 ms at 200); above it with Bard-Schweitzer / Seidmann, whose error there is given in
# docs/planning.md. A curve is sampled at geometric steps (predict.job_grid), never every integer.
EXACT_JOBS = 200
# Far above any population a database serves; beyond the saturation point throughput no longer
# changes, so a larger figure only costs time and is most likely a typing mistake.
MAX_JOBS_SOLVED = 100_000
MAX_CORES = 4096  # above the largest single hosts; the multi-server CPU station costs time per core
MAX_DISKS = 1024  # each disk is a station of the network
MAX_SPEED_FACTOR = 1000.0  # a thousandfold change is far outside what one calibration can speak for


@dataclass(frozen=True)
class Config:
    """The platform a prediction is for; the measured one is cores=host cores and the rest 1."""

    cores: int
    _: KW_ONLY  # the speeds are two floats side by side: named, never swapped
    cpu_speed: float = 1.0  # relative speed of one core (2 = twice as fast)
    disk_speed: float = 1.0  # relative speed of every device
    disks: int | None = None  # spread data IO evenly over this many devices (None: as measured)

    def __post_init__(self) -> None:
        if not 1 <= self.cores <= MAX_CORES:
            raise CapmarkError(f"The number of CPU cores must be between 1 and {MAX_CORES:,} (the largest hosts sold); "
                               f"got {self.cores:g}.")
        for what, factor in (("CPU speed", self.cpu_speed), ("disk speed", self.disk_speed)):
            if not 0 < factor <= MAX_SPEED_FACTOR:
                raise CapmarkError(f"The {what} factor must be above 0 and at most {MAX_SPEED_FACTOR:g} (a model "
                                   f"calibrated on one platform says little beyond that); got {factor:g}.")
        if self.disks is not None and not 1 <= self.disks <= MAX_DISKS:
            raise CapmarkError(f"The number of disks must be between 1 and {MAX_DISKS:,} (each is a station of the "
                               f"model); got {self.disks:g}.")


CPU_MEASURED = "measured"
CPU_ESTIMATED = "estimated from wait samples"  # the database host's CPU was not measured (see dbhost.py)


@dataclass(kw_only=True)
class TypeDemand:
    """One transaction type of a mix: a class of the model. Its demands are the mean unit's, scaled: the work
    outside WAL flushes by `scale`, the flushes by its own `flush_requests` (see calibrate.type_demands)."""

    name: str
    share: float  # fraction of the units
    scale: float  # its work outside flushes relative to the mean unit's
    flush_requests: float  # commits per unit of this type that need a flush (before batching)
    base_s: float  # measured mean latency at calibration
    base_p95_s: float
    base_p99_s: float
    base_quantiles_s: list[float] = field(default_factory=list)  # at QUANTILES, measured at calibration


SPREAD_CPU, SPREAD_DEVICES, SPREAD_FLUSH_CPU, SPREAD_FLUSH_DEVICE = "cpu", "devices", "flush_cpu", "flush_device"


@dataclass(kw_only=True)
class DbModel:
    workload: str
    unit: str
    cores: int
    cpu_s: float  # CPU per unit outside WAL flushes (database processes, OS, the driver when on the host)
    devices: dict[str, float]  # device busy per unit outside WAL flushes
    wal_device: str | None
    flush_requests: float  # commits per unit that need a WAL flush (before batching)
    flush_cpu_s: float  # CPU of one flush (write + fsync system calls, WAL lock handling)
    flush_device_s: float  # device busy of one flush
    delay_s: float  # calibrated rest of the response time per unit
    client_s: float  # client tier off the database host, per unit
    think_s: float  # think time per unit at calibration
    p95_over_mean: float  # latency shape at calibration (no queueing yet)
    p99_over_mean: float
    calibrated_from: list[int] = field(default_factory=list)
    # calibrated on open-loop steps (capmark run --rate): their mean arrival rate, units/s (0: a closed loop); the
    # measured load is then this rate, not the steps' jobs
    calibrated_rate: float = 0.0
    notes: list[str] = field(default_factory=list)
    cores_from: str = "measured"  # measured | recorded with the run | stated with --cores
    # each core's speed on the measured platform relative to a whole core: below 1 where the server ran under a CPU
    # quota (plan/dbhost._quota_cores); a what-if's --cpu-speed is relative to it
    core_speed: float = 1.0
    cpu_from: str = CPU_MEASURED  # or CPU_ESTIMATED: the CPU per unit is an estimate, not a measurement
    # CPU per unit rises by this fraction per busy core beyond the first (plan/cpuscaling.py); cpu_s and
    # flush_cpu_s are then the CPU with one core busy
    cpu_growth: float = 0.0
    wait_cpu_s: float = 0.0  # CPU of one commit's wait for another job's flush (plan/cpuscaling.py)
    # more jobs at the CPU than cores cost CPU per unit, rising towards 1 + this (plan/cpuscaling.oversubscribed);
    # fitted from a probe step above the cores, whose jobs are in probe_jobs (a probe step is never scored)
    cpu_oversubscription: float = 0.0
    probe_jobs: list[int] = field(default_factory=list)
    cpu_scaling: CpuScalingFit | None = None  # the fit's points and note, for the report (None: not calibrated)
    types: list[TypeDemand] = field(default_factory=list)  # the classes of a mix (empty: one type)
    # each demand's largest relative deviation from its mean across the valid steps within the cores, where the model
    # holds one value (SPREAD_* keys; None: fewer than two such steps): predictions carry a range for demands that
    # far either side
    demand_spread: dict[str, float] | None = None
    # the response time's parts (cpu, devices, fixed, flush) the model gives at the calibration load: a type's
    # latency at another load is its measured one plus its share of how far each part has moved
    type_reference: dict[str, float] = field(default_factory=dict)


def at_spread_ends(model: DbModel, solved: Callable[[DbModel], Prediction]) -> tuple[Prediction, Prediction] | None:
    """`solved` (one load on one platform) with every measured demand moved up by its spread, then down: the ends
    of the range a prediction carries. None where the calibration had no spread to go by."""
    if not model.demand_spread:
        return None
    return solved(spread_model(model, 1)), solved(spread_model(model, -1))


def spread_model(model: DbModel, sign: int) -> DbModel:
    """The model with each measured demand moved by its spread across the calibration steps, up (sign 1) or down
    (-1)."""
    u = model.demand_spread or {}

    def moved(value: float, key: str) -> float:
        return value * (1 + sign * u.get(key, 0.0))

    return replace(model, cpu_s=moved(model.cpu_s, SPREAD_CPU),
                   devices={k: moved(v, SPREAD_DEVICES) for k, v in model.devices.items()},
                   flush_cpu_s=moved(model.flush_cpu_s, SPREAD_FLUSH_CPU),
                   flush_device_s=moved(model.flush_device_s, SPREAD_FLUSH_DEVICE),
                   notes=list(model.notes), types=list(model.types))


class TypeFigures(TypedDict):
    """One class of a mix at a load: its share of the units and its throughput and latency."""

    share: float
    throughput: float
    response_time_s: float
    p95_s: float
    p99_s: float
    quantiles_s: NotRequired[list[float]]  # at QUANTILES, where the type's calibration has them and it queues more


class PredictionJson(TypedDict):
    """A Prediction as the JSON documents carry it: its fields and the CPU's busy per cent."""

    model: str
    calibrated_from: list[int]
    jobs: float | None
    offered_rate: float | None
    think_s: float
    saturated: bool
    throughput: float | None
    response_time_s: float | None
    p95_s: float | None
    p99_s: float | None
    utilizations: dict[str, float]
    bottleneck: str
    stretch: float | None
    headroom: float | None
    flushes_per_unit: float | None
    batch: float | None
    demands_s: dict[str, float]
    converged: bool
    rounds: int
    method: str
    interval: dict[str, tuple[float, float]] | None
    notes: list[str]
    parts: dict[str, float]
    by_type: dict[str, TypeFigures]
    flush_s: float | None
    cpu_busy_pct: float


@dataclass(kw_only=True)
class Prediction:
    model: str
    calibrated_from: list[int]
    jobs: float | None  # closed load
    offered_rate: float | None  # open load
    think_s: float
    saturated: bool
    throughput: float | None
    response_time_s: float | None
    p95_s: float | None
    p99_s: float | None
    utilizations: dict[str, float]  # busy fraction per resource (CPU over all cores)
    bottleneck: str
    stretch: float | None  # response time / response time without queueing
    headroom: float | None  # more load (1.0 = double) before the bottleneck reaches 80 %
    flushes_per_unit: float | None
    batch: float | None  # commits per WAL flush
    demands_s: dict[str, float]  # per unit at this load
    # the solver settled: the fixed point's residual fell below CONVERGED (closed), the batch size stopped moving
    # (open), the replications agree (simulation); False comes with a note and the figures of the last round
    converged: bool = True
    rounds: int = 0  # rounds (fixed point) or replications (simulation) the solver took
    method: str = ""  # how the closed network was solved (exact or approximate MVA, or simulation)
    # 95 % confidence intervals (low, high) per figure, where the solver has them (the simulation's replications)
    interval: dict[str, tuple[float, float]] | None = None
    notes: list[str] = field(default_factory=list)  # what the solver could not model as asked, said to the user
    # the response time in parts: CPU outside flushes, data devices, fixed delays, commits' flush waits
    parts: dict[str, float] = field(default_factory=dict)
    by_type: dict[str, TypeFigures] = field(default_factory=dict)  # per class: throughput, mean, p95, p99
    flush_s: float | None = None  # the elapsed time of one WAL flush at this load (MVA)

    @property
    def cpu_busy_pct(self) -> float:
        return 100 * self.utilizations.get("CPU", 0.0)

    def to_dict(self) -> PredictionJson:
        """The JSON form, with copies of the containers (a document never shares them with the prediction)."""
        return PredictionJson(
            model=self.model, calibrated_from=list(self.calibrated_from), jobs=self.jobs,
            offered_rate=self.offered_rate, think_s=self.think_s, saturated=self.saturated,
            throughput=self.throughput, response_time_s=self.response_time_s, p95_s=self.p95_s, p99_s=self.p99_s,
            utilizations=dict(self.utilizations), bottleneck=self.bottleneck, stretch=self.stretch,
            headroom=self.headroom, flushes_per_unit=self.flushes_per_unit, batch=self.batch,
            demands_s=dict(self.demands_s), converged=self.converged, rounds=self.rounds, method=self.method,
            interval=dict(self.interval) if self.interval is not None else None, notes=list(self.notes),
            parts=dict(self.parts), by_type={k: _copy_figures(v) for k, v in self.by_type.items()},
            flush_s=self.flush_s, cpu_busy_pct=self.cpu_busy_pct)


def _copy_figures(figures: TypeFigures) -> TypeFigures:
    out = figures.copy()
    if "quantiles_s" in figures:
        out["quantiles_s"] = list(figures["quantiles_s"])
    return out


@dataclass(kw_only=True)
class _Demands:
    cpu: float
    devices: dict[str, float]
    flush_cpu: float
    flush_device: float
    wal_station: str | None
    wait_cpu: float = 0.0  # CPU of one commit's wait for another's flush


def _with_waits(d: _Demands, flush_requests: float, flusher_busy: float, jobs: float) -> _Demands:
    """The demands with the CPU that commits spend waiting for other jobs' flushes at this flusher load."""
    if not d.wait_cpu or not flush_requests:
        return d
    return replace(d, cpu=d.cpu + flush_requests * waiting_share(flusher_busy, jobs) * d.wait_cpu)


def device_station(device: str) -> str:
    """The station (and utilization key) of a measured data device: built from the device's name wherever a
    device's figure is looked up, never taken apart."""
    return f"disk {device}"


def _demands(model: DbModel, cfg: Config) -> _Demands:
    """Per-unit demands on the configured platform (before batching)."""
    speed = cfg.cpu_speed * model.core_speed
    cpu = model.cpu_s / speed
    devices = {device_station(k): v / cfg.disk_speed for k, v in model.devices.items()}
    wal = device_station(model.wal_device) if model.wal_device else None
    if cfg.disks:
        # a throttled disk's write queue is a station of its own (iothrottle.py): each disk spread over keeps one
        reads = sum(v for k, v in devices.items() if not is_writes_station(k))
        writes = sum(v for k, v in devices.items() if is_writes_station(k))
        throttled = any(is_writes_station(k) for k in devices)
        names = [f"disk {i + 1} of {cfg.disks}" for i in range(cfg.disks)]
        devices = {n: reads / cfg.disks for n in names}
        if throttled:
            devices.update({writes_station(n): writes / cfg.disks for n in names})
        wal = None if not model.wal_device else (
            writes_station(names[0]) if is_writes_station(model.wal_device) else names[0])
    if wal and wal not in devices:
        devices[wal] = 0.0
    return _Demands(cpu=cpu, devices=devices, flush_cpu=model.flush_cpu_s / speed,
                    flush_device=model.flush_device_s / cfg.disk_speed, wal_station=wal,
                    wait_cpu=model.wait_cpu_s / speed)


def _stations(d: _Demands, flushes: float, cores: int, growth: float = 0.0, oversubscription: float = 0.0,
              jobs: int = 0) -> list[mva.Station]:
    """CPU carries the flushes' CPU too (it competes with the backends); devices carry only the other IO: one
    flusher never queues behind its own writes, so the flush's device time is part of the flush server. With a
    CPU growth the cores serve less than linearly, and with an oversubscription more jobs at the CPU than cores
    slow it further (plan/cpuscaling.py): a load-dependent station, its table as long as the jobs."""
    cpu = max(d.cpu + flushes * d.flush_cpu, 1e-12)
    m = max(1, cores)
    table = (demand_table(cpu, growth, m, oversubscription, jobs)
             if (growth and m > 1) or (oversubscription and jobs > m) else None)
    out = [mva.Station("CPU", demand=cpu, servers=m, service_time_with_n_present=table)]
    out += [mva.Station(name, demand=max(v, 1e-12)) for name, v in d.devices.items()]
    return out


def cpu_queue_shape(ahead: float, servers: int) -> float:
    """The shape k of a CPU queueing delay's distribution. A waiting job waits for k = jobs ahead - m + 1
    completions before a core frees: Erlang(k), a gamma of shape k, exponential at k = 1 (the open-system
    limit: p95 = 3.0 x mean, p99 = 4.6 x mean). In a closed system the jobs ahead are bounded by the
    population, so near saturation the wait varies far less (measured on tp-light's updates at 4-16 jobs:
    p95 / mean 1.7-1.75 of the whole latency, where an exponential queue would give 2.6-2.9)."""
    return max(1.0, ahead - servers + 1)


def quantile_factor(p: float, k: float = 1.0) -> float:
    """The p-quantile of a gamma delay of shape k over its mean (k = 1: exponential, -ln(1 - p))."""
    if k == 1.0:
        return -math.log(1 - p)
    # the gamma distribution's quantile is the inverse of the regularised incomplete gamma function; scipy.stats'
    # gamma.ppf computes the same through its generic machinery at ~100 times the cost, a tenth of a report's time
    from scipy.special import gammaincinv  # loaded on first use: a command starts without scipy

    return float(gammaincinv(k, p) / k)


def flush_quantile_factor(p: float) -> float:
    """The p-quantile of the extra wait for a WAL flush over its mean. A commit waits for the rest of the flush
    in progress (uniform over one flush) and then its own (one flush, a write and fsync that vary little), so
    its wait lies between one and two flushes: quantile (1 + p) F over the mean 1.5 F, 1.3 at p95, not the
    exponential's 3.0 (the M/D/1 against the M/M/1 case)."""
    return (1 + p) / 1.5


def _shape(model: DbModel, d: _Demands, *, r: float, r0: float, cpu_queue: float, flush_queue: float,
           cpu_k: float = 1.0) -> tuple[float, float]:
    """p95 and p99: the calibration's latency shape for the part without queueing, a tail for each kind of
    queueing delay on top of it: the CPU queue's (cpu_queue_shape), the flush wait's (flush_quantile_factor),
    exponential for the rest (p95 = 3.0 x mean, p99 = 4.6 x mean). A unit that never blocks (no IO, no commit
    flush) meets CPU queueing only when the scheduler preempts it, once per time slice, so when its CPU time
    is a small part of a slice the CPU queueing lifts the mean, not the percentiles. A unit of a slice of CPU
    or more is preempted many times, so its cores are shared (processor sharing): its whole distribution
    stretches by the same factor as its mean."""
    queue = max(0.0, r - r0)
    cpu_queue = min(max(0.0, cpu_queue), queue)
    flush_queue = min(max(0.0, flush_queue), queue - cpu_queue)
    blocks = model.flush_requests > 0 or sum(d.devices.values()) > 0.05 * d.cpu
    if not blocks and d.cpu / SCHED_SLICE_S < 0.05:
        cpu95, cpu99 = 0.0, 0.0
    elif d.cpu >= SCHED_SLICE_S:
        cpu95, cpu99 = model.p95_over_mean, model.p99_over_mean
    else:
        cpu95, cpu99 = quantile_factor(0.95, cpu_k), quantile_factor(0.99, cpu_k)
    rest = queue - cpu_queue - flush_queue
    return (r0 * model.p95_over_mean + rest * LN20 + cpu_queue * cpu95 + flush_queue * flush_quantile_factor(0.95),
            r0 * model.p99_over_mean + rest * LN100 + cpu_queue * cpu99 + flush_queue * flush_quantile_factor(0.99))


def _burst_wait(q: float, batch: float, cpu_per_unit: float, cores: int) -> float:
    """A flush releases its whole batch at once, so each released job meets its batch-mates at the CPU: on
    average (b - 1) / 2 of them ahead, served by m cores (the batch-arrival wait of an M^X/M/m queue with a
    fixed batch). Product-form MVA spreads those arrivals over time and misses this wait."""
    return q * max(0.0, batch - 1) / 2 * cpu_per_unit / max(1, cores)


def _flush_time(d: _Demands, wal_util_other: float, wake_s: float = 0.0, slow: float = 1.0) -> float:
    """One flush as its flusher lives it: its CPU (on slowed cores), its device time slowed by the device's other
    IO, and one wait for a core. The flusher sleeps in fsync until the device is done and must then be scheduled
    again, behind the runnable jobs: that wait is the model's own CPU queueing of a unit, so the flush grows with
    the CPU load, as pg_stat_io's fsync time does (wal-lat1 on 2 cores: 31 us at 1 job, 40 at 4, 60-84 at 8,
    100-136 at 16), and a longer flush gathers bigger batches."""
    return d.flush_cpu * slow + wake_s + d.flush_device / max(1e-6, 1 - min(wal_util_other, 0.999999))


def _utilizations(names: list[str], busy: list[float], d: _Demands, *, rate: float, flushes: float, flush_s: float,
                  q: float) -> dict[str, float]:
    util = dict(zip(names, busy, strict=True))
    if q > 0:
        if d.wal_station:
            util[d.wal_station] = util.get(d.wal_station, 0.0) + rate * flushes * d.flush_device
        util[WAL_FLUSH] = min(1.0, rate * flushes * flush_s)
    return util


@dataclass(kw_only=True)
class _ClosedState:
    """What one round of the closed solver carries to the next."""

    batch: float = 1.0  # commits per flush
    wait: float = 0.0  # a commit's wait for its flush
    cpu_stretch: float = 1.0  # CPU residence / CPU demand
    wal_other: float = 0.0  # utilization of the WAL device by other IO
    throughput: float = 0.0
    cpu_wait: float = 0.0  # a unit's wait for a core (its CPU residence less its service)
    slow: float = 1.0  # the cores' slowdown at this load (plan/cpuscaling.py)
    flusher_busy: float = 0.0  # the WAL flusher's busy fraction: how often a commit meets another's flush


def _closed_round(model: DbModel, d: _Demands, cfg: Config, n: int, z: float, state: _ClosedState,
                  damping: float) -> tuple[_ClosedState, mva.ClosedResult, float, float]:
    """One round: solve the network for the current batch and flush wait, then move batch and wait a step
    `damping` towards what that solution implies. Returns the new state, the network's solution, the flush
    time and the round's residual (relative change the undamped step asked for)."""
    q = model.flush_requests
    f = q / state.batch
    d = _with_waits(d, q, state.flusher_busy, n)
    flush_s = _flush_time(d, state.wal_other, state.cpu_wait, state.slow)
    extra = q * state.wait - f * d.flush_cpu * state.cpu_stretch  # the batch's flush, less the CPU already queued
    extra += _burst_wait(q, state.batch, d.cpu + f * d.flush_cpu, cfg.cores)
    stations = _stations(d, f, cfg.cores, model.cpu_growth, model.cpu_oversubscription, n)
    think_s = z + model.delay_s + model.client_s + extra
    result = mva.exact_mva(stations, n, think_s) if n <= EXACT_JOBS else mva.approximate_mva(stations, n, think_s)
    x = result.throughput
    new = _ClosedState(batch=state.batch, wait=state.wait,
                       cpu_stretch=result.residence_times[0] / stations[0].total_demand,
                       wal_other=(result.utilizations[[st.name for st in stations].index(d.wal_station)]
                                  if d.wal_station else 0.0),
                       throughput=x)
    new.slow = slowdown(model.cpu_growth, result.utilizations[0] * cfg.cores)
    new.cpu_wait = max(0.0, result.residence_times[0] - stations[0].total_demand * new.slow)
    if q <= 0:
        return new, result, flush_s, 0.0
    gap = max(1e-12, (n / x - q * state.wait) / q)
    st = flush_state(n, flush_s, gap)
    # one flusher: if the flushes asked for exceed its capacity, commits queue for it until they do not
    over = max(0.0, x * f * flush_s - 1)
    target_wait = st.wait_s + (n / x) * over / q
    new.batch = state.batch + damping * (st.batch - state.batch)
    new.wait = state.wait + damping * (target_wait - state.wait)
    busy = min(1.0, x * f * flush_s)
    new.flusher_busy = state.flusher_busy + damping * (busy - state.flusher_busy)
    residual = max(abs(st.batch - state.batch) / state.batch, abs(target_wait - state.wait) / max(target_wait, 1e-12),
                   abs(x - state.throughput) / x,
                   abs(busy - state.flusher_busy) if d.wait_cpu and n > 1 else 0.0)  # only where waits cost CPU
    return new, result, flush_s, residual


def solve(model: DbModel, jobs: float, think_s: float | None = None, config: Config | None = None,
          max_rounds: int | None = None) -> Prediction:
    """Closed load: `jobs` clients, each thinking `think_s` between units (default: as measured).

    Batch size, flush wait and the network's solution depend on each other: a damped fixed point. A plain
    half step can circle a limit cycle for ever, so the step shrinks whenever a round asks for more
    change than the one before; a prediction that still has not settled after max_rounds (default MAX_ROUNDS)
    says so (converged False and a note)."""
    if not jobs >= 1:
        raise CapmarkError(f"A closed load needs at least 1 job, got {jobs:g}.")
    max_rounds = _rounds(max_rounds)
    if jobs > MAX_JOBS_SOLVED:
        raise CapmarkError(f"{jobs:g} jobs is beyond what the model predicts ({MAX_JOBS_SOLVED:,}); the answer would "
                           "be the saturated throughput, which a smaller number already shows.")
    cfg = config or Config(model.cores)
    z = model.think_s if think_s is None else think_s
    n = int(round(jobs))
    d = _demands(model, cfg)
    q = model.flush_requests
    state = _ClosedState(wait=_flush_time(d, 0.0) if q > 0 else 0.0)
    damping, window_start, converged, rounds = FIRST_DAMPING, math.inf, False, 0
    result, flush_s, residual = None, 0.0, math.inf
    while rounds < max_rounds:
        rounds += 1
        state, result, flush_s, residual = _closed_round(model, d, cfg, n, z, state, damping)
        if residual <= CONVERGED:
            converged = True
            break
        if rounds % DAMPING_WINDOW == 0:  # not even halved over a window: circling, take smaller steps
            if residual > 0.5 * window_start:
                damping = max(MIN_DAMPING, damping / 2)
            window_start = residual
    assert result is not None
    x, b = state.throughput, state.batch
    r0 = _no_queue_response(model, d)  # one unit alone: no commit waits for another's flush
    d = _with_waits(d, q, state.flusher_busy, n)
    stations = _stations(d, q / b, cfg.cores, model.cpu_growth, model.cpu_oversubscription, n)
    r = n / x - z
    util = _utilizations([st.name for st in stations], result.utilizations, d, rate=x, flushes=q / b, flush_s=flush_s,
                         q=q)
    # the cores' slowdown at this load (the last round's): longer service, not queueing, so it scales the
    # unqueued response time rather than adding to the tail
    slow = state.slow
    r0_slowed = r0 + (slow - 1) * (d.cpu + q * d.flush_cpu)
    stretch = result.residence_times[0] / stations[0].total_demand
    cpu_k = cpu_queue_shape(result.queue_lengths[0] * (n - 1) / n, cfg.cores)
    parts = _parts(model, d, r=r, slow=slow, cpu_stretch=stretch, devices=sum(result.residence_times[1:]))
    p95, p99 = _shape(model, d, r=r, r0=r0_slowed, cpu_queue=result.residence_times[0] - stations[0].total_demand * slow,
                      flush_queue=parts["flush"] - q * (d.flush_cpu + d.flush_device), cpu_k=cpu_k)
    out = _prediction(name=CLOSED_MODEL, model=model, jobs=jobs, rate=None, think=z, saturated=False, x=x, r=r,
                      p95=p95, p99=p99, util=util, r0=r0, q=q, b=b, stations=stations)
    out.converged, out.rounds, out.method = converged, rounds, result.method
    if not converged:
        out.notes.append(unsettled_note(f"the closed model at {jobs:g} jobs", rounds, residual))
    if not result.converged and result.note:  # the network solver of the last round stopped short too
        out.converged = False
        out.notes.append(result.note)
    out.parts = parts
    out.flush_s = flush_s if q > 0 else None
    out.by_type = by_type(model, d, out.parts, x, cpu_k)
    mixed = mix_percentiles(out.by_type) if out.by_type else None
    if mixed:
        out.p95_s, out.p99_s = mixed
    return out


def _rounds(max_rounds: int | None) -> int:
    """The round limit asked for, MAX_ROUNDS (read when called) by default."""
    limit = MAX_ROUNDS if max_rounds is None else max_rounds
    if limit < 1:
        raise CapmarkError(f"A model solution needs at least 1 round, got {limit}.")
    return limit


def unsettled_note(what: str, rounds: int, residual: float) -> str:
    """What the user reads when a fixed point stopped at its round limit: which, how far off, what to do."""
    return (f"{what} did not settle in {rounds} rounds (the last round still moved it by {residual:.1e} of itself); "
            "its figures are the last round's, so treat them as rough, or ask about a nearby load")


def _parts(model: DbModel, d: _Demands, *, r: float, slow: float, cpu_stretch: float,
           devices: float) -> dict[str, float]:
    """The response time in parts: CPU service outside flushes (slowed where busy cores slow each other),
    its queueing, the data devices, the fixed delays, and what is left, the commits' waits for their flushes
    (the flushes' own CPU included)."""
    cpu, cpu_queue = d.cpu * slow, d.cpu * (cpu_stretch - slow)
    fixed = model.delay_s + model.client_s
    return {"cpu": cpu, "cpu_queue": cpu_queue, "devices": devices, "fixed": fixed,
            "flush": r - cpu - cpu_queue - devices - fixed}


def by_type(model: DbModel, d: _Demands, parts: dict[str, float], throughput: float | None,
            cpu_k: float = 1.0) -> dict[str, TypeFigures]:
    """Each class of a mix at this load. Jobs draw a type for every unit, so a job switches class from unit to
    unit: the network is solved as one chain (the mean unit), and each type meets the same queues in proportion
    to its own demands (product form: residence per unit of demand is the same for every class at a station).
    A type's latency is its measured one at calibration, scaled by how much longer its CPU service has become
    (slower busy cores), plus its share of how far each queueing part of the mean unit's response time has moved
    since: CPU queue and devices by its scale, the flush waits by its commits. Its p95 and p99 scale alike and
    add a tail for each kind of queueing (as for the mean unit, see _shape)."""
    ref = model.type_reference
    if not model.types or not ref or throughput is None:
        return {}
    q = model.flush_requests
    blocks_on_io = sum(d.devices.values()) > 0.05 * d.cpu
    # a short unit that never blocks keeps its core from one unit to the next, so the run queue's wait falls on
    # the units that block and wake up (measured on tp-light at 16 jobs: reads 0.004 -> 0.009 ms, updates 0.036
    # -> 0.47 ms): the mean unit's CPU queueing goes to the other types, in proportion to their CPU work
    keeps_core = {t.name: not (t.flush_requests > 0 or blocks_on_io) and t.scale * d.cpu / SCHED_SLICE_S < 0.05
                  for t in model.types}
    waking = sum(t.share * t.scale for t in model.types if not keeps_core[t.name])
    out: dict[str, TypeFigures] = {}
    for t in model.types:
        longer = 1 + t.scale * (parts["cpu"] - ref["cpu"]) / t.base_s if t.base_s > 0 else 1.0
        longer = max(MIN_SERVICE_FACTOR, longer)
        weight = (0.0 if keeps_core[t.name] else t.scale / waking) if waking > 0 else t.scale
        cpu_queue = weight * (parts["cpu_queue"] - ref["cpu_queue"])
        other = t.scale * (parts["devices"] - ref["devices"])
        flush = (t.flush_requests / q if q > 0 else 0.0) * (parts["flush"] - ref["flush"])
        mean = max(0.0, t.base_s * longer + cpu_queue + other + flush)
        cpu_queue = 0.0 if keeps_core[t.name] else cpu_queue  # preempted once a slice: the mean, not the tail
        tail = other + flush + cpu_queue
        shared = t.scale * d.cpu >= SCHED_SLICE_S and t.base_s > 0  # processor sharing: the shape stretches

        def cpu_factor(p: float, base_at_p: float) -> float:
            return base_at_p / t.base_s if shared else quantile_factor(p, cpu_k)  # noqa: B023

        def at(p: float, base: float) -> float:  # the p-quantile: the calibrated one, longer, plus each tail
            return (base * longer + other * quantile_factor(p) + flush * flush_quantile_factor(p)  # noqa: B023
                    + cpu_queue * cpu_factor(p, base))  # noqa: B023

        if tail >= 0:
            p95, p99 = at(0.95, t.base_p95_s), at(0.99, t.base_p99_s)
        else:  # less queueing than at calibration (a faster platform): the shape scales with the mean
            shrink = mean / t.base_s if t.base_s > 0 else 1.0
            p95, p99 = t.base_p95_s * shrink, t.base_p99_s * shrink
        out[t.name] = TypeFigures(share=t.share, throughput=throughput * t.share, response_time_s=mean, p95_s=p95,
                                  p99_s=p99)
        if len(t.base_quantiles_s) == len(QUANTILES) and tail >= 0:
            out[t.name]["quantiles_s"] = [at(p, base) for base, p in zip(t.base_quantiles_s, QUANTILES, strict=True)]
    return out


def mix_percentiles(types: dict[str, TypeFigures]) -> tuple[float, float] | None:
    """p95 and p99 of a mix from its types' distributions: the time t where the units slower than t, summed
    over the types by their shares, are 5 % (1 %) of all. A mix's p95 is not a single-class tail: in tp-light it
    is the 20 % updates' 75th percentile. Each type's exceedance is interpolated log-linearly between its
    percentiles and extended beyond its p99 with the last segment's slope."""
    curves = [(v["share"], v["quantiles_s"]) for v in types.values() if v.get("quantiles_s")]
    if len(curves) != len(types) or not curves:
        return None

    def exceeding(t: float) -> float:
        return sum(share * _exceedance(t, qs) for share, qs in curves)

    out = []
    for target in (0.05, 0.01):
        lo, hi = 0.0, max(qs[-1] for _, qs in curves) * 100
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if exceeding(mid) > target else (lo, mid)
        out.append((lo + hi) / 2)
    return out[0], out[1]


def _exceedance(t: float, quantiles: list[float]) -> float:
    """P(latency > t) of one type from its latencies at QUANTILES."""
    points = [(q, 1 - p) for q, p in zip(quantiles, QUANTILES, strict=True)]
    if t <= points[0][0]:  # below the median: linear from certainty at 0
        return 1 - (1 - points[0][1]) * t / points[0][0] if points[0][0] > 0 else points[0][1]
    for (t0, s0), (t1, s1) in zip(points, points[1:], strict=False):
        if t <= t1:
            return s0 * (s1 / s0) ** ((t - t0) / (t1 - t0)) if t1 > t0 else s1
    (t0, s0), (t1, s1) = points[-2], points[-1]
    return s1 * (s1 / s0) ** ((t - t1) / (t1 - t0)) if t1 > t0 else 0.0


def _no_queue_response(model: DbModel, d: _Demands) -> float:
    """Response time of one unit alone on the platform: every demand once, one flush per flush request."""
    return (d.cpu + sum(d.devices.values()) + model.flush_requests * (d.flush_cpu + d.flush_device)
            + model.delay_s + model.client_s)


def _open_slowdown(load: float, growth: float, cores: int) -> float:
    """How much slower each core works at an open load: the busy cores b solve b = load (1 + g (b - 1)) with
    load the busy cores one core's speed would give (plan/cpuscaling.py); at least 1, at most all cores."""
    if not growth or cores < 2:
        return 1.0
    denominator = 1 - load * growth
    busy = load * (1 - growth) / denominator if denominator > 0 else cores
    return slowdown(growth, min(cores, busy))


def solve_open(model: DbModel, rate: float, config: Config | None = None,
               max_rounds: int | None = None) -> Prediction:
    """Open load: units arrive at `rate` per second (Poisson), whatever the number of clients. The batch size is
    a half-step fixed point; one that has not settled after max_rounds says so (converged False and a note)."""
    if not (0 < rate < math.inf):
        raise CapmarkError(f"An open load needs a positive, finite arrival rate, got {rate:g}.")
    max_rounds = _rounds(max_rounds)
    cfg = config or Config(model.cores)
    d = _demands(model, cfg)
    q = model.flush_requests
    b, busy, r = 1.0, 0.0, 0.0
    r0 = _no_queue_response(model, d)
    flush_s = _flush_time(d, 0.0)
    stations = _stations(d, q, cfg.cores)
    util: dict[str, float] = {}
    converged, rounds, residual = False, 0, math.inf
    base = d
    res: dict[str, float] = {}
    while rounds < max_rounds:
        rounds += 1
        f = q / b
        waiting = _with_waits(base, q, busy, math.inf)
        slow = _open_slowdown(rate * (waiting.cpu + f * base.flush_cpu), model.cpu_growth, cfg.cores)
        d = replace(waiting, cpu=waiting.cpu * slow, flush_cpu=base.flush_cpu * slow)
        stations = _stations(d, f, cfg.cores)
        util = {s.name: rate * s.total_demand / s.servers for s in stations}
        if d.wal_station and q > 0:
            total_wal = util[d.wal_station] + rate * f * d.flush_device
            if total_wal >= 1:
                util[d.wal_station] = total_wal
        if max(util.values()) >= 1:
            # a batch too small for this rate overloads what the flushes use (the first round's batch is 1); one
            # flusher takes every commit that arrived during its flush, so the batch grows until they fit: only a
            # load that saturates a station even without flush work is saturated whatever the batch
            batch_bound = q > 0 and all(rate * st.total_demand / st.servers < 1 for st in _stations(d, 0.0, cfg.cores))
            if batch_bound and rounds < max_rounds:
                b *= 2
                continue
            out = _prediction(name=OPEN_MODEL, model=model, jobs=None, rate=rate, think=0.0, saturated=True, x=None,
                              r=None, p95=None, p99=None, util=util, r0=r0, q=q, b=b, stations=stations,
                              bottleneck=max(util, key=lambda k: util[k]))
            out.rounds, out.method = rounds, OPEN_METHOD
            if batch_bound:  # out of rounds with a batch that might still grow: saturation is not established
                out.converged = False
                out.notes.append(f"the open model at {rate:g} {model.unit}s/s did not settle in {rounds} rounds: its "
                                 f"last batch of {b:.3g} commits per flush saturates {out.bottleneck}, a larger one "
                                 "might not; treat the saturation as rough")
            return out
        res = {}
        for s in stations:
            if s.servers > 1:
                wait = erlang_c(s.servers, rate * s.total_demand) * s.total_demand / (s.servers * (1 - util[s.name]))
                res[s.name] = s.total_demand + wait
            else:
                res[s.name] = s.total_demand / (1 - util[s.name])
        s_cpu = res["CPU"] / stations[0].total_demand
        flush_s = _flush_time(d, util.get(d.wal_station, 0.0) if d.wal_station else 0.0,
                              res["CPU"] - stations[0].total_demand)
        a = rate * q * flush_s
        b_new = a + math.exp(-a) if q > 0 else 1.0
        busy = rate * (q / b_new) * flush_s
        wait = flush_s * (1 + busy / 2)
        r = (sum(res.values()) + model.delay_s + model.client_s + q * wait - f * d.flush_cpu * s_cpu
             + _burst_wait(q, b, d.cpu + f * d.flush_cpu, cfg.cores))
        residual = abs(b_new - b) / b
        if residual <= OPEN_CONVERGED:
            converged = True
            break
        b = 0.5 * b + 0.5 * b_new
    util = _utilizations(list(util), list(util.values()), d, rate=rate, flushes=q / b, flush_s=flush_s, q=q)
    parts = _parts(model, d, r=r, slow=1.0, cpu_stretch=res["CPU"] / stations[0].total_demand,
                   devices=sum(v for k, v in res.items() if k != "CPU"))
    p95, p99 = _shape(model, d, r=r, r0=_no_queue_response(model, d), cpu_queue=res["CPU"] - stations[0].total_demand,
                      flush_queue=parts["flush"] - q * (d.flush_cpu + d.flush_device))
    out = _prediction(name=OPEN_MODEL, model=model, jobs=None, rate=rate, think=0.0, saturated=False, x=rate, r=r,
                      p95=p95, p99=p99, util=util, r0=r0, q=q, b=b, stations=stations)
    out.converged, out.rounds, out.method = converged, rounds, OPEN_METHOD
    if not converged:
        out.notes.append(unsettled_note(f"the open model at {rate:g} {model.unit}s/s", rounds, residual))
    out.flush_s = flush_s if q > 0 else None
    out.parts = parts
    out.by_type = by_type(model, d, out.parts, rate)
    mixed = mix_percentiles(out.by_type) if out.by_type else None
    if mixed:
        out.p95_s, out.p99_s = mixed
    return out


def _prediction(*, name: str, model: DbModel, jobs: float | None, rate: float | None, think: float, saturated: bool,
                x: float | None, r: float | None, p95: float | None, p99: float | None, util: dict[str, float],
                r0: float, q: float, b: float, stations: list[mva.Station],
                bottleneck: str | None = None) -> Prediction:
    top = bottleneck or max(util, key=lambda k: util[k])
    return Prediction(
        model=name, calibrated_from=list(model.calibrated_from), jobs=jobs, offered_rate=rate, think_s=think,
        saturated=saturated, throughput=x, response_time_s=r, p95_s=p95, p99_s=p99, utilizations=util,
        bottleneck=top, stretch=r / r0 if r is not None and r0 > 0 else None,
        headroom=(0.8 / util[top] - 1) if util[top] > 0 else None,
        flushes_per_unit=q / b if q > 0 else None, batch=b if q > 0 else None,
        demands_s={s.name: s.total_demand for s in stations})
