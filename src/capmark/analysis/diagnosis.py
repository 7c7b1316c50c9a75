"""Bottleneck signatures and the steps' self-checks of a stored run (capmark.diagnose/1)."""

from __future__ import annotations

from dataclasses import dataclass

from capmark.analysis.document import Document
from capmark.diagnose.diagnosis import TestDiagnosis, diagnose_test
from capmark.results import RunResult, TestResult

__all__ = ["DiagnosisDocument", "TestDiagnosis", "diagnosis_document"]  # TestDiagnosis: its tests, for renderers


@dataclass(kw_only=True)
class DiagnosisDocument(Document):
    """Bottleneck signatures and the steps' self-checks, per test (`capmark diagnose`)."""

    SCHEMA = "capmark.diagnose/1"
    run: str
    tests: list[TestDiagnosis]


def diagnosis_document(run: RunResult, tests: list[TestResult] | None = None) -> DiagnosisDocument:
    chosen = tests if tests is not None else run.tests
    return DiagnosisDocument(run=run.run_id, tests=[diagnose_test(t) for t in chosen if t.steps])
