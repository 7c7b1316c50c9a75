"""Size to a service level: the highest load the measured platform carries within the SLA, and the
smallest single change (cores, CPU speed, disk speed) that carries a target load within it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from capmark.errors import CapmarkError
from capmark.plan.dbmodel import Config, DbModel, Prediction, PredictionJson, solve, solve_open, spread_model

_SLA = re.compile(r"^\s*(mean|avg|p50|p95|p99)\s*(<=|<)\s*(\d+(?:\.\d+)?)\s*(us|ms|s)\s*$", re.IGNORECASE)
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
# Search limits of a sizing: each bounds a bisection, so a target no change can meet ends in a few
# dozen model solutions with "not reachable within the limits" instead of a search without end.
MAX_JOBS = 4096  # most jobs searched for the SLA; the model is saturated long before on any measured host
MAX_CORES = 1024  # most cores tried for a target load
MAX_FACTOR = 64.0  # largest CPU or disk speed-up tried: far beyond one hardware generation
NAMED_LOADS = 5  # unsettled loads a note names before it counts the rest
MAX_CAPACITY_RATE = 1e12  # units/s: the capacity search doubles up to here; no database host comes near it


class Option(TypedDict):
    """One change alone that meets the SLA at the target rate: its value (cores, or a speed factor) and how big a
    step it is relative to the measured platform; None where none within the limits does."""

    value: float | None
    relative: float | None


class Options(TypedDict):
    cores: Option
    cpu_speed: Option
    disk_speed: Option


class Target(TypedDict):
    """What a target arrival rate within the SLA needs: nothing, or the smallest single change."""

    target_rate: float
    meets_now: bool
    now: PredictionJson  # the measured platform at the target rate
    options: Options
    smallest: str | None  # the option that is the smallest relative step (None: meets now, or none does)
    reachable: bool
    limits: str
    note: str | None
    converged: bool
    unsettled: list[str]
    unsettled_note: str | None


@dataclass(frozen=True)
class Sla:
    metric: str  # mean | p95 | p99
    limit_s: float
    text: str

    def value(self, p: Prediction) -> float | None:
        return {"mean": p.response_time_s, "p95": p.p95_s, "p99": p.p99_s}[self.metric]

    def met(self, p: Prediction) -> bool:
        v = self.value(p)
        return not p.saturated and v is not None and v <= self.limit_s


def parse_sla(text: str) -> Sla:
    m = _SLA.match(str(text))
    if not m:
        raise CapmarkError(f"The SLA '{text}' is not valid; write a response-time metric, < and a time, e.g. "
                           "\"p95<5ms\", \"mean<2ms\" or \"p99<20ms\".")
    metric = "mean" if m.group(1).lower() == "avg" else m.group(1).lower()
    if metric == "p50":
        raise CapmarkError("The SLA metric p50 is not predicted; use mean, p95 or p99.")
    limit_s = float(m.group(3)) * _SCALE[m.group(4).lower()]
    if not 0 < limit_s < float("inf"):
        raise CapmarkError(f"The SLA '{text}' needs a positive, finite time limit, e.g. \"p95<5ms\".")
    return Sla(metric, limit_s, text.strip())


class _Tried:
    """The model solutions a search made, keeping the loads whose solution did not settle: a search decides on
    every one of them, so its answer is only as firm as they are."""

    def __init__(self) -> None:
        self.unsettled: list[str] = []

    def check(self, p: Prediction, load: str) -> Prediction:
        if not p.converged and load not in self.unsettled:
            self.unsettled.append(load)
        return p


def unsettled_note(loads: list[str]) -> str | None:
    """The sentence a search's answer carries when solutions it decided on did not settle."""
    if not loads:
        return None
    named = ", ".join(loads[:NAMED_LOADS]) + (f" and {len(loads) - NAMED_LOADS} more" if len(loads) > NAMED_LOADS else "")
    return f"the model did not settle at {named} during this search, so the answer near there rests on rough figures"


