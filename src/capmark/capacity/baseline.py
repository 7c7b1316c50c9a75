"""The baseline model: an open multi-class queueing network of the database host, calibrated on the peak window.

Stations: the CPU, a multi-server station with the database host's cores (from the observation, never the analysing
machine's); each busy device and the WAL flush, single servers. Every modelled workload is an open class at its
measured rate with its demands there (one estimator's, `measured` by default). Work of no modelled workload (SYSTEM,
the collector, what no process explains) keeps its servers busy as background. What the stations do not explain of
a workload's measured response time (lock waits, waits the model does not hold) is its residual delay, a constant
added to its modelled response time.

The measured response time of a unit is its statements' execution and planning time per unit (pg_stat_statements),
the time the server worked or waited for it, plus its round trips (capmark.capacity.round_trips) at the time the
collector's probes measured for one: the unit's time as its client sees it, without the client's think time. The
round trips grow with the CPU's queue in every solution; the residual is what the stations leave of the server's
time alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from capmark.capacity import round_trips
from capmark.capacity.demands import (
    COST_RANGE,
    CPU,
    CostByBusy,
    DemandTable,
    Estimator,
    ResourceKind,
    estimate,
    fit_cost_by_busy,
    fit_unattributed_cpu,
    wal_flush_s,
)
from capmark.capacity.document import CapacityDocument
from capmark.capacity.peak import PeakOptions, PeakWindow, cpu_busy, find_peak, held_out
from capmark.capacity.round_trips import RoundTripCurve
from capmark.capacity.workloads import (
    Attribution,
    Reconciliation,
    WorkloadRules,
    WorkloadShare,
    application_transactions,
    attribute,
    reconcile,
    workload_shares,
)
from capmark.errors import CapmarkError
from capmark.model.open import open_multiclass_station
from capmark.observations import Observation

Unattributed = Literal["background", "load"]
UNATTRIBUTED: tuple[Unattributed, ...] = ("background", "load")
UTILISATION_THRESHOLD = 0.80  # Bulumulle and Bordin: response times degraded fast once CPUs and controllers passed 80 %
STRETCH_LIMIT = 2.0  # the case study: a stretch factor of two or more (as long queued as served) should be avoided


@dataclass(kw_only=True)
class Station:
    """One station of the calibrated model: seconds of it per unit of each workload, and the background it carries."""

    name: str
    kind: ResourceKind
    servers: int
    background_busy: float  # servers busy with work of no modelled workload
    demands: dict[str, float]  # workload -> seconds per unit


@dataclass(kw_only=True)
class BaselineModel:
    """What what-if, sizing and compare solve: the stations, the rates at the peak and each workload's residual."""

    estimator: Estimator
    rates: dict[str, float]  # units per second at the peak
    stations: list[Station]
    residual_s: dict[str, float]  # measured response time less the modelled residences (at least 0)
    measured_response_s: dict[str, float]
    unattributed: Unattributed = "background"  # how the CPU no database process explains is modelled
    # with "load": the cores of it that stay as they are when the load grows (fit_unattributed_cpu), kept as background
    unattributed_fixed_cores: float = 0.0
    # the CPU cost of a unit as a line in the host's CPU utilisation (None: the same at every load)
    cpu_cost: CostByBusy | None = None
    round_trips: dict[str, float] = field(default_factory=dict)  # workload -> its clients' round trips per unit
    round_trip: RoundTripCurve | None = None  # one round trip's time by the host's CPU busy (None: not probed)


@dataclass(kw_only=True)
class Solution:
    """The model solved at some rates: utilisation per station, response time and stretch per workload. A saturated
    station (utilisation >= 1) gives every workload that uses it an infinite response time."""

    rates: dict[str, float]
    utilisation: dict[str, float]
    residence_s: dict[str, dict[str, float]]  # station -> workload -> seconds per unit
    response_s: dict[str, float]  # residences, residual and round trips
    stretch: dict[str, float]  # residence over demand, summed over the stations
    saturated: list[str]
    round_trips_s: dict[str, float] = field(default_factory=dict)  # of the response, the client's round trips


