"""Run every detector on every test of a stored run, beside the steps' self-checks."""

from __future__ import annotations

from typing import Any

from capmark.diagnose.features import engine_of, test_view
from capmark.diagnose.signatures import DETECTORS, Finding
from capmark.engines import registry
from capmark.engines.base import Engine
from capmark.measure import record
from capmark.measure.validity import cautions
from capmark.results import RunResult, TestResult


def diagnose_test(test: TestResult, engine: Engine | None = None) -> dict[str, Any]:
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
    invalid = [{"jobs": s.jobs, "problems": s.problems} for s in view.steps if not s.valid]
    invalid += [{"jobs": s.jobs, "problems": list(record.of(s).problems)} for s in test.steps
                if s.status != "ok" or not s.units]
    idle = [s for s in test.steps if s.status == "ok" and not s.units]
    if findings:
        summary = f"{len(findings)} finding(s); most likely: {findings[0].name} ({findings[0].level} confidence)"
    elif idle:  # a step that measured nothing says nothing of bottlenecks, and hides whatever stopped it
        summary = (f"not diagnosed: {len(idle)} step(s) completed no unit of work ({record.of(idle[0]).problems[0]})"
                   if not view.valid_steps else f"no bottleneck signature fired in the valid steps, but {len(idle)} "
                   f"step(s) completed no unit of work ({record.of(idle[0]).problems[0]})")
    else:
        summary = "clean: no bottleneck signature fired"
    for f in information:
        summary += f"; for information (expected, not a fault): {f.name} - {f.evidence[0]}"
    if invalid:
        summary += f"; {len(invalid)} step(s) failed a self-check and are left out of models"
    flagged = [{"jobs": s.jobs, "cautions": why} for s in test.steps if (why := cautions(s))]
    if flagged:
        summary += f"; {len(flagged)} step(s) shared the host with other busy programs (see the cautions)"
    return {"workload": test.workload, "unit": test.unit, "summary": summary, "clean": not (findings or idle),
            "findings": [f.to_dict() for f in findings], "information": [f.to_dict() for f in information],
            "invalid_steps": invalid, "cautions": flagged,
            "steps": [s.jobs for s in view.steps]}


def diagnose_run(run: RunResult, tests: list[TestResult] | None = None) -> dict[str, Any]:
    engine = registry.named(run.target.get("engine"))
    return {"schema": "capmark.diagnose/1", "run": run.run_id,
            "tests": [diagnose_test(t, engine) for t in (tests if tests is not None else run.tests) if t.steps]}
