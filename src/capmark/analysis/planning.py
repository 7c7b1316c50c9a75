"""Calibration and validation, what-if, sizing and the quick anticipation of a stored run: one typed document
per question, each test answered with the same calibrated model of its measured steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capmark.analysis.answers import answer_each
from capmark.analysis.document import Document, Payload, TestAnswer
from capmark.errors import CapmarkError
from capmark.plan.anticipate import AfterChange, MeasuredRate, RatePoint, check_change
from capmark.plan.anticipate import anticipate as anticipate_test
from capmark.plan.calibrate import WITHIN_NOISE as WITHIN_NOISE
from capmark.plan.calibrate import Figure as Figure
from capmark.plan.calibrate import Interval as Interval
from capmark.plan.calibrate import ModelPoint as ModelPoint
from capmark.plan.calibrate import StepRow as StepRow
from capmark.plan.calibrate import UslFitted, UslNote, validate
from capmark.plan.calibrate import Verdict as Verdict
from capmark.plan.calibrate import calibrate as calibrate_test
from capmark.plan.dbhost import DatabaseHost, database_host, require_host_cpu
from capmark.plan.dbmodel import MAX_CORES, MAX_JOBS_SOLVED
from capmark.plan.dbmodel import DbModel as DbModel
from capmark.plan.dbmodel import PredictionJson as PredictionJson
from capmark.plan.predict import CurveJson as CurveJson
from capmark.plan.sizing import (
    Sla,
    Target,
    check_target_rate,
    max_jobs,
    max_rate,
    parse_sla,
    sizing_range,
    smallest_change,
)
from capmark.plan.whatif import Baseline, OutcomeJson, Scenario, evaluate, expand, load_scenarios
from capmark.results import RunResult, TestResult

Progress = Callable[[str], None]
# The names imported `as` themselves are the shapes the planning documents hold, re-exported for the renderers
# (which read analysis, never plan).


@dataclass(kw_only=True)
class Calibration(Payload):
    """Measured vs model for every job count, the verdict, the USL beside it, and the curve beyond."""

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


@dataclass(kw_only=True)
class CalibrationDocument(Document):
    """The calibrated model of each test, validated against every step (`capmark calibrate`)."""

    SCHEMA = "capmark.calibrate/2"
    run: str
    tests: list[TestAnswer[Calibration]]


@dataclass(kw_only=True)
class Platform:
    """The platform a plan was solved for, and how each part of it is known: measured, recorded, stated or
    estimated, with the model's notes (an estimated CPU says so wherever it is used)."""

    cores: int
    cores_from: str
    cpu_from: str
    notes: list[str]


@dataclass(kw_only=True)
class WhatIf(Payload):
    unit: str
    platform: Platform
    baseline: Baseline
    model: list[int]
    scenarios: list[OutcomeJson]
    converged: bool  # every scenario's prediction settled
    unconverged_scenarios: list[str]


@dataclass(kw_only=True)
class WhatIfDocument(Document):
    """The baseline and each scenario per test (`capmark whatif`)."""

    SCHEMA = "capmark.whatif/1"
    run: str
    tests: list[TestAnswer[WhatIf]]


@dataclass(kw_only=True)
class Sizing(Payload):
    unit: str
    sla: Sla
    calibrated_from: list[int]
    think_s: float
    platform: Platform
    max_jobs: int
    at_max_jobs: PredictionJson | None
    one_more_job: PredictionJson
    search_limit_reached: bool  # the SLA held up to the jobs search's limit: max_jobs is that limit
    max_rate: float | None
    at_max_rate: PredictionJson | None
    rate_search_limit_reached: bool  # the open model never saturated below the rate search's limit
    # the same two answers with every measured demand moved by its spread over the calibration steps, low end
    # (demands up) first; None where the calibration had no spread to go by
    max_jobs_range: list[int] | None = None
    max_rate_range: list[float] | None = None
    converged: bool  # every solution the searches decided on settled
    unsettled: dict[str, list[str]]  # jobs | rate: the loads whose solution did not
    unsettled_notes: list[str]
    target: Target | None


@dataclass(kw_only=True)
class SizingDocument(Document):
    """The highest load within a service level, and what a target load needs, per test (`capmark size`)."""

    SCHEMA = "capmark.size/1"
    run: str
    tests: list[TestAnswer[Sizing]]


@dataclass(kw_only=True)
class Anticipation(Payload):
    """The quick response-time curve through a measured step, before and after a change (Shallahamer's formula)."""

    workload: str
    formula: str
    service_time_s: float
    service_time_from_jobs: int
    measured: MeasuredRate
    effective_servers: float
    curve: list[RatePoint]
    change: AfterChange


@dataclass(kw_only=True)
class AnticipationDocument(Document):
    """The quick response-time curve before and after a change, per test (`capmark anticipate`)."""

    SCHEMA = "capmark.anticipate/1"
    run: str
    tests: list[TestAnswer[Anticipation]]


def check_jobs_bound(jobs: int | None, option: str) -> None:
    if jobs is not None and not 1 <= jobs <= MAX_JOBS_SOLVED:
        raise CapmarkError(f"{option} must be between 1 and {MAX_JOBS_SOLVED:,} jobs (beyond, the predicted "
                           f"throughput no longer changes); got {jobs}.")


def check_cores(cores: int | None) -> None:
    if cores is not None and not 1 <= cores <= MAX_CORES:
        raise CapmarkError(f"--cores must be between 1 and {MAX_CORES:,} (the largest hosts sold); got {cores}.")


