"""Quick anticipation (Shallahamer, OraPub): R = S / (1 - (S lambda / M)^M) through one measured point.

S is the unqueued response time per unit (the lowest valid step's measured mean), lambda and R come
from the chosen step, and M, the effective number of servers, is solved so that the curve passes
through the measurement. The curve after a change of S, lambda or M shows what the change buys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

from capmark.errors import CapmarkError
from capmark.measure import record
from capmark.model.open import effective_servers, quick_response_time
from capmark.results import TestResult

CURVE_POINTS = 40
FORMULA = "R = S / (1 - (S*lambda/M)^M) (Shallahamer, OraPub)"


@dataclass(frozen=True, kw_only=True)
class RatePoint:
    rate: float  # units/s
    response_time_s: float


@dataclass(frozen=True, kw_only=True)
class MeasuredRate:
    """The measured step the curve passes through."""

    jobs: int
    rate: float
    response_time_s: float


@dataclass(frozen=True, kw_only=True)
class AfterChange:
    """S, lambda and M after the change, the response time there (None: saturated) and the curve."""

    service_time_s: float
    rate: float
    servers: float
    response_time_s: float | None
    saturated: bool
    curve: list[RatePoint]


class QuickAnticipation(TypedDict):
    """The quick curve through a measured step, before and after a change."""

    workload: str
    formula: str
    service_time_s: float
    service_time_from_jobs: int
    measured: MeasuredRate
    effective_servers: float
    curve: list[RatePoint]
    change: AfterChange


def _curve(s: float, m: float, up_to: float) -> list[RatePoint]:
    top = min(up_to, 0.98 * m / s)
    return [RatePoint(rate=top * i / CURVE_POINTS, response_time_s=quick_response_time(s, top * i / CURVE_POINTS, m))
            for i in range(CURVE_POINTS + 1)]


def check_change(service_factor: float, rate_factor: float, servers: float | None) -> None:
    """The change must be positive finite factors (and a positive finite number of servers)."""
    for name, value in (("service time factor", service_factor), ("arrival rate factor", rate_factor),
                        ("number of effective servers", servers if servers is not None else 1.0)):
        if not 0 < value < math.inf:
            raise CapmarkError(f"The {name} must be a positive finite number; got {value:g}.")


def anticipate(test: TestResult, at_jobs: int | None = None, service_factor: float = 1.0, rate_factor: float = 1.0,
               servers: float | None = None) -> QuickAnticipation:
    check_change(service_factor, rate_factor, servers)
    valid = [s for s in test.steps if record.of(s, test.per_unit).valid]
    if len(valid) < 2:
        raise CapmarkError(f"Test {test.workload} needs at least two valid steps for the quick anticipation: the "
                           "lowest gives the service time, a higher one the measured point.")
    low = min(valid, key=lambda s: s.jobs)
    point = next((s for s in valid if s.jobs == at_jobs), None) if at_jobs else max(valid, key=lambda s: s.jobs)
    if point is None or point is low:
        have = ", ".join(str(s.jobs) for s in valid if s is not low)
        raise CapmarkError(f"Choose a measured step above the lowest for --at; valid ones have {have} jobs.")
    s = low.latency.mean_s or 0.0
    lam = point.units / point.elapsed_s
    r = point.latency.mean_s or 0.0
    if r <= s:
        raise CapmarkError(f"At {point.jobs} jobs the response time ({r * 1e3:.3f} ms) is not above the one-job value "
                           f"({s * 1e3:.3f} ms): no queueing to fit; choose a busier step with --at.")
    m = effective_servers(s, lam, r)
    s2, lam2, m2 = s * service_factor, lam * rate_factor, servers or m
    after = None
    if lam2 * s2 / m2 < 1:
        after = quick_response_time(s2, lam2, m2)
    return QuickAnticipation(
        workload=test.workload, formula=FORMULA, service_time_s=s, service_time_from_jobs=low.jobs,
        measured=MeasuredRate(jobs=point.jobs, rate=lam, response_time_s=r), effective_servers=m,
        curve=_curve(s, m, 1.5 * lam),
        change=AfterChange(service_time_s=s2, rate=lam2, servers=m2, response_time_s=after, saturated=after is None,
                           curve=_curve(s2, m2, 1.5 * max(lam, lam2))))
