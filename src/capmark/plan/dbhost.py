"""The database host as the model needs it, from the stored run alone: how many cores it has, whether its CPU
was measured, and where capmark's own process ran. Never from the machine doing the analysis, so that a run
re-analysed anywhere gives the same answers; and never a model without a CPU where the CPU was not measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from capmark.errors import CapmarkError
from capmark.measure.demands import driver_on_host, host_busy_s
from capmark.plan.iothrottle import IoThrottle, io_throttle
from capmark.results import RunResult, StepResult, TestResult

FIXES = ("measure again with `--host-metrics sql` after giving capmark's database role read access to the host's "
         "/proc, or with `--node-exporter URL` from a node_exporter on that host, or state the host's cores with "
         "`--cores N` to estimate its CPU from the wait samples")
# runs stored before capmark could read another host's counters say only that the database was not local
OLD_REMOTE_REASON = "the database ran on another host, which capmark could not measure when this run was made"
# where the model's cores come from, shown beside them: a stated or recorded count is not the step's measurement
CORES_MEASURED = "measured"
CORES_RECORDED = "recorded with the run"
CORES_STATED = "stated with --cores"
CORES_CONFINED = "the cores the server was confined to"
CORES_QUOTA = "the CPU time the server was limited to"


@dataclass(frozen=True)
class DatabaseHost:
    """What the run recorded of the database host, and the cores the user stated for it (--cores)."""

    cores: int | None = None  # recorded with the run; None where it was not
    source: str | None = None  # local | sql | node-exporter | none; None for runs stored before the sources
    reason: str = ""  # why no source measured the host
    driver_on_host: bool | None = None  # capmark's process ran on the database host; None: not recorded
    stated_cores: int | None = None  # --cores: the user's word overrides what the run recorded
    confined_cores: int | None = None  # --server-cpus: the server had only these of the host's cores
    cpu_quota: float | None = None  # --server-cpu-quota: the server had this many cores' worth of CPU time
    probe_growth: float | None = None  # the host's own CPU scaling, as capmark's probe measured it (driver/probe.py)
    probe_words: str = ""
    io_throttle: IoThrottle | None = None  # --server-iops, --server-mbps: the throttle is the device (iothrottle.py)


@dataclass(frozen=True)
class Cores:
    count: int
    origin: str  # CORES_MEASURED | CORES_RECORDED | CORES_STATED | CORES_CONFINED | CORES_QUOTA
    # each core's speed relative to the host's: below 1 where a CPU quota gave the server fewer cores' worth of time
    speed: float = 1.0


def _count(value: Any) -> int | None:
    """A positive count as stored (JSON may hold null, a bool or nothing), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def database_host(run: RunResult, stated_cores: int | None = None) -> DatabaseHost:
    """The database host of a stored run. Runs stored before the host metrics sources recorded only the machine
    that ran capmark ("host"), which was the database host only when the database was local."""
    env = run.environment or {}
    recorded = env.get("database_host")
    confined = env.get("platform")
    confined_cores = _count(confined.get("cpus")) if isinstance(confined, dict) else None
    quota = confined.get("cpu_quota") if isinstance(confined, dict) else None
    cpu_quota = float(quota) if isinstance(quota, int | float) and not isinstance(quota, bool) and quota > 0 else None
    probe = env.get("platform_scaling")
    growth = probe.get("growth") if isinstance(probe, dict) else None
    probe_growth = float(growth) if isinstance(growth, int | float) and not isinstance(growth, bool) else None
    probe_words = _probe_words(probe) if probe_growth is not None and isinstance(probe, dict) else ""
    if isinstance(recorded, dict):
        on_host = recorded.get("driver_on_host")
        return DatabaseHost(_count(recorded.get("cores")), recorded.get("source"), str(recorded.get("reason") or ""),
                            on_host if isinstance(on_host, bool) else None, stated_cores, confined_cores,
                            cpu_quota, probe_growth, probe_words, io_throttle(confined))
    local = (env.get("database") or {}).get("local")
    if local is True:
        return DatabaseHost(_count((env.get("host") or {}).get("logical_cores")), None, "", True, stated_cores)
    return DatabaseHost(None, None, OLD_REMOTE_REASON if local is False else "", None, stated_cores)


