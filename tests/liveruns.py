"""Live runs for tests that read what a run measured and stored, not the report written after it."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

from capmark import runner
from capmark.config import RunSpec
from capmark.results import RunResult
from capmark.runner import RunObserver

T = TypeVar("T")


def run_without_report(spec: RunSpec, observer: RunObserver | None = None) -> RunResult:
    """What `api.run` does, without writing report.html: a run's report draws plots for every step (a few seconds
    per test on 2 cores, 5 s for ten one-step tests, 30 s for the quick suite), and a test that only reads the
    stored steps would wait for a page it never opens. api.run swallows any rendering failure into a note, so such
    a test could not catch one either; the report is tested on stored runs (tests/report) and where a test reads
    the page of its own run (those tests call api.run)."""
    return runner.run(spec, observer)


def alternating(spec_for: Callable[[T], RunSpec], platforms: Sequence[T], rounds: int) -> dict[T, list[RunResult]]:
    """Each platform's runs, measured in alternating rounds (a, b, a, b, ...), without reports. On a shared host
    throughput drifts by up to 15 % within a minute, more than a what-if's goal, so two platforms are compared
    round by round, each pair measured side by side, and the comparisons' median is what a test judges."""
    runs: dict[T, list[RunResult]] = {p: [] for p in platforms}
    for _ in range(rounds):
        for p in platforms:
            runs[p].append(run_without_report(spec_for(p)))
    return runs


def median_error(pairs: Sequence[tuple[float, float]]) -> float:
    """The median over the rounds of predicted / measured - 1."""
    return statistics.median(p / m - 1 for p, m in pairs)


def drift(runs: Sequence[float]) -> float:
    """How far one platform's rounds spread: largest over smallest, less 1 (0 for a single round)."""
    return max(runs) / min(runs) - 1 if runs and min(runs) > 0 else 0.0


def throughput_at(run: RunResult, jobs: int) -> float:
    """The first test's throughput at the step of `jobs`."""
    return next(s.measures.throughput for s in run.tests[0].steps if s.jobs == jobs)


def spread_at(rounds: Sequence[RunResult], jobs: int) -> float:
    """How far one platform's rounds spread at `jobs` (drift of their throughputs)."""
    return drift([throughput_at(r, jobs) for r in rounds])
