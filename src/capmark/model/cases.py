"""Solve cases written in the format of shared/validation/queueing_cases.json (kind, method, model).

Input errors become one sentence (CapmarkError); results use the field names of the cases' `expect`.
Every field is checked for its type and range before a solver runs, so that a malformed file is named
as such instead of failing deep inside a recursion.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from capmark.errors import CapmarkError
from capmark.model import mva, usl
from capmark.model.open import effective_servers, mmm, quick_response_time

KINDS = ("closed", "closed-multiclass", "open", "usl-fit", "quick-formula", "quick-formula-solve-servers", "lqn")
CLOSED_METHODS = ("exact-mva", "exact-mva-load-dependent", "schweitzer-amva", "linearizer-amva")
LQN_METHODS = ("mol", "mol-exact")
SCHEMA_HINT = "see docs/models.md for the case format"

# Large populations are solved approximately (Bard-Schweitzer, which costs the same at any population; the
# result's method says so), so the bound is the solvers' own: beyond it floating point loses whole customers.
MAX_POPULATION = mva.MAX_POPULATION
# The exact layered solver ("mol-exact") solves every population vector of the software layer in each round:
# 200,000 vectors take a few seconds; more belong to the approximate method ("mol").
MAX_POPULATION_VECTORS = 200_000
MAX_CALL_PATHS = 10_000  # the layered solver visits every call path from the users once per solve


# --- results, keyed like the cases' `expect` ------------------------------------------------------------------

class ClosedCase(TypedDict):
    """A single-class closed model: per-station lists in the order of the case's stations."""

    method: str
    throughput: float
    response_time: float
    queue_lengths: list[float]
    utilizations: list[float]
    residence_times: list[float]
    residence_time_per_visit: list[float]
    bottleneck: str
    converged: bool
    iterations: int
    note: NotRequired[str]  # where the solver has something to say (an approximation that stopped short)


class MulticlassCase(TypedDict):
    """A multi-class closed model: per-class throughput and response time, per-station queues and busy."""

    method: str
    throughput: list[float]
    response_time: list[float]
    queue_lengths: list[float]
    utilizations: list[float]
    iterations: int


class OpenCase(TypedDict):
    """An M/M/m queue."""

    utilization: float
    wait_probability: float
    mean_queue_length_waiting: float
    waiting_time: float
    response_time: float
    stretch_factor: float


UslCase = TypedDict("UslCase", {  # functional form: one key is the Python keyword lambda
    "sigma": float, "kappa": float, "lambda": float, "se_sigma": float, "se_kappa": float, "se_lambda": float,
    "r_squared": float, "peak_concurrency": float, "peak_throughput": float, "amdahl": bool})


class QuickCase(TypedDict):
    response_time: float


class ServersCase(TypedDict):
    servers: float


class LayeredCase(TypedDict):
    throughput: float
    response_time: float
    processor_utilization: dict[str, float]
    task_utilization: dict[str, float]
    task_waiting_time: dict[str, float]
    iterations: int


CaseResult = ClosedCase | MulticlassCase | OpenCase | UslCase | QuickCase | ServersCase | LayeredCase


# --- field checks -------------------------------------------------------------------------------------------

def _number(value: Any, what: str, *, positive: bool = False) -> float:
    """A finite number: zero or more, or (positive) more than zero."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CapmarkError(f"{what} must be a number; got {value!r}.")
    if abs(value) > 1e300 or not math.isfinite(value):  # 1e300: a JSON integer too large for a float
        raise CapmarkError(f"{what} must be a finite number of sensible size; got {value!r:.40}.")
    if value < 0 or (positive and value == 0):
        raise CapmarkError(f"{what} must be {'positive' if positive else 'zero or more'}; got {value}.")
    return float(value)


def _whole(value: Any, what: str, maximum: int | None = None, why: str = "") -> int:
    """A whole number of at least 1 (servers, populations, multiplicities), at most maximum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CapmarkError(f"{what} must be a whole number of at least 1; got {value!r}.")
    if maximum is not None and value > maximum:
        raise CapmarkError(f"{what} is {value:,}, above the limit of {maximum:,}: {why}.")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:  # open-ended: a JSON object of the user's case file
    if not isinstance(value, dict):
        raise CapmarkError(f"{what} must be a JSON object; got {_kind(value)}; {SCHEMA_HINT}.")
    return value


