"""Closed queueing networks: exact MVA (single and multi-class, load-dependent and multi-server
stations through marginal probabilities), Bard-Schweitzer approximate MVA, Seidmann's multi-server
approximation for multi-class models.

References: Reiser & Lavenberg (1980); Lazowska et al., Quantitative System Performance, ch. 6, 7, 20;
Bolch et al., Queueing Networks and Markov Chains, ch. 8.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from capmark.errors import CapmarkError


@dataclass(frozen=True)
class Station:
    """A service centre. Give demand (visits x service time per visit), or visits and service_time.

    kind 'queue' (FCFS/PS, product form) or 'delay' (infinite servers). servers > 1, or a per-population
    service time list (load dependent: the demand when j customers are present, j = 1, 2, ...),
    make the station load dependent."""

    name: str
    demand: float | None = None
    visits: float = 1.0
    service_time: float | None = None
    kind: str = "queue"
    servers: int = 1
    service_time_with_n_present: Sequence[float] | None = None

    @property
    def total_demand(self) -> float:
        if self.demand is not None:
            return self.demand
        if self.service_time is None:
            raise CapmarkError(f"Station {self.name} needs a demand or a service time.")
        return self.visits * self.service_time

    @property
    def load_dependent(self) -> bool:
        return self.kind == "queue" and (self.servers > 1 or self.service_time_with_n_present is not None)

    def demand_at(self, j: int) -> float:
        """Demand per visit-cycle when j customers are present (1/completion rate)."""
        if self.service_time_with_n_present is not None:
            table = self.service_time_with_n_present
            return table[min(j, len(table)) - 1]
        return self.total_demand / min(j, self.servers)


@dataclass
class ClosedResult:
    throughput: float
    response_time: float  # sum of residence times (think time excluded)
    residence_times: list[float]
    queue_lengths: list[float]
    utilizations: list[float]  # busy fraction of the station (of all its servers for multi-server)
    iterations: int = 0
    stations: list[str] = field(default_factory=list)

    def residence_time_per_visit(self, stations: Sequence[Station]) -> list[float]:
        return [r / s.visits for r, s in zip(self.residence_times, stations, strict=True)]


def _utilization(station: Station, throughput: float, marginals: list[float] | None) -> float:
    if station.kind == "delay":
        return throughput * station.total_demand
    if station.service_time_with_n_present is not None and marginals is not None:
        return 1 - marginals[0]
    return throughput * station.total_demand / station.servers


def exact_mva(stations: Sequence[Station], population: int, think_time: float = 0.0,
              method: str = "auto") -> ClosedResult:
    """Exact single-class MVA; load-dependent stations use marginal queue-length probabilities.

    Models of load-independent stations with a large population are solved through the normalizing
    constant (Buzen's convolution, one linear recurrence per station), which gives the same exact
    answer as the MVA recursion in a fraction of the time."""
    if population < 1:
        raise CapmarkError("A closed model needs a population of at least 1.")
    use_convolution = method == "convolution" or (method == "auto" and population >= 200)
    if use_convolution and not any(s.load_dependent for s in stations):
        fast = _convolution(stations, population, think_time)
        if fast is not None:
            return fast
    k = len(stations)
    q = [0.0] * k
    marg: list[list[float] | None] = [[1.0] if s.load_dependent else None for s in stations]
    x = 0.0
    r = [0.0] * k
    for n in range(1, population + 1):
        for i, s in enumerate(stations):
            if s.kind == "delay":
                r[i] = s.total_demand
            elif s.load_dependent:
                p = marg[i]
                assert p is not None
                r[i] = sum(j * s.demand_at(j) * p[j - 1] for j in range(1, n + 1))
            else:
                r[i] = s.total_demand * (1 + q[i])
        x = n / (think_time + sum(r))
        for i, s in enumerate(stations):
            q[i] = x * r[i]
            if s.load_dependent:
                p = marg[i]
                assert p is not None
                new = [0.0] * (n + 1)
                for j in range(1, n + 1):
                    new[j] = x * s.demand_at(j) * p[j - 1]
                new[0] = max(0.0, 1 - sum(new[1:]))
                marg[i] = new
    utils = [_utilization(s, x, marg[i]) for i, s in enumerate(stations)]
    return ClosedResult(x, sum(r), list(r), list(q), utils, stations=[s.name for s in stations])


def _convolution(stations: Sequence[Station], population: int, think_time: float) -> ClosedResult | None:
    """Buzen's algorithm with demands scaled by the largest one; None when G overflows (then use MVA)."""
    import numpy as np
    from scipy.signal import lfilter

    queues = [s.total_demand for s in stations if s.kind != "delay"]
    z = think_time + sum(s.total_demand for s in stations if s.kind == "delay")
    if not queues or max(queues) <= 0:
        return None
    scale = max(queues)
    n = np.arange(population + 1, dtype=float)
    zs = z / scale
    from scipy.special import gammaln

    with np.errstate(over="ignore", invalid="ignore"):
        g = np.exp(n * np.log(zs) - gammaln(n + 1)) if zs > 0 else (n == 0).astype(float)
        for d in queues:
            g = lfilter([1.0], [1.0, -d / scale], g)
        if not np.all(np.isfinite(g)) or g[-1] <= 0:
            return None
        x = g[-2] / g[-1] / scale
        # Q_k(N) = sum_j D_k^j G(N-j) / G(N): the last output of y(n) = D_k (G(n-1) + y(n-1))
        q_queue = [float(lfilter([0.0, d / scale], [1.0, -d / scale], g)[-1] / g[-1]) for d in queues]
    q, r, it = [], [], iter(q_queue)
    for s in stations:
        if s.kind == "delay":
            q.append(x * s.total_demand)
            r.append(s.total_demand)
        else:
            qi = next(it)
            q.append(qi)
            r.append(qi / x)
    utils = [x * s.total_demand for s in stations]
    return ClosedResult(float(x), float(sum(r)), r, q, utils, stations=[s.name for s in stations])


def schweitzer_multiclass(demands: Sequence[Sequence[float]], population: Sequence[int],
                          think_time: Sequence[float] | None = None, delay: Sequence[bool] | None = None,
                          tol: float = 1e-10, max_iter: int = 100_000) -> MultiClassResult:
    """Multi-class Bard-Schweitzer: a class-c arrival sees Q_k - Q_kc / N_c, iterated to a fixed point."""
    import numpy as np

    d = np.asarray(demands, dtype=float)  # [station, class]
    pop = np.asarray(population, dtype=float)
    z = np.asarray(think_time if think_time is not None else [0.0] * len(population), dtype=float)
    is_delay = np.asarray(delay if delay is not None else [False] * d.shape[0])[:, None]
    q = np.tile(pop / d.shape[0], (d.shape[0], 1))
    for _ in range(max_iter):
        seen = q.sum(axis=1, keepdims=True) - q / np.where(pop > 0, pop, 1)
        r = np.where(is_delay, d, d * (1 + seen))
        x = np.where(pop > 0, pop / (z + r.sum(axis=0)), 0.0)
        new_q = r * x
        if np.max(np.abs(new_q - q)) < tol:
            q = new_q
            break
        q = new_q
    else:
        raise CapmarkError(f"Bard-Schweitzer MVA did not converge in {max_iter} iterations.")
    return MultiClassResult(x.tolist(), r.sum(axis=0).tolist(), r.tolist(), q.sum(axis=1).tolist(), q.tolist(),
                            (d * x).sum(axis=1).tolist())


def schweitzer_mva(stations: Sequence[Station], population: int, think_time: float = 0.0, tol: float = 1e-10,
                   max_iter: int = 100_000) -> ClosedResult:
    """Bard-Schweitzer approximate MVA: Q(n-1) ~ (n-1)/n Q(n), iterated to a fixed point."""
    if any(s.load_dependent for s in stations):
        raise CapmarkError("Bard-Schweitzer handles load-independent stations; use exact_mva for load-dependent "
                           "ones or seidmann() for multi-server stations.")
    n = population
    q = [n / len(stations)] * len(stations)
    for it in range(1, max_iter + 1):
        r = [s.total_demand if s.kind == "delay" else s.total_demand * (1 + q[i] * (n - 1) / n)
             for i, s in enumerate(stations)]
        x = n / (think_time + sum(r))
        new_q = [x * ri for ri in r]
        if max(abs(a - b) for a, b in zip(new_q, q, strict=True)) < tol:
            q = new_q
            utils = [x * s.total_demand for s in stations]
            return ClosedResult(x, sum(r), r, q, utils, it, [s.name for s in stations])
        q = new_q
    raise CapmarkError(f"Bard-Schweitzer MVA did not converge in {max_iter} iterations.")


def linearizer(stations: Sequence[Station], population: int, think_time: float = 0.0, passes: int = 3,
               tol: float = 1e-10, max_iter: int = 100_000) -> ClosedResult:
    """Linearizer (Chandy & Neuse 1982), single class: like Bard-Schweitzer, but with the deviation
    F_k = Q_k(n-1)/(n-1) - Q_k(n)/n estimated from solutions at N and N-1 (assumed linear in n)."""
    if any(s.load_dependent for s in stations):
        raise CapmarkError("Linearizer handles load-independent stations; use exact_mva for load-dependent ones.")
    k = len(stations)
    d = [s.total_demand for s in stations]
    queue = [s.kind != "delay" for s in stations]

    def core(n: int, f: list[float], q: list[float]) -> tuple[float, list[float], list[float], int]:
        x, r = 0.0, [0.0] * k
        for it in range(1, max_iter + 1):
            seen = [(n - 1) * (q[i] / n + f[i]) if n > 1 else 0.0 for i in range(k)]
            r = [d[i] * (1 + seen[i]) if queue[i] else d[i] for i in range(k)]
            x = n / (think_time + sum(r))
            new_q = [x * ri for ri in r]
            if max(abs(a - b) for a, b in zip(new_q, q, strict=True)) < tol:
                return x, r, new_q, it
            q = new_q
        raise CapmarkError(f"Linearizer did not converge in {max_iter} iterations.")

    n = population
    f = [0.0] * k
    q_n = [n / k] * k
    q_n1 = [(n - 1) / k] * k
    total_it = 0
    for _ in range(passes):
        x, r, q_n, it1 = core(n, f, q_n)
        if n > 1:
            _, _, q_n1, it2 = core(n - 1, f, q_n1)
            f = [q_n1[i] / (n - 1) - q_n[i] / n for i in range(k)]
            total_it += it2
        total_it += it1
    x, r, q_n, it = core(n, f, q_n)
    return ClosedResult(x, sum(r), r, q_n, [x * di for di in d], total_it + it, [s.name for s in stations])


@dataclass
class MultiClassResult:
    throughput: list[float]  # per class
    response_time: list[float]  # per class
    residence_times: list[list[float]]  # [station][class]
    queue_lengths: list[float]  # per station, all classes
    queue_lengths_by_class: list[list[float]]  # [station][class]
    utilizations: list[float]  # per station


def exact_mva_multiclass(demands: Sequence[Sequence[float]], population: Sequence[int],
                         think_time: Sequence[float] | None = None,
                         delay: Sequence[bool] | None = None) -> MultiClassResult:
    """Exact multi-class MVA over every population vector (load-independent stations).

    demands[k][c] is class c's demand at station k."""
    classes, k = len(population), len(demands)
    z = list(think_time or [0.0] * classes)
    is_delay = list(delay or [False] * k)
    q: dict[tuple[int, ...], list[float]] = {tuple([0] * classes): [0.0] * k}
    last = None
    for vec in sorted(itertools.product(*(range(p + 1) for p in population)), key=sum):
        if sum(vec) == 0:
            continue
        r = [[0.0] * classes for _ in range(k)]
        x = [0.0] * classes
        for c in range(classes):
            if vec[c] == 0:
                continue
            prev = list(vec)
            prev[c] -= 1
            q_prev = q[tuple(prev)]
            for i in range(k):
                r[i][c] = demands[i][c] * (1 if is_delay[i] else 1 + q_prev[i])
            x[c] = vec[c] / (z[c] + sum(r[i][c] for i in range(k)))
        q[vec] = [sum(x[c] * r[i][c] for c in range(classes)) for i in range(k)]
        last = (x, r)
    assert last is not None
    x, r = last
    by_class = [[x[c] * r[i][c] for c in range(classes)] for i in range(k)]
    utils = [sum(x[c] * demands[i][c] for c in range(classes)) for i in range(k)]
    return MultiClassResult(x, [sum(r[i][c] for i in range(k)) for c in range(classes)], r,
                            q[tuple(population)], by_class, utils)


def seidmann(station: Station) -> list[Station]:
    """Seidmann's approximation of an m-server station: a queue with demand D/m and a delay with D(m-1)/m."""
    d, m = station.total_demand, station.servers
    return [Station(f"{station.name} (queue)", demand=d / m),
            Station(f"{station.name} (delay)", demand=d * (m - 1) / m, kind="delay")]
