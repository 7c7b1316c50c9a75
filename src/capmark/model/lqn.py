"""Layered queueing models, solved in the manner of the Method of Layers (Rolia & Sevcik 1995).

Two submodels are solved in turn until the reference throughput converges:
- Device layer: a multi-class closed network with one class per software task; a class's population is
  the task's threads (its multiplicity, at most the number of users) and its think time is the part of a
  thread's cycle not spent at devices (cycle = threads / task throughput). It gives each task's phase-1 and
  phase-2 times at the devices, queueing included. Multi-server processors use Seidmann's split.
- Software layer: exact MVA of the users over the tasks they call. A call waits for the callers ahead
  (each holds the thread for phase 1 + phase 2) and, with the probability that the thread is in phase 2,
  for a phase-2 residual; it then waits for phase 1 only (the rendezvous server replies before phase 2).
  Tasks with at least as many threads as users never queue.
Nested calls (a task calling a lower task) add the callee's wait and phase 1 to the caller's phase 1.

Convergence: damping 0.5 on throughput, holding and waiting times; stop when the throughput changes by
less than `tol` (relative) between rounds; at most `max_iter` rounds, else an error says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from capmark.errors import CapmarkError
from capmark.model.mva import (
    BISECTION_TOL,
    MAX_BISECTION_STEPS,
    MAX_EXACT_POPULATION,
    exact_mva_multiclass,
    schweitzer_multiclass,
)


@dataclass
class Processor:
    name: str
    multiplicity: int = 1
    scheduling: str = "ps"  # ps or fcfs: both solved as product-form queues here


@dataclass
class Entry:
    """An entry of a task: device demands per call in phase 1 and phase 2, and synchronous calls."""

    name: str
    phase1: dict[str, float] = field(default_factory=dict)  # processor -> demand per call
    phase2: dict[str, float] = field(default_factory=dict)
    calls: dict[str, float] = field(default_factory=dict)  # callee entry -> mean visits per call


@dataclass
class Task:
    name: str
    entries: list[Entry]
    multiplicity: float = math.inf  # inf = a thread per caller (infinite server)
    reference: bool = False
    population: int = 0
    think_time: float = 0.0


@dataclass(kw_only=True)
class LQNResult:
    throughput: float  # reference requests per second
    response_time: float  # per reference request
    processor_utilization: dict[str, float]
    task_utilization: dict[str, float]  # busy threads (phase 1 + 2) / multiplicity
    task_waiting_time: dict[str, float]  # per call, queueing for a thread
    entry_throughput: dict[str, float]
    entry_phase1_time: dict[str, float]  # per call: phase 1 incl. nested calls
    iterations: int


def solve(processors: list[Processor], tasks: list[Task], tol: float = 1e-9, max_iter: int = 2000,
          device_solver: str = "schweitzer") -> LQNResult:
    """Solve a layered model; device_solver 'exact' (exact multi-class MVA, slower) or 'schweitzer'."""
    _validate(processors, tasks)
    ref = [t for t in tasks if t.reference][0]
    procs = {p.name: p for p in processors}
    pnames = list(procs)
    entries = {e.name: e for t in tasks for e in t.entries}
    task_of = {e.name: t for t in tasks for e in t.entries}
    visits: dict[str, float] = {}
    def visit(name: str, v: float) -> None:
        visits[name] = visits.get(name, 0.0) + v
        for c, n in entries[name].calls.items():
            visit(c, v * n)
    for e in ref.entries:
        visit(e.name, 1.0 / len(ref.entries))
    N = ref.population
    soft = [t for t in tasks if not t.reference]
    vis = {t.name: sum(visits.get(e.name, 0.0) for e in t.entries) for t in soft}
    # per-call device demands of each task, by phase
    def per_call(t: Task, phase: str) -> dict[str, float]:
        out = {p: 0.0 for p in pnames}
        if vis[t.name] <= 0:
            return out
        for e in t.entries:
            for p, d in getattr(e, phase).items():
                out[p] += visits.get(e.name, 0.0) * d / vis[t.name]
        return out
    d1 = {t.name: per_call(t, "phase1") for t in soft}
    d2 = {t.name: per_call(t, "phase2") for t in soft}
    threads = {t.name: int(min(t.multiplicity, N)) for t in soft}
    x = N / (ref.think_time + sum(vis[t.name] * sum(d1[t.name].values()) for t in soft))
    s1 = {t.name: sum(d1[t.name].values()) for t in soft}
    s2 = {t.name: sum(d2[t.name].values()) for t in soft}
    waits = {t.name: 0.0 for t in soft}
    rounds, change = 0, math.inf
    for it in range(1, max_iter + 1):
        rounds = it
        # device layer: one class per task, population = threads, think = idle time per thread cycle
        active = [t for t in soft if vis[t.name] > 0]
        demands = [[d1[t.name][p] + d2[t.name][p] for t in active] for p in pnames]
        thinks = []
        for t in active:
            cycle = threads[t.name] / (x * vis[t.name])
            thinks.append(max(0.0, cycle - (s1[t.name] + s2[t.name])))
        # multi-server processors: Seidmann split
        dem2, delay = [], []
        for i, p in enumerate(pnames):
            m = procs[p].multiplicity
            dem2.append([d / m for d in demands[i]])
            delay.append(False)
            if m > 1:
                dem2.append([d * (m - 1) / m for d in demands[i]])
                delay.append(True)
        pops = [threads[t.name] for t in active]
        if device_solver == "exact":
            res = exact_mva_multiclass(dem2, pops, thinks, delay)
        else:
            res = schweitzer_multiclass(dem2, pops, thinks, delay, tol=1e-9)
        # residence per unit demand of each class at each processor
        row = 0
        new_s1, new_s2 = {}, {}
        factor: dict[str, dict[str, float]] = {t.name: {} for t in active}
        for i, p in enumerate(pnames):
            m = procs[p].multiplicity
            for c, t in enumerate(active):
                d = demands[i][c]
                r = res.residence_times[row][c] + (res.residence_times[row + 1][c] if m > 1 else 0.0)
                factor[t.name][p] = r / d if d > 0 else 1.0
            row += 2 if m > 1 else 1
        for t in active:
            new_s1[t.name] = sum(d1[t.name][p] * factor[t.name][p] for p in pnames)
            new_s2[t.name] = sum(d2[t.name][p] * factor[t.name][p] for p in pnames)
        # nested calls add the callee's wait + phase 1 to the caller's phase 1 (one level here)
        for t in active:
            for e in t.entries:
                for callee, v in e.calls.items():
                    new_s1[t.name] += v * (waits[task_of[callee].name] + new_s1[task_of[callee].name])
        # software layer: MVA of the users over the tasks (exact recursion, Schweitzer for large populations)
        new_w = {t.name: 0.0 for t in soft}
        top = [t for t in active if any(t is task_of[c] for e in ref.entries for c in e.calls)]
        layer = [(t.name, t.multiplicity, vis[t.name], new_s1[t.name], new_s2[t.name]) for t in top]
        solve_layer = _software_layer if N <= MAX_EXACT_POPULATION else _software_layer_schweitzer
        xs, waits_now = solve_layer(layer, N, ref.think_time)
        new_w.update(waits_now)
        change = abs(xs - x) / x
        done = change <= tol
        x = 0.5 * x + 0.5 * xs
        s1 = {k: 0.5 * s1[k] + 0.5 * new_s1[k] for k in new_s1}
        s2 = {k: 0.5 * s2[k] + 0.5 * new_s2[k] for k in new_s2}
        waits = {k: 0.5 * waits[k] + 0.5 * new_w[k] for k in new_w}
        if done:
            break
    else:
        raise CapmarkError(f"The layered model did not settle in {max_iter} rounds (the throughput still moved by "
                           f"{change:.2g} of itself, above the tolerance {tol:g}); allow more rounds (max_iter) or a "
                           "looser tolerance (tol).")
    util = {p: x * sum(vis[t.name] * (d1[t.name][p] + d2[t.name][p]) for t in soft) / procs[p].multiplicity
            for p in pnames}
    task_util = {t.name: x * vis[t.name] * (s1.get(t.name, 0.0) + s2.get(t.name, 0.0))
                 / (t.multiplicity if math.isfinite(t.multiplicity) else 1.0) for t in soft}
    return LQNResult(throughput=x, response_time=N / x - ref.think_time, processor_utilization=util,
                     task_utilization=task_util, task_waiting_time=waits,
                     entry_throughput={e: x * v for e, v in visits.items()}, entry_phase1_time=s1, iterations=rounds)


_Layer = list[tuple[str, float, float, float, float]]  # task, multiplicity, visits, phase-1 and phase-2 time


def _software_layer(layer: _Layer, population: int, think_time: float) -> tuple[float, dict[str, float]]:
    """The users over the top tasks by the MVA recursion n = 1 .. N: a task of m threads is a queue of
    h/m per visit (h = its phase 1 + 2), plus the residual phase 2 of the previous call when busy."""
    q = {name: 0.0 for name, *_ in layer}
    xs = 0.0
    w_of: dict[str, float] = {}
    for n in range(1, population + 1):
        rs = {}
        for name, m, v, s1, s2 in layer:
            if m >= population:
                w = 0.0
            else:
                u2 = min(0.99, xs * v * s2 / m) if n > 1 else 0.0
                w = q[name] * (s1 + s2) / m + u2 * s2
            w_of[name] = w
            rs[name] = v * (w + s1)
        xs = n / (think_time + sum(rs.values()))
        q = {k: xs * r for k, r in rs.items()}
    return xs, w_of


def _software_layer_schweitzer(layer: _Layer, population: int, think_time: float) -> tuple[float, dict[str, float]]:
    """The same equations at N alone with Q(N-1) ~ (N-1)/N Q(N) (Bard-Schweitzer): for a throughput x each
    task holds q = x v (u2 s2 + s1) / (1 - a x v h / m), rising with x up to a pole, so the x with
    N = x Z + sum q is found by bisection at a cost independent of N (the recursion costs N steps a round)."""
    a = (population - 1) / population

    def waits(x: float) -> dict[str, float]:
        out = {}
        for name, m, v, s1, s2 in layer:
            if m >= population:
                out[name] = 0.0
                continue
            u2 = min(0.99, x * v * s2 / m)
            q = x * v * (u2 * s2 + s1) / (1 - a * x * v * (s1 + s2) / m)
            out[name] = a * q * (s1 + s2) / m + u2 * s2
        return out

    def customers(x: float) -> float:
        w = waits(x)
        return x * think_time + sum(x * v * (w[name] + s1) for name, _, v, s1, _ in layer)

    hi = population / max(1e-300, think_time + sum(v * s1 for _, _, v, s1, _ in layer))
    for _, m, v, s1, s2 in layer:
        if m < population and a * v * (s1 + s2) > 0:
            hi = min(hi, m / (a * v * (s1 + s2)))
    lo = 0.0
    for _ in range(MAX_BISECTION_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if customers(mid) < population else (lo, mid)
        if hi - lo <= BISECTION_TOL * hi:
            break
    else:
        raise CapmarkError(f"The layered model's software layer could not settle its throughput in "
                           f"{MAX_BISECTION_STEPS} bisection steps; check that the tasks' demands are finite.")
    x = (lo + hi) / 2
    return x, waits(x)


def _validate(processors: list[Processor], tasks: list[Task]) -> None:
    refs = [t for t in tasks if t.reference]
    if len(refs) != 1:
        raise CapmarkError("A layered model needs exactly one reference task (the users).")
    if refs[0].population < 1:
        raise CapmarkError("The reference task needs a population of at least 1.")
    procs = {p.name for p in processors}
    entries = {e.name for t in tasks for e in t.entries}
    for t in tasks:
        if not t.reference and t.multiplicity < 1:
            raise CapmarkError(f"Task {t.name} needs a multiplicity of at least 1.")
        for e in t.entries:
            for p, d in (*e.phase1.items(), *e.phase2.items()):
                if p not in procs:
                    raise CapmarkError(f"Entry {e.name} uses processor {p}, which the model does not define.")
                if d < 0:
                    raise CapmarkError(f"Entry {e.name} has a negative demand on {p}.")
            for callee, v in e.calls.items():
                if callee not in entries:
                    raise CapmarkError(f"Entry {e.name} calls {callee}, which no task defines.")
                if v < 0:
                    raise CapmarkError(f"Entry {e.name} calls {callee} a negative number of times.")
