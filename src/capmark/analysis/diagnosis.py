"""Bottleneck signatures and the steps' self-checks of a stored run (capmark.diagnose/1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capmark.analysis.document import Document, Payload, payload_of
from capmark.diagnose.diagnosis import diagnose_test
from capmark.results import RunResult, TestResult


@dataclass(kw_only=True)
class TestDiagnosis(Payload):
    __test__ = False  # a document, not a test class (pytest collects names starting with Test)

    workload: str
    unit: str
    summary: str
    clean: bool
    findings: list[dict[str, Any]]
    information: list[dict[str, Any]]
    invalid_steps: list[dict[str, Any]]
    cautions: list[dict[str, Any]]
    steps: list[int]

    @property
    def headline(self) -> str:
        """The diagnosis in one line: the most likely finding, or that none fired."""
        if self.findings:
            top = self.findings[0]
            return f"{top['name']} ({top['level']} confidence)"
        return "no bottleneck signature fired"


@dataclass(kw_only=True)
class DiagnosisDocument(Document):
    """Bottleneck signatures and the steps' self-checks, per test (`capmark diagnose`)."""

    SCHEMA = "capmark.diagnose/1"
    run: str
    tests: list[TestDiagnosis]


def diagnosis_document(run: RunResult, tests: list[TestResult] | None = None) -> DiagnosisDocument:
    chosen = tests if tests is not None else run.tests
    return DiagnosisDocument(run=run.run_id,
                             tests=[payload_of(TestDiagnosis, diagnose_test(t)) for t in chosen if t.steps])