@dataclass(kw_only=True)
class JobsAnswer:
    """The most jobs within an SLA (0: even one job misses it), the predictions at it and at one job more."""

    jobs: int
    at: Prediction | None
    beyond: Prediction
    limit_reached: bool  # the SLA still held at MAX_JOBS: the answer is the search's limit, not where it breaks
    unsettled: list[str]  # loads whose solution did not settle while searching

    @property
    def note(self) -> str | None:
        return unsettled_note(self.unsettled)


@dataclass(kw_only=True)
class RateAnswer:
    """The highest arrival rate within an SLA (0: even a trickle misses it) and the prediction there."""

    rate: float
    at: Prediction | None
    limit_reached: bool  # the open model never saturated below MAX_CAPACITY_RATE: the search ended at that limit
    unsettled: list[str]

    @property
    def note(self) -> str | None:
        return unsettled_note(self.unsettled)


def max_jobs(model: DbModel, sla: Sla, think_s: float, config: Config | None = None,
             progress: Callable[[str], None] | None = None) -> JobsAnswer:
    """The most jobs whose predicted response time meets the SLA, its prediction, and the one-more prediction.
    Response time rises with jobs, so a doubling search then bisection (at most 2 log2 MAX_JOBS solutions)."""
    tried = _Tried()

    def at(jobs: int) -> Prediction:
        return tried.check(solve(model, jobs, think_s, config), f"{jobs:,} jobs")

    def met(jobs: int) -> bool:
        if progress:
            progress(f"{model.workload}: most jobs within {sla.text}: trying {jobs}")
        return sla.met(at(jobs))

    first = at(1)
    if not sla.met(first):
        return JobsAnswer(jobs=0, at=None, beyond=first, limit_reached=False, unsettled=tried.unsettled)
    lo, hi = 1, 2
    while hi <= MAX_JOBS and met(hi):
        lo, hi = hi, hi * 2
    limit = hi > MAX_JOBS
    while not limit and hi - lo > 1:
        mid = (lo + hi) // 2
        if met(mid):
            lo = mid
        else:
            hi = mid
    return JobsAnswer(jobs=lo, at=at(lo), beyond=at(lo + 1), limit_reached=limit, unsettled=tried.unsettled)


def sizing_range(model: DbModel, sla: Sla) -> tuple[list[int] | None, list[float] | None]:
    """The most jobs and the highest arrival rate within the SLA with every measured demand moved by its spread over
    the calibration steps, more demand (the low end) first; None where the calibration had no spread, or where a
    search ended at its limit."""
    if not model.demand_spread:
        return None, None
    more, less = spread_model(model, 1), spread_model(model, -1)
    jobs = [max_jobs(more, sla, model.think_s), max_jobs(less, sla, model.think_s)]
    rates = [max_rate(more, sla), max_rate(less, sla)]
    # an end the search stopped at its limit is the limit, not an answer: no range is claimed from it
    return (None if any(j.limit_reached for j in jobs) else [j.jobs for j in jobs],
            None if any(r.limit_reached for r in rates) else [r.rate for r in rates])


def capacity(model: DbModel, config: Config | None = None) -> tuple[float, bool]:
    """The arrival rate at which the open model's busiest station reaches 100 %, and whether the search stopped
    at MAX_CAPACITY_RATE without finding it (then the rate is that limit)."""
    lo, hi = 0.0, 1.0
    while not solve_open(model, hi, config).saturated:
        lo, hi = hi, hi * 2
        if hi > MAX_CAPACITY_RATE:
            return lo, True
    for _ in range(60):
        mid = (lo + hi) / 2
        if solve_open(model, mid, config).saturated:
            hi = mid
        else:
            lo = mid
    return lo, False