def solve(model: BaselineModel, rates: dict[str, float] | None = None, *, cpus: int | None = None,
          cpu_speed: float = 1.0, disk_speed: float = 1.0) -> Solution:
    """Solve the model at `rates` (default: the peak's) on a host with `cpus` cores and faster (or slower) CPUs and
    disks: demands and background on the CPU divide by cpu_speed, on devices and the WAL flush by disk_speed."""
    rates = dict(model.rates if rates is None else rates)
    names = list(rates)
    utilisation: dict[str, float] = {}
    residence: dict[str, dict[str, float]] = {}
    saturated = []
    cost = {st.name: 1.0 for st in model.stations}
    for st in model.stations:
        speed = cpu_speed if st.kind == "cpu" else disk_speed
        servers = cpus if st.kind == "cpu" and cpus is not None else st.servers
        if st.kind == "cpu" and model.cpu_cost is not None:
            cost[st.name] = _cost_at(model.cpu_cost, sum(rates[n] * st.demands.get(n, 0.0) for n in names) / speed,
                                     st.background_busy / speed, servers)
        demands = [st.demands.get(n, 0.0) * cost[st.name] / speed for n in names]
        r = open_multiclass_station([rates[n] for n in names], demands, servers, st.background_busy / speed)
        utilisation[st.name] = r.utilization
        residence[st.name] = dict(zip(names, r.residence_times, strict=True))
        if r.utilization >= 1:
            saturated.append(st.name)
    cpu_station = next((st for st in model.stations if st.kind == "cpu"), None)
    trip = 0.0
    if model.round_trip is not None and cpu_station is not None:
        trip = model.round_trip.at(utilisation[cpu_station.name], cpus)
    trips = {n: model.round_trips.get(n, 0.0) * trip if model.round_trips.get(n, 0.0) > 0 else 0.0 for n in names}
    response: dict[str, float] = {}
    stretch: dict[str, float] = {}
    for n in names:
        demand = sum(st.demands.get(n, 0.0) * cost[st.name] / (cpu_speed if st.kind == "cpu" else disk_speed)
                     for st in model.stations)
        res = sum(residence[st.name][n] for st in model.stations)
        response[n] = res + model.residual_s.get(n, 0.0) + trips[n]
        stretch[n] = res / demand if demand > 0 else math.nan
    return Solution(rates=rates, utilisation=utilisation, residence_s=residence, response_s=response,
                    stretch=stretch, saturated=saturated, round_trips_s=trips)


def _cost_at(line: CostByBusy, work: float, background: float, servers: int) -> float:
    """The CPU cost factor where the host settles: its utilisation u = (background + work x factor(u)) / servers
    with the factor linear in u, solved in closed form; a host that cannot settle below full takes the factor of a
    full one."""
    b, w = background / servers, work / servers
    denominator = 1 - w * line.per_busy
    if denominator <= 0:
        return line.factor(1.0)
    return line.factor((b + w * (1 - line.per_busy * line.at_busy)) / denominator)


@dataclass(kw_only=True)
class ResourceCheck:
    resource: str
    measured: float  # utilisation (per server)
    modelled: float


@dataclass(kw_only=True)
class ResponseCheck:
    workload: str
    rate: float
    measured_s: float
    modelled_s: float


@dataclass(kw_only=True)
class Validation:
    """Model against measurement on one window: on the peak it checks the calibration, on another busy window the
    prediction (the peak's model at that window's measured rates)."""

    window: str  # "peak" or "held-out"
    start: float
    end: float
    resources: list[ResourceCheck]
    responses: list[ResponseCheck]


@dataclass(kw_only=True)
class WorkloadRow:
    """One workload at the peak: the baseline table's row."""

    name: str
    unit: str
    rate: float
    response_measured_s: float
    response_modelled_s: float
    residual_s: float
    round_trips: float  # the clients' round trips per unit (0: the observation holds no probe)
    round_trips_s: float  # their time per unit, modelled at the peak
    demands_s: dict[str, float]  # resource -> seconds per unit (the model's estimator)
    utilisation_share: dict[str, float]  # resource -> its part of the resource's utilisation
    stretch: float


@dataclass(kw_only=True)
class TimelinePoint:
    """One interval for the collection's timeline: CPU cores busy by workload, devices' utilisation, commits."""

    ordinal: int
    start: float
    end: float
    broken: bool
    cpu_busy: float | None  # fraction of the host's CPU
    cores_by_workload: dict[str, float]
    devices: dict[str, float]
    commits_per_s: float | None


