"""Closed queueing networks: exact MVA (single and multi-class, load-dependent and multi-server
stations through marginal probabilities), Bard-Schweitzer approximate MVA, Seidmann's multi-server
approximation for multi-class models.

Exact solutions cost time (and memory) that grows with the population: the single-class recursion is
linear in it, with load-dependent stations quadratic, and the multi-class one visits every population
vector. Above MAX_EXACT_POPULATION (or MAX_EXACT_VECTORS population vectors) the exact solvers answer
with Bard-Schweitzer approximate MVA instead (Seidmann's split for multi-server stations), whose cost
does not depend on the population, and say so in the result's `method`; docs/models.md gives the
error this costs at the threshold.

References: Reiser & Lavenberg (1980); Lazowska et al., Quantitative System Performance, ch. 6, 7, 20;
Bolch et al., Queueing Networks and Markov Chains, ch. 8.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from capmark.errors import CapmarkError

# Above this population exact single-class MVA gives way to Bard-Schweitzer: the load-dependent recursion
# costs population^2 steps (about 0.1 s at 2,000), and there the approximation's error is below 0.1 %
# on the validation cases (docs/models.md).
MAX_EXACT_POPULATION = 2000
# Above this many population vectors exact multi-class MVA gives way to multi-class Bard-Schweitzer: the
# recursion visits every vector (about 1 s per 100,000 in Python) and keeps their queue lengths in memory.
MAX_EXACT_VECTORS = 100_000
# Beyond 10^15 customers a population count no longer holds whole units in double precision ((N-1)/N
# rounds to 1 near 2^53); no real system comes near, so a larger figure is a mistake in the input.
MAX_POPULATION = 10**15
# Bard-Schweitzer's throughput is found by bisection: each step halves the bracket, so about 50 steps reach the
# relative tolerance from any finite bracket; the limit only stops a bracket that never shrinks (an infinite one).
BISECTION_TOL = 1e-15
MAX_BISECTION_STEPS = 200
EXACT = "exact MVA"
APPROXIMATE = "Bard-Schweitzer approximate MVA"


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


@dataclass(kw_only=True)
class ClosedResult:
    """A closed network's solution. `converged` is False only where an iterative solver stopped at its limit
    before its tolerance (then `note` says so); the exact recursions always settle."""

    throughput: float
    response_time: float  # sum of residence times (think time excluded)
    residence_times: list[float]
    queue_lengths: list[float]
    utilizations: list[float]  # busy fraction of the station (of all its servers for multi-server)
    iterations: int = 0
    stations: list[str] = field(default_factory=list)
    method: str = EXACT
    converged: bool = True
    note: str | None = None

    def residence_time_per_visit(self, stations: Sequence[Station]) -> list[float]:
        return [r / s.visits for r, s in zip(self.residence_times, stations, strict=True)]


def _utilization(station: Station, throughput: float, marginals: list[float] | None) -> float:
    if station.kind == "delay":
        return throughput * station.total_demand
    if station.service_time_with_n_present is not None and marginals is not None:
        if station.servers > 1:  # the busy fraction of all servers: min(j, m) of them busy with j present
            m = station.servers  # (over the probabilities' sum: the recursion's rounding leaves it a hair off 1)
            return sum(p * min(j, m) for j, p in enumerate(marginals)) / m / max(sum(marginals), 1e-300)
        return 1 - marginals[0]
    return throughput * station.total_demand / station.servers


def check_population(population: int, what: str = "population") -> None:
    """A closed model's population must be a whole number between 1 and MAX_POPULATION."""
    if population < 1:
        raise CapmarkError(f"A closed model needs a {what} of at least 1.")
    if population > MAX_POPULATION:
        raise CapmarkError(f"A {what} of {population:g} is beyond what capmark solves ({MAX_POPULATION:.0e}: larger "
                           "counts lose whole customers in floating point); give a smaller one.")


