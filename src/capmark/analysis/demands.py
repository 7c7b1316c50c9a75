"""Service demands and instrument reconciliation of a stored run (capmark.demands/1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from capmark.analysis.document import Document, Payload
from capmark.measure.demands import ComponentRow as ComponentRow  # a row of TestDemands, for its renderers
from capmark.measure.demands import LatencyRealism, StatementCost, demands_of_test
from capmark.measure.reconcile import Pair, reconcile
from capmark.results import RunResult, TestResult


class StepReconciliation(TypedDict):
    """Whether the instruments agree at one step."""

    jobs: int
    pairs: list[Pair]


@dataclass(kw_only=True)
class TestDemands(Payload):
    """Per job count (the `jobs` list gives the order): each component's demand per unit, per-commit WAL work,
    run queue, devices, latency realism, top statements, and whether the instruments agree."""

    __test__ = False  # a document, not a test class (pytest collects names starting with Test)

    workload: str
    unit: str
    log_label: str  # what the engine calls its write-ahead log ("WAL", "redo log")
    jobs: list[int]
    components: list[ComponentRow]
    per_commit: list[dict[str, float | None]]
    run_queue: list[dict[str, float | None]]
    sampler: list[dict[str, float | None]]
    devices: list[dict[str, dict[str, float | None]]]
    latency: list[LatencyRealism]
    statements: list[list[StatementCost]]
    varies: list[str]
    reconciliation: list[StepReconciliation]


@dataclass(kw_only=True)
class DemandsDocument(Document):
    """Service demands per unit of work and whether the instruments agree, per test (`capmark demands`)."""

    SCHEMA = "capmark.demands/1"
    run: str
    tests: list[TestDemands]


def demands_of(test: TestResult) -> TestDemands:
    reconciliation = [StepReconciliation(jobs=s.jobs, pairs=reconcile(s)) for s in test.steps]
    return TestDemands(**demands_of_test(test), reconciliation=reconciliation)


def demands_document(run: RunResult, tests: list[TestResult]) -> DemandsDocument:
    return DemandsDocument(run=run.run_id, tests=[demands_of(t) for t in tests])
