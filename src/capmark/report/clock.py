"""Latency percentiles finer than the clock that timed them, marked wherever a table shows them.

A server-side test times its units in PL/pgSQL with PostgreSQL's timestamps, which count whole microseconds: each
unit reads a whole number of them, so a percentile can be off by one microsecond. Above about 25 us that is less
than a histogram bucket (4.1 %) and the histogram sets the precision; below it the clock does, and the figure is
shown as approximate. A client-side test times its units with the driver's nanosecond clock and needs no mark.
"""

from __future__ import annotations

from capmark.histogram import RELATIVE_WIDTH
from capmark.results import TestResult

SERVER_CLOCK_TICK_S = 1e-6  # PostgreSQL's timestamps count whole microseconds
# below this a clock tick is wider than a histogram bucket: the clock, not the histogram, limits the percentile
RESOLVED_FROM_S = SERVER_CLOCK_TICK_S / RELATIVE_WIDTH
MARK = "≈"
NOTE = f"{MARK}: timed by the server's clock in whole microseconds, so it may be off by 1 µs"
# the columns that hold a latency percentile in milliseconds: the KPM table's and the per-type tables'
PERCENTILE_KEYS = frozenset({"rt_p50_ms", "rt_p95_ms", "rt_p99_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms"})


def coarse(test: TestResult, key: str, value_ms: object) -> bool:
    """Whether a shown value is a percentile that the server's clock could not resolve."""
    return (test.mode == "server" and key in PERCENTILE_KEYS and isinstance(value_ms, float | int)
            and value_ms < RESOLVED_FROM_S * 1e3)


def cell(text: str, test: TestResult, key: str, value_ms: object) -> str:
    """A table cell's text, marked approximate where the clock could not resolve its percentile."""
    return MARK + text if coarse(test, key, value_ms) else text


def note(test: TestResult, by_type: bool = False) -> str | None:
    """The note under a table of the test's percentiles, overall or by transaction type, when one of them is marked
    (a distribution's median is its smallest percentile shown)."""
    if test.mode != "server":
        return None
    medians = [latency.p50_s for step in test.steps if step.measures is not None
               for latency in (step.measures.latency_by_type.values() if by_type else [step.measures.latency])]
    return NOTE if any(m is not None and m < RESOLVED_FROM_S for m in medians) else None