def exact_mva(stations: Sequence[Station], population: int, think_time: float = 0.0,
              method: str = "auto") -> ClosedResult:
    """Exact single-class MVA; load-dependent stations use marginal queue-length probabilities.

    Models of load-independent stations with a large population are solved through the normalizing
    constant (Buzen's convolution, one linear recurrence per station), which gives the same exact
    answer as the MVA recursion in a fraction of the time. Above MAX_EXACT_POPULATION the answer is
    Bard-Schweitzer's (see approximate_mva); result.method says which."""
    check_population(population)
    if population > MAX_EXACT_POPULATION and method == "auto":
        return approximate_mva(stations, population, think_time)
    use_convolution = method == "convolution" or (method == "auto" and population >= 200)
    if use_convolution and not any(s.load_dependent for s in stations):
        fast = _convolution(stations, population, think_time)
        if fast is not None:
            return fast
    if any(s.load_dependent for s in stations):
        return _exact_load_dependent(stations, population, think_time)
    k = len(stations)
    q = [0.0] * k
    x = 0.0
    r = [0.0] * k
    for n in range(1, population + 1):
        for i, s in enumerate(stations):
            r[i] = s.total_demand if s.kind == "delay" else s.total_demand * (1 + q[i])
        x = n / (think_time + sum(r))
        q = [x * ri for ri in r]
    utils = [_utilization(s, x, None) for s in stations]
    return ClosedResult(throughput=x, response_time=sum(r), residence_times=list(r), queue_lengths=list(q),
                        utilizations=utils, stations=[s.name for s in stations])


def _demand_table(station: Station, population: int) -> list[float]:
    """demand_at(j) for j = 1 .. population."""
    return [station.demand_at(j) for j in range(1, population + 1)]


def _exact_load_dependent(stations: Sequence[Station], population: int, think_time: float) -> ClosedResult:
    """The MVA recursion with marginal probabilities of the load-dependent stations, one numpy vector each:
    R_k(n) = sum_j j D_k(j) p_k(j-1 | n-1) and p_k(j | n) = X(n) D_k(j) p_k(j-1 | n-1)."""
    import numpy as np

    k = len(stations)
    demand = np.array([0.0 if s.load_dependent else s.total_demand for s in stations])
    queue = np.array([s.kind != "delay" and not s.load_dependent for s in stations])
    ld = [i for i, s in enumerate(stations) if s.load_dependent]
    d_at = {i: np.array(_demand_table(stations[i], population)) for i in ld}
    j_d_at = {i: np.arange(1, population + 1) * d_at[i] for i in ld}
    marg = {i: np.zeros(population + 1) for i in ld}
    for i in ld:
        marg[i][0] = 1.0
    q = np.zeros(k)
    r = np.zeros(k)
    x = 0.0
    for n in range(1, population + 1):
        r = np.where(queue, demand * (1 + q), demand)
        for i in ld:
            r[i] = float(np.dot(j_d_at[i][:n], marg[i][:n]))
        x = n / (think_time + float(r.sum()))
        q = x * r
        for i in ld:
            p = marg[i]
            p[1:n + 1] = x * d_at[i][:n] * p[:n]  # numpy reads the right side before writing
            p[0] = max(0.0, 1.0 - float(p[1:n + 1].sum()))
    utils = [_utilization(s, x, marg[i].tolist() if i in marg else None) for i, s in enumerate(stations)]
    return ClosedResult(throughput=x, response_time=float(r.sum()), residence_times=r.tolist(),
                        queue_lengths=q.tolist(), utilizations=utils, stations=[s.name for s in stations])


def _parts(station: Station) -> list[tuple[float, bool]]:
    """A station as (demand, queueing?) parts for the approximation: a delay stays a delay; a multi-server
    station becomes Seidmann's queue D/m and delay D(m-1)/m; a table of demands by queue length becomes
    a queue with its last (steady) demand and a delay that gives a lone customer its first demand."""
    if station.kind == "delay":
        return [(station.total_demand, False)]
    if station.service_time_with_n_present is not None:
        table = station.service_time_with_n_present
        return [(table[-1], True), (max(0.0, table[0] - table[-1]), False)]
    if station.servers > 1:
        d, m = station.total_demand, station.servers
        return [(d / m, True), (d * (m - 1) / m, False)]
    return [(station.total_demand, True)]


@dataclass(frozen=True)
class Bisection:
    """Where a bisection for a throughput stopped: the value, the steps it took and whether the bracket shrank
    below its tolerance (False: it stopped at its step limit, and the value is only the bracket's middle)."""

    value: float
    steps: int
    settled: bool


