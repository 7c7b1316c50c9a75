"""Run every detector on every test of a stored run, beside the steps' self-checks."""

from __future__ import annotations

from dataclasses import dataclass

from capmark.diagnose.features import engine_of, test_view
from capmark.diagnose.signatures import DETECTORS, Finding
from capmark.engines.base import Engine
from capmark.measure import record
from capmark.measure.validity import cautions
from capmark.results import TestResult


@dataclass(frozen=True)
class InvalidStep:
    """A step that failed a self-check, and why: models and tables leave it out."""

    jobs: int
    problems: list[str]


@dataclass(frozen=True)
class StepCautions:
    """A valid step that shared the host with other busy programs, and which."""

    jobs: int
    cautions: list[str]


@dataclass(kw_only=True)
class TestDiagnosis:
    """One test's diagnosis: the signatures that fired, most likely first, and the steps' self-checks."""

    __test__ = False  # a record, not a test class (pytest collects names starting with Test)

    workload: str
    unit: str
    summary: str
    clean: bool  # no problem found, every step completed units of work, and one at least passed its self-checks
    findings: list[Finding]  # problems to act on
    information: list[Finding]  # expected behaviour worth knowing (severity "info")
    invalid_steps: list[InvalidStep]
    cautions: list[StepCautions]
    steps: list[int]  # the job counts of the steps the detectors looked at

    @property
    def headline(self) -> str:
        """The diagnosis in one line: the most likely finding, or that none fired."""
        if self.findings:
            top = self.findings[0]
            return f"{top.name} ({top.level} confidence)"
        return "no bottleneck signature fired"


def diagnose_test(test: TestResult, engine: Engine | None = None) -> TestDiagnosis:
    """engine: the one the test was measured on, which names its waits and its advice (default: the engine its
    steps' statistics name)."""
    engine = engine or engine_of(test)
    view = test_view(test, engine)
    findings: list[Finding] = []
    for detect in DETECTORS:
        found = detect(view)
        if found is not None:
            findings.append(found)
    advice = engine.advice
    for f in findings:  # what to try names the engine's own settings and views
        f.to_try = advice.get(f.key, f.to_try)
    findings.sort(key=lambda f: -f.confidence)
    information = [f for f in findings if f.severity == "info"]
    findings = [f for f in findings if f.severity != "info"]
    invalid = [InvalidStep(s.jobs, s.problems) for s in view.steps if not s.valid]
    invalid += [InvalidStep(s.jobs, list(record.of(s).problems)) for s in test.steps
                if s.status != "ok" or not s.units]
    idle = [s for s in test.steps if s.status == "ok" and not s.units]
    unchecked = bool(invalid) and not view.valid_steps  # every step failed a self-check: nothing is known to be clean
    if findings:
        summary = f"{len(findings)} finding(s); most likely: {findings[0].name} ({findings[0].level} confidence)"
    elif idle:  # a step that measured nothing says nothing of bottlenecks, and hides whatever stopped it
        summary = (f"not diagnosed: {len(idle)} step(s) completed no unit of work ({record.of(idle[0]).problems[0]})"
                   if not view.valid_steps else f"no bottleneck signature fired in the valid steps, but {len(idle)} "
                   f"step(s) completed no unit of work ({record.of(idle[0]).problems[0]})")
    elif unchecked:
        summary = f"not diagnosed: no step passed its self-checks ({_first_problem(invalid)})"
    else:
        summary = "clean: no bottleneck signature fired"
    for f in information:
        summary += f"; for information (expected, not a fault): {f.name} - {f.evidence[0]}"
    if invalid:
        summary += f"; {len(invalid)} step(s) failed a self-check and are left out of models"
    flagged = [StepCautions(s.jobs, why) for s in test.steps if (why := cautions(s))]
    if flagged:
        summary += f"; {len(flagged)} step(s) shared the host with other busy programs (see the cautions)"
    return TestDiagnosis(workload=test.workload, unit=test.unit, summary=summary,
                         clean=not (findings or idle or unchecked),
                         findings=findings, information=information, invalid_steps=invalid, cautions=flagged,
                         steps=[s.jobs for s in view.steps])


def _first_problem(invalid: list[InvalidStep]) -> str:
    return next((p for s in invalid for p in s.problems), "no reason recorded")