def _list(value: Any, what: str, empty: bool = False) -> list[Any]:
    if not isinstance(value, list) or not (value or empty):
        raise CapmarkError(f"{what} must be a non-empty JSON list; got {_kind(value)}; {SCHEMA_HINT}.")
    return value


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise CapmarkError(f"{what} must be a non-empty string; got {value!r}.")
    return value


def _kind(value: Any) -> str:
    """A JSON type name for messages."""
    if value is None:
        return "nothing"
    return {dict: "an object", list: "a list" if value else "an empty list", str: f"the string {value!r}",
            bool: f"{str(value).lower()}"}.get(type(value), f"the number {value!r}")


def _population(value: Any, what: str = "The population") -> int:
    return _whole(value, what, MAX_POPULATION, "larger counts lose whole customers in floating point")


# --- single-class closed models -----------------------------------------------------------------------------

def _station(s: Any, i: int) -> mva.Station:
    s = _object(s, f"Station {i}")
    name = _name(s.get("name", f"station {i}"), f"The name of station {i}")
    if "demand" not in s and "service_time" not in s and "service_time_with_n_present" not in s:
        raise CapmarkError(f"Station {name} needs a demand, a service_time (with visits) or "
                           "service_time_with_n_present.")
    demand = _number(s["demand"], f"The demand of {name}") if "demand" in s else None
    st = _number(s["service_time"], f"The service time of {name}") if "service_time" in s else None
    visits = _number(s.get("visits", 1.0), f"The visits of {name}")
    servers = _whole(s.get("servers", 1), f"The servers of {name}", MAX_POPULATION, "more servers than any "
                     "population capmark solves")
    table = s.get("service_time_with_n_present")
    if table is not None:
        table = [_number(v, f"A service time of {name}", positive=True)
                 for v in _list(table, f"service_time_with_n_present of {name}")]
    kind = s.get("kind", "queue")
    if kind not in ("queue", "delay"):
        raise CapmarkError(f"Station {name} has kind {kind!r}; use queue or delay.")
    return mva.Station(name, demand=demand, visits=visits, service_time=st, kind=kind, servers=servers,
                       service_time_with_n_present=table)


def _stations(model: dict) -> list[mva.Station]:
    if not model.get("stations"):
        raise CapmarkError("The model has no stations; add a \"stations\" list.")
    return [_station(s, i) for i, s in enumerate(_list(model["stations"], "The stations"), start=1)]


def _has_work(stations: list[mva.Station], think_time: float) -> None:
    """A closed model whose every demand and think time is zero has no cycle time: throughput is undefined."""
    if think_time == 0 and all(s.total_demand == 0 for s in stations) and not any(
            s.service_time_with_n_present for s in stations):
        raise CapmarkError("Every demand and the think time are zero, so a customer's cycle takes no time; give "
                           "at least one station a positive demand.")


def _closed(model: dict, method: str | None) -> ClosedCase:
    method = method or "exact-mva"
    if method not in CLOSED_METHODS:
        raise CapmarkError(f"Unknown method {method!r} for a closed model; use {', '.join(CLOSED_METHODS)}.")
    stations = _stations(model)
    z = _number(model.get("think_time", 0.0), "The think time")
    n = _population(model.get("population"))
    _has_work(stations, z)
    approximate: dict[str, Callable[[list[mva.Station], int, float], mva.ClosedResult]] = {
        "schweitzer-amva": mva.schweitzer_mva, "linearizer-amva": mva.linearizer}
    solver = approximate.get(method, mva.exact_mva)
    r = solver(stations, n, z)
    out = ClosedCase(method=r.method, throughput=r.throughput, response_time=r.response_time,
                     queue_lengths=r.queue_lengths, utilizations=r.utilizations, residence_times=r.residence_times,
                     residence_time_per_visit=r.residence_time_per_visit(stations),
                     bottleneck=stations[max(range(len(stations)), key=lambda i: r.utilizations[i])].name,
                     converged=r.converged, iterations=r.iterations)
    if r.note:
        out["note"] = r.note
    return out


# --- multi-class closed models ------------------------------------------------------------------------------

def _per_class(value: Any, what: str, classes: int) -> list[float]:
    """One number per class (a single number applies to every class)."""
    if isinstance(value, list):
        if len(value) != classes:
            raise CapmarkError(f"{what} has {len(value)} entries for {classes} classes; give one per class.")
        return [_number(v, what) for v in value]
    return [_number(value, what)] * classes