def _schweitzer_throughput(queue_demands: Sequence[float], delay: float, population: float,
                           seen_extra: Sequence[float] | None = None,
                           max_steps: int = MAX_BISECTION_STEPS) -> Bisection:
    """Solve Bard-Schweitzer's fixed point for the throughput X directly. A queue's length is
    Q_k = X D_k (1 + c_k) / (1 - a X D_k), a = (N-1)/N, c_k an optional correction of what an arrival sees
    (Linearizer); X is the root of X Z + sum Q_k = N, which rises with X up to the pole 1/(a D_max), so
    bisection finds it in a bounded number of steps whatever the population (no iteration to converge)."""
    a = (population - 1) / population
    extra = seen_extra or [0.0] * len(queue_demands)
    total = delay + sum(queue_demands)
    d_max = max(queue_demands, default=0.0)
    if total <= 0 and a * d_max <= 0:
        raise CapmarkError("The demands and the think time add up to zero or less: the throughput is unbounded; "
                           "give the stations positive demands.")

    def customers(x: float) -> float:
        return x * delay + sum(x * d * (1 + c) / (1 - a * x * d) for d, c in zip(queue_demands, extra, strict=True))

    # customers(x) is convex and starts below N (a negative delay, as calibration can give, makes it dip
    # first), so it crosses N once below the pole; N / total bounds X when every residence is >= its demand
    hi = 1 / (a * d_max) if a * d_max > 0 else math.inf
    if total > 0:
        hi = min(hi, population / total)
    lo, steps = 0.0, 0
    while hi - lo > BISECTION_TOL * hi and steps < max_steps:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if customers(mid) < population else (lo, mid)
        steps += 1
    return Bisection((lo + hi) / 2, steps, hi - lo <= BISECTION_TOL * hi)


def _queue_lengths(demands: Sequence[float], queueing: Sequence[bool], x: float, population: float,
                   think_time: float, seen_extra: Sequence[float] | None = None) -> list[float]:
    """Queue length per station at the Schweitzer throughput x (c_k: extra customers an arrival sees).
    Near saturation 1 - a X D_max is a tiny difference, so the queues with the largest demand share what
    the others leave of the population (Little on the whole model, in proportion to 1 + c_k), which keeps
    N = X (R + Z) exact to rounding at any population."""
    a = (population - 1) / population
    extra = list(seen_extra) if seen_extra is not None else [0.0] * len(demands)
    d_max = max((d for d, is_queue in zip(demands, queueing, strict=True) if is_queue), default=0.0)
    top = [i for i, (d, is_queue) in enumerate(zip(demands, queueing, strict=True)) if is_queue and d == d_max]
    q = [x * d * (1 + c) / (1 - a * x * d) if is_queue else x * d
         for d, is_queue, c in zip(demands, queueing, extra, strict=True)]
    if top and d_max > 0:
        rest = max(0.0, population - x * think_time - sum(v for i, v in enumerate(q) if i not in top))
        weight = sum(1 + extra[i] for i in top)
        for i in top:
            q[i] = rest * (1 + extra[i]) / weight
    return q


def approximate_mva(stations: Sequence[Station], population: int, think_time: float = 0.0,
                    max_steps: int | None = None) -> ClosedResult:
    """Bard-Schweitzer approximate MVA for any station kind (multi-server and load-dependent stations split
    as in _parts); cost independent of the population. As N grows it tends to the asymptotic bound
    X = 1 / D_max (per server), so it is exact in the limit. A throughput bisection that stops at `max_steps`
    (default MAX_BISECTION_STEPS) before its tolerance gives a result with converged False and a note."""
    check_population(population)
    parts = [_parts(s) for s in stations]
    queue_d = [d for ps in parts for d, is_queue in ps if is_queue]
    delay = think_time + sum(d for ps in parts for d, is_queue in ps if not is_queue)
    found = _schweitzer_throughput(queue_d, delay, population,
                                   max_steps=MAX_BISECTION_STEPS if max_steps is None else max_steps)
    x, steps = found.value, found.steps
    flat = [part for ps in parts for part in ps]
    q_parts = iter(_queue_lengths([d for d, _ in flat], [is_queue for _, is_queue in flat], x, population,
                                  think_time))
    residence = [sum(next(q_parts) for _ in ps) / x for ps in parts]
    utils = [min(1.0, x * s.service_time_with_n_present[-1]) if s.service_time_with_n_present is not None
             else _utilization(s, x, None) for s in stations]
    return ClosedResult(throughput=x, response_time=sum(residence), residence_times=residence,
                        queue_lengths=[x * r for r in residence], utilizations=utils, iterations=steps,
                        stations=[s.name for s in stations], method=APPROXIMATE, converged=found.settled,
                        note=None if found.settled else _unsettled_note(APPROXIMATE, steps))


