"""Is a step fit to calibrate a model on? A step that fails a check is shown but not used.

A saturated load generator measures the driver, not the database; an open loop that falls behind
its schedule no longer offers the load it claims; a step whose jobs, throughput and response
time disagree with Little's law (N = X (R + Z)) has a hole in its bookkeeping; a step that shared the
server with other sessions, or the host with other busy programs, measured them too; and a storage step
whose server could not evict shared buffers measured the buffers.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, TypeVar

from capmark.measure.demands import host_busy_s
from capmark.results import StepResult

DRIVER_SATURATED = 0.9  # driver CPU in cores: one Python process runs one thread at a time
LITTLE_TOLERANCE = 0.05
# this 2-vCPU VM shows 1 s coefficients of variation up to 0.18 and fitted trends up to 30 % in clean steps
UNSTABLE_CV = 0.25
UNSTABLE_TREND = 0.35
WARMUP_SHORTFALL = 0.6
# Other sessions active on the server in more than 5 % of the 10 Hz samples: a monitoring poll (a few ms every
# few seconds) stays well below, while any sustained work by another application shows in most samples.
OTHER_SESSIONS_SHARE = 0.05
# Other programs on the host using more than 5 % of the host's busy CPU may have competed with the instance for
# it: the step is flagged (a caution the user sees beside its figures) and stays in the models.
OTHER_PROCESSES_SHARE = 0.05
# Beyond a quarter of the host's busy CPU, another program did as much as a fair share of the work on a small
# host: the step's throughput and demands describe the sharing, not the platform, and models leave it out.
OTHER_PROCESSES_INVALID_SHARE = 0.25
# ...but only where they also took at least a twentieth of the host's CPU capacity (cores x window). A step that
# keeps the host barely busy (an IO-bound one waits on its device with the cores idle) makes a quarter of a small
# busy out of the host's own housekeeping: 0.04 s of daemons was a third of such a step's busy CPU in CI, on cores
# that were idle most of the window and so took nothing from the instance.
OTHER_PROCESSES_MIN_CAPACITY = 0.05


# A window that ended this long after its plan (jobs still busy at its end: a lock another session held, a unit
# far longer than the window) measured a longer, different window than planned: its throughput is not the plan's.
OVERRUN_TOLERANCE_S = 5.0


# A node whose clock offset to the runner is known only to more than 1 % of the window may have started or ended
# its jobs' window that far from the others': the step's throughput and series are then off by as much.
CLOCK_UNCERTAINTY_SHARE = 0.01


@dataclass(frozen=True)
class Stability:
    cv: float  # standard deviation / mean of the 1 s throughput
    trend: float  # fitted change first -> last second, relative to the mean
    r_squared: float  # of the linear fit
    opening: float  # mean of the first tenth of the window / median of the rest


_Count = TypeVar("_Count", int, float)  # units per second, or their batch means


def full_seconds(series: list[_Count]) -> list[_Count]:
    """A 1 s series without its last second, which often holds units that ended just after the window."""
    return series[:-1] if len(series) > 3 else series


def stability(series: list[int]) -> Stability | None:
    """How steady a step's 1 s throughput was (the last second, often partial, left out)."""
    u = [float(v) for v in full_seconds(series)]
    if len(u) < 4 or not any(u):
        return None
    n, mean = len(u), statistics.fmean(u)
    if mean <= 0:
        return None
    mx = (n - 1) / 2
    sxx = sum((x - mx) ** 2 for x in range(n))
    slope = sum((x - mx) * (y - mean) for x, y in zip(range(n), u, strict=True)) / sxx
    ss_tot = sum((y - mean) ** 2 for y in u)
    ss_res = sum((y - mean - slope * (x - mx)) ** 2 for x, y in zip(range(n), u, strict=True))
    head = max(1, n // 10)
    rest = statistics.median(u[head:])
    return Stability(statistics.pstdev(u) / mean, slope * (n - 1) / mean, 1 - ss_res / ss_tot if ss_tot else 0.0,
                     statistics.fmean(u[:head]) / rest if rest else 1.0)


def little_gap(step: StepResult) -> float | None:
    """N / (X (R + Z)) - 1 over the window (closed loop only)."""
    if not step.elapsed_s or not step.units or step.pacing.get("rate"):
        return None
    mean = step.latency.mean_s
    if mean is None:
        return None
    x = step.units / step.elapsed_s
    return step.jobs / (x * (mean + step.pacing.get("think_s", 0.0))) - 1


def interference_problems(step: StepResult) -> list[str]:
    """Other sessions on the server or other programs on the host that worked during the window."""
    out = []
    sessions = (step.interference or {}).get("sessions") or {}
    if sessions.get("capmark_samples"):
        names = ", ".join(sessions.get("capmark_by_application") or {})
        out.append(f"another capmark run worked on the same server during the step ({names}, active in "
                   f"{sessions['capmark_samples']} of {sessions['samples']} samples)")
    share = sessions.get("active_share")
    if share is not None and share > OTHER_SESSIONS_SHARE:
        names = ", ".join(sessions.get("by_application") or {})
        out.append(f"other sessions worked on the server during the step: active in {share:.0%} of the samples "
                   f"({names})")
    share, sentence = _other_programs(step)
    if _other_programs_invalidate(step, share):
        out.append(sentence)
    return out


def _other_programs_invalidate(step: StepResult, share: float) -> bool:
    return share > OTHER_PROCESSES_INVALID_SHARE and _other_programs_capacity_share(step) >= OTHER_PROCESSES_MIN_CAPACITY


def _other_programs_capacity_share(step: StepResult) -> float:
    """Other programs' CPU in the window as a share of the host's capacity (every core's seconds, idle ones too)."""
    processes = (step.interference or {}).get("processes")
    capacity = float(sum((step.os.get("cpu_seconds") or {}).values()))
    if not processes or not capacity:
        return 0.0
    return float(processes.get("cpu_s") or 0.0) / capacity


def _other_programs(step: StepResult) -> tuple[float, str]:
    """The share of host busy CPU that other programs used in the window, and a sentence naming the top ones."""
    processes = (step.interference or {}).get("processes")
    busy = host_busy_s(step)
    if not processes or not busy:
        return 0.0, ""
    others = processes.get("cpu_s") or 0.0
    top = ", ".join(f"{p['name']} (pid {p['pid']}, {p['cpu_s']:.2f} s)" for p in processes.get("top", [])[:3])
    return others / busy, f"other programs on the host used {others / busy:.0%} of its busy CPU during the step: {top}"


def cautions(step: StepResult) -> list[str]:
    """What a valid step's reader should know: other programs used a noticeable share of the host's CPU."""
    share, sentence = _other_programs(step)
    if share > OTHER_PROCESSES_SHARE and not _other_programs_invalidate(step, share):
        return [sentence + " (the figures may include their competition for the CPU)"]
    return []


def storage_problems(step: StepResult) -> list[str]:
    """A storage step on a server that could not evict shared buffers, with a table they hold."""
    eviction = (step.instruments or {}).get("eviction")
    if eviction and not eviction.get("measures_storage", True):
        return [f"shared buffers were not evicted ({eviction.get('reason')}): this step measures shared buffers, "
                "not storage"]
    return []


def _driver_saturation(step: StepResult) -> list[str]:
    """A driver process that used (or wanted) a whole core was the bottleneck, not the database. Each process
    counts on its own: one process can drive at most one core, whatever the others do."""
    processes = step.driver_cpu.get("processes") or [step.driver_cpu]
    for p in processes:
        cores = (p.get("user_s", 0.0) + p.get("sys_s", 0.0)) / step.elapsed_s
        wanted = cores + (p.get("run_delay_s") or 0.0) / step.elapsed_s
        who = _driver_process(p, len(processes))
        if cores >= DRIVER_SATURATED:
            return [f"the load generator was saturated ({who}CPU {cores:.2f} of one core)"]
        if wanted >= DRIVER_SATURATED:
            return [f"the load generator was saturated ({who}busy or waiting for a CPU {wanted:.0%} of the window, "
                    f"CPU {cores:.2f} of one core)"]
    return []


def cluster_problems(step: StepResult) -> list[str]:
    """On a Ray cluster: a node whose clock was not pinned down, or whose cores the job processes used up."""
    nodes = ((step.instruments or {}).get("cluster") or {}).get("nodes") or []
    out = []
    for node in nodes:
        name = f"{node.get('hostname')} ({node.get('address')})"
        uncertainty = node.get("uncertainty_s")
        if uncertainty is not None and step.elapsed_s and uncertainty > CLOCK_UNCERTAINTY_SHARE * step.elapsed_s:
            out.append(f"the clock of load node {name} is known only to within {uncertainty * 1000:.0f} ms, more "
                       f"than {CLOCK_UNCERTAINTY_SHARE:.0%} of the window: its jobs' window may not have been the "
                       "others'")
        used = sum(p.get("user_s", 0.0) + p.get("sys_s", 0.0) for p in step.driver_cpu.get("processes", [])
                   if p.get("node") == node.get("node_id"))
        cores = node.get("cores") or 1
        if step.elapsed_s and used / step.elapsed_s >= DRIVER_SATURATED * cores:
            out.append(f"the load generator was saturated on node {name}: its job processes used "
                       f"{used / step.elapsed_s:.2f} of its {cores} cores")
    return out


# open-ended: one process of StepResult.driver_cpu as the driver recorded it (its CPU, and its jobs where known)
def _driver_process(p: dict[str, Any], processes: int) -> str:
    if processes == 1:
        return "driver "
    jobs = p.get("jobs") or []
    if not jobs:
        return "the driver's main process: "
    return f"the driver process of job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs))}: "


def problems(step: StepResult) -> list[str]:
    out = []
    if step.status != "ok":
        out.append(f"the step did not complete ({step.status})")
        return out
    if not step.units:
        out.append(no_units(step))
        return out
    overrun = window_overrun(step)
    if overrun:
        out.append(overrun)
    if step.driver_cpu and step.elapsed_s:
        out.extend(_driver_saturation(step))
    out.extend(cluster_problems(step))
    lag = step.schedule_lag.summary() if step.schedule_lag is not None and step.schedule_lag.total else None
    # open loop: latency counts from the intended start, so a late generator inflates it; late by more than a
    # millisecond at the median and for most of the measured latency means the load was not offered
    if lag and lag["p50_s"] is not None and lag["p50_s"] > 1e-3 and (lag["mean_s"] or 0.0) > 0.5 * (
            step.latency.mean_s or 0.0):
        out.append(f"the open loop fell behind its schedule (median start delay {lag['p50_s'] * 1000:.1f} ms)")
    st = stability(step.series_units)
    if st is not None:
        if st.cv > UNSTABLE_CV:
            out.append(f"the step was unstable: its 1 s throughput varied by {st.cv:.0%} (coefficient of variation)")
        elif abs(st.trend) > UNSTABLE_TREND and st.r_squared > 0.5:
            out.append(f"the step was unstable: its 1 s throughput drifted by {st.trend:+.0%} over the window")
        elif st.opening < WARMUP_SHORTFALL:
            out.append(f"the warm-up was too short: the window's first seconds ran at {st.opening:.0%} of the rest")
    out += interference_problems(step) + storage_problems(step)
    gap = little_gap(step)
    if gap is not None and abs(gap) > LITTLE_TOLERANCE:
        out.append(f"Little's law does not balance: jobs / (throughput x (response + think)) is off by {gap:+.0%} "
                   "(jobs spent time outside measured units, e.g. a checkpoint between slices, or counts are off)")
    return out


def _planned_s(step: StepResult) -> float:
    """The planned window: stored by the overrun watch, else one entry of the 1 s series per planned second."""
    window = ((step.instruments or {}).get("overrun") or {}).get("window_s")
    return float(window) if window is not None else float(len(step.series_units))


def _what_jobs_waited_for(step: StepResult) -> str:
    """What the step's overrun watch saw the jobs wait for, with the session holding a lock ('' when none)."""
    overrun = (step.instruments or {}).get("overrun") or {}
    blockers = overrun.get("blockers") or []
    if blockers:
        b = blockers[0]
        since = f", its transaction started at {b['xact_start']}" if b.get("xact_start") else ""
        app = f"application '{b['application_name']}'" if b.get("application_name") else "no application_name"
        return (f"every job waited on a lock held by pid {b['pid']} ({app}, user {b.get('user') or '?'}{since})"
                + (f" on {', '.join(b['relations'])}" if b.get("relations") else ""))
    waits = overrun.get("waits") or {}
    return f"the jobs waited for {', '.join(waits)}" if waits else ""


def no_units(step: StepResult) -> str:
    """Why a step completed no unit, as far as the step knows: the window, and what its jobs waited for."""
    planned = _planned_s(step)
    sentence = f"no unit completed in the {planned:g} s window" if planned else "no unit completed"
    why = _what_jobs_waited_for(step)
    overrun = (step.instruments or {}).get("overrun") or {}
    if why:
        sentence += f": {why}"
        if overrun.get("phase") == "warm-up":
            sentence += " from the warm-up on"
        if overrun.get("cancelled"):
            sentence += f" (capmark cancelled them {overrun.get('over_s', 0):g} s past the {overrun['phase']}'s plan)"
    return sentence


def window_overrun(step: StepResult) -> str:
    """A window that ran more than OVERRUN_TOLERANCE_S past its plan: the step measured another window."""
    planned = _planned_s(step)
    over = step.elapsed_s - planned
    if not planned or over <= OVERRUN_TOLERANCE_S:
        return ""
    why = _what_jobs_waited_for(step)
    return (f"the window ran {over:.0f} s past its plan of {planned:g} s (jobs were still busy at its end"
            + (f": {why}" if why else "") + ")")


def is_valid(step: StepResult) -> bool:
    return not problems(step)