def _multiclass(model: dict) -> MulticlassCase:
    pops_raw = model.get("population")
    if not isinstance(pops_raw, list) or not pops_raw:
        raise CapmarkError("A multi-class model needs a population list, one entry per class.")
    pops = [_population(p, f"The population of class {c}") for c, p in enumerate(pops_raw, start=1)]
    if "classes" in model:
        names = _list(model["classes"], "The classes")
        if len(names) != len(pops):
            raise CapmarkError(f"The model names {len(names)} classes but gives a population for {len(pops)}; give "
                               "one population per class.")
    stations = _list(model.get("stations"), "The stations")
    demands, delay = [], []
    for i, s in enumerate(stations, start=1):
        s = _object(s, f"Station {i}")
        name = _name(s.get("name", f"station {i}"), f"The name of station {i}")
        if "demand" not in s:
            raise CapmarkError(f"Station {name} has no demand; give \"demand\": one number per class.")
        if not isinstance(s["demand"], list):
            raise CapmarkError(f"The demand of {name} must be a list with one number per class; got "
                               f"{_kind(s['demand'])}.")
        demands.append(_per_class(s["demand"], f"The demand of {name}", len(pops)))
        kind = s.get("kind", "queue")
        if kind not in ("queue", "delay"):
            raise CapmarkError(f"Station {name} has kind {kind!r}; use queue or delay.")
        delay.append(kind == "delay")
    think = _per_class(model.get("think_time", 0.0), "The think time", len(pops))
    for c in range(len(pops)):
        if think[c] == 0 and all(d[c] == 0 for d in demands):
            raise CapmarkError(f"Class {c + 1} has no demand anywhere and no think time, so its cycle takes no time; "
                               "give it a positive demand.")
    r = mva.exact_mva_multiclass(demands, pops, think, delay)
    return MulticlassCase(method=r.method, throughput=r.throughput, response_time=r.response_time,
                          queue_lengths=r.queue_lengths, utilizations=r.utilizations, iterations=r.iterations)


# --- open models, USL, quick formula ------------------------------------------------------------------------

def _open(model: dict) -> OpenCase:
    lam = _number(model.get("arrival_rate"), "The arrival rate", positive=True)
    mu = _number(model.get("service_rate"), "The service rate", positive=True)
    m = _whole(model.get("servers", 1), "The servers", MAX_POPULATION, "more servers than any population capmark "
               "solves")
    r = mmm(lam, mu, m)
    return OpenCase(utilization=r.utilization, wait_probability=r.wait_probability,
                    mean_queue_length_waiting=r.mean_queue_length_waiting, waiting_time=r.waiting_time,
                    response_time=r.response_time, stretch_factor=r.response_time * mu)


def _usl_fit(model: dict) -> UslCase:
    n = [_number(v, "A concurrency", positive=True) for v in _list(model.get("concurrency"), "The concurrency")]
    x = [_number(v, "A throughput", positive=True) for v in _list(model.get("throughput"), "The throughput")]
    if len(n) != len(x):
        raise CapmarkError(f"The USL fit has {len(n)} concurrency values but {len(x)} throughputs; give one "
                           "throughput per concurrency.")
    if len(set(n)) < 4:
        raise CapmarkError(f"The USL has three parameters; fitting it needs at least 4 different concurrency values, "
                           f"got {len(set(n))}.")
    try:
        f = usl.fit(n, x)
    except (RuntimeError, ValueError) as err:  # scipy's least squares gave up
        raise CapmarkError(f"The USL does not fit these points ({err}); check the measurements.") from None
    return UslCase({"sigma": f.sigma, "kappa": f.kappa, "lambda": f.lam, "se_sigma": f.se_sigma,
                    "se_kappa": f.se_kappa, "se_lambda": f.se_lambda, "r_squared": f.r_squared,
                    "peak_concurrency": f.peak_concurrency, "peak_throughput": f.peak_throughput, "amdahl": f.amdahl})


def _quick(kind: str, model: dict) -> QuickCase | ServersCase:
    s = _number(model.get("service_time"), "The service time", positive=True)
    if kind == "quick-formula":
        return QuickCase(response_time=quick_response_time(
            s, _number(model.get("arrival_rate"), "The arrival rate"),
            _number(model.get("servers"), "The servers", positive=True)))
    return ServersCase(servers=effective_servers(
        s, _number(model.get("arrival_rate"), "The arrival rate", positive=True),
        _number(model.get("response_time"), "The response time", positive=True)))


# --- layered models -----------------------------------------------------------------------------------------

