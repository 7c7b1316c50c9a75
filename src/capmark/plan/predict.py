"""Beyond the measured range: the curve up to a number of jobs, the maximum sustainable throughput and
the knee (where the response time reaches twice its one-job value)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from capmark.plan.dbmodel import Config, DbModel, Prediction, PredictionJson, at_spread_ends, solve

KNEE_FACTOR = 2.0


class CurveJson(TypedDict):
    """A Curve as the JSON documents carry it."""

    points: list[PredictionJson]
    max_throughput: float
    max_throughput_jobs: int
    knee_jobs: int | None
    knee_rule: str
    bottleneck: str
    converged: bool
    unconverged_jobs: list[int]
    # the maximum throughput with the measured demands at the ends of their spread across the calibration steps
    # (low, high); None where fewer than two steps were within the cores
    max_throughput_range: list[float] | None


@dataclass
class Curve:
    points: list[Prediction]
    max_throughput: float
    max_throughput_jobs: int
    knee_jobs: int | None  # first job count with R >= 2 x R(1); None if not reached
    bottleneck: str  # at the last point
    max_throughput_range: tuple[float, float] | None = None  # (low, high): DbModel.demand_spread either side

    @property
    def unconverged_jobs(self) -> list[int]:
        """Job counts whose fixed point did not settle (their figures are the last round's)."""
        return [int(p.jobs or 0) for p in self.points if not p.converged]

    def to_dict(self) -> CurveJson:
        return CurveJson(points=[p.to_dict() for p in self.points], max_throughput=self.max_throughput,
                         max_throughput_jobs=self.max_throughput_jobs, knee_jobs=self.knee_jobs,
                         knee_rule=f"response time >= {KNEE_FACTOR:g} x its one-job value", bottleneck=self.bottleneck,
                         converged=not self.unconverged_jobs, unconverged_jobs=self.unconverged_jobs,
                         max_throughput_range=list(self.max_throughput_range) if self.max_throughput_range else None)


def job_grid(up_to: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ...: dense enough to place the knee, cheap to solve."""
    out, n = [1, 2, 3], 4
    while n <= up_to:
        out += [n, n * 3 // 2]
        n *= 2
    return sorted({j for j in out if j <= up_to} | {up_to})


def curve(model: DbModel, up_to: int, think_s: float | None = None, config: Config | None = None,
          progress: Callable[[str], None] | None = None) -> Curve:
    """The model at every job count of job_grid(up_to) (a few dozen points even for 100,000 jobs)."""
    points = []
    for n in job_grid(max(1, up_to)):
        if progress:
            progress(f"{model.workload}: predicting {n:,} jobs (up to {up_to:,})")
        points.append(solve(model, n, think_s, config))
    first = points[0].response_time_s or 0.0
    knee = next((int(p.jobs or 0) for p in points if (p.response_time_s or 0) >= KNEE_FACTOR * first), None)
    best = max(points, key=lambda p: p.throughput or 0.0)
    return Curve(points, best.throughput or 0.0, int(best.jobs or 0), knee, points[-1].bottleneck,
                 throughput_range(model, best.jobs or 1, think_s, config))


def throughput_range(model: DbModel, jobs: float, think_s: float | None = None,
                     config: Config | None = None) -> tuple[float, float] | None:
    """The throughput at `jobs` with every measured demand moved by its spread across the calibration steps: more
    demand gives the low end, less the high one. None where the calibration had no spread to go by."""
    ends = at_spread_ends(model, lambda m: solve(m, jobs, think_s, config))
    return (ends[0].throughput or 0.0, ends[1].throughput or 0.0) if ends else None