def host_of(run: RunResult, tests: list[TestResult], cores: int | None) -> DatabaseHost:
    """The database host as stored (with the cores the user stated); refused in one sentence where its CPU was
    never measured and no cores were stated."""
    check_cores(cores)
    host = database_host(run, cores)
    require_host_cpu(run, tests, host)
    return host


def calibration_of(test: TestResult, host: DatabaseHost, from_jobs: list[int] | None = None, up_to: int | None = None,
                   progress: Progress | None = None, solver: str = "mva") -> Calibration:
    return Calibration(**validate(test, from_jobs, up_to, progress, host, solver))


def calibration_document(run: RunResult, tests: list[TestResult], *, from_jobs: list[int] | None = None,
                         up_to: int | None = None, progress: Progress | None = None, cores: int | None = None,
                         solver: str = "mva") -> CalibrationDocument:
    check_jobs_bound(up_to, "--up-to")
    host = host_of(run, tests, cores)
    return CalibrationDocument(run=run.run_id, tests=answer_each(
        run, tests, "calibrate a model", lambda t: calibration_of(t, host, from_jobs, up_to, progress, solver)))


def _platform(model: DbModel) -> Platform:
    return Platform(cores=model.cores, cores_from=model.cores_from, cpu_from=model.cpu_from, notes=model.notes)


def _base_jobs(model: DbModel, at_jobs: int | None) -> int:
    if at_jobs is None:
        return model.calibrated_from[0]
    check_jobs_bound(at_jobs, "--at")
    return at_jobs


# open-ended: the command line's loose settings, checked by whatif.scenario()
def scenarios_of(changes: dict[str, Any] | None, scenario_file: Path | None) -> list[Scenario]:
    """The command line's changes first, then the file's scenarios; at least one is needed."""
    changes = {k: v for k, v in (changes or {}).items() if v is not None}
    scenarios = load_scenarios(scenario_file) if scenario_file else []
    if changes:
        scenarios = expand("", changes) + scenarios
    if not scenarios:
        raise CapmarkError("Give at least one change (e.g. --growth 20%x3, --cpus 4, --disk-speed 2) or "
                           "--scenarios FILE.toml.")
    return scenarios


def whatif_document(run: RunResult, tests: list[TestResult], scenarios: list[Scenario], *,
                    from_jobs: list[int] | None = None, at_jobs: int | None = None, progress: Progress | None = None,
                    cores: int | None = None, solver: str = "mva") -> WhatIfDocument:
    check_jobs_bound(at_jobs, "--at")  # the user's input: refused once, not as every test's answer
    host = host_of(run, tests, cores)

    def answer(t: TestResult) -> WhatIf:
        model = calibrate_test(t, from_jobs, host)
        found = evaluate(model, _base_jobs(model, at_jobs), model.think_s, scenarios, progress, solver,
                         base_rate=model.calibrated_rate if at_jobs is None else None)
        return WhatIf(unit=t.unit, platform=_platform(model), **found)

    return WhatIfDocument(run=run.run_id, tests=answer_each(run, tests, "answer what-if questions", answer))


def sizing_document(run: RunResult, tests: list[TestResult], sla_text: str, *, from_jobs: list[int] | None = None,
                    target_tps: float | None = None, progress: Progress | None = None,
                    cores: int | None = None) -> SizingDocument:
    sla = parse_sla(sla_text)
    if target_tps is not None:
        check_target_rate(target_tps)
    host = host_of(run, tests, cores)

    def answer(t: TestResult) -> Sizing:
        model = calibrate_test(t, from_jobs, host)
        most = max_jobs(model, sla, model.think_s, progress=progress)
        if progress:
            progress(f"{t.workload}: highest arrival rate within {sla.text}")
        fastest = max_rate(model, sla)
        if progress and model.demand_spread:
            progress(f"{t.workload}: the same with the demands' spread over the calibration steps")
        jobs_range, rate_range = sizing_range(model, sla)
        if progress and target_tps:
            progress(f"{t.workload}: what {target_tps:g} {t.unit}s/s within {sla.text} needs")
        return Sizing(unit=t.unit, sla=sla,
                      calibrated_from=model.calibrated_from, think_s=model.think_s, platform=_platform(model),
                      max_jobs=most.jobs, at_max_jobs=most.at.to_dict() if most.at else None,
                      one_more_job=most.beyond.to_dict(), search_limit_reached=most.limit_reached,
                      max_rate=fastest.rate, at_max_rate=fastest.at.to_dict() if fastest.at else None,
                      rate_search_limit_reached=fastest.limit_reached,
                      max_jobs_range=jobs_range, max_rate_range=rate_range,
                      converged=not most.unsettled and not fastest.unsettled,
                      unsettled={"jobs": most.unsettled, "rate": fastest.unsettled},
                      unsettled_notes=[n for n in (most.note, fastest.note) if n],
                      target=smallest_change(model, sla, target_tps) if target_tps else None)

    return SizingDocument(run=run.run_id, tests=answer_each(run, tests, "size", answer))


def anticipation_of(test: TestResult, at_jobs: int | None = None, service_factor: float = 1.0,
                    rate_factor: float = 1.0, servers: float | None = None) -> Anticipation:
    return Anticipation(**anticipate_test(test, at_jobs, service_factor, rate_factor, servers))


def anticipation_document(run: RunResult, tests: list[TestResult], *, at_jobs: int | None = None,
                          service_factor: float = 1.0, rate_factor: float = 1.0,
                          servers: float | None = None) -> AnticipationDocument:
    check_change(service_factor, rate_factor, servers)
    return AnticipationDocument(run=run.run_id, tests=answer_each(
        run, tests, "anticipate", lambda t: anticipation_of(t, at_jobs, service_factor, rate_factor, servers)))
