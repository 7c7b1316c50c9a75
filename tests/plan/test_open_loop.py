"""Planning from open-loop runs (`capmark run --rate`), on two stored real runs of srv-report client-side: a closed
loop at 1 and 2 jobs and an open loop of Poisson arrivals at half the closed loop's best throughput, spread over 8
jobs (how both were recorded: tests/fixtures/README.md).

An open loop's jobs only carry the arrivals: most of the time they wait for the next one, so neither their count
nor jobs / throughput is the load. A model calibrated on such a step as if it were closed puts that idle time into
its fixed delay and answers every question with it; one validated as if closed solves 8 jobs flat out instead of
the rate that arrived. Each direction of the load lever is checked against the other run's measurement.
"""

from __future__ import annotations

import json
import os

import pytest
from storedruns import unpack
from typer.testing import CliRunner

from capmark.cli import app
from capmark.plan import dbmodel
from capmark.plan.calibrate import calibrate, offered_rate, response_from_start_s, validate
from capmark.plan.dbhost import database_host
from capmark.results import RunResult, StepResult, TestResult
from capmark.store import load_run

CLOSED, OPEN = "plan-load-closed", "plan-load-open"
# The goals of the what-if levers against the real change: throughput within 10 %, mean response time within 15 %
GOAL_THROUGHPUT = 0.10
GOAL_RESPONSE = 0.15
# The calibrated fixed delay of the open loop is the part of its response time no station explains (a few per
# cent of it at the closed loop's calibration); the jobs' idle time between arrivals was many times the response.
DELAY_SHARE = 0.5
P95_AT_CALIBRATION_PCT = 20


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, RunResult]:
    results = tmp_path_factory.mktemp("load-lever")
    closed_id, open_id = unpack(results, CLOSED, OPEN)
    return load_run(results / closed_id), load_run(results / open_id)


WORKLOAD = "srv-report"


def _only(run: RunResult) -> tuple[TestResult, StepResult]:
    (test,) = run.tests
    return test, test.steps[0]


def _closed(run: RunResult) -> TestResult:
    return next(t for t in run.tests if t.workload == WORKLOAD)


def test_the_open_loop_is_what_the_fixture_says(runs: tuple[RunResult, RunResult]) -> None:
    closed, opened = runs
    test, step = _only(opened)
    assert offered_rate(step) > 0 and step.jobs == 8 and step.schedule_lag is not None
    assert all(not offered_rate(s) for s in _closed(closed).steps)
    # the jobs were mostly idle: jobs / throughput (2.9 ms) is over three times the response time (0.87 ms)
    assert step.jobs / (step.units / step.elapsed_s) > 3 * response_from_start_s(step)


def test_a_model_calibrated_on_an_open_loop_holds_none_of_its_jobs_idle_time(
        runs: tuple[RunResult, RunResult]) -> None:
    _, opened = runs
    test, step = _only(opened)
    model = calibrate(test, host=database_host(opened))
    measured = response_from_start_s(step)
    assert abs(model.delay_s) < DELAY_SHARE * measured, (model.delay_s, measured)
    assert model.calibrated_rate == pytest.approx(step.units / step.elapsed_s, rel=1e-9)
    again = dbmodel.solve_open(model, model.calibrated_rate)
    assert again.response_time_s == pytest.approx(measured, rel=0.01)


class PacedDriverCost(AssertionError):
    """The known miss: the paced driver's own CPU per unit, which neither loop's model can see in the other."""


PACED_DRIVER_COST = (
    "the Python driver pacing an open loop spends more CPU per unit on the database host than it does flat out (srv-"
    "report: 129.6 us against 89.6 us at 1 job and 61.7 us at 2 closed), so the open loop's model over-states the "
    "closed loop's CPU (2 jobs: -31.5 % throughput) and the closed loop's model under-states the open loop's "
    "response time (-37.7 %)")


# The known misses as measured (docs/benchmarks.md), with room for nothing but rounding: a larger or smaller miss,
# or one of the other sign, is another error than the paced driver's CPU and fails the test
KNOWN_MISSES = {("2 jobs", "throughput"): (-0.33, -0.30), ("2 jobs", "response"): (0.45, 0.49),
                ("the open loop", "response"): (-0.39, -0.36)}


def _judged(errors: dict[str, float], goals: dict[str, float], where: str) -> None:
    """A figure outside its goal fails the test, except a known miss of its measured size, which raises
    PacedDriverCost."""
    misses = {k: e for k, e in errors.items() if abs(e) > goals[k]}
    unknown = {k: e for k, e in misses.items()
               if not KNOWN_MISSES.get((where, k), (0.0, 0.0))[0] <= e <= KNOWN_MISSES.get((where, k), (0.0, 0.0))[1]}
    assert not unknown, f"{where}: {misses}"
    if misses:
        raise PacedDriverCost(f"{where}: {misses}")


