"""All workloads by name, and the built-in suites."""

from __future__ import annotations

from typing import Any

from capmark.errors import CapmarkError
from capmark.workloads import da, dbwr, diag, dl, pgbench, pls, srv, sto, stress, tp, wal
from capmark.workloads.base import ParamValue, Workload

WORKLOADS: dict[str, Workload] = {w.name: w for family in (srv, sto, wal, dbwr, dl, da, tp, pls, stress, pgbench, diag)
                                  for w in family.WORKLOADS}
DIAGNOSTIC = {w.name for w in diag.WORKLOADS}  # reproduce a bottleneck on purpose: not in the full suite
SUITES: dict[str, tuple[str, ...]] = {
    "quick": ("srv-mixed", "tp-mixed1", "wal-lat1"),
    "full": tuple(name for name in WORKLOADS if name not in DIAGNOSTIC),
}
DEFAULT_SUITE = SUITES["quick"]


def get(name: str) -> Workload:
    try:
        return WORKLOADS[name.lower()]
    except KeyError:
        raise CapmarkError(f"Unknown workload '{name}'; `capmark list` shows the known ones.") from None


def reference(workload: Workload) -> Any:
    """What identifies a workload to another process: its name in the catalogue, else its recipe (None: neither,
    so it can run only in this process)."""
    if WORKLOADS.get(workload.name) is workload:
        return workload.name
    return workload.recipe


def resolve(ref: Any) -> Workload:
    """The workload a reference names (see reference())."""
    return get(ref) if isinstance(ref, str) else ref.build()


def select(names: list[str] | None) -> list[Workload]:
    chosen: list[Workload] = []
    for name in names or DEFAULT_SUITE:
        for n in SUITES.get(name, (name,)):
            chosen.append(get(n))
    return chosen


def check_params(workloads: list[Workload], given: dict[str, str]) -> dict[str, dict[str, ParamValue]]:
    """Per-workload parameter values; a name no selected workload knows is an error."""
    known = {p.name for w in workloads for p in w.params}
    for name in given:
        if name not in known:
            names = ", ".join(sorted(known)) or "none"
            raise CapmarkError(f"Unknown parameter '{name}' for {', '.join(w.name for w in workloads)}; "
                               f"known parameters: {names}.")
    return {w.name: w.resolve_params(given) for w in workloads}


def check_mode(workloads: list[Workload], mode: str) -> None:
    if mode == "client":
        server_only = [w.name for w in workloads if not w.client_side]
        if server_only:
            raise CapmarkError(f"{', '.join(server_only)} run server-side only; drop --mode client or choose "
                               "workloads with a client-side mode (`capmark list`).")