def _demands(value: Any, what: str, to: str) -> dict[str, float]:
    """An entry's phase demands ({processor: seconds}) or calls ({entry: visits}): non-negative numbers."""
    table = _object(value, what)
    return {_name(k, f"A key of {what}"): _number(v, f"{what} {to} {k}") for k, v in table.items()}


def _lqn_entry(e: Any, task: str, i: int) -> Any:
    from capmark.model import lqn

    e = _object(e, f"Entry {i} of task {task}")
    name = _name(e.get("name"), f"The name of entry {i} of task {task}")
    return lqn.Entry(name, _demands(e.get("phase1", {}), f"The phase1 demand of entry {name}", "on"),
                     _demands(e.get("phase2", {}), f"The phase2 demand of entry {name}", "on"),
                     _demands(e.get("calls", {}), f"The calls of entry {name}", "to"))


def _lqn_task(t: Any, i: int) -> Any:
    from capmark.model import lqn

    t = _object(t, f"Task {i}")
    name = _name(t.get("name"), f"The name of task {i}")
    reference = t.get("reference", False)
    if not isinstance(reference, bool):
        raise CapmarkError(f"The reference flag of task {name} must be true or false; got {reference!r}.")
    entries = [_lqn_entry(e, name, j) for j, e in enumerate(_list(t.get("entries"), f"The entries of task {name}"),
                                                          start=1)]
    multiplicity = (math.inf if t.get("multiplicity") is None
                    else float(_whole(t["multiplicity"], f"The multiplicity of task {name}")))
    population = 0
    if reference:
        population = _whole(t.get("population"), f"The population of the reference task {name}", MAX_POPULATION,
                            "larger counts lose whole customers in floating point")
    think = _number(t.get("think_time", 0.0), f"The think time of task {name}")
    return lqn.Task(name, entries, multiplicity=multiplicity, reference=reference, population=population,
                    think_time=think)


def _check_calls(tasks: list[Any]) -> None:
    """Calls must not lead back to the caller (a request would call itself without end), and the solver walks
    every call path from the users, so their number is bounded."""
    calls = {e.name: [c for c in e.calls if c != e.name] for t in tasks for e in t.entries}
    for t in tasks:
        for e in t.entries:
            if e.name in e.calls:
                raise CapmarkError(f"Entry {e.name} calls itself; a layered model's calls must not lead back to the "
                                   "caller.")
    paths: dict[str, int] = {}  # entry -> call paths starting there (itself included)
    for root in calls:
        stack: list[tuple[str, int]] = [(root, 0)]
        on_path = [root]
        while stack:
            name, i = stack.pop()
            callees = [c for c in calls[name] if c in calls]
            if i < len(callees):
                stack.append((name, i + 1))
                callee = callees[i]
                if callee in on_path:
                    cycle = " -> ".join([*on_path[on_path.index(callee):], callee])
                    raise CapmarkError(f"The calls form a cycle ({cycle}); a layered model's calls must not lead "
                                       "back to the caller.")
                if callee not in paths:
                    stack.append((callee, 0))
                    on_path.append(callee)
                continue
            paths[name] = 1 + sum(paths[c] for c in callees)
            if paths[name] > MAX_CALL_PATHS:
                raise CapmarkError(f"Entry {name} starts more than {MAX_CALL_PATHS:,} call paths; the layered solver "
                                   "walks each of them, so simplify the calls.")
            on_path.pop()


def _has_lqn_work(tasks: list[Any]) -> None:
    """The users' cycle must take time: a think time or a positive demand somewhere below them."""
    ref = next((t for t in tasks if t.reference), None)
    if ref is None or ref.think_time > 0:
        return
    if not any(d > 0 for t in tasks if not t.reference for e in t.entries
               for d in (*e.phase1.values(), *e.phase2.values())):
        raise CapmarkError("Every demand and the users' think time are zero, so a request takes no time; give an "
                           "entry a positive phase1 demand.")
    if not any(e.calls for e in ref.entries):
        raise CapmarkError(f"The reference task {ref.name} calls no entry and has no think time; give its entries "
                           "calls, e.g. \"calls\": {\"server\": 1}.")