@pytest.mark.xfail(strict=True, raises=PacedDriverCost, reason=PACED_DRIVER_COST)
def test_the_open_loops_model_predicts_the_closed_loop(runs: tuple[RunResult, RunResult]) -> None:
    """At 1 job within the goals; at 2 the open loop's driver CPU per unit shows (the known miss)."""
    closed, opened = runs
    model = calibrate(opened.tests[0], host=database_host(opened))
    known: list[str] = []
    for s in sorted(_closed(closed).steps, key=lambda s: s.jobs):
        p = dbmodel.solve(model, s.jobs)
        measured_x, measured_r = s.units / s.elapsed_s, s.latency.summary()["mean_s"] or 0.0
        errors = {"throughput": (p.throughput or 0.0) / measured_x - 1,
                  "response": (p.response_time_s or 0.0) / measured_r - 1}
        print(f"{s.jobs} jobs: {measured_x:,.0f}/s {measured_r * 1e3:.3f} ms measured, errors {errors}")
        try:
            _judged(errors, {"throughput": GOAL_THROUGHPUT, "response": GOAL_RESPONSE}, f"{s.jobs} jobs")
        except PacedDriverCost as miss:
            known.append(str(miss))
    if known:
        raise PacedDriverCost("; ".join(known))


@pytest.mark.xfail(strict=True, raises=PacedDriverCost, reason=PACED_DRIVER_COST)
def test_the_closed_loops_model_predicts_the_open_loop(runs: tuple[RunResult, RunResult]) -> None:
    """The throughput is the rate that arrived (the model is not saturated); the response time is the known miss."""
    closed, opened = runs
    _, step = _only(opened)
    model = calibrate(_closed(closed), host=database_host(closed))
    p = dbmodel.solve_open(model, offered_rate(step))
    measured_x, measured_r = step.units / step.elapsed_s, response_from_start_s(step)
    _judged({"throughput": (p.throughput or 0.0) / measured_x - 1, "response": (p.response_time_s or 0.0) / measured_r - 1},
            {"throughput": GOAL_THROUGHPUT, "response": GOAL_RESPONSE}, "the open loop")


def test_an_open_step_is_validated_at_its_arrival_rate(runs: tuple[RunResult, RunResult]) -> None:
    """Its own calibration step: the open model at the rate that arrived gives the measured response from the units'
    start, and the tail the measured p95 (from the intended start, as the step measured it). Validated as 8 jobs,
    the model answered a closed loop; with the shape taken from the lagged mean, the p95 came out 40 % short."""
    _, opened = runs
    test, step = _only(opened)
    validation = validate(test, host=database_host(opened))
    (row,) = validation["steps"]
    assert row["model"]["throughput"] == pytest.approx(offered_rate(step))
    assert row["measured"]["response_time_s"] == pytest.approx(response_from_start_s(step))
    for figure in ("throughput", "response_time_s"):
        assert abs(row["error_pct"][figure] or 0.0) < 2, row["error_pct"]  # a calibration step: rounding only
    # the tail is the calibration's latency shape with the open model's queueing tails added, which this load's
    # own queueing is already in: -15 % here (a closed 1-job calibration step is within 1 %); shaped on the
    # lagged mean it was -37 %
    assert abs(row["error_pct"]["p95_s"] or 0.0) < P95_AT_CALIBRATION_PCT, row["error_pct"]
    assert "note" in validation["usl"]  # no curve through jobs whose throughput is the rate that arrived


def test_an_open_loop_is_no_oversubscription_probe(runs: tuple[RunResult, RunResult]) -> None:
    """Its 8 jobs on 2 cores wait for arrivals, they are not 8 runnable jobs."""
    _, opened = runs
    test, _ = _only(opened)
    model = calibrate(test, host=database_host(opened))
    assert model.probe_jobs == [] and model.cpu_oversubscription == 0.0


def test_a_what_if_on_an_open_loop_starts_from_the_rate_it_measured(runs: tuple[RunResult, RunResult],
                                                                    tmp_path: os.PathLike[str]) -> None:
    _, opened = runs
    _, step = _only(opened)
    out = CliRunner().invoke(app, ["whatif", str(opened.folder), "--cpus", "4", "--format", "json"])
    assert out.exit_code == 0, out.output
    (answer,) = json.loads(out.output)["tests"]
    baseline = answer["baseline"]
    assert baseline["rate"] == pytest.approx(step.units / step.elapsed_s)
    assert baseline["throughput"] == pytest.approx(baseline["rate"])
    # more cores for the same open load: the same throughput, a shorter or equal response time (a closed 8-job
    # solution would have run flat out on 4 cores)
    base, more = answer["scenarios"][0]["prediction"], answer["scenarios"][-1]["prediction"]
    assert more["throughput"] == pytest.approx(baseline["rate"])
    assert more["response_time_s"] <= base["response_time_s"]
