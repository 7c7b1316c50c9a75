"""Solve cases written in the format of shared/validation/queueing_cases.json (kind, method, model).

Input errors become one sentence (CapmarkError); results use the field names of the cases' `expect`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from capmark.errors import CapmarkError
from capmark.model import mva, usl
from capmark.model.open import effective_servers, mmm, quick_response_time

KINDS = ("closed", "closed-multiclass", "open", "usl-fit", "quick-formula", "quick-formula-solve-servers", "lqn")
CLOSED_METHODS = ("exact-mva", "exact-mva-load-dependent", "schweitzer-amva", "linearizer-amva")


def _number(value: Any, what: str, *, positive: bool = False, allow_zero: bool = True) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise CapmarkError(f"{what} must be a number; got {value!r}.")
    if value < 0 or (positive and value == 0 and not allow_zero):
        raise CapmarkError(f"{what} must be {'positive' if positive else 'zero or more'}; got {value}.")
    return float(value)


def _stations(model: dict) -> list[mva.Station]:
    raw = model.get("stations")
    if not raw:
        raise CapmarkError("The model has no stations; add a \"stations\" list.")
    out = []
    for i, s in enumerate(raw):
        name = s.get("name", f"station {i + 1}")
        if "demand" not in s and "service_time" not in s and "service_time_with_n_present" not in s:
            raise CapmarkError(f"Station {name} needs a demand, a service_time (with visits) or "
                               "service_time_with_n_present.")
        demand = _number(s["demand"], f"The demand of {name}") if "demand" in s else None
        st = _number(s["service_time"], f"The service time of {name}") if "service_time" in s else None
        visits = _number(s.get("visits", 1.0), f"The visits of {name}")
        servers = s.get("servers", 1)
        if not isinstance(servers, int) or servers < 1:
            raise CapmarkError(f"The servers of {name} must be a whole number of at least 1; got {servers!r}.")
        table = s.get("service_time_with_n_present")
        if table is not None:
            table = [_number(v, f"A service time of {name}", positive=True, allow_zero=False) for v in table]
        kind = s.get("kind", "queue")
        if kind not in ("queue", "delay"):
            raise CapmarkError(f"Station {name} has kind {kind!r}; use queue or delay.")
        out.append(mva.Station(name, demand=demand, visits=visits, service_time=st, kind=kind, servers=servers,
                               service_time_with_n_present=table))
    return out


def _population(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CapmarkError(f"The population must be a whole number of at least 1; got {value!r}.")
    return value


def _lqn(case: dict) -> dict[str, Any]:
    """kind "lqn": processors [{name, multiplicity}], tasks [{name, reference, population, think_time,
    multiplicity, entries: [{name, phase1: {processor: demand}, phase2: {...}, calls: {entry: visits}}]}];
    method "mol" (Schweitzer device layer, default) or "mol-exact"."""
    from capmark.model import lqn

    model = case["model"]
    method = case.get("method", "mol")
    if method not in ("mol", "mol-exact"):
        raise CapmarkError(f"Unknown method {method!r} for a layered model; use mol or mol-exact.")
    try:
        procs = [lqn.Processor(p["name"], int(p.get("multiplicity", 1))) for p in model["processors"]]
        tasks = [lqn.Task(t["name"], [lqn.Entry(e["name"], dict(e.get("phase1", {})), dict(e.get("phase2", {})),
                                                dict(e.get("calls", {}))) for e in t["entries"]],
                          multiplicity=float(t.get("multiplicity", math.inf)), reference=bool(t.get("reference")),
                          population=int(t.get("population", 0)), think_time=float(t.get("think_time", 0.0)))
                 for t in model["tasks"]]
    except KeyError as err:
        raise CapmarkError(f"The layered model lacks {err.args[0]!r}; see docs/models.md for its schema.") from None
    r = lqn.solve(procs, tasks, device_solver="exact" if method == "mol-exact" else "schweitzer")
    return {"throughput": r.throughput, "response_time": r.response_time,
            "processor_utilization": r.processor_utilization, "task_utilization": r.task_utilization,
            "task_waiting_time": r.task_waiting_time, "iterations": r.iterations}


def solve(case: dict) -> dict[str, Any]:
    """Results of one case, keyed like the cases' `expect` fields."""
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
        method = method or "exact-mva"
        if method not in CLOSED_METHODS:
            raise CapmarkError(f"Unknown method {method!r} for a closed model; use {', '.join(CLOSED_METHODS)}.")
        stations = _stations(model)
        z = _number(model.get("think_time", 0.0), "The think time")
        n = _population(model.get("population"))
        solver = {"schweitzer-amva": mva.schweitzer_mva, "linearizer-amva": mva.linearizer}.get(method, mva.exact_mva)
        r = solver(stations, n, z)
        return {"throughput": r.throughput, "response_time": r.response_time, "queue_lengths": r.queue_lengths,
                "utilizations": r.utilizations, "residence_times": r.residence_times,
                "residence_time_per_visit": r.residence_time_per_visit(stations),
                "bottleneck": stations[max(range(len(stations)), key=lambda i: r.utilizations[i])].name}
    if kind == "closed-multiclass":
        pops = model.get("population")
        if not isinstance(pops, list) or not pops:
            raise CapmarkError("A multi-class model needs a population list, one entry per class.")
        pops = [_population(p) for p in pops]
        stations = model.get("stations") or []
        if not stations:
            raise CapmarkError("The model has no stations; add a \"stations\" list.")
        demands = [[_number(d, f"A demand of {s.get('name', '?')}") for d in s["demand"]] for s in stations]
        if any(len(d) != len(pops) for d in demands):
            raise CapmarkError("Every station needs one demand per class.")
        r = mva.exact_mva_multiclass(demands, pops, model.get("think_time"),
                                     [s.get("kind") == "delay" for s in stations])
        return {"throughput": r.throughput, "response_time": r.response_time, "queue_lengths": r.queue_lengths,
                "utilizations": r.utilizations}
    if kind == "open":
        lam = _number(model.get("arrival_rate"), "The arrival rate", positive=True, allow_zero=False)
        mu = _number(model.get("service_rate"), "The service rate", positive=True, allow_zero=False)
        m = model.get("servers", 1)
        if not isinstance(m, int) or m < 1:
            raise CapmarkError(f"The servers must be a whole number of at least 1; got {m!r}.")
        r = mmm(lam, mu, m)
        return {"utilization": r.utilization, "wait_probability": r.wait_probability,
                "mean_queue_length_waiting": r.mean_queue_length_waiting, "waiting_time": r.waiting_time,
                "response_time": r.response_time, "stretch_factor": r.response_time * mu}
    if kind == "usl-fit":
        f = usl.fit(model.get("concurrency", []), model.get("throughput", []))
        return {"sigma": f.sigma, "kappa": f.kappa, "lambda": f.lam, "se_sigma": f.se_sigma, "se_kappa": f.se_kappa,
                "se_lambda": f.se_lambda, "r_squared": f.r_squared, "peak_concurrency": f.peak_concurrency,
                "peak_throughput": f.peak_throughput, "amdahl": f.amdahl}
    if kind == "quick-formula":
        return {"response_time": quick_response_time(
            _number(model.get("service_time"), "The service time", positive=True, allow_zero=False),
            _number(model.get("arrival_rate"), "The arrival rate"),
            _number(model.get("servers"), "The servers", positive=True, allow_zero=False))}
    return {"servers": effective_servers(
        _number(model.get("service_time"), "The service time", positive=True, allow_zero=False),
        _number(model.get("arrival_rate"), "The arrival rate", positive=True, allow_zero=False),
        _number(model.get("response_time"), "The response time", positive=True, allow_zero=False))}


def solve_file(path: Path) -> dict[str, Any] | list[dict[str, Any]]:
    """One case, a list of cases, or {"cases": [...]} from a JSON file; a list gets each case's id back."""
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise CapmarkError(f"Cannot read {path} ({err.strerror}); check the path.") from None
    except json.JSONDecodeError as err:
        raise CapmarkError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}); fix it and retry.") from None
    cases = data["cases"] if isinstance(data, dict) and "cases" in data else data
    if isinstance(cases, dict):
        return solve(cases)
    if not isinstance(cases, list):
        raise CapmarkError(f"{path} holds neither a case nor a list of cases.")
    return [{"id": c.get("id"), **solve(c)} for c in cases]