def _unsettled_note(method: str, steps: int) -> str:
    return (f"{method} stopped at its limit of {steps} bisection steps before its throughput settled; the figures "
            "are approximate (a larger step limit, or exact MVA for a small population, settles it)")


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
    return ClosedResult(throughput=float(x), response_time=float(sum(r)), residence_times=r, queue_lengths=q,
                        utilizations=utils, stations=[s.name for s in stations])


def schweitzer_multiclass(demands: Sequence[Sequence[float]], population: Sequence[int],
                          think_time: Sequence[float] | None = None, delay: Sequence[bool] | None = None,
                          tol: float = 1e-10, max_iter: int = 10_000,
                          max_steps: int = MAX_BISECTION_STEPS) -> MultiClassResult:
    """Multi-class Bard-Schweitzer: a class-c arrival sees Q_k - Q_kc / N_c.

    Solved class by class (nonlinear Gauss-Seidel): with the other classes' queues held, one class's
    equations are single-class Schweitzer whose arrivals also see the others' customers, solved for its
    throughput directly (_schweitzer_throughput). A class of a billion customers thus settles in a sweep
    instead of creeping towards saturation by 1/N per iteration. Converged when a sweep moves no queue
    length by more than tol x the largest class population; not converged in max_iter sweeps (or a throughput
    bisection stopped at max_steps) is an error."""
    k, classes = len(demands), len(population)
    d = [[float(v) for v in row] for row in demands]  # [station][class]
    z = [float(v) for v in (think_time if think_time is not None else [0.0] * classes)]
    queueing = [not v for v in (delay if delay is not None else [False] * k)]
    q = [[0.0] * classes for _ in range(k)]
    x = [0.0] * classes
    limit = tol * max(1.0, float(max(population)))
    moved, sweeps = math.inf, 0
    for _ in range(max_iter):
        sweeps += 1
        moved = 0.0
        for c in range(classes):
            new = [0.0] * k
            if population[c] > 0:
                others = [sum(q[i]) - q[i][c] for i in range(k)]
                found = _schweitzer_throughput([d[i][c] for i in range(k) if queueing[i]],
                                               z[c] + sum(d[i][c] for i in range(k) if not queueing[i]),
                                               population[c], [others[i] for i in range(k) if queueing[i]], max_steps)
                if not found.settled:
                    raise CapmarkError(f"Multi-class Bard-Schweitzer MVA could not settle class {c}'s throughput in "
                                       f"{found.steps} bisection steps; allow more steps (max_steps).")
                x[c] = found.value
                new = _queue_lengths([d[i][c] for i in range(k)], queueing, x[c], population[c], z[c], others)
            moved = max(moved, max(abs(new[i] - q[i][c]) for i in range(k)))
            for i in range(k):
                q[i][c] = new[i]
        if moved < limit:
            break
    else:
        raise CapmarkError(f"Multi-class Bard-Schweitzer MVA did not settle in {max_iter} sweeps (queue lengths "
                           f"still moved by {moved:.3g} customers, above {limit:.3g}); allow more sweeps (max_iter) "
                           "or a looser tolerance (tol).")
    r = [[q[i][c] / x[c] if x[c] > 0 else d[i][c] for c in range(classes)] for i in range(k)]
    return MultiClassResult(throughput=x, response_time=[sum(r[i][c] for i in range(k)) for c in range(classes)],
                            residence_times=r, queue_lengths=[sum(row) for row in q], queue_lengths_by_class=q,
                            utilizations=[sum(x[c] * d[i][c] for c in range(classes)) for i in range(k)],
                            method=APPROXIMATE, iterations=sweeps)