@dataclass(kw_only=True)
class BaselineDocument(CapacityDocument):
    """capmark baseline: the workloads, the peak, the demands by three estimators, the model and its validation."""

    SCHEMA = "capmark.capacity.baseline/1"

    observation_id: str
    host_cores: int
    workloads: list[WorkloadShare]
    reconciliation: Reconciliation  # over the whole observation
    peak_reconciliation: Reconciliation
    peak: PeakWindow
    demands: DemandTable
    model: BaselineModel
    at_peak: list[WorkloadRow]
    unattributed_cpu_cores: float  # busy cores no database process explains at the peak
    validation: Validation
    held_out: Validation | None
    held_out_reason: str
    timeline: list[TimelinePoint]
    attribution_notes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def calibrate(observation: Observation, attribution: Attribution, ordinals: Sequence[int], cores: int,
              estimator: Estimator, unattributed: Unattributed = "background") -> tuple[BaselineModel, DemandTable]:
    """The model calibrated on the given intervals, and the demand table it came from. `unattributed`: the CPU no
    database process explains stays constant background ("background"), or grows with the load ("load": it joins
    the workloads' CPU demands in proportion to their CPU, as when their clients run on the database host)."""
    table = estimate(observation, attribution, ordinals, cores)
    use = attribution.over(ordinals)
    rates = {w.name: w.rate for w in table.resources[0].workloads}
    stations = []
    fixed = 0.0  # set only with unattributed="load"
    for r in table.resources:
        demands = {w.name: (e.value if (e := w.of(estimator)) is not None else math.nan) for w in r.workloads}
        if any(math.isnan(v) for v in demands.values()):
            if estimator == "measured" and r.kind == "cpu":
                raise CapmarkError("The observation has no per-process CPU, so the measured estimator has no CPU "
                                   "demands; choose the regression or statements estimator.")
            demands = {n: (e.value if (e := w.measured) is not None else 0.0) for n, w in
                       ((w.name, w) for w in r.workloads)}
        background = r.background_busy(estimator)
        spread = r.background.get("unattributed", 0.0) if r.kind == "cpu" and estimator != "regression" else 0.0
        ours = sum(rates[n] * d for n, d in demands.items())
        if unattributed == "load" and spread > 0 and ours > 0:
            fixed = _fixed_part(observation, attribution, spread, table)
            demands = {n: d * (1 + (spread - fixed) / ours) for n, d in demands.items()}
            background -= spread - fixed
        stations.append(Station(name=r.resource, kind=r.kind, servers=r.servers, background_busy=background,
                                demands=demands))
    at_server = {n: use[n].exec_time_s / use[n].units for n in rates}
    model = BaselineModel(estimator=estimator, rates=rates, stations=stations, residual_s={},
                          measured_response_s=at_server, unattributed=unattributed,
                          unattributed_fixed_cores=fixed, cpu_cost=_cost_line(observation, attribution, table, cores))
    bare = solve(model)  # no round trips yet: the residual is what the stations leave of the server's time
    model.residual_s = {n: max(0.0, at_server[n] - (bare.response_s[n] if math.isfinite(bare.response_s[n]) else 0.0))
                        for n in rates}
    in_peak = set(ordinals)
    peak = [i for i in observation.usable() if i.ordinal in in_peak]
    model.round_trip, said = round_trips.fit(observation, peak, cores)
    table.notes.append(said)
    if model.round_trip is not None:
        model.round_trips = {n: round_trips.per_unit(use[n]) for n in rates}
        model.measured_response_s = {n: at_server[n] + model.round_trips[n] * model.round_trip.at_peak_s
                                     for n in rates}
        table.notes.append(_round_trips_said(model.round_trips))
    return model, table


def _round_trips_said(per_unit: dict[str, float]) -> str:
    """Each workload's round trips a unit, in words."""
    parts = [f"{n} {trips:.2f}" for n, trips in per_unit.items()]
    return ("each workload's mean response time holds its clients' round trips to the server, one a statement and a "
            "transaction block's BEGIN and COMMIT; a unit's round trips: "
            + ", ".join(parts))


