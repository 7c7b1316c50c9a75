"""Is a step fit to calibrate a model on? A step that fails a check is shown but not used.

A saturated load generator measures the driver, not the database; an open loop that falls behind
its schedule no longer offers the load it claims; and a step whose jobs, throughput and response
time disagree with Little's law (N = X (R + Z)) has a hole in its bookkeeping.
"""

from __future__ import annotations

from capmark.results import StepResult

DRIVER_SATURATED = 0.9  # driver CPU in cores: one Python process runs one thread at a time
LITTLE_TOLERANCE = 0.05


def little_gap(step: StepResult) -> float | None:
    """N / (X (R + Z)) - 1 over the window (closed loop only)."""
    if not step.elapsed_s or not step.units or step.pacing.get("rate"):
        return None
    mean = step.latency.mean_s
    if mean is None:
        return None
    x = step.units / step.elapsed_s
    return step.jobs / (x * (mean + step.pacing.get("think_s", 0.0))) - 1


def problems(step: StepResult) -> list[str]:
    out = []
    if step.status != "ok":
        out.append(f"the step did not complete ({step.status})")
        return out
    if not step.units:
        out.append("no unit of work completed")
        return out
    if step.driver_cpu and step.elapsed_s:
        cores = (step.driver_cpu.get("user_s", 0.0) + step.driver_cpu.get("sys_s", 0.0)) / step.elapsed_s
        if cores >= DRIVER_SATURATED:
            out.append(f"the load generator was saturated (driver CPU {cores:.2f} of one core)")
    lag = step.schedule_lag.summary() if step.schedule_lag is not None and step.schedule_lag.total else None
    if lag and lag["p50_s"] is not None and lag["p50_s"] > max(1e-3, 2 * (step.latency.mean_s or 0.0)):
        out.append(f"the open loop fell behind its schedule (median start delay {lag['p50_s'] * 1000:.1f} ms)")
    gap = little_gap(step)
    if gap is not None and abs(gap) > LITTLE_TOLERANCE:
        out.append(f"Little's law does not balance: jobs / (throughput x (response + think)) is off by {gap:+.0%}")
    return out


def is_valid(step: StepResult) -> bool:
    return not problems(step)