def _probe_words(probe: dict[str, Any]) -> str:  # open-ended: the probe's record as the run stored it
    words = probe.get("words")
    return words if isinstance(words, str) else "the host's CPU probe"


def has_host_cpu(step: StepResult) -> bool:
    return host_busy_s(step) is not None


def no_host_cpu_sentence(subject: str, host: DatabaseHost) -> str:
    """One sentence: the CPU of the database host was not measured, so the model will not answer, and the fixes."""
    why = host.reason.strip().rstrip(".").replace(". ", "; ")
    return (f"{subject} has no measurement of the database host's CPU{f' ({why})' if why else ''}, so a model of it "
            f"cannot tell when its CPU limits the load; {FIXES}.")


def require_host_cpu(run: RunResult, tests: list[TestResult], host: DatabaseHost) -> None:
    """Refuse a run whose measured steps never saw the database host's CPU, unless the user stated its cores.
    A run has one host metrics source, so one sentence for the run rather than one per test."""
    steps = [s for t in tests for s in t.steps]
    if host.stated_cores is None and steps and not any(has_host_cpu(s) for s in steps):
        raise CapmarkError(no_host_cpu_sentence(f"Run {run.run_id}", host))


def cores_for(step: StepResult, host: DatabaseHost, subject: str) -> Cores:
    """The database host's cores for the model: as stated (--cores), else those the server was confined to
    (--server-cpus, and a CPU quota: see _quota_cores), else as the step measured them, else as the run recorded
    them; a CapmarkError naming --cores where none of these exists."""
    if host.stated_cores is not None:
        return Cores(host.stated_cores, CORES_STATED)
    if host.cpu_quota is not None:
        return _quota_cores(host.cpu_quota, host.confined_cores or _count(step.os.get("cores")) or host.cores)
    if host.confined_cores is not None:
        return Cores(host.confined_cores, CORES_CONFINED)
    measured = _count(step.os.get("cores"))
    if measured is not None:
        return Cores(measured, CORES_MEASURED)
    if host.cores is not None:
        return Cores(host.cores, CORES_RECORDED)
    raise CapmarkError(f"{subject} does not record how many cores the database host has; state them with "
                       "`--cores N`.")


def _quota_cores(quota: float, cores: int | None) -> Cores:
    """A quota of F cores' worth of CPU time, as the model's cores: ceil(F) cores (at most those the server had),
    each running at F / ceil(F) of its speed, so that the jobs together never run above F, as under the kernel's
    quota (averaged over its 100 ms periods). Exact for F up to 1 and for whole F; between whole numbers one job
    runs at F / ceil(F) of a core, where the kernel would let it use a whole one."""
    count = math.ceil(quota - 1e-9)  # a whole quota of 2.0 is 2 cores, not 3
    if cores is not None:
        count = min(count, cores)
    return Cores(count, CORES_QUOTA, speed=min(1.0, quota / count))


def stated_cores_note(host: DatabaseHost, step: StepResult) -> str:
    """The note a model calibrated with --cores carries, naming what the run itself recorded."""
    assert host.stated_cores is not None
    recorded = _count(step.os.get("cores")) or host.cores
    seen = f" (the run recorded {recorded})" if recorded is not None and recorded != host.stated_cores else ""
    return f"the database host's cores are {host.stated_cores}, as stated with --cores{seen}"


def driver_runs_on_host(step: StepResult, host: DatabaseHost) -> bool:
    """Whether capmark's driver shared the database host's CPU: as the step's host metrics recorded it (runs
    stored before the sources: where the host's CPU was measured, since it was then local), else as the run
    recorded it; a driver nobody placed is taken to be elsewhere."""
    if "driver_on_host" in step.os or has_host_cpu(step):
        return driver_on_host(step)
    return bool(host.driver_on_host)


def estimate_note(jobs: list[int], partly: bool) -> str:
    """What a model whose CPU comes from the wait samples says about it, wherever it is shown."""
    at = f" at {', '.join(map(str, jobs))} job{'s' if jobs != [1] else ''}" if partly else ""
    where = f"the calibration step(s){at}"
    return (f"ESTIMATE: the database host's CPU was not measured in {where}, so the CPU per unit is estimated from "
            "the wait samples (the share of the jobs' samples on CPU times the jobs' time, per unit); it counts the "
            "jobs' database sessions only, not background processes or the kernel's own work")
