"""Two observations' peaks side by side, per workload: rates, demands, response times and the change."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from capmark.capacity.baseline import BaselineDocument
from capmark.capacity.document import CapacityDocument


@dataclass(kw_only=True)
class Change:
    before: float | None
    after: float | None
    change_pct: float | None  # (after - before) / before; None where either is missing or before is 0


def change(before: float | None, after: float | None) -> Change:
    ok = before is not None and after is not None and math.isfinite(before) and math.isfinite(after) and before != 0
    pct = (after - before) / before * 100 if ok else None  # type: ignore[operator]
    return Change(before=before, after=after, change_pct=pct)


@dataclass(kw_only=True)
class WorkloadChange:
    name: str
    in_before: bool
    in_after: bool
    rate: Change
    response_s: Change
    demands_s: dict[str, Change]  # resource -> seconds per unit (each baseline's own estimator)


@dataclass(kw_only=True)
class ResourceChange:
    resource: str
    utilisation: Change


@dataclass(kw_only=True)
class ComparisonDocument(CapacityDocument):
    SCHEMA = "capmark.capacity.compare/1"

    before_id: str
    after_id: str
    before_peak: tuple[float, float]
    after_peak: tuple[float, float]
    workloads: list[WorkloadChange]
    resources: list[ResourceChange]
    notes: list[str] = field(default_factory=list)


def compare(before: BaselineDocument, after: BaselineDocument) -> ComparisonDocument:
    names = list(before.model.rates) + [n for n in after.model.rates if n not in before.model.rates]
    resources = [st.name for st in before.model.stations] + [st.name for st in after.model.stations
                                                             if st.name not in {s.name for s in before.model.stations}]

    def demand(doc: BaselineDocument, resource: str, name: str) -> float | None:
        st = next((s for s in doc.model.stations if s.name == resource), None)
        return st.demands.get(name) if st is not None else None

    rows = []
    for n in names:
        rows.append(WorkloadChange(
            name=n, in_before=n in before.model.rates, in_after=n in after.model.rates,
            rate=change(before.model.rates.get(n), after.model.rates.get(n)),
            response_s=change(before.model.measured_response_s.get(n), after.model.measured_response_s.get(n)),
            demands_s={r: change(demand(before, r, n), demand(after, r, n)) for r in resources}))
    util_before = {c.resource: c.measured for c in before.validation.resources}
    util_after = {c.resource: c.measured for c in after.validation.resources}
    notes = []
    if before.model.estimator != after.model.estimator:
        notes.append(f"the demands come from different estimators ({before.model.estimator} before, "
                     f"{after.model.estimator} after)")
    if before.host_cores != after.host_cores:
        notes.append(f"the host had {before.host_cores} cores before and {after.host_cores} after")
    return ComparisonDocument(before_id=before.observation_id, after_id=after.observation_id,
                              before_peak=(before.peak.start, before.peak.end),
                              after_peak=(after.peak.start, after.peak.end), workloads=rows,
                              resources=[ResourceChange(resource=r, utilisation=change(util_before.get(r),
                                                                                        util_after.get(r)))
                                         for r in resources], notes=notes)
