"""Everything the HTML report shows, computed once from a stored run: the renderer only lays it out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capmark.analysis.answers import answer_of
from capmark.analysis.demands import TestDemands, demands_of
from capmark.analysis.diagnosis import DiagnosisDocument, diagnosis_document
from capmark.analysis.headline import Headline, headline
from capmark.analysis.planning import Anticipation, Calibration, anticipation_of, calibration_of
from capmark.analysis.sessions import overridden, overridden_sentence
from capmark.measure import record
from capmark.measure.validity import cautions
from capmark.plan.dbhost import database_host
from capmark.results import RunResult, TestResult
from capmark.store import load_derived, load_run


@dataclass(kw_only=True)
class TestReport:
    """One test's part of the report: its analyses, or for each one the sentence saying why it is missing."""

    __test__ = False  # a document, not a test class (pytest collects names starting with Test)

    test: TestResult
    invalid: list[tuple[int, list[str]]]  # steps that failed a self-check, with why
    cautions: list[tuple[int, list[str]]]  # steps that shared the host with other busy programs
    demands: TestDemands | None
    calibration: Calibration | None
    calibration_problem: str
    anticipation: Anticipation | None
    anticipation_problem: str
    # open-ended: the JSON `capmark whatif --save` stored for this test, perhaps by an older capmark, shown as stored
    saved_whatif: dict[str, Any] | None
    # open-ended: the JSON `capmark size --save` stored, as above
    saved_size: dict[str, Any] | None
    headline: Headline
    # server settings the workload's sessions set otherwise, said so that the server's value is not credited
    session_overrides: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class ReportDocuments:
    run: RunResult
    diagnosis: DiagnosisDocument
    tests: list[TestReport] = field(default_factory=list)

    @property
    def headlines(self) -> list[Headline]:
        return [t.headline for t in self.tests if t.test.steps]


def report_documents(run: RunResult, saved: dict[str, dict[int, Any]] | None = None) -> ReportDocuments:
    """The report's content. `saved` holds the analyses users stored with --save, by kind and test ordinal."""
    saved = saved or {}
    diagnosis = diagnosis_document(run)
    diagnosed = iter(diagnosis.tests)  # one per measured test, in the run's order
    host = database_host(run)
    docs = ReportDocuments(run=run, diagnosis=diagnosis)
    for test in run.tests:
        measured = bool(test.steps)
        model = answer_of(test, lambda t: calibration_of(t, host)) if measured else None
        quick = answer_of(test, anticipation_of) if measured else None
        diag = next(diagnosed) if measured else None
        docs.tests.append(TestReport(
            test=test,
            invalid=[(s.jobs, list(record.of(s, test.per_unit).problems)) for s in test.steps
                     if not record.of(s).valid],
            cautions=[(s.jobs, why) for s in test.steps if (why := cautions(s))],
            demands=demands_of(test) if measured else None,
            calibration=model.answer if model else None, calibration_problem=model.reason if model else "",
            anticipation=quick.answer if quick else None, anticipation_problem=quick.reason if quick else "",
            saved_whatif=saved.get("whatif", {}).get(test.ordinal), saved_size=saved.get("size", {}).get(test.ordinal),
            headline=headline(test, model.answer if model else None, diag, model.reason if model else ""),
            session_overrides=[overridden_sentence(test.workload, o) for o in overridden(run, test)]))
    return docs


SAVED_KINDS = ("whatif", "size")  # analyses users keep with the run (--save) and the report shows


def stored_report_documents(folder: Path) -> ReportDocuments:
    """The report's content for the run stored in `folder`, with the analyses saved beside it."""
    return report_documents(load_run(folder), {kind: load_derived(folder, kind) for kind in SAVED_KINDS})