def _cost_line(observation: Observation, attribution: Attribution, table: DemandTable,
               cores: int) -> CostByBusy | None:
    """The CPU cost per unit as a line in the host's busy, where the observation's intervals show one; said in the
    table's notes either way."""
    cpu = table.resource(CPU)
    demands = {w.name: w.measured.value for w in cpu.workloads if w.measured is not None} if cpu else {}
    if cpu is None or not demands:
        return None
    line = fit_cost_by_busy(observation, attribution, demands, cores, cpu.measured_utilisation)
    if line is None:
        table.notes.append("the CPU cost per unit is taken to be the same at every load: the observation's intervals "
                           "do not vary enough in the host's busy to tell")
        return None
    seen = (f"over {line.intervals} intervals with the host {line.low_busy:.0%} to {line.high_busy:.0%} busy, the "
            f"workloads' CPU per unit changed by {line.per_busy * 0.1:+.1%} per 10 points of the host's busy "
            f"({line.low * 0.1:+.1%} to {line.high * 0.1:+.1%})")
    if not line.significant:  # carried beyond the observed load, a slope within the noise moves every growth
        table.notes.append(f"the CPU cost per unit is taken to be the same at every load: {seen}, no change told "
                           "from the intervals' noise")
        return None
    idle, full = line.factor(0.0), line.factor(1.0)
    if not (COST_RANGE[0] <= idle <= COST_RANGE[1] and COST_RANGE[0] <= full <= COST_RANGE[1]):
        table.notes.append(f"the CPU cost per unit is taken to be the same at every load: {seen}, a line too steep "
                           f"to carry (x{idle:.2f} on an idle host, x{full:.2f} on a full one)")
        return None
    # Carried beyond the observed load, the fitted slope moves every growth by its own noise: the production's
    # observations gave -4.8 % per 10 points (-9.2 to -2.7) one run and no change told (-2.6 to +0.1) the next, and
    # what its growth levels measured lay between (x0.96 at 1.44 times the rates, x0.85 at 1.728). The end of the
    # interval nearest no change is what the intervals bear out; a planner errs to the side of more CPU.
    carried = replace(line, per_busy=line.high if line.per_busy < 0 else line.low)
    table.notes.append(f"the model's CPU cost per unit follows the host's busy: {seen}; it is carried at the end of "
                       f"that interval nearest no change ({carried.per_busy * 0.1:+.1%} per 10 points): at the "
                       f"peak's {line.at_busy:.0%} it is as measured, on a full host x{carried.factor(1.0):.2f} of it")
    return carried


def _fixed_part(observation: Observation, attribution: Attribution, unattributed: float, table: DemandTable) -> float:
    """Of the `unattributed` cores of CPU no database process explains in the window, those that stay when the load
    grows: the intercept of their line through the observation's intervals (at most all of them, at least none), or
    all of them where the line does not rise with the load. Without intervals enough to fit it, all of it grows with
    the load. The fit is said in the table's notes."""
    fit = fit_unattributed_cpu(observation, attribution)
    if fit is None:
        table.notes.append(f"the {unattributed:.2f} cores of CPU no database process explains are taken to grow with "
                           "the load: the observation's intervals do not vary enough in load to tell a fixed part")
        return 0.0
    if fit.per_core <= 0:  # it did not rise with the load: none of it is the clients' work per transaction
        table.notes.append(f"the {unattributed:.2f} cores of CPU no database process explains stay as they are when "
                           f"the load grows: over {fit.intervals} intervals with the workloads' processes "
                           f"{fit.low_cores:.2f} to {fit.high_cores:.2f} cores busy they did not rise with the load "
                           f"({fit.per_core:.3f} cores per busy core of the workloads)")
        return unattributed
    fixed = min(unattributed, max(0.0, fit.fixed_cores))
    table.notes.append(f"of the {unattributed:.2f} cores of CPU no database process explains, {fixed:.2f} stay as "
                       "they are when the load grows and the rest grows with it: a line through "
                       f"{fit.intervals} intervals with the workloads' processes {fit.low_cores:.2f} to "
                       f"{fit.high_cores:.2f} cores busy gives {fit.fixed_cores:.3f} cores plus "
                       f"{fit.per_core:.3f} per busy core of the workloads")
    return fixed


def _validate(observation: Observation, attribution: Attribution, model: BaselineModel, ordinals: Sequence[int],
              window: str) -> Validation:
    by_ordinal = {i.ordinal: i for i in observation.usable()}
    intervals = [by_ordinal[o] for o in ordinals]
    length = sum(i.length_s for i in intervals)
    use = attribution.over(ordinals)
    rates = {n: use[n].units / length if n in use else 0.0 for n in model.rates}
    solved = solve(model, rates)
    resources = []
    for st in model.stations:
        if st.kind == "cpu":
            measured = sum(i.host.busy_s for i in intervals if i.host) / length / st.servers
        elif st.kind == "device":
            measured = sum(d.busy_s for i in intervals if i.host for d in i.host.devices if d.name == st.name) / length
        else:
            measured = sum(wal_flush_s(i) or 0.0 for i in intervals) / length
        resources.append(ResourceCheck(resource=st.name, measured=measured, modelled=solved.utilisation[st.name]))
    trip = round_trips.measured_s(intervals) if model.round_trip is not None else None
    responses = [ResponseCheck(workload=n, rate=rates[n],
                               measured_s=(use[n].exec_time_s / use[n].units
                                           + (round_trips.per_unit(use[n]) * trip if trip is not None else 0.0))
                               if use[n].units > 0 else math.nan,
                               modelled_s=solved.response_s[n]) for n in model.rates]
    return Validation(window=window, start=intervals[0].start, end=intervals[-1].end, resources=resources,
                      responses=responses)


