"""Open queueing models: M/M/1, M/M/m (Erlang C) and the quick response-time formula of Shallahamer, OraPub."""

from __future__ import annotations

import math
from dataclasses import dataclass

from capmark.errors import CapmarkError

# The effective servers M are searched up to this many: far beyond any host's cores, where the quick formula's R
# is the service time to many digits
MAX_EFFECTIVE_SERVERS = 1e4
MAX_ROOT_ITERATIONS = 100  # Brent's method settles in a few dozen steps on this smooth, monotone function


@dataclass(frozen=True, kw_only=True)
class OpenResult:
    utilization: float
    wait_probability: float
    mean_queue_length_waiting: float
    mean_number_in_system: float
    waiting_time: float
    response_time: float


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/m queue with offered load a = lambda / mu.

    Through Erlang B's recursion B(k) = a B(k-1) / (k + a B(k-1)), then C = B / (1 - rho (1 - B)): every
    term stays in [0, 1], so thousands of servers neither overflow (a^m / m! would) nor lose precision."""
    rho = offered_load / servers
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    return blocking / (1 - rho * (1 - blocking))


def mmm(arrival_rate: float, service_rate: float, servers: int = 1) -> OpenResult:
    """M/M/m with FCFS: utilization, Erlang C wait probability, waiting queue, response time."""
    a = arrival_rate / service_rate
    rho = a / servers
    if rho >= 1:
        raise CapmarkError(f"The queue is unstable: utilization {rho:.2f} >= 1 (arrivals {arrival_rate:g}/s, "
                           f"capacity {servers * service_rate:g}/s); lower the load or add servers.")
    pw = erlang_c(servers, a)
    lq = pw * rho / (1 - rho)
    wq = lq / arrival_rate
    r = wq + 1 / service_rate
    return OpenResult(utilization=rho, wait_probability=pw, mean_queue_length_waiting=lq,
                      mean_number_in_system=arrival_rate * r, waiting_time=wq, response_time=r)


def mm1(arrival_rate: float, service_rate: float) -> OpenResult:
    return mmm(arrival_rate, service_rate, 1)


def quick_response_time(service_time: float, arrival_rate: float, servers: float) -> float:
    """Shallahamer's (OraPub) R = S / (1 - (S lambda / M)^M); M may be fractional (effective servers)."""
    u = service_time * arrival_rate / servers
    if u >= 1:
        raise CapmarkError(f"The quick formula needs S*lambda/M < 1; got {u:.2f}. Lower the load or raise M.")
    return service_time / (1 - u ** servers)


def effective_servers(service_time: float, arrival_rate: float, response_time: float,
                      max_iter: int = MAX_ROOT_ITERATIONS) -> float:
    """The M for which the quick formula gives the observed response time (a root between S*lambda and
    MAX_EFFECTIVE_SERVERS); a response time no M in that range gives, or a root search that does not settle in
    max_iter steps, is an error."""
    if response_time <= service_time:
        raise CapmarkError("The observed response time must exceed the service time to solve for M.")
    low = max(service_time * arrival_rate * (1 + 1e-9), 1e-9)  # M must keep S*lambda/M below 1

    def gap(m: float) -> float:
        return quick_response_time(service_time, arrival_rate, m) - response_time

    if gap(MAX_EFFECTIVE_SERVERS) > 0:
        raise CapmarkError(f"The observed response time {response_time:.3g} s is so close to the service time "
                           f"{service_time:.3g} s that no effective number of servers up to {MAX_EFFECTIVE_SERVERS:g} "
                           "explains it; measure at a load where jobs queue.")
    from scipy.optimize import brentq  # loaded on first use: a command starts without scipy

    root, info = brentq(gap, low, MAX_EFFECTIVE_SERVERS, maxiter=max_iter, full_output=True, disp=False)
    if not info.converged:
        raise CapmarkError(f"The effective number of servers did not settle in {info.iterations} root-finding "
                           f"steps ({info.flag}); allow more steps (max_iter).")
    return float(root)


def open_network(arrival_rates: list[float], demands: list[list[float]]) -> dict[str, list]:
    """Multi-class open network of single-server queueing stations (product form).

    demands[k][c] is class c's demand at station k; returns per station utilization and per class
    residence times and response times."""
    utilizations = [sum(lam * d for lam, d in zip(arrival_rates, row, strict=True)) for row in demands]
    for k, u in enumerate(utilizations):
        if u >= 1:
            raise CapmarkError(f"Station {k} is saturated (utilization {u:.2f} >= 1); the open model has no "
                               "steady state.")
    residence = [[d / (1 - u) for d in row] for row, u in zip(demands, utilizations, strict=True)]
    response = [sum(residence[k][c] for k in range(len(demands))) for c in range(len(arrival_rates))]
    return {"utilizations": utilizations, "residence_times": residence, "response_times": response,
            "stretch": [math.nan if u >= 1 else 1 / (1 - u) for u in utilizations]}


@dataclass(frozen=True, kw_only=True)
class StationResult:
    """One station of an open multi-class network: its utilisation (per server) and each class's residence time."""

    utilization: float
    residence_times: list[float]
    wait_factor: float  # residence / demand: 1 + the waiting a unit of demand meets (the stretch factor)


def open_multiclass_station(arrival_rates: list[float], demands: list[float], servers: int = 1,
                            background_busy: float = 0.0) -> StationResult:
    """A station of m identical servers shared by several open classes (FCFS, exponential service; Menasce, Almeida
    and Dowdy's multi-class multi-server approximation): utilisation rho = (background + sum(lambda_c D_c)) / m and
    residence R_c = D_c (1 + C(m, m rho) / (m (1 - rho))), with C Erlang's wait probability. For one class it is
    M/M/m exactly; for m = 1 it is D_c / (1 - rho), the product-form single server. `background_busy` is servers kept
    busy by work that is not modelled as a class (it takes capacity, its own response is not asked for)."""
    if servers < 1:
        raise CapmarkError(f"A station needs at least one server; got {servers}.")
    busy = background_busy + sum(lam * d for lam, d in zip(arrival_rates, demands, strict=True))
    rho = busy / servers
    if rho >= 1:
        return StationResult(utilization=rho, residence_times=[math.inf if d > 0 else 0.0 for d in demands],
                             wait_factor=math.inf)
    factor = 1 + erlang_c(servers, busy) / (servers * (1 - rho)) if busy > 0 else 1.0
    return StationResult(utilization=rho, residence_times=[d * factor for d in demands], wait_factor=factor)
