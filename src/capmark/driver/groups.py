"""The jobs of one step as the step runner sees them, whether they are threads of this process (server side:
they only wait on their sockets) or threads of worker processes (client side: Python's global lock would hold
one process to one core). Both meet the runner at the same phase boundaries and hand back the same tallies."""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict

from capmark.collect import netinfo
from capmark.driver.jobs import Job, Pacing, Schedule, Tally, error_text
from capmark.driver.procs import ProcessJobs, WorkerFailed, WorkerSpec, split_jobs
from capmark.engines import registry as engines
from capmark.engines.base import TargetInfo
from capmark.workloads import registry
from capmark.workloads.base import DataSize, ParamValue, Workload

if TYPE_CHECKING:
    from capmark.driver.cluster import NodeLayout

BARRIER_TIMEOUT_S = 120.0  # a phase boundary every job reaches within this, or the step fails


class StepFailed(Exception):
    """The step could not run to its end; the message says why, in the user's words."""


class ProcessCpu(TypedDict):
    """One driver process's CPU over the window, as the step stores it (driver_cpu.processes)."""

    pid: int
    jobs: list[int]  # the jobs it ran (none: the runner's own process)
    user_s: float
    sys_s: float
    run_delay_s: float | None  # time its threads waited for a CPU while runnable (None: not measured)
    node: NotRequired[str]  # on a Ray cluster: the Ray node it ran on
    together: NotRequired[bool]  # its jobs' lookups ran from one thread, over all their connections (driver/crew.py)


@dataclass
class Outcome:
    """Everything the jobs did, merged by the runner: per-job tallies, failures, and the driver processes' CPU
    and traffic over the window (empty for threads: the runner measures its own process)."""

    tallies: list[Tally]
    failures: list[str]
    processes: list[ProcessCpu] = field(default_factory=list)
    net_before: list[netinfo.NetReading] = field(default_factory=list)
    net_after: list[netinfo.NetReading] = field(default_factory=list)
    cluster: list[NodeLayout] | None = None  # on a Ray cluster: per node, its jobs, cores and clock offset


class JobGroup(Protocol):
    schedule: Any

    def start(self) -> list[int]: ...

    def wait(self) -> None: ...

    def mark_window(self) -> None: ...

    def finish(self) -> Outcome: ...

    def stop(self) -> None: ...

    def cut_short(self) -> None: ...

    def failed(self) -> bool:
        """Whether a job has already failed, so that the runner ends the phase now instead of at its planned end."""
        ...


@dataclass
class StepJobs:
    """What a step's jobs run: the same for threads and processes."""

    dsn: str
    workload: Workload
    params: dict[str, ParamValue]
    size: DataSize
    mode: str
    info: TargetInfo
    pacing: Pacing
    jobs: int
    session_settings: dict[str, str]


