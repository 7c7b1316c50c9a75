"""What-if on a baseline: growth (compounded per period, for all workloads or one), more or fewer cores, faster CPUs or
disks, a workload moved off the host. Per scenario: utilisation per resource, response time and stretch per
workload, and the first scenario that breaks an SLA or the utilisation threshold.

A p95 is predicted from the mean by the exponential assumption (p95 = mean x ln 20, about 3.0 x mean): the
observation holds means per statement, not distributions, so nothing better is known.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from capmark.capacity.baseline import STRETCH_LIMIT, UTILISATION_THRESHOLD, BaselineDocument, BaselineModel, solve
from capmark.capacity.document import CapacityDocument
from capmark.errors import CapmarkError

P95_OVER_MEAN = math.log(20)  # the exponential distribution's 95th percentile over its mean
P99_OVER_MEAN = math.log(100)
MAX_GROWTH_PCT = 10_000.0  # per period: beyond a hundredfold the model is saturated anyway
MAX_PERIODS = 100  # growth periods a scenario list or a sizing search goes through
MAX_CORES = 4096
MAX_SPEED = 100.0
_GROWTH = re.compile(r"^\s*(?:([^=\s][^=]*?)\s*=\s*)?(-?\d+(?:\.\d+)?)\s*%\s*(?:[xX*]\s*(\d+))?\s*$")
_SLA = re.compile(r"^\s*([^:]+?)\s*:\s*(mean|avg|p95|p99)\s*(<=|<)\s*(\d+(?:\.\d+)?)\s*(us|ms|s)\s*$", re.IGNORECASE)
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


@dataclass(frozen=True, kw_only=True)
class Growth:
    """Growth per period, compounded: `workload` None for all of them."""

    workload: str | None
    per_period: float  # 0.2 for 20 %
    periods: int
    text: str

    def factor(self, period: int) -> float:
        return (1 + self.per_period) ** period


def parse_growth(text: str) -> Growth:
    """'20%x3' (all workloads, three periods), 'orders=30%x3' (one workload), '20%' (one period)."""
    m = _GROWTH.match(text)
    if not m:
        raise CapmarkError(f"--growth '{text}' is not a growth; write a percentage per period and the periods, e.g. "
                           "20%x3, or for one workload orders=30%x3.")
    pct = float(m.group(2))
    periods = int(m.group(3) or 1)
    if not -100 < pct <= MAX_GROWTH_PCT:
        raise CapmarkError(f"--growth '{text}': the growth per period must be above -100 % and at most "
                           f"{MAX_GROWTH_PCT:g} %, e.g. 20%x3.")
    if not 1 <= periods <= MAX_PERIODS:
        raise CapmarkError(f"--growth '{text}': the number of periods must be 1 to {MAX_PERIODS}, e.g. 20%x3.")
    return Growth(workload=m.group(1), per_period=pct / 100, periods=periods, text=text.strip())


@dataclass(frozen=True, kw_only=True)
class Sla:
    workload: str
    metric: str  # mean, p95, p99
    limit_s: float
    text: str

    def value(self, mean_s: float) -> float:
        return mean_s * {"mean": 1.0, "p95": P95_OVER_MEAN, "p99": P99_OVER_MEAN}[self.metric]


def parse_sla(text: str) -> Sla:
    """'orders:p95<50ms', 'lookups:mean<2ms' (p95 and p99 from the mean by the exponential assumption)."""
    m = _SLA.match(text)
    if not m:
        raise CapmarkError(f"--sla '{text}' is not an SLA; write workload:metric<time, e.g. \"orders:p95<50ms\" "
                           "(metric mean, p95 or p99).")
    limit = float(m.group(4)) * _SCALE[m.group(5).lower()]
    if not 0 < limit < math.inf:
        raise CapmarkError(f"--sla '{text}' needs a positive time limit, e.g. \"orders:p95<50ms\".")
    metric = "mean" if m.group(2).lower() == "avg" else m.group(2).lower()
    return Sla(workload=m.group(1), metric=metric, limit_s=limit, text=text.strip())


@dataclass(frozen=True, kw_only=True)
class WhatIfRequest:
    """The changes: growth series, hardware (applied to every scenario after the baseline), workloads moved off."""

    growth: tuple[Growth, ...] = ()
    cpus: int | None = None
    cpu_speed: float = 1.0
    disk_speed: float = 1.0
    move: tuple[str, ...] = ()
    slas: tuple[Sla, ...] = ()
    threshold: float = UTILISATION_THRESHOLD


def check_request(model: BaselineModel, request: WhatIfRequest) -> None:
    """Every workload named exists in the model; the hardware figures are in range. One sentence otherwise."""
    known = sorted(model.rates)
    named = [(g.workload, f"--growth {g.text}") for g in request.growth if g.workload is not None]
    named += [(w, f"--move {w}") for w in request.move] + [(s.workload, f"--sla {s.text}") for s in request.slas]
    for name, option in named:
        if name not in model.rates:
            raise CapmarkError(f"{option}: no modelled workload is named '{name}'; the workloads are "
                               f"{', '.join(known)}.")
    if request.cpus is not None and not 1 <= request.cpus <= MAX_CORES:
        raise CapmarkError(f"--cpus must be 1 to {MAX_CORES}; got {request.cpus}.")
    for option, value in (("--cpu-speed", request.cpu_speed), ("--disk-speed", request.disk_speed)):
        if not (0 < value <= MAX_SPEED and math.isfinite(value)):
            raise CapmarkError(f"{option} must be a factor above 0 and at most {MAX_SPEED:g} (1.5: 50 % faster); got "
                               f"{value:g}.")
    if not 0 < request.threshold < 1:
        raise CapmarkError(f"The utilisation threshold must be between 0 and 1; got {request.threshold:g}.")
    alls = [g for g in request.growth if g.workload is None]
    if len(alls) > 1 or len({g.workload for g in request.growth}) < len(request.growth):
        raise CapmarkError("--growth names the same workloads twice; give one growth for all, or one per workload.")


def growth_rates(model: BaselineModel, growth: Sequence[Growth], period: int, move: Sequence[str] = ()) -> dict[
        str, float]:
    """The rates in a period: each workload's own growth if it has one, else the growth for all; a growth compounds
    for its own periods and then stays. Moved workloads are gone."""
    everyone = next((g for g in growth if g.workload is None), None)
    rates = {}
    for n, rate in model.rates.items():
        if n in move:
            continue
        g = next((g for g in growth if g.workload == n), everyone)
        rates[n] = rate * (g.factor(min(period, g.periods)) if g is not None else 1.0)
    return rates


@dataclass(kw_only=True)
class ScenarioWorkload:
    name: str
    rate: float
    response_s: float  # infinite where a station it uses is saturated
    p95_s: float  # from the mean by the exponential assumption
    stretch: float
    slas_broken: list[str]


@dataclass(kw_only=True)
class Scenario:
    name: str  # "baseline", "+20 %", "+44 %", "4 cores", ...
    period: int  # growth period (0: none)
    growth_factor: dict[str, float]  # workload -> rate over the peak's
    utilisation: dict[str, float]  # resource -> utilisation
    workloads: list[ScenarioWorkload]
    over_threshold: list[str]  # resources at or above the threshold
    saturated: list[str]
    breaks: bool  # an SLA or the threshold broken


@dataclass(kw_only=True)
class WhatIfDocument(CapacityDocument):
    """capmark whatif on an observation: one row per scenario, and which breaks first."""

    SCHEMA = "capmark.capacity.whatif/1"

    observation_id: str
    threshold: float
    stretch_limit: float
    p95_assumption: str
    changes: list[str]
    scenarios: list[Scenario]
    first_breaking: str | None  # the first scenario that breaks an SLA or the threshold
    runs_out_in_period: int | None  # with growth: the first period that breaks (None: none of those given)
    notes: list[str] = field(default_factory=list)


def scenario(model: BaselineModel, name: str, rates: dict[str, float], request: WhatIfRequest, period: int,
             hardware: bool) -> Scenario:
    s = solve(model, rates, cpus=request.cpus if hardware else None,
              cpu_speed=request.cpu_speed if hardware else 1.0, disk_speed=request.disk_speed if hardware else 1.0)
    rows = []
    for n, rate in rates.items():
        broken = [sla.text for sla in request.slas if sla.workload == n and not sla.value(s.response_s[n]) <= sla.limit_s]
        rows.append(ScenarioWorkload(name=n, rate=rate, response_s=s.response_s[n],
                                     p95_s=s.response_s[n] * P95_OVER_MEAN, stretch=s.stretch[n], slas_broken=broken))
    over = [r for r, u in s.utilisation.items() if u >= request.threshold]
    return Scenario(name=name, period=period,
                    growth_factor={n: rates[n] / model.rates[n] for n in rates if model.rates[n] > 0},
                    utilisation=s.utilisation, workloads=rows, over_threshold=over, saturated=s.saturated,
                    breaks=bool(over or any(w.slas_broken for w in rows)))


def _hardware_text(request: WhatIfRequest) -> list[str]:
    out = []
    if request.cpus is not None:
        out.append(f"{request.cpus} cores")
    if request.cpu_speed != 1:
        out.append(f"CPU speed x{request.cpu_speed:g}")
    if request.disk_speed != 1:
        out.append(f"disk speed x{request.disk_speed:g}")
    out += [f"{w} moved off" for w in request.move]
    return out


def whatif(base: BaselineDocument, request: WhatIfRequest) -> WhatIfDocument:
    """The baseline as measured, then (with hardware changes or moves) the changed host at the peak's rates, then
    each growth period on the changed host."""
    return whatif_model(base.model, request, base.observation_id)


def whatif_model(model: BaselineModel, request: WhatIfRequest, observation_id: str = "") -> WhatIfDocument:
    """whatif on a model alone (the baseline document's `model`)."""
    check_request(model, request)
    hardware = _hardware_text(request)
    scenarios = [scenario(model, "baseline", dict(model.rates), request, 0, False)]
    if hardware:
        scenarios.append(scenario(model, ", ".join(hardware), growth_rates(model, (), 0, request.move), request, 0,
                                  True))
    periods = max((g.periods for g in request.growth), default=0)
    for period in range(1, periods + 1):
        rates = growth_rates(model, request.growth, period, request.move)
        scenarios.append(scenario(model, period_name(request.growth, period), rates, request, period, True))
    first = next((s for s in scenarios if s.breaks), None)
    runs_out = next((s.period for s in scenarios if s.breaks and s.period > 0), None)
    changes = [f"growth {g.text}" for g in request.growth] + hardware + [f"SLA {s.text}" for s in request.slas]
    return WhatIfDocument(observation_id=observation_id, threshold=request.threshold, stretch_limit=STRETCH_LIMIT,
                          p95_assumption="p95 = mean x ln 20 (exponential response times)", changes=changes,
                          scenarios=scenarios, first_breaking=first.name if first else None,
                          runs_out_in_period=runs_out)


def period_name(growth: Sequence[Growth], period: int) -> str:
    """'+44 %' for everyone's growth in period 2 of 20 %; 'period 2' where workloads grow differently."""
    if len(growth) == 1 and growth[0].workload is None:
        return f"+{(growth[0].factor(min(period, growth[0].periods)) - 1) * 100:.4g} %"
    return f"period {period}"
