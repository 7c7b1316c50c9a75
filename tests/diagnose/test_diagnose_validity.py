"""A test whose every step failed a self-check is not diagnosed, however many units its steps completed: nothing is
known of it, so it is never called clean (a lock held through a window whose first slice had ended before it gave
such a step: units, an overrun, and the diagnosis "clean"). On a stored run: tests/fixtures/plan-cpu-commit, whose
srv-query1 (1, 2 and 4 jobs) is clean."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from storedruns import unpack

from capmark.diagnose.diagnosis import diagnose_test
from capmark.measure import record
from capmark.measure.validity import cautions, problems
from capmark.results import TestResult
from capmark.store import load_run

OVERRUN = "the window ran 12.0 s past its plan: every job waited on a lock held by pid 4242"


@pytest.fixture()
def test_of_quick(tmp_path: Path) -> TestResult:
    run_id = unpack(tmp_path, "plan-cpu-commit")[0]
    test = load_run(tmp_path / run_id).tests[0]
    assert all(s.units > 0 for s in test.steps) and diagnose_test(test).clean  # a clean test to start from
    return test


def _invalid(test: TestResult, jobs: set[int]) -> TestResult:
    for s in test.steps:
        if s.jobs in jobs:
            s.measures = replace(record.of(s), problems=(OVERRUN,))
    return test


def test_every_step_invalid_is_not_diagnosed_and_not_clean(test_of_quick):
    test = _invalid(test_of_quick, {s.jobs for s in test_of_quick.steps})
    diagnosis = diagnose_test(test)
    assert not diagnosis.clean
    assert diagnosis.summary.startswith(f"not diagnosed: no step passed its self-checks ({OVERRUN})"), \
        diagnosis.summary
    assert [s.problems for s in diagnosis.invalid_steps] == [[OVERRUN]] * len(test.steps)


def test_one_valid_step_is_enough_to_diagnose(test_of_quick):
    kept = test_of_quick.steps[0].jobs
    test = _invalid(test_of_quick, {s.jobs for s in test_of_quick.steps} - {kept})
    diagnosis = diagnose_test(test)
    assert diagnosis.clean and diagnosis.summary.startswith("clean"), diagnosis.summary


def _with_host(step, busy_s: float, others_s: float, seconds: float = 3.0, cores: int = 2):
    """The step as if the host's cores were `busy_s` busy over `seconds` and other programs used `others_s` of it."""
    idle = seconds * cores - busy_s
    step.os["cpu_seconds"] = {"user": busy_s * 0.8, "system": busy_s * 0.2, "idle": idle * 0.5, "iowait": idle * 0.5}
    step.interference = {**(step.interference or {}), "processes": {
        "cpu_s": others_s, "kernel_threads_s": 0.0,
        "top": [{"pid": 4242 + i, "name": f"daemon-{i}", "cpu_s": others_s / 8} for i in range(8)]}}
    return step


def test_other_programs_on_a_barely_busy_host_caution_but_do_not_invalidate(test_of_quick):
    """An IO-bound step keeps the cores idle: daemons' 0.12 s is 40 % of its 0.3 s of busy CPU but 2 % of the host's
    capacity, and took no core from the instance (CI: such a sto-random step was not diagnosed)."""
    step = _with_host(test_of_quick.steps[0], busy_s=0.3, others_s=0.12)
    assert not [p for p in problems(step) if "other programs" in p], problems(step)
    assert [c for c in cautions(step) if "other programs on the host used 40%" in c], cautions(step)


def test_other_programs_with_a_fair_share_of_a_busy_host_invalidate_the_step(test_of_quick):
    step = _with_host(test_of_quick.steps[0], busy_s=2.0, others_s=0.9)
    assert [p for p in problems(step) if "other programs on the host used 45%" in p], problems(step)
    assert not cautions(step)
