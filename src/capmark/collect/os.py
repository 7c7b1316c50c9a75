"""Arithmetic over OS counter samples of the database host (whichever source read them): CPU shares, CPU by
process role, other programs; and capmark's own process."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TypedDict

import psutil

from capmark.collect.procfs import CPU_FIELDS, USER_HZ

ROLES = ("client backends", "capmark sampler", "walwriter", "checkpointer", "background writer", "autovacuum",
         "io workers", "postmaster", "other", "exited processes")
SAMPLER_ROLE = "capmark sampler"  # the server backend of capmark's own sampling session: capmark's cost, not work
KERNEL_THREADS_PARENT = 2  # kthreadd: kernel threads are OS overhead, not programs


def cpu_percentages(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """Share of each CPU state over an interval; the eight states sum to 100."""
    delta = {k: max(0, after.get(k, 0) - before.get(k, 0)) for k in CPU_FIELDS}
    total = sum(delta.values())
    if total <= 0:
        return {k: 0.0 for k in (*CPU_FIELDS, "busy")}
    pct = {k: 100.0 * v / total for k, v in delta.items()}
    pct["busy"] = 100.0 - pct["idle"] - pct["iowait"]
    return pct


def cpu_seconds(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    return {k: (after.get(k, 0) - before.get(k, 0)) / USER_HZ for k in CPU_FIELDS}


_CLUSTER_PREFIX = re.compile(r"^\d+/[\w.-]+:\s*")


def role_of(cmdline: list[str], is_postmaster: bool) -> str:
    """Map a PostgreSQL process title ('postgres: checkpointer') to a capmark role."""
    if is_postmaster:
        return "postmaster"
    title = " ".join(cmdline)
    if title.startswith("postgres:"):
        title = _CLUSTER_PREFIX.sub("", title[len("postgres:"):].strip())
    for prefix, role in (("walwriter", "walwriter"), ("checkpointer", "checkpointer"),
                         ("background writer", "background writer"), ("autovacuum", "autovacuum"),
                         ("io worker", "io workers"), ("logical replication", "other"), ("archiver", "other"),
                         ("walsummarizer", "other"), ("stats collector", "other"), ("startup", "other"),
                         ("walsender", "other"), ("walreceiver", "other")):
        if title.startswith(prefix):
            return role
    return "client backends"


@dataclass
class ProcessSample:
    """CPU seconds and memory of every process of the instance, plus the postmaster's reaped children."""

    # pid -> role, user s, sys s, rss bytes, shared bytes (of the rss: shared buffers touched count in it)
    procs: dict[int, tuple[str, float, float, int, int]] = field(default_factory=dict)
    reaped_user_s: float = 0.0
    reaped_sys_s: float = 0.0


def cpu_by_role(before: ProcessSample, after: ProcessSample) -> dict[str, dict[str, float]]:
    """CPU seconds per role over the interval; processes that exited count under 'exited processes'.

    A process that exits is reaped by the postmaster, whose children times then grow by its whole
    lifetime CPU; subtract what was already attributed to it before it exited.
    """
    # PostgreSQL's roles always (one that did nothing shows 0); a one-process server's single role instead
    roles = {role for role, *_ in after.procs.values()}
    listed = ROLES if roles <= set(ROLES) else (*sorted(roles), "exited processes")
    out = {role: {"user_s": 0.0, "sys_s": 0.0, "processes": 0} for role in listed}
    for pid, (role, user, sys, _rss, _shared) in after.procs.items():
        u0, s0 = (before.procs[pid][1], before.procs[pid][2]) if pid in before.procs else (0.0, 0.0)
        out[role]["user_s"] += user - u0
        out[role]["sys_s"] += sys - s0
        out[role]["processes"] += 1
    gone = [p for p in before.procs if p not in after.procs]
    seen_user = sum(before.procs[p][1] for p in gone)
    seen_sys = sum(before.procs[p][2] for p in gone)
    exited = out["exited processes"]
    exited["user_s"] = max(0.0, after.reaped_user_s - before.reaped_user_s - seen_user)
    exited["sys_s"] = max(0.0, after.reaped_sys_s - before.reaped_sys_s - seen_sys)
    exited["processes"] = len(gone)
    return out


def relabel(sample: ProcessSample, pid: int | None, role: str) -> None:
    """Give one process of the instance its own role (e.g. the sampler's backend among the client backends)."""
    if pid is not None and pid in sample.procs:
        sample.procs[pid] = (role, *sample.procs[pid][1:])


@dataclass
class HostProcesses:
    """CPU seconds of every other process on the host: pid -> (name, CPU seconds, start time)."""

    procs: dict[int, tuple[str, float, float]] = field(default_factory=dict)
    kernel_threads_s: float = 0.0
    taken_at: float = 0.0


class ProgramCpu(TypedDict):
    pid: int
    name: str
    cpu_s: float


class OtherPrograms(TypedDict):
    """The CPU of the host's other programs over the window, as the step stores it (interference.processes)."""

    cpu_s: float  # all of them together
    kernel_threads_s: float
    top: list[ProgramCpu]  # the busiest few, busiest first


def other_processes_cpu(before: HostProcesses, after: HostProcesses, exclude: set[int],
                        top: int = 5) -> OtherPrograms:
    """CPU the host's other programs used between two samples: their total and the busiest few by name.

    Processes of the instance and the driver are excluded by pid. A process that started in the interval
    counts its whole CPU; one that ended in it is missed (its CPU stays in the unattributed remainder).
    """
    used: list[tuple[float, int, str]] = []
    for pid, (name, cpu, started) in after.procs.items():
        if pid in exclude:
            continue
        prev = before.procs.get(pid)
        if prev is not None and prev[2] == started:
            cpu -= prev[1]
        elif started < before.taken_at - 1.0:  # pid reused by a process that started long ago: cannot tell
            continue
        if cpu > 0:
            used.append((cpu, pid, name))
    used.sort(reverse=True)
    return OtherPrograms(cpu_s=sum(c for c, _p, _n in used),
                         kernel_threads_s=max(0.0, after.kernel_threads_s - before.kernel_threads_s),
                         top=[ProgramCpu(pid=pid, name=name, cpu_s=cpu) for cpu, pid, name in used[:top]])


def own_cpu_seconds() -> tuple[float, float]:
    t = psutil.Process().cpu_times()
    return t.user, t.system


def own_run_delay() -> dict[int, float]:
    """Seconds each of this process's threads has waited for a CPU while runnable (/proc schedstat); with
    its CPU time it says whether the driver itself was starved of CPU. Empty where schedstat is missing."""
    out: dict[int, float] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return out


def run_delay_between(before: dict[int, float], after: dict[int, float]) -> float | None:
    if not after:
        return None
    return sum(v - before.get(tid, 0.0) for tid, v in after.items())