def _lqn(case: dict) -> LayeredCase:
    """kind "lqn": processors [{name, multiplicity}], tasks [{name, reference, population, think_time,
    multiplicity, entries: [{name, phase1: {processor: demand}, phase2: {...}, calls: {entry: visits}}]}];
    method "mol" (Schweitzer device layer, default) or "mol-exact"."""
    from capmark.model import lqn

    model = case["model"]
    method = case.get("method", "mol")
    if method not in LQN_METHODS:
        raise CapmarkError(f"Unknown method {method!r} for a layered model; use mol or mol-exact.")
    procs = []
    for i, p in enumerate(_list(model.get("processors"), "The processors", empty=True), start=1):
        p = _object(p, f"Processor {i}")
        name = _name(p.get("name"), f"The name of processor {i}")
        procs.append(lqn.Processor(name, _whole(p.get("multiplicity", 1), f"The multiplicity of processor {name}")))
    tasks = [_lqn_task(t, i) for i, t in enumerate(_list(model.get("tasks"), "The tasks"), start=1)]
    entry_names = [e.name for t in tasks for e in t.entries]
    if len(set(entry_names)) != len(entry_names):
        twice = sorted({n for n in entry_names if entry_names.count(n) > 1})
        raise CapmarkError(f"Entry names must be unique; {', '.join(twice)} appear more than once.")
    _check_calls(tasks)
    _has_lqn_work(tasks)
    if method == "mol-exact":
        users = max((t.population for t in tasks if t.reference), default=1)
        vectors = math.prod(int(min(t.multiplicity, users)) + 1 for t in tasks if not t.reference)
        if vectors > MAX_POPULATION_VECTORS:
            raise CapmarkError(f"mol-exact would solve {vectors:,} population vectors per round, above the limit of "
                               f"{MAX_POPULATION_VECTORS:,}; use method mol.")
    r = lqn.solve(procs, tasks, device_solver="exact" if method == "mol-exact" else "schweitzer")
    return LayeredCase(throughput=r.throughput, response_time=r.response_time,
                       processor_utilization=r.processor_utilization, task_utilization=r.task_utilization,
                       task_waiting_time=r.task_waiting_time, iterations=r.iterations)


# --- cases and files ----------------------------------------------------------------------------------------

def solve(case: dict) -> CaseResult:
    """Results of one case, keyed like the cases' `expect` fields."""
    case = _object(case, "A case")
    kind = case.get("kind")
    model = case.get("model")
    if kind not in KINDS:
        raise CapmarkError(f"Unknown case kind {kind!r}; capmark solves {', '.join(KINDS)}.")
    if not isinstance(model, dict):
        raise CapmarkError("The case has no \"model\" object.")
    method = case.get("method")
    if kind == "lqn":
        return _lqn(case)
    if kind == "closed":
        return _closed(model, method)
    if kind == "closed-multiclass":
        return _multiclass(model)
    if kind == "open":
        return _open(model)
    if kind == "usl-fit":
        return _usl_fit(model)
    return _quick(kind, model)


def read_cases(path: Path) -> Any:
    """The parsed JSON of a case file, or one sentence saying why it cannot be read."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise CapmarkError(f"Cannot read {path} ({err.strerror}); check the path.") from None
    except UnicodeDecodeError:
        raise CapmarkError(f"{path} is not UTF-8 text; save it as UTF-8 JSON and retry.") from None
    try:
        return json.loads(text, parse_constant=lambda token: _reject_constant(path, token))
    except json.JSONDecodeError as err:
        raise CapmarkError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}); fix it and retry.") from None
    except RecursionError:
        raise CapmarkError(f"{path} nests its JSON too deeply to be a case; fix it and retry.") from None


def _reject_constant(path: Path, token: str) -> float:
    raise CapmarkError(f"{path} holds {token}, which JSON does not allow; write a finite number.")


def solve_file(path: Path) -> CaseResult | list[dict[str, object]]:
    """One case, a list of cases, or {"cases": [...]} from a JSON file; a list gets each case's id back."""
    data = read_cases(path)
    cases = data["cases"] if isinstance(data, dict) and "cases" in data else data
    if isinstance(cases, dict):
        return solve(cases)
    if not isinstance(cases, list) or not cases:
        raise CapmarkError(f"{path} holds neither a case nor a list of cases; {SCHEMA_HINT}.")
    out: list[dict[str, object]] = []  # each case's id (whatever JSON value the file gives) before its result
    for i, c in enumerate(cases, start=1):
        if not isinstance(c, dict):
            raise CapmarkError(f"Case {i} of {path} is {_kind(c)}, not a case object; {SCHEMA_HINT}.")
        out.append({"id": c.get("id"), **solve(c)})
    return out