def schweitzer_mva(stations: Sequence[Station], population: int, think_time: float = 0.0) -> ClosedResult:
    """Bard-Schweitzer approximate MVA: Q(n-1) ~ (n-1)/n Q(n), solved for its fixed point."""
    if any(s.load_dependent for s in stations):
        raise CapmarkError("Bard-Schweitzer handles load-independent stations; use exact_mva for load-dependent "
                           "ones or seidmann() for multi-server stations.")
    return approximate_mva(stations, population, think_time)


def linearizer(stations: Sequence[Station], population: int, think_time: float = 0.0, passes: int = 3,
               max_steps: int = MAX_BISECTION_STEPS) -> ClosedResult:
    """Linearizer (Chandy & Neuse 1982), single class: like Bard-Schweitzer, but with the deviation
    F_k = Q_k(n-1)/(n-1) - Q_k(n)/n estimated from solutions at N and N-1 (assumed linear in n)."""
    if any(s.load_dependent for s in stations):
        raise CapmarkError("Linearizer handles load-independent stations; use exact_mva for load-dependent ones.")
    check_population(population)
    k = len(stations)
    d = [s.total_demand for s in stations]
    queue = [s.kind != "delay" for s in stations]
    delay = think_time + sum(d[i] for i in range(k) if not queue[i])

    settled = [True]

    def core(n: int, f: list[float]) -> tuple[float, list[float], list[float], int]:
        extra = [max(-0.999, (n - 1) * f[i]) for i in range(k) if queue[i]]
        found = _schweitzer_throughput([d[i] for i in range(k) if queue[i]], delay, n, extra, max_steps)
        settled[0] = settled[0] and found.settled
        x = found.value
        a = (n - 1) / n
        r = [d[i] * (1 + max(-0.999, (n - 1) * f[i])) / (1 - a * x * d[i]) if queue[i] else d[i] for i in range(k)]
        return x, r, [x * ri for ri in r], found.steps

    n = population
    f = [0.0] * k
    total_it = 0
    for _ in range(passes):  # a fixed number of passes is the method (Chandy & Neuse use 3), not a search
        x, r, q_n, it1 = core(n, f)
        if n > 1:
            _, _, q_n1, it2 = core(n - 1, f)
            f = [q_n1[i] / (n - 1) - q_n[i] / n for i in range(k)]
            total_it += it2
        total_it += it1
    x, r, q_n, it = core(n, f)
    method = "Linearizer approximate MVA"
    return ClosedResult(throughput=x, response_time=sum(r), residence_times=r, queue_lengths=q_n,
                        utilizations=[x * di for di in d], iterations=total_it + it, stations=[s.name for s in stations],
                        method=method, converged=settled[0], note=None if settled[0] else _unsettled_note(method, it))


@dataclass(kw_only=True)
class MultiClassResult:
    throughput: list[float]  # per class
    response_time: list[float]  # per class
    residence_times: list[list[float]]  # [station][class]
    queue_lengths: list[float]  # per station, all classes
    queue_lengths_by_class: list[list[float]]  # [station][class]
    utilizations: list[float]  # per station
    method: str = EXACT
    iterations: int = 0  # sweeps of the approximation (0: the exact recursion)


def exact_mva_multiclass(demands: Sequence[Sequence[float]], population: Sequence[int],
                         think_time: Sequence[float] | None = None,
                         delay: Sequence[bool] | None = None) -> MultiClassResult:
    """Exact multi-class MVA over every population vector (load-independent stations).

    demands[k][c] is class c's demand at station k. With more than MAX_EXACT_VECTORS population vectors
    the answer is multi-class Bard-Schweitzer's; result.method says which."""
    for p in population:
        check_population(p, "class population")
    if math.prod(p + 1 for p in population) > MAX_EXACT_VECTORS:
        return schweitzer_multiclass(demands, population, think_time, delay)
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
    return MultiClassResult(throughput=x, response_time=[sum(r[i][c] for i in range(k)) for c in range(classes)],
                            residence_times=r, queue_lengths=q[tuple(population)], queue_lengths_by_class=by_class,
                            utilizations=utils)


def seidmann(station: Station) -> list[Station]:
    """Seidmann's approximation of an m-server station: a queue with demand D/m and a delay with D(m-1)/m."""
    d, m = station.total_demand, station.servers
    return [Station(f"{station.name} (queue)", demand=d / m),
            Station(f"{station.name} (delay)", demand=d * (m - 1) / m, kind="delay")]