class ThreadJobs:
    """One thread and one connection per job, in this process."""

    def __init__(self, spec: StepJobs) -> None:
        self.spec = spec
        self.schedule = Schedule()
        self.stop_event = threading.Event()
        self.barrier = threading.Barrier(spec.jobs + 1)
        self.conns: list[Any] = []
        self.engine = engines.named(spec.info.engine)
        self.jobs: list[Job] = []
        self.net: list[list[netinfo.NetReading]] = []

    def start(self) -> list[int]:
        s = self.spec
        for i in range(s.jobs):
            conn = self.engine.connect(s.dsn, application_name=f"capmark job {i + 1}")
            self.conns.append(conn)
            self.engine.set_session(conn, s.session_settings)
        try:
            self.jobs = [Job(i + 1, c, s.workload, s.params, s.size, s.mode, s.info, self.barrier, self.schedule,
                             self.stop_event, s.pacing) for i, c in enumerate(self.conns)]
        except self.engine.error as err:  # e.g. preparing the client statements: the step cannot start
            raise StepFailed(f"the jobs could not prepare their statements: {error_text(err, self.engine)}") from None
        for job in self.jobs:
            job.start()
        return [self.engine.backend_pid(c) for c in self.conns]

    def wait(self) -> None:
        try:
            self.barrier.wait(timeout=BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            failures = [j.failure for j in self.jobs if j.failure]
            raise StepFailed("; ".join(failures) or "a job stopped responding") from None

    def failed(self) -> bool:
        return self.barrier.broken  # a failing job breaks it

    def mark_window(self) -> None:
        """Called by the runner in the pauses before and after the window: the job sockets are quiet."""
        self.net.append(netinfo.read_all(self.conns))

    def finish(self) -> Outcome:
        for job in self.jobs:
            job.join(timeout=10)
        for conn in self.conns:
            conn.close()
        before, after = (self.net[0], self.net[-1]) if len(self.net) >= 2 else ([], [])
        return Outcome([j.tally for j in self.jobs], [j.failure for j in self.jobs if j.failure],
                       net_before=before, net_after=after)

    def cut_short(self) -> None:
        """End the current phase early: the jobs take a cancel of their statement as the end of it and meet the
        runner at the next boundary (the step's overrun watch cancels the statements)."""
        self.stop_event.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.barrier.abort()
        for conn in self.conns:
            with contextlib.suppress(Exception):  # best effort; closing below ends the backend anyway
                self.engine.cancel(conn, self.spec.dsn)
        for job in self.jobs:
            job.join(timeout=5)
        for conn in self.conns:
            conn.close()


def worker_specs(spec: StepJobs, procs: int) -> list[WorkerSpec]:
    """The step's jobs dealt over procs processes, each part described so that another process can run it."""
    return [WorkerSpec(spec.dsn, part, registry.reference(spec.workload), spec.params, spec.size, spec.mode,
                       spec.info, spec.pacing, spec.session_settings) for part in split_jobs(spec.jobs, procs)]


class ProcessGroup:
    """The jobs in worker processes (see procs.py); the runner's view is the same as of threads."""

    def __init__(self, spec: StepJobs, procs: int) -> None:
        specs = worker_specs(spec, procs)
        self.pool = ProcessJobs(specs, spec.jobs)
        self.schedule = self.pool.schedule

    def start(self) -> list[int]:
        try:
            return self.pool.start()
        except WorkerFailed as err:
            raise StepFailed(str(err)) from None

    def wait(self) -> None:
        try:
            self.pool.wait(BARRIER_TIMEOUT_S)
        except WorkerFailed as err:
            raise StepFailed(str(err)) from None

    def mark_window(self) -> None:
        """The workers read their own sockets and CPU at the same quiet instants."""

    def finish(self) -> Outcome:
        try:
            results = self.pool.results()
        except WorkerFailed as err:
            raise StepFailed(str(err)) from None
        by_job = sorted(((j, t) for r in results for j, t in zip(r.jobs, r.tallies, strict=True)))
        return Outcome([t for _j, t in by_job], [f for r in results for f in r.failures],
                       [ProcessCpu(pid=r.pid, jobs=r.jobs, user_s=r.user_s, sys_s=r.sys_s, run_delay_s=r.run_delay_s,
                                   together=r.together) for r in results],
                       [n for r in results for n in r.net_before], [n for r in results for n in r.net_after])

    def cut_short(self) -> None:
        self.pool.stop_event.set()  # the jobs in every process see it; their backends are cancelled by pid

    def failed(self) -> bool:
        return self.pool.failed()

    def stop(self) -> None:
        self.pool.stop()


class ClusterGroup:
    """The jobs as Ray actors spread over a cluster's nodes (see cluster.py); the runner's view is the same."""

    def __init__(self, spec: StepJobs, procs: int) -> None:
        from capmark.driver import cluster

        self.cluster = cluster
        specs = worker_specs(spec, procs)
        self.jobs = cluster.RayJobs(specs)
        self.schedule = Schedule()

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (self.cluster.NodeLost, RuntimeError) as err:
            raise StepFailed(str(err)) from None

    def start(self) -> list[int]:
        return self._call(self.jobs.start)

    def wait(self) -> None:
        s = self.schedule
        self._call(self.jobs.wait, BARRIER_TIMEOUT_S, (s.warmup_end, s.measure_start, s.measure_end))

    def mark_window(self) -> None:
        """Each actor reads its own process's CPU and sockets at the same quiet instants."""

    def finish(self) -> Outcome:
        placed = self._call(self.jobs.results)
        by_job = sorted(((j, t) for _p, r in placed for j, t in zip(r.jobs, r.tallies, strict=True)))
        return Outcome([t for _j, t in by_job], [f for _p, r in placed for f in r.failures],
                       [ProcessCpu(pid=r.pid, jobs=r.jobs, user_s=r.user_s, sys_s=r.sys_s, run_delay_s=r.run_delay_s,
                                   node=p.node.node_id if p.node else "", together=r.together) for p, r in placed],
                       [n for _p, r in placed for n in r.net_before], [n for _p, r in placed for n in r.net_after],
                       cluster=self.jobs.layout())

    def cut_short(self) -> None:
        """The actors cannot be told to end a phase early: the overrun watch's cancel ends their statements, which
        fails the step instead of letting it wait forever."""

    def failed(self) -> bool:
        return False  # the actors' barrier is met through Ray calls: a failure shows when the phase ends

    def stop(self) -> None:
        self.jobs.stop()


def driver_processes(requested: int | None, jobs: int, mode: str, workload: Workload, cluster: bool = False) -> int:
    """How many worker processes run a step's jobs; 0 means threads in this process.

    Server-side jobs only wait on their sockets: threads. Client-side jobs do Python work per unit, so by default
    each core of the load host gets a process of its own (no process drives more than one core can), never more
    processes than jobs. A workload that is not in the catalogue (made in code, not by name) cannot be sent to
    another process, so it runs threaded. On a Ray cluster the processes are actors, one per CPU it offers."""
    if mode != "client" or registry.reference(workload) is None:
        return 0
    if cluster:
        from capmark.driver.cluster import actors_for

        return actors_for(jobs, requested)
    if requested is not None:
        return min(requested, jobs)
    return min(jobs, os.cpu_count() or 1)


def job_group(spec: StepJobs, procs: int, cluster: bool = False) -> JobGroup:
    """Ray actors when the run joined a cluster (client side), worker processes, or threads of this process."""
    if cluster and procs:
        return ClusterGroup(spec, procs)
    if procs:
        return ProcessGroup(spec, procs)
    return ThreadJobs(spec)
