"""Size to a service level: the highest load the measured platform carries within the SLA, and the
smallest single change (cores, CPU speed, disk speed) that carries a target load within it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from capmark.errors import CapmarkError
from capmark.plan.dbmodel import Config, DbModel, Prediction, solve, solve_open

_SLA = re.compile(r"^\s*(mean|avg|p50|p95|p99)\s*(<=|<)\s*(\d+(?:\.\d+)?)\s*(us|ms|s)\s*$", re.IGNORECASE)
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
MAX_JOBS = 4096
MAX_FACTOR = 64.0


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
    return Sla(metric, float(m.group(3)) * _SCALE[m.group(4).lower()], text.strip())


def max_jobs(model: DbModel, sla: Sla, think_s: float, config: Config | None = None) -> tuple[int, Prediction | None,
                                                                                              Prediction]:
    """The most jobs whose predicted response time meets the SLA, its prediction, and the one-more prediction.
    Response time rises with jobs, so a doubling search then bisection."""
    first = solve(model, 1, think_s, config)
    if not sla.met(first):
        return 0, None, first
    lo, hi = 1, 2
    while hi <= MAX_JOBS and sla.met(solve(model, hi, think_s, config)):
        lo, hi = hi, hi * 2
    if hi > MAX_JOBS:
        return lo, solve(model, lo, think_s, config), solve(model, lo + 1, think_s, config)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if sla.met(solve(model, mid, think_s, config)):
            lo = mid
        else:
            hi = mid
    return lo, solve(model, lo, think_s, config), solve(model, lo + 1, think_s, config)


def capacity(model: DbModel, config: Config | None = None) -> float:
    """The arrival rate at which the open model's busiest station reaches 100 %."""
    lo, hi = 0.0, 1.0
    while not solve_open(model, hi, config).saturated:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            break
    for _ in range(60):
        mid = (lo + hi) / 2
        if solve_open(model, mid, config).saturated:
            hi = mid
        else:
            lo = mid
    return lo


def max_rate(model: DbModel, sla: Sla, config: Config | None = None) -> tuple[float, Prediction | None]:
    """The highest arrival rate (units/s) whose predicted response time meets the SLA (open model)."""
    cap = capacity(model, config)
    lo, hi = 0.0, cap
    if not sla.met(solve_open(model, cap * 1e-6, config)):
        return 0.0, None
    for _ in range(60):
        mid = (lo + hi) / 2
        if sla.met(solve_open(model, mid, config)):
            lo = mid
        else:
            hi = mid
    return lo, solve_open(model, lo, config)


def _min_factor(meets: Any) -> float | None:
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


def smallest_change(model: DbModel, sla: Sla, rate: float) -> dict[str, Any]:
    """For a target arrival rate: does the measured platform meet the SLA, and if not, the least cores, CPU
    speed and disk speed that do (each alone), and which of them is the smallest relative step."""
    base = Config(model.cores)
    now = solve_open(model, rate, base)
    options: dict[str, Any] = {}
    cores = next((c for c in range(model.cores + 1, 1025) if sla.met(solve_open(model, rate, Config(c)))), None)
    options["cores"] = {"value": cores, "relative": cores / model.cores - 1 if cores else None}
    for key in ("cpu_speed", "disk_speed"):
        f = _min_factor(lambda x, k=key: sla.met(solve_open(model, rate, Config(model.cores, **{k: x}))))
        options[key] = {"value": f, "relative": f - 1 if f else None}
    feasible = {k: v for k, v in options.items() if v["relative"] is not None}
    best = min(feasible, key=lambda k: feasible[k]["relative"]) if feasible else None
    return {"target_rate": rate, "meets_now": sla.met(now), "now": now.to_dict(), "options": options,
            "smallest": None if sla.met(now) else best}
