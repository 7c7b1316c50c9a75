"""Service demands and instrument reconciliation of a stored run (capmark.demands/1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capmark.analysis.document import Document, Payload, payload_of
from capmark.measure.demands import demands_of_test
from capmark.measure.reconcile import reconcile
from capmark.results import RunResult, TestResult


@dataclass(kw_only=True)
class TestDemands(Payload):
    """Per job count (the `jobs` list gives the order): each component's demand per unit, per-commit WAL work,
    run queue, devices, latency realism, top statements, and whether the instruments agree."""

    __test__ = False  # a document, not a test class (pytest collects names starting with Test)

    workload: str
    unit: str
    jobs: list[int]
    components: list[dict[str, Any]]
    per_commit: list[dict[str, Any]]
    run_queue: list[dict[str, Any]]
    sampler: list[dict[str, Any]]
    devices: list[dict[str, Any]]
    latency: list[dict[str, Any]]
    statements: list[list[dict[str, Any]]]
    varies: list[str]
    reconciliation: list[dict[str, Any]]


@dataclass(kw_only=True)
class DemandsDocument(Document):
    """Service demands per unit of work and whether the instruments agree, per test (`capmark demands`)."""

    SCHEMA = "capmark.demands/1"
    run: str
    tests: list[TestDemands]


def demands_of(test: TestResult) -> TestDemands:
    reconciliation = [{"jobs": s.jobs, "pairs": reconcile(s)} for s in test.steps]
    return payload_of(TestDemands, {**demands_of_test(test), "reconciliation": reconciliation})


def demands_document(run: RunResult, tests: list[TestResult]) -> DemandsDocument:
    return DemandsDocument(run=run.run_id, tests=[demands_of(t) for t in tests])
