"""All workloads by name, and the built-in suites."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from capmark.engines import registry as engines
from capmark.engines.base import Engine
from capmark.errors import CapmarkError
from capmark.workloads import da, dbwr, diag, dl, pgbench, pls, srv, sto, stress, tp, tpcc, wal
from capmark.workloads.base import ParamValue, Workload

WORKLOADS: dict[str, Workload] = {w.name: w for family in (srv, sto, wal, dbwr, dl, da, tp, tpcc, pls, stress, pgbench, diag)
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
    """What identifies a workload to another process: its name in the catalogue, else its recipe (a user's scripts,
    or a catalogue workload as another engine runs it; None: neither, so it can run only in this process)."""
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


def check_users(workload: Workload, params: dict[str, ParamValue], mode: str, think_s: float, rate: float) -> None:
    """Keying and think times make each job a user at a terminal, which only a client-side driver can be, and
    they pace it themselves."""
    if workload.user_model(params, "client") is None:
        return
    if mode != "client":
        raise CapmarkError(f"{workload.name} with keying and think times runs client-side (each job is one user); "
                           "add --mode client.")
    if think_s or rate:
        raise CapmarkError(f"{workload.name} with keying and think times paces its users itself; drop --think and "
                           "--rate.")


@dataclass(frozen=True)
class OnEngine:
    """A catalogue workload as another engine runs it: what another process needs to rebuild it (picklable)."""

    name: str
    engine: str

    def build(self) -> Workload:
        return _translated(get(self.name), engines.named(self.engine))


def for_engine(workload: Workload, engine: Engine, params: dict[str, ParamValue]) -> Workload:
    """The workload as this engine runs it (the catalogue is written for PostgreSQL), or one sentence saying why it
    cannot mean the same there."""
    if engine.server_side:
        return workload
    why = unavailable(workload, engine, params)
    if why:
        raise CapmarkError(f"{workload.name} cannot run on {engine.label}: {why}. `capmark list` shows the "
                           "workloads of each engine.")
    return _translated(workload, engine)


def unavailable(workload: Workload, engine: Engine, params: dict[str, ParamValue]) -> str:
    """Why the workload cannot run on this engine ('' when it can)."""
    if engine.server_side:
        return ""
    if not workload.client_side:
        return "it runs only as a server-side procedure, and capmark has none for this engine"
    if workload.own_data is not None:
        return "its tables and transactions are written for PostgreSQL only"
    if workload.recipe is not None or not workload.client_statements:  # the pgbench script interpreter
        return "it runs pgbench's scripts, which speak PostgreSQL's SQL and protocol"
    missing = [n for n, sql in workload.client_statements.items() if engine.client_statement(n, sql) is None]
    if missing:
        return f"capmark has no {engine.label} text for its statement{'s' if len(missing) > 1 else ''} " + \
            ", ".join(missing)
    settings = engine.session_settings(workload.session(params)) if workload.session else {}
    if isinstance(settings, str):
        return settings
    prepared = engine.preparation(workload.prepare_sql)
    return prepared if isinstance(prepared, str) else ""


def _translated(workload: Workload, engine: Engine) -> Workload:
    statements = {n: engine.client_statement(n, sql) or "" for n, sql in workload.client_statements.items()}
    session = workload.session
    prepared = engine.preparation(workload.prepare_sql)

    def settings(params: dict[str, ParamValue]) -> dict[str, str]:
        mapped = engine.session_settings(session(params)) if session else {}
        return mapped if isinstance(mapped, dict) else {}

    return dataclasses.replace(workload, client_statements=statements, procedure_sql="", helpers_sql=(),
                               session=settings if session else None,
                               prepare_sql=prepared if isinstance(prepared, tuple) else (),
                               recipe=OnEngine(workload.name, engine.name))
