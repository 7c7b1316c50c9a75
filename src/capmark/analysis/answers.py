"""Answer one question per test of a run, keeping each test's failure to itself."""

from __future__ import annotations

from collections.abc import Callable

from capmark.analysis.document import P, TestAnswer
from capmark.errors import CapmarkError
from capmark.results import RunResult, TestResult


def answer_each(run: RunResult, tests: list[TestResult], what: str,
                answer: Callable[[TestResult], P]) -> list[TestAnswer[P]]:
    """Every test's answer, or the reason it has none. A run (or choice of tests) with nothing to answer at all
    is an error, so that a script does not take an empty document for a result."""
    if not any(t.steps for t in tests):
        raise CapmarkError(f"Run {run.run_id} has no measured step to {what} (its tests failed or were "
                           "interrupted before a step completed); measure a run with `capmark run` first.")
    out = [answer_of(t, answer) if t.steps else
           TestAnswer(workload=t.workload, ordinal=t.ordinal,
                      reason=f"Test {t.workload} has no measured step (status {t.status}).")
           for t in tests]
    if not any(a.answered for a in out):
        reasons = "; ".join(a.reason.rstrip(".") for a in out)
        raise CapmarkError(f"No test of run {run.run_id} can be used to {what}: {reasons}.")
    return out


def answer_of(test: TestResult, answer: Callable[[TestResult], P]) -> TestAnswer[P]:
    """One test's answer, or the sentence saying why it cannot be answered."""
    try:
        return TestAnswer(workload=test.workload, ordinal=test.ordinal, answer=answer(test))
    except CapmarkError as err:
        return TestAnswer(workload=test.workload, ordinal=test.ordinal, reason=str(err))