def max_rate(model: DbModel, sla: Sla, config: Config | None = None) -> RateAnswer:
    """The highest arrival rate (units/s) whose predicted response time meets the SLA (open model)."""
    tried = _Tried()

    def at(rate: float) -> Prediction:
        return tried.check(solve_open(model, rate, config), f"{rate:,.0f} {model.unit}s/s")

    cap, limit = capacity(model, config)
    lo, hi = 0.0, cap
    if not sla.met(at(cap * 1e-6)):
        return RateAnswer(rate=0.0, at=None, limit_reached=False, unsettled=tried.unsettled)
    for _ in range(60):
        mid = (lo + hi) / 2
        if sla.met(at(mid)):
            lo = mid
        else:
            hi = mid
    return RateAnswer(rate=lo, at=at(lo), limit_reached=limit and lo >= cap * (1 - 1e-9), unsettled=tried.unsettled)


def _min_factor(meets: Callable[[float], bool]) -> float | None:
    if not meets(MAX_FACTOR):
        return None
    lo, hi = 1.0, MAX_FACTOR
    for _ in range(40):
        mid = (lo + hi) / 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _fewest_cores(model: DbModel, sla: Sla, rate: float, tried: _Tried | None = None) -> int | None:
    """The fewest cores above the measured ones that meet the SLA at `rate` (more cores never hurt), by
    bisection up to MAX_CORES; None if even MAX_CORES do not."""
    seen = tried or _Tried()

    def meets(cores: int) -> bool:
        return sla.met(seen.check(solve_open(model, rate, Config(cores)), f"{cores:,} cores"))

    lo, hi = model.cores, max(model.cores + 1, MAX_CORES)
    if not meets(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return hi


def limits_text() -> str:
    return f"up to {MAX_CORES:,} cores, CPU speed x{MAX_FACTOR:g}, disk speed x{MAX_FACTOR:g}"


def check_target_rate(rate: float) -> None:
    """Any finite positive rate has an answer (perhaps "not reachable within the limits"); nan and inf have none."""
    if not 0 < rate < math.inf:
        raise CapmarkError(f"--target-tps must be a positive number of units per second; got {rate:g}.")


def smallest_change(model: DbModel, sla: Sla, rate: float) -> Target:
    """For a target arrival rate: does the measured platform meet the SLA, and if not, the least cores, CPU
    speed and disk speed that do (each alone), and which of them is the smallest relative step."""
    check_target_rate(rate)
    tried = _Tried()
    now = tried.check(solve_open(model, rate, Config(model.cores)), "the measured platform")
    cores = None if sla.met(now) else _fewest_cores(model, sla, rate, tried)

    def meets(key: str) -> Callable[[float], bool]:
        def at(x: float) -> bool:
            config = Config(model.cores, cpu_speed=x) if key == "cpu_speed" else Config(model.cores, disk_speed=x)
            return sla.met(tried.check(solve_open(model, rate, config), f"{key.replace('_', ' ')} x{x:.2f}"))
        return at

    speeds = {key: None if sla.met(now) else _min_factor(meets(key)) for key in ("cpu_speed", "disk_speed")}
    options = Options(cores=Option(value=cores, relative=cores / model.cores - 1 if cores else None),
                      cpu_speed=_speed_option(speeds["cpu_speed"]), disk_speed=_speed_option(speeds["disk_speed"]))
    relative = {"cores": options["cores"]["relative"], "cpu_speed": options["cpu_speed"]["relative"],
                "disk_speed": options["disk_speed"]["relative"]}
    feasible = {k: v for k, v in relative.items() if v is not None}
    best = min(feasible, key=lambda k: feasible[k]) if feasible else None
    reachable = sla.met(now) or best is not None
    return Target(target_rate=rate, meets_now=sla.met(now), now=now.to_dict(), options=options,
                  smallest=None if sla.met(now) else best, reachable=reachable, limits=limits_text(),
                  note=None if reachable else f"{rate:,.0f} {model.unit}s/s within {sla.text} is not reachable by any "
                                              f"single change within the limits ({limits_text()}).",
                  converged=not tried.unsettled, unsettled=tried.unsettled,
                  unsettled_note=unsettled_note(tried.unsettled))


def _speed_option(factor: float | None) -> Option:
    return Option(value=factor, relative=factor - 1 if factor else None)
