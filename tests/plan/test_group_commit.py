"""Group commit beyond the cores, on a stored real run of tp-light (a fifth of the units commit, the reads keep
their core) and wal-lat1 (every unit commits) at 1, 2, 4, 8 and 16 jobs on 2 cores (how it was recorded:
tests/fixtures/README.md). Each is calibrated on the steps within the cores, as docs/benchmarks.md scores the model.

What the flusher did, from pg_stat_io's write and fsync time against the flushes' rate: it is idle between flushes
for 50-80 us (a waiting commit woken and on a core), and each flush takes longer as the run queue grows (tp-light
147 us at 1 job, 648 at 16), most of all where reads never leave their core, so the commits written meanwhile ride
on the next flush. A model that started the next flush the moment one ended and gave the flusher the mean unit's
wait for a core predicted 1.43 / 2.20 / 3.48 commits a flush for tp-light at 4 / 8 / 16 jobs against 2.05 / 3.75 /
6.88 measured, and the CPU 12 to 18 points too busy, the flushes' own CPU spread over too few commits."""

from __future__ import annotations

import pytest
from storedruns import unpack

from capmark.plan import dbmodel
from capmark.plan.calibrate import calibrate, flushes, measured_point
from capmark.plan.dbhost import database_host
from capmark.results import RunResult, TestResult
from capmark.store import load_run

FIXTURE = "plan-group-commit"
WITHIN_CORES = [1, 2]
# The goals beyond the measured range: commits per flush within 20 % of the measured, the CPU within 5 points
BATCH_GOAL = 0.20
CPU_GOAL_POINTS = 5.0
BEYOND = [(w, j) for w in ("tp-light", "wal-lat1") for j in (4, 8, 16)]
# Known misses, with what was measured when this was written. At 4 jobs both batch about a quarter less than measured
# (tp-light 1.58 against 2.05, wal-lat1 1.67 against 2.23): with half the jobs in each flush already, the measured
# batches pass N/2, which the two alternating groups of the model's batch cannot. tp-light's CPU is 7-10 points too
# busy (77.6 / 90.6 / 97.8 % against 70.6 / 81.2 / 87.7): its jobs wait for cores behind reads that keep theirs
# longer than the model's one wait per wake-up, and leave the cores idle meanwhile. wal-lat1 at 16 jobs: +5.02 points.
BATCH_MISSES = {("tp-light", 4), ("wal-lat1", 4)}
CPU_MISSES = {("tp-light", 4), ("tp-light", 8), ("tp-light", 16), ("wal-lat1", 16)}


def _cases(misses: set[tuple[str, int]], reason: str) -> list:
    return [pytest.param(w, j, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))
            if (w, j) in misses else (w, j) for w, j in BEYOND]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    results = tmp_path_factory.mktemp("group-commit")
    (run_id,) = unpack(results, FIXTURE)
    return load_run(results / run_id)


def _test(run: RunResult, workload: str) -> TestResult:
    return next(t for t in run.tests if t.workload == workload)


def _one_job_flushes(test: TestResult) -> float:
    """Flushes per unit at one job, which batches nothing: the unit's commits that need a flush."""
    return next(flushes(s)[0] for s in test.steps if s.jobs == 1)


def _solved(run: RunResult, workload: str, jobs: int) -> tuple[dbmodel.Prediction, TestResult]:
    test = _test(run, workload)
    model = calibrate(test, from_jobs=WITHIN_CORES, host=database_host(run))
    return dbmodel.solve(model, jobs), test


@pytest.mark.parametrize(("workload", "jobs"), _cases(BATCH_MISSES, "the measured batch passes half the jobs"))
def test_commits_per_flush_beyond_the_cores(run: RunResult, workload: str, jobs: int) -> None:
    predicted, test = _solved(run, workload, jobs)
    step = next(s for s in test.steps if s.jobs == jobs)
    measured = _one_job_flushes(test) / flushes(step)[0]
    assert predicted.batch == pytest.approx(measured, rel=BATCH_GOAL), (workload, jobs, predicted.batch, measured)


@pytest.mark.parametrize(("workload", "jobs"), _cases(CPU_MISSES, "waits for a core behind reads that keep theirs"))
def test_cpu_busy_beyond_the_cores(run: RunResult, workload: str, jobs: int) -> None:
    predicted, test = _solved(run, workload, jobs)
    measured = measured_point(next(s for s in test.steps if s.jobs == jobs))["cpu_busy_pct"]
    assert measured is not None
    assert abs(predicted.cpu_busy_pct - measured) <= CPU_GOAL_POINTS, (workload, jobs, predicted.cpu_busy_pct, measured)


@pytest.mark.parametrize("workload", ["tp-light", "wal-lat1"])
@pytest.mark.parametrize("jobs", [4, 8])
def test_calibrated_above_the_cores_the_flush_requests_are_one_jobs(run: RunResult, workload: str, jobs: int) -> None:
    """A unit commits as often at 8 jobs as at one. Fitted from the 8-job step's flushes and the model's batch there
    instead, wal-lat1's requests came out 0.55 a unit (each of its units commits once), the difference absorbed by a
    delay of +331 us; and with another batch model, 1.03 with -547 us: one step above the cores does not tell them
    apart. One job batches nothing, so its flushes are the requests; and the calibration settles."""
    test = _test(run, workload)
    model = calibrate(test, from_jobs=[jobs], host=database_host(run))
    assert model.flush_requests == pytest.approx(_one_job_flushes(test), rel=1e-9)
    assert not [n for n in model.notes if "did not settle" in n], model.notes
    step = next(s for s in test.steps if s.jobs == jobs)
    solved = dbmodel.solve(model, jobs)
    assert solved.throughput == pytest.approx(step.units / step.elapsed_s, rel=1e-3)  # its own step, reproduced
