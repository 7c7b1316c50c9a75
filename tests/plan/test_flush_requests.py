"""The flush requests per unit when a model is calibrated on steps above the cores, on a stored real run of tp-light
(a fifth of the units commit) and wal-lat1 (every unit commits) at 1, 2, 4, 8 and 16 jobs on 2 cores (how it was
recorded: tests/fixtures/README.md).

A unit commits as often at 8 jobs as at one. Fitted from the 8-job step's flushes and the model's batch there,
wal-lat1's requests came out 0.55 a unit (each of its units commits once), the difference absorbed by a delay of
+331 us, and the alternating fit of requests and delay did not settle; with another batch model the same step gave
1.03 and -547 us: one step above the cores does not tell the two apart. One job batches nothing, so where the run
has a one-job step its flushes are the requests.
"""

from __future__ import annotations

import pytest
from storedruns import unpack

from capmark.plan import dbmodel
from capmark.plan.calibrate import calibrate, flushes
from capmark.plan.dbhost import database_host
from capmark.results import RunResult, TestResult
from capmark.store import load_run

FIXTURE = "plan-group-commit"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    results = tmp_path_factory.mktemp("group-commit")
    (run_id,) = unpack(results, FIXTURE)
    return load_run(results / run_id)


def _test(run: RunResult, workload: str) -> TestResult:
    return next(t for t in run.tests if t.workload == workload)


@pytest.mark.parametrize("workload", ["tp-light", "wal-lat1"])
@pytest.mark.parametrize("jobs", [4, 8])
def test_calibrated_above_the_cores_the_flush_requests_are_one_jobs(run: RunResult, workload: str, jobs: int) -> None:
    test = _test(run, workload)
    model = calibrate(test, from_jobs=[jobs], host=database_host(run))
    one_job = next(flushes(s)[0] for s in test.steps if s.jobs == 1)
    assert model.flush_requests == pytest.approx(one_job, rel=1e-9)
    assert not [n for n in model.notes if "did not settle" in n], model.notes
    step = next(s for s in test.steps if s.jobs == jobs)
    assert dbmodel.solve(model, jobs).throughput == pytest.approx(step.units / step.elapsed_s, rel=1e-3)


@pytest.mark.parametrize("workload", ["tp-light", "wal-lat1"])
def test_calibrated_with_the_one_job_step_the_requests_are_fitted_over_the_steps(run: RunResult, workload: str) -> None:
    """Within the cores the steps' own flushes fit the requests: the model's flushes per unit at 1 and 2 jobs, on
    average, are the measured ones (a workload whose units change as it runs commits less at 2 jobs than at 1)."""
    test = _test(run, workload)
    model = calibrate(test, from_jobs=[1, 2], host=database_host(run))
    predicted = [model.flush_requests / (dbmodel.solve(model, j).batch or 1.0) for j in (1, 2)]
    measured = [next(flushes(s)[0] for s in test.steps if s.jobs == j) for j in (1, 2)]
    assert sum(predicted) == pytest.approx(sum(measured), rel=2e-3), (predicted, measured)