def timeline(observation: Observation, attribution: Attribution) -> list[TimelinePoint]:
    points = []
    for i in observation.intervals:
        iu = attribution.intervals.get(i.ordinal)
        cores = {n: w.cpu_s / i.length_s for n, w in iu.workloads.items()} if iu and i.length_s > 0 else {}
        devices = {d.name: d.busy_s / i.length_s for d in i.host.devices} if i.host and i.length_s > 0 else {}
        x = application_transactions(i) if iu else None
        points.append(TimelinePoint(ordinal=i.ordinal, start=i.start, end=i.end, broken=iu is None,
                                    cpu_busy=cpu_busy(i) if iu else None, cores_by_workload=cores, devices=devices,
                                    commits_per_s=x / i.length_s if x is not None and i.length_s > 0 else None))
    return points


def host_cores(observation: Observation) -> int:
    if observation.host_cores is None or observation.host_cores < 1:
        raise CapmarkError("The observation does not record the database host's cores (its host counters were not "
                           "collected), so the CPU cannot be modelled; observe again with --host-metrics.")
    return observation.host_cores


def baseline(observation: Observation, rules: WorkloadRules | None = None, peak: PeakOptions | None = None,
             estimator: Estimator = "measured", unattributed: Unattributed = "background") -> BaselineDocument:
    """The baseline document of an observation: workloads by `rules` (default: by application), the peak window
    chosen by `peak`, demands by three estimators, the model calibrated with `estimator`'s demands (the CPU no
    process explains as constant background, or growing with the load: `unattributed`), and its validation on the
    peak and on another busy window."""
    rules = rules or WorkloadRules()
    peak = peak or PeakOptions()
    cores = host_cores(observation)
    attribution = attribute(observation, rules)
    window = find_peak(observation, attribution, peak)
    model, table = calibrate(observation, attribution, window.ordinals, cores, estimator, unattributed)
    solved = solve(model)
    rows = []
    for n in model.rates:
        demands = {st.name: st.demands.get(n, 0.0) for st in model.stations}
        share = {st.name: model.rates[n] * st.demands.get(n, 0.0) / st.servers / solved.utilisation[st.name]
                 if solved.utilisation[st.name] > 0 else 0.0 for st in model.stations}
        rows.append(WorkloadRow(name=n, unit=attribution.unit_names[n], rate=model.rates[n],
                                response_measured_s=model.measured_response_s[n],
                                response_modelled_s=solved.response_s[n], residual_s=model.residual_s[n],
                                round_trips=model.round_trips.get(n, 0.0), round_trips_s=solved.round_trips_s[n],
                                demands_s=demands, utilisation_share=share, stretch=solved.stretch[n]))
    cpu = next(r for r in table.resources if r.resource == CPU)
    notes: list[str] = list(table.notes) + list(window.notes)
    other = held_out(observation, window, peak)
    reason = "" if other is not None else "the observation has no other busy window of the peak's length that does " \
        "not overlap the peak; observe longer to check the model's predictions"
    return BaselineDocument(
        observation_id=observation.observation_id, host_cores=cores,
        workloads=workload_shares(attribution, window.ordinals),
        reconciliation=reconcile(attribution, list(attribution.intervals)),
        peak_reconciliation=reconcile(attribution, window.ordinals), peak=window, demands=table, model=model,
        at_peak=rows, unattributed_cpu_cores=cpu.background.get("unattributed", 0.0),
        validation=_validate(observation, attribution, model, window.ordinals, "peak"),
        held_out=_validate(observation, attribution, model, other, "held-out") if other else None,
        held_out_reason=reason, timeline=timeline(observation, attribution), attribution_notes=attribution.notes,
        notes=notes)
