"""Sizing on a baseline: in which growth period capacity runs out, and the least change (cores, CPU speed, disk
speed) that carries the growth asked for within the utilisation threshold and the SLAs.

Runs out: the growth compounds period after period (past the periods given, up to MAX_PERIODS) until a scenario
breaks the threshold or an SLA. The least change is searched for the last period asked for, one change at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from capmark.capacity.baseline import UTILISATION_THRESHOLD, BaselineDocument, BaselineModel
from capmark.capacity.document import CapacityDocument
from capmark.capacity.whatif import (
    MAX_CORES,
    MAX_PERIODS,
    MAX_SPEED,
    Growth,
    Scenario,
    Sla,
    WhatIfRequest,
    check_request,
    growth_rates,
    period_name,
    scenario,
)
from capmark.errors import CapmarkError

SPEED_STEP = 1.01  # speed factors are searched to 1 %


@dataclass(kw_only=True)
class Change:
    """One change alone that carries the target period: its value and the scenario it gives."""

    what: str  # cpus, cpu_speed, disk_speed
    value: float
    scenario: Scenario


@dataclass(kw_only=True)
class SizingDocument(CapacityDocument):
    SCHEMA = "capmark.capacity.sizing/1"

    observation_id: str
    threshold: float
    growth: list[str]
    slas: list[str]
    runs_out_in_period: int | None  # first period (1 = after one period's growth) that breaks; 0 = already now
    runs_out_scenario: Scenario | None
    target_period: int
    target: Scenario  # the target period on the measured host
    fits: bool  # the measured host carries the target period
    changes: list[Change]  # each single change that makes it fit (empty where it fits already or none does)
    notes: list[str] = field(default_factory=list)


def size(base: BaselineDocument, growth: tuple[Growth, ...], slas: tuple[Sla, ...] = (),
         threshold: float = UTILISATION_THRESHOLD) -> SizingDocument:
    """When the growth runs the baseline's host out of capacity, and what single change carries it."""
    return size_model(base.model, growth, slas, threshold, base.observation_id)


def size_model(model: BaselineModel, growth: tuple[Growth, ...], slas: tuple[Sla, ...] = (),
               threshold: float = UTILISATION_THRESHOLD, observation_id: str = "") -> SizingDocument:
    """size on a model alone (the baseline document's `model`)."""
    if not growth:
        raise CapmarkError("Sizing needs a growth, e.g. --growth 20%x3.")
    request = WhatIfRequest(growth=growth, slas=slas, threshold=threshold)
    check_request(model, request)
    runs_out: Scenario | None = None
    for period in range(0, MAX_PERIODS + 1):
        rates = growth_rates(model, _unbounded(growth), period)
        s = scenario(model, period_name(growth, period) if period else "baseline", rates, request, period, False)
        if s.breaks:
            runs_out = s
            break
    target_period = max(g.periods for g in growth)
    rates = growth_rates(model, growth, target_period)
    target = scenario(model, period_name(growth, target_period), rates, request, target_period, False)
    changes: list[Change] = []
    notes = []
    if target.breaks:
        cpu = next((st for st in model.stations if st.kind == "cpu"), None)
        if cpu is not None:
            for cores in range(cpu.servers + 1, MAX_CORES + 1):
                s = scenario(model, f"{cores} cores", rates, replace(request, cpus=cores), target_period, True)
                if not s.breaks:
                    changes.append(Change(what="cpus", value=cores, scenario=s))
                    break
        for what in ("cpu_speed", "disk_speed"):
            factor = SPEED_STEP
            while factor <= MAX_SPEED:
                changed = replace(request, **{what: factor})  # type: ignore[arg-type]
                s = scenario(model, f"{what.replace('_', ' ')} x{factor:.2f}", rates, changed, target_period, True)
                if not s.breaks:
                    changes.append(Change(what=what, value=round(factor, 2), scenario=s))
                    break
                factor *= SPEED_STEP
        if not changes:
            notes.append("no single change of cores, CPU speed or disk speed carries the target period; combine "
                         "them, or move a workload off the host")
    return SizingDocument(observation_id=observation_id, threshold=threshold, growth=[g.text for g in growth],
                          slas=[s.text for s in slas], runs_out_in_period=runs_out.period if runs_out else None,
                          runs_out_scenario=runs_out, target_period=target_period, target=target,
                          fits=not target.breaks, changes=changes, notes=notes)


def _unbounded(growth: tuple[Growth, ...]) -> tuple[Growth, ...]:
    """The same growth, compounding for every period (to find when capacity runs out)."""
    return tuple(replace(g, periods=MAX_PERIODS) for g in growth)
