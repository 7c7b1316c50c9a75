"""What-if scenarios against a calibrated baseline (Bulumulle and Bordin's process: baseline, growth, configuration).

The baseline is a measured step (default: the calibration step) on the measured platform. A scenario
changes the platform (cores, CPU speed, disk speed, number of data disks) and the load: more jobs or
another think time keep the load closed; growth is more business volume, so it multiplies the
baseline's throughput as an arrival rate and is solved with the open model (the baseline row of a
growth series is then the open model at the baseline's throughput, so that the rows compare).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from capmark.config import parse_duration, read_toml
from capmark.errors import CapmarkError
from capmark.plan.dbmodel import (
    MAX_CORES,
    MAX_DISKS,
    MAX_JOBS_SOLVED,
    MAX_SPEED_FACTOR,
    Config,
    DbModel,
    Prediction,
    PredictionJson,
    at_spread_ends,
    solve,
    solve_open,
)

_GROWTH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*(?:[xX*]\s*(\d+))?\s*$")
MAX_THINK_S = 86_400.0  # a day per unit: beyond it a job offers no load a model can tell from none
MAX_GROWTH_PCT = 10_000  # per period: beyond a hundredfold load the model is saturated anyway
CHANGE_KEYS = ("growth", "jobs", "think", "cpus", "cpu_speed", "disk_speed", "disks", "rate")


class Changes(TypedDict, total=False):
    """What a scenario changes: only the settings it sets (the speeds where they are not 1)."""

    growth: float
    jobs: int
    think_s: float
    rate: float
    cpus: int
    disks: int
    cpu_speed: float
    disk_speed: float


class ChangeVsBaseline(TypedDict, total=False):
    """Per cent change against the baseline solved the same way (empty for the baselines themselves)."""

    throughput: float | None
    response_time_s: float | None
    p95_s: float | None


class SpreadRange(TypedDict):
    """A scenario solved with every measured demand moved by its spread over the calibration steps (more demand,
    less demand): [low, high] of its throughput and mean response time; an end is None where that model saturates
    an open load."""

    throughput: list[float | None]
    response_time_s: list[float | None]


class OutcomeJson(TypedDict):
    name: str
    changes: Changes
    prediction: PredictionJson
    change_vs_baseline_pct: ChangeVsBaseline
    # None where the calibration had no spread to go by, or the rows were simulated; absent from what-ifs saved by
    # capmark before it gave ranges
    spread_range: NotRequired[SpreadRange | None]


class Baseline(TypedDict):
    jobs: int
    think_s: float
    throughput: float
    rate: NotRequired[float]  # an open-loop baseline's arrival rate (units/s): the model calibrated on --rate steps


class Evaluation(TypedDict):
    """The baseline and every scenario against it."""

    baseline: Baseline
    model: list[int]  # the job counts the model was calibrated on
    scenarios: list[OutcomeJson]
    converged: bool  # every scenario's prediction settled
    unconverged_scenarios: list[str]


@dataclass
class Scenario:
    name: str
    _: KW_ONLY  # eight optional changes, most of them numbers: named at every call
    growth: float | None = None  # factor on the baseline throughput (1.2 = +20 %)
    jobs: int | None = None
    think_s: float | None = None
    rate: float | None = None  # an explicit arrival rate (units/s), open model
    cpus: int | None = None
    cpu_speed: float = 1.0
    disk_speed: float = 1.0
    disks: int | None = None

    def config(self, model: DbModel) -> Config:
        return Config(self.cpus or model.cores, cpu_speed=self.cpu_speed, disk_speed=self.disk_speed, disks=self.disks)

    def changes(self) -> Changes:
        out = Changes()
        if self.growth is not None:
            out["growth"] = self.growth
        if self.jobs is not None:
            out["jobs"] = self.jobs
        if self.think_s is not None:
            out["think_s"] = self.think_s
        if self.rate is not None:
            out["rate"] = self.rate
        if self.cpus is not None:
            out["cpus"] = self.cpus
        if self.disks is not None:
            out["disks"] = self.disks
        if self.cpu_speed != 1.0:
            out["cpu_speed"] = self.cpu_speed
        if self.disk_speed != 1.0:
            out["disk_speed"] = self.disk_speed
        return out


@dataclass
class Outcome:
    scenario: Scenario
    prediction: Prediction
    change_pct: ChangeVsBaseline = field(default_factory=lambda: ChangeVsBaseline())
    spread_range: SpreadRange | None = None

    def to_dict(self) -> OutcomeJson:
        return OutcomeJson(name=self.scenario.name, changes=self.scenario.changes(),
                           prediction=self.prediction.to_dict(), change_vs_baseline_pct=self.change_pct,
                           spread_range=self.spread_range)


def spread_range(model: DbModel, solved: Callable[[DbModel], Prediction]) -> SpreadRange | None:
    """The scenario solved (by `solved`) with the demands at either end of their spread; None without a spread."""
    ends = at_spread_ends(model, solved)
    if ends is None:
        return None
    more, less = ends

    def figure(p: Prediction, value: float | None) -> float | None:
        return None if p.saturated and p.offered_rate is not None else value

    return SpreadRange(throughput=[figure(more, more.throughput), figure(less, less.throughput)],
                       response_time_s=[figure(less, less.response_time_s), figure(more, more.response_time_s)])


def parse_growth(text: str) -> list[float]:
    """'20%x3' -> [1.2, 1.44, 1.728] (compounded periods); '20%' -> [1.2]."""
    m = _GROWTH.match(str(text))
    if not m:
        raise CapmarkError(f"The growth '{text}' is not valid; write a percentage per period and the number of "
                           "periods, e.g. 20%x3.")
    rate, periods = float(m.group(1)) / 100, int(m.group(2) or 1)
    if rate > MAX_GROWTH_PCT / 100:
        raise CapmarkError(f"The growth '{text}' is above {MAX_GROWTH_PCT:,}% per period; a model calibrated on one "
                           "load says nothing about a hundredfold one.")
    if periods < 1 or periods > 50:
        raise CapmarkError(f"The growth '{text}' needs between 1 and 50 periods.")
    return [(1 + rate) ** k for k in range(1, periods + 1)]


def growth_name(factor: float) -> str:
    return f"BL+{(factor - 1) * 100:.4g}%"


def _positive(value: Any, what: str, integer: bool = False, at_most: float = math.inf) -> Any:
    expected = f"a positive, finite {'whole ' if integer else ''}number"
    if isinstance(value, bool):
        raise CapmarkError(f"The {what} must be {expected}; got {value!r}.")
    try:
        number = int(value) if integer else float(value)
        if not math.isfinite(float(value)):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise CapmarkError(f"The {what} must be {expected}; got {value!r}.") from None
    if number > at_most:  # before the whole-number check: a float cannot hold a huge whole number exactly
        raise CapmarkError(f"The {what} must be at most {at_most:,g}; got {value}.")
    if number <= 0 or (integer and float(value) != number):
        raise CapmarkError(f"The {what} must be a positive {'whole ' if integer else ''}number; got {value}.")
    return number


def scenario(name: str, growth: float | None = None, **changes: Any) -> Scenario:
    """A checked scenario from loose values (command line or TOML)."""
    s = Scenario(name, growth=growth)
    for key, value in changes.items():
        if value is None:
            continue
        if key == "jobs":
            s.jobs = _positive(value, "number of jobs", integer=True, at_most=MAX_JOBS_SOLVED)
        elif key == "think":
            s.think_s = parse_duration(value, "think time")
            if s.think_s > MAX_THINK_S:
                raise CapmarkError(f"The think time must be at most {MAX_THINK_S / 3600:g} hours per unit (beyond, "
                                   f"the load is nil); got {value}.")
        elif key == "rate":
            s.rate = _positive(value, "arrival rate")
        elif key == "cpus":
            s.cpus = _positive(value, "number of CPUs", integer=True, at_most=MAX_CORES)
        elif key == "disks":
            s.disks = _positive(value, "number of disks", integer=True, at_most=MAX_DISKS)
        elif key in ("cpu_speed", "disk_speed"):
            setattr(s, key, _positive(value, key.replace("_", " ") + " factor", at_most=MAX_SPEED_FACTOR))
        else:
            raise CapmarkError(f"Unknown scenario setting '{key}'; use one of: {', '.join(CHANGE_KEYS)}.")
    return s


# open-ended: the user's loose settings (command line or a TOML table), checked by scenario()
def expand(name: str, changes: dict[str, Any]) -> list[Scenario]:
    """One scenario, or one per growth period when the changes include growth ('20%x3'); without a name
    it is called after its changes ('cpus 4, jobs 8'), growth periods after the growth (BL+20%)."""
    changes = dict(changes)
    growth = changes.pop("growth", None)
    label = name or ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in changes.items())
    if growth is None:
        return [scenario(label, **changes)]
    factors = parse_growth(growth)
    return [scenario(f"{label} {growth_name(g)}".strip(), g, **changes) for g in factors]


def load_scenarios(path: Path) -> list[Scenario]:
    """A TOML file with [[scenario]] tables: name plus any of growth, jobs, think, rate, cpus, cpu_speed,
    disk_speed, disks."""
    doc = read_toml(path, "scenario file")
    tables = doc.get("scenario")
    if not isinstance(tables, list) or not tables:
        raise CapmarkError(f"The scenario file {path} has no [[scenario]] tables; add one per scenario with a name and "
                           "its changes.")
    out = []
    for i, t in enumerate(tables, 1):
        if not isinstance(t, dict):
            raise CapmarkError(f"Scenario {i} of {path} is not a table; write each scenario as a [[scenario]] section.")
        t = dict(t)
        name = t.pop("name", f"scenario {i}")
        if not isinstance(name, str) or not name.strip():
            raise CapmarkError(f"Scenario {i} of {path} has the name {name!r}; write it as a non-empty string, e.g. "
                               "name = \"double the cores\".")
        if "growth" in t and not isinstance(t["growth"], str):
            raise CapmarkError(f"The growth of scenario {name} in {path} must be a string such as \"20%x3\"; got "
                               f"{t['growth']!r}.")
        out += expand(name, t)
    unknown = set(doc) - {"scenario"}
    if unknown:
        raise CapmarkError(f"The scenario file {path} has unknown top-level key(s) {', '.join(sorted(unknown))}; put "
                           "every setting in a [[scenario]] table.")
    return out


def evaluate(model: DbModel, base_jobs: int, base_think_s: float, scenarios: list[Scenario],
             progress: Callable[[str], None] | None = None, solver: str = "mva",
             base_rate: float | None = None) -> Evaluation:
    """Baseline and every scenario, each with the change vs the baseline solved the same way. With solver 'sim'
    the closed loads are simulated; growth and arrival rates stay with the open model (the simulation plays
    a closed load only). With `base_rate` (a model calibrated on open-loop steps) the baseline is the open model
    at that rate, the load that was measured; the closed scenarios keep base_jobs."""
    from capmark.plan.simulate import solver as solver_for

    closed = solver_for(solver)
    ranged = solver == "mva"  # a simulated row's spread would take three simulations: its own interval stands

    def closed_range(jobs: int, think_s: float, cfg: Config | None = None) -> SpreadRange | None:
        return spread_range(model, lambda m: solve(m, jobs, think_s, cfg)) if ranged else None

    def open_range(rate: float, cfg: Config | None = None) -> SpreadRange | None:
        return spread_range(model, lambda m: solve_open(m, rate, cfg))

    baseline = Baseline(jobs=base_jobs, think_s=base_think_s, throughput=0.0)
    open_base: Prediction | None
    if base_rate:
        closed_base = open_base = solve_open(model, base_rate)
        baseline["rate"] = base_rate
        rows = [Outcome(Scenario("Baseline", rate=base_rate), open_base, spread_range=open_range(base_rate))]
    else:
        closed_base = closed(model, base_jobs, base_think_s)
        base_rate = closed_base.throughput or 0.0
        open_base = solve_open(model, base_rate) if any(s.growth or s.rate for s in scenarios) else None
        rows = [Outcome(Scenario("Baseline", jobs=base_jobs, think_s=base_think_s), closed_base,
                        spread_range=closed_range(base_jobs, base_think_s))]
        if open_base is not None:
            rows.append(Outcome(Scenario("Baseline (open)", rate=base_rate), open_base,
                                spread_range=open_range(base_rate)))
    baseline["throughput"] = closed_base.throughput or 0.0
    for s in scenarios:
        if progress:
            progress(f"{model.workload}: scenario {s.name}")
        cfg = s.config(model)
        # from an open baseline, a scenario that names no closed load (jobs, think time) keeps the open one
        open_load = s.growth or s.rate or (baseline.get("rate") and s.jobs is None and s.think_s is None)
        if open_load:
            rate = s.rate or base_rate * (s.growth or 1.0)
            p, ref, span = solve_open(model, rate, cfg), open_base, open_range(rate, cfg)
        else:
            jobs, think_s = s.jobs or base_jobs, base_think_s if s.think_s is None else s.think_s
            p, ref, span = closed(model, jobs, think_s, cfg), closed_base, closed_range(jobs, think_s, cfg)
        rows.append(Outcome(s, p, _change(p, ref), span))
    return Evaluation(baseline=baseline,
                      model=model.calibrated_from, scenarios=[o.to_dict() for o in rows],
                      converged=all(o.prediction.converged for o in rows),
                      unconverged_scenarios=[o.scenario.name for o in rows if not o.prediction.converged])


def _change(p: Prediction, ref: Prediction | None) -> ChangeVsBaseline:
    def pct(a: float | None, b: float | None) -> float | None:
        return (a / b - 1) * 100 if a is not None and b else None

    if ref is None:
        return ChangeVsBaseline()
    return ChangeVsBaseline(throughput=pct(p.throughput, ref.throughput),
                            response_time_s=pct(p.response_time_s, ref.response_time_s), p95_s=pct(p.p95_s, ref.p95_s))
