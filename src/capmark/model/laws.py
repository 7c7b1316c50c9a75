"""Operational laws and bounds (Denning & Buzen; Lazowska et al. ch. 3 and 5)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def utilization(throughput: float, service_time: float) -> float:
    """Utilization law: U = X S."""
    return throughput * service_time


def little(throughput: float, response_time: float) -> float:
    """Little's law: N = X R."""
    return throughput * response_time


def forced_flow(system_throughput: float, visits: float) -> float:
    """Forced flow law: X_k = V_k X."""
    return system_throughput * visits


def service_demand(utilization_: float, throughput: float) -> float:
    """Service demand law: D = U / X."""
    return utilization_ / throughput


def interactive_response_time(population: float, throughput: float, think_time: float) -> float:
    """Interactive response time law: R = N / X - Z."""
    return population / throughput - think_time


def asymptotic_bounds(demands: Sequence[float], think_time: float, population: int) -> dict[str, float]:
    """Asymptotic bounds on throughput and response time of a closed model with queueing stations."""
    d = sum(demands)
    d_max = max(demands)
    return {
        "throughput_upper": min(population / (d + think_time), 1 / d_max),
        "throughput_lower": population / (population * d + think_time),
        "response_time_lower": max(d, population * d_max - think_time),
        "response_time_upper": population * d,
    }


def balanced_job_bounds(demands: Sequence[float], think_time: float, population: int) -> dict[str, float]:
    """Balanced job bounds (Zahorjan et al.), tighter than the asymptotic ones."""
    d, d_max = sum(demands), max(demands)
    d_avg = d / len(demands)
    n = population
    x_up = min(1 / d_max, n / (d + think_time + (n - 1) * d_avg / (1 + think_time / (n * d))))
    x_low = n / (d + think_time + (n - 1) * d_max / (1 + think_time / (n * d_max)))
    return {"throughput_upper": x_up, "throughput_lower": x_low,
            "response_time_lower": n / x_up - think_time, "response_time_upper": n / x_low - think_time}


def saturation_point(demands: Sequence[float], think_time: float) -> float:
    """N* = (D + Z) / D_max: beyond it the bottleneck saturates."""
    return (sum(demands) + think_time) / max(demands)


def stretch_factor(queue_time: float, service_time: float) -> float:
    """(queue time + service time) / service time (Bulumulle and Bordin)."""
    return (queue_time + service_time) / service_time


def headroom(utilization_: float, threshold: float = 0.8) -> float:
    """How much more load fits before the utilization reaches the threshold (1.0 = double)."""
    return threshold / utilization_ - 1 if utilization_ > 0 else math.inf
