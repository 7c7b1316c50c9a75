"""A stored observation -> the capacity documents its commands show: baseline, what-if, sizing, report, compare.

Thin: the options' texts are parsed here once (one sentence on bad input, before anything is read), and the work is
capmark.capacity's. The renderers import the documents' types from here (the report layer reaches capacity only
through analysis).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from capmark.capacity import (
    ESTIMATORS,
    STRETCH_LIMIT,
    UNATTRIBUTED,
    UTILISATION_THRESHOLD,
    BaselineDocument,
    BaselineModel,
    ComparisonDocument,
    Estimator,
    PeakOptions,
    SizingDocument,
    Unattributed,
    WhatIfDocument,
    WhatIfRequest,
    WorkloadRules,
    baseline,
    check_group_by,
    check_peak_by,
    compare,
    load_rules,
    parse_growth,
    parse_peak,
    parse_sla,
    size,
    whatif,
)
from capmark.capacity.baseline import ResourceCheck, TimelinePoint, Validation, WorkloadRow
from capmark.capacity.compare import Change, ResourceChange, WorkloadChange
from capmark.capacity.demands import CPU, WAL_FLUSH, Estimate, ResourceDemands
from capmark.capacity.document import JsonObject, to_jsonable
from capmark.capacity.peak import DEFAULT_PEAK_LENGTH_S, PeakWindow
from capmark.capacity.whatif import P95_OVER_MEAN, Scenario, ScenarioWorkload
from capmark.capacity.workloads import COLLECTOR, OTHER, SYSTEM, WorkloadShare
from capmark.config import parse_duration
from capmark.errors import CapmarkError
from capmark.observations import Observation

__all__ = [
    "COLLECTOR", "CPU", "ESTIMATORS", "OTHER", "P95_OVER_MEAN", "STRETCH_LIMIT", "SYSTEM", "UTILISATION_THRESHOLD",
    "WAL_FLUSH", "BaselineDocument", "BaselineModel", "BaselineOptions", "Change", "ComparisonDocument", "Estimate",
    "ObservationReport",
    "PeakWindow", "ResourceChange", "ResourceCheck", "ResourceDemands", "Scenario", "ScenarioWorkload",
    "SizingDocument", "TimelinePoint", "Validation", "WhatIfDocument", "WhatIfOptions", "WorkloadChange", "WorkloadRow",
    "WorkloadShare", "observation_baseline", "observation_compare", "observation_report", "observation_size",
    "observation_whatif", "parse_baseline_options", "parse_whatif_options",
]

DEFAULT_GROWTH = "20%x3"  # the case study's what-if: 20 % a period, compounded for three periods
ESTIMATOR_ALIASES: dict[str, Estimator] = {"share": "statements"}  # the execution-time share of pg_stat_statements
MAX_PEAK_LENGTH_S = 31 * 86400.0  # a month: longer than any observation worth a peak


@dataclass(frozen=True, kw_only=True)
class BaselineOptions:
    """The baseline's options as given on the command line (None: not given)."""

    workloads: Path | None = None
    group_by: str | None = None
    peak: str | None = None
    peak_by: str | None = None
    peak_length: str | None = None
    estimator: str | None = None
    unattributed: str | None = None


@dataclass(frozen=True, kw_only=True)
class WhatIfOptions:
    """The what-if's and sizing's options as given (growth and SLAs may repeat)."""

    growth: tuple[str, ...] = ()
    cpus: int | None = None
    cpu_speed: float | None = None
    disk_speed: float | None = None
    move: tuple[str, ...] = ()
    sla: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ParsedBaseline:
    rules: WorkloadRules
    peak: PeakOptions
    estimator: Estimator
    unattributed: Unattributed = "background"


def parse_estimator(text: str) -> Estimator:
    if text in ESTIMATOR_ALIASES:
        return ESTIMATOR_ALIASES[text]
    for e in ESTIMATORS:
        if text == e:
            return e
    raise CapmarkError(f"--estimator '{text}' is not known; use measured, statements (or share) or regression.")


def parse_unattributed(text: str) -> Unattributed:
    for choice in UNATTRIBUTED:
        if text == choice:
            return choice
    raise CapmarkError(f"--unattributed '{text}' is not known; use background (CPU no database process explains "
                       "stays as it was) or load (it grows with the workloads' load).")


