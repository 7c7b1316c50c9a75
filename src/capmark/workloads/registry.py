"""All workloads by name, and the default suite."""

from __future__ import annotations

from capmark.errors import CapmarkError
from capmark.workloads.base import Workload
from capmark.workloads.srv import SRV_QUERY1
from capmark.workloads.tp import TP_LIGHT

WORKLOADS: dict[str, Workload] = {w.name: w for w in (SRV_QUERY1, TP_LIGHT)}
DEFAULT_SUITE = ("srv-query1", "tp-light")


def get(name: str) -> Workload:
    try:
        return WORKLOADS[name.lower()]
    except KeyError:
        raise CapmarkError(f"Unknown workload '{name}'; `capmark list` shows the known ones "
                           f"({', '.join(WORKLOADS)}).") from None


def select(names: list[str] | None) -> list[Workload]:
    return [get(n) for n in (names or DEFAULT_SUITE)]


def check_params(workloads: list[Workload], given: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per-workload parameter values; a name no selected workload knows is an error."""
    known = {p.name for w in workloads for p in w.params}
    for name in given:
        if name not in known:
            names = ", ".join(sorted(known)) or "none"
            raise CapmarkError(f"Unknown parameter '{name}' for {', '.join(w.name for w in workloads)}; "
                               f"known parameters: {names}.")
    return {w.name: w.resolve_params(given) for w in workloads}