def parse_baseline_options(options: BaselineOptions) -> ParsedBaseline:
    """The rules, the peak's choice and the estimator, or one sentence on the first bad option or file."""
    group_by = check_group_by(options.group_by) if options.group_by is not None else "application"
    if options.workloads is not None and options.group_by is not None:
        raise CapmarkError("--group-by groups sessions when no workloads file is given; give --workloads or "
                           "--group-by, not both.")
    if options.peak is not None and (options.peak_by is not None or options.peak_length is not None):
        raise CapmarkError("--peak gives the window itself, while --peak-by and --peak-length choose one; give "
                           "--peak alone, or --peak-by with --peak-length.")
    length = DEFAULT_PEAK_LENGTH_S
    if options.peak_length is not None:
        length = parse_duration(options.peak_length, "peak length (--peak-length)")
        if not 0 < length <= MAX_PEAK_LENGTH_S:
            raise CapmarkError(f"--peak-length must be more than 0 and at most 31 days; got {options.peak_length}, "
                               "e.g. --peak-length 1h.")
    if options.peak is not None:
        peak = PeakOptions(given=parse_peak(options.peak))
    else:
        peak = PeakOptions(by=check_peak_by(options.peak_by) if options.peak_by is not None else "cpu",
                           length_s=length)
    estimator = parse_estimator(options.estimator) if options.estimator is not None else "measured"
    unattributed = parse_unattributed(options.unattributed) if options.unattributed is not None else "background"
    rules = load_rules(options.workloads, group_by) if options.workloads is not None else \
        WorkloadRules(group_by=group_by)
    return ParsedBaseline(rules=rules, peak=peak, estimator=estimator, unattributed=unattributed)


def parse_whatif_options(options: WhatIfOptions, default_growth: bool = True) -> WhatIfRequest:
    """The changes asked for. Without any change (and with `default_growth`), the case study's 20 % growth for three
    periods. The workloads named are checked against the model later (capacity.whatif.check_request)."""
    growth = tuple(parse_growth(g) for g in options.growth)
    unchanged = not (growth or options.cpus is not None or options.cpu_speed is not None or
                     options.disk_speed is not None or options.move)
    if not growth and default_growth and unchanged:
        growth = (parse_growth(DEFAULT_GROWTH),)
    for option, value in (("--cpu-speed", options.cpu_speed), ("--disk-speed", options.disk_speed)):
        if value is not None and not value > 0:
            raise CapmarkError(f"{option} must be a factor above 0 (1.5: 50 % faster); got {value:g}.")
    if options.cpus is not None and options.cpus < 1:
        raise CapmarkError(f"--cpus must be a whole number of at least 1; got {options.cpus}, e.g. --cpus 8.")
    if len(set(options.move)) < len(options.move):
        raise CapmarkError("--move names the same workload twice; name each workload once.")
    return WhatIfRequest(growth=growth, cpus=options.cpus, cpu_speed=options.cpu_speed or 1.0,
                         disk_speed=options.disk_speed or 1.0, move=tuple(options.move),
                         slas=tuple(parse_sla(s) for s in options.sla))


def observation_baseline(observation: Observation, options: ParsedBaseline) -> BaselineDocument:
    return baseline(observation, options.rules, options.peak, options.estimator, options.unattributed)


def observation_whatif(base: BaselineDocument, request: WhatIfRequest) -> WhatIfDocument:
    return whatif(base, request)


def observation_size(base: BaselineDocument, request: WhatIfRequest) -> SizingDocument:
    """When the growth runs the host out of capacity and the least single change that carries it (the hardware and
    moves of a what-if do not apply to sizing: it searches them)."""
    if request.cpus is not None or request.cpu_speed != 1 or request.disk_speed != 1 or request.move:
        raise CapmarkError("size searches the cores and speeds itself; give --growth (and --sla), and try a given "
                           "change with `capmark whatif` instead.")
    growth = request.growth or (parse_growth(DEFAULT_GROWTH),)
    return size(base, growth, request.slas, request.threshold)


def observation_compare(before: BaselineDocument, after: BaselineDocument) -> ComparisonDocument:
    return compare(before, after)


@dataclass(kw_only=True)
class ObservationReport:
    """What `capmark report OBS` shows: the observation, its baseline, a what-if and the sizing of its growth."""

    SCHEMA = "capmark.capacity.report/1"

    observation_id: str
    folder: str
    status: str
    reason: str
    created_at: str
    interval_s: float
    intervals: int
    broken_intervals: int
    baseline: BaselineDocument
    whatif: WhatIfDocument
    sizing: SizingDocument
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"schema": self.SCHEMA, "observation_id": self.observation_id, "folder": self.folder,
                "status": self.status, "reason": self.reason, "created_at": self.created_at,
                "interval_s": self.interval_s, "intervals": self.intervals,
                "broken_intervals": self.broken_intervals, "baseline": self.baseline.to_json(),
                "whatif": self.whatif.to_json(), "sizing": self.sizing.to_json(),
                "notes": to_jsonable(self.notes)}


def observation_report(observation: Observation, folder: Path, options: ParsedBaseline,
                       request: WhatIfRequest) -> ObservationReport:
    """The baseline, the what-if asked for (the case study's growth by default) and the sizing of its growth."""
    base = observation_baseline(observation, options)
    growth_only = WhatIfRequest(growth=request.growth or (parse_growth(DEFAULT_GROWTH),), slas=request.slas,
                                threshold=request.threshold)
    broken = sum(1 for i in observation.intervals if i.status != "ok")
    return ObservationReport(observation_id=observation.observation_id, folder=str(folder),
                             status=observation.status, reason=observation.reason,
                             created_at=observation.created_at, interval_s=observation.settings.interval_s,
                             intervals=len(observation.intervals), broken_intervals=broken, baseline=base,
                             whatif=whatif(base, request), sizing=size(base, growth_only.growth, growth_only.slas,
                                                                       growth_only.threshold))
