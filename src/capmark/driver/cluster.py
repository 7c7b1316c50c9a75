"""Client-side jobs on a Ray cluster: the load comes from several hosts, the step stays one step.

Ray places the job processes (actors, one placement bundle of one CPU each, spread over the nodes), carries
the calls between them and the step runner, and tells when a node is gone; capmark writes no agent of its own.
Each actor runs its share of the jobs as threads, exactly as a local worker process does (procs.JobsInProcess).
There is no barrier across hosts, so the runner plays it: it waits until every actor's jobs have reached their
local barrier, then releases them all with the step's plan in the runner's clock; each actor turns that plan
into its own node's clock with the offset measured when the step started (a few round-trip pings, keeping the
fastest), so every job ends its window at the same instant wherever it runs. Each actor sends back its jobs'
tallies and its process's CPU over the window, with the node it ran on.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from capmark.driver.jobs import Schedule
from capmark.driver.procs import JobsInProcess, WorkerResult, WorkerSpec, first_line, split_jobs
from capmark.errors import CapmarkError

CLOCK_PINGS = 8  # round trips per node; the fastest bounds the clock offset most tightly
READY_TIMEOUT_S = 120.0  # placing the actors (a new worker process each) and connecting their jobs
RESULT_TIMEOUT_S = 60.0  # an actor's tallies after its jobs ended
STOP_TIMEOUT_S = 10.0
REACH_TIMEOUT_S = 3.0  # a cluster's head answers a TCP connect within this, or the address is wrong
ARRIVE_POLL_S = 0.001  # how often an actor looks whether its jobs have all reached the barrier
ACTOR_CONCURRENCY = 4  # an actor answers "stop" while it waits for its jobs at a phase boundary
BOOT_ID = "/proc/sys/kernel/random/boot_id"  # the same running kernel: the same host

INSTALL_HINT = "install it with pip install 'capmark[cluster]' on this host and on every node of the cluster"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise CapmarkError(f"--cluster needs Ray, which is not installed; {INSTALL_HINT}.") from None
    return ray


def join(address: str) -> dict[str, Any]:
    """Join the Ray cluster at address (ray://HEAD:10001, or auto for the cluster this host has joined) once per
    run; returns what the run records about it. One sentence when it cannot."""
    ray = _ray()
    if not ray.is_initialized():
        _answers(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING", configure_logging=False)
        except Exception as err:  # noqa: BLE001 - Ray raises several kinds for an unreachable or unknown address
            raise CapmarkError(f"capmark could not join the Ray cluster at {address}: {first_line(err)}; start one "
                               "with ray start --head on the head node (and ray start --address HEAD:6379 on the "
                               "others), then pass --cluster ray://HEAD:10001, or --cluster auto on a node of it."
                               ) from None
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"address": address, "nodes": [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"],
                                            "cpus": int(n.get("Resources", {}).get("CPU", 0))} for n in nodes],
            "ray_version": ray.__version__}


def _answers(address: str) -> None:
    """Refuse at once an address where nothing listens (Ray's client would retry it for half a minute)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as err:
        raise CapmarkError(f"capmark could not join the Ray cluster at {address}: nothing answers there "
                           f"({err.strerror or err}); check the address, or start the cluster with ray start --head "
                           "on its head node.") from None


def leave() -> None:
    """Disconnect from the cluster (the cluster itself goes on)."""
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


def cluster_cpus() -> int:
    """CPUs the cluster offers to actors (Ray's logical CPUs, one per core unless a node was started otherwise)."""
    return int(_ray().available_resources().get("CPU", 0))


def _node_facts() -> dict[str, Any]:
    import ray

    try:
        with open(BOOT_ID) as f:
            boot_id = f.read().strip()
    except OSError:
        boot_id = None
    return {"node_id": ray.get_runtime_context().get_node_id(), "address": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(), "cores": os.cpu_count() or 1, "boot_id": boot_id}


class JobHost:
    """The body of one Ray actor: its share of the step's jobs as threads of one process on some node."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.barrier = threading.Barrier(len(spec.jobs) + 1)
        self.schedule = Schedule()
        self.stop_event = threading.Event()
        self.offset_s = 0.0
        self.error: str | None = None
        self.jobs: JobsInProcess | None = None
        try:
            self.jobs = JobsInProcess(spec, self.barrier, self.schedule, self.stop_event)
        except Exception as err:  # noqa: BLE001 - the runner reports it for these jobs
            self.error = first_line(err)

    def ready(self) -> dict[str, Any]:
        return {"error": self.error, "pids": self.jobs.backend_pids if self.jobs else [], "node": _node_facts()}

    def now(self) -> float:
        return time.time()

    def start(self, offset_s: float) -> None:
        """Start the jobs; offset_s = this node's clock less the runner's."""
        assert self.jobs is not None
        self.offset_s = offset_s
        self.jobs.start()

    def arrive(self, timeout: float) -> list[str]:
        """Return once every job waits at the barrier (empty), or with the jobs' failures when one failed."""
        assert self.jobs is not None
        waiting = len(self.jobs.jobs)
        deadline = time.monotonic() + timeout
        while self.barrier.n_waiting < waiting and not self.barrier.broken:
            if time.monotonic() > deadline:
                return [f"jobs {', '.join(map(str, self.jobs.spec.jobs))} did not reach the phase boundary within "
                        f"{timeout:.0f} s"]
            time.sleep(ARRIVE_POLL_S)
        return [j.failure for j in self.jobs.jobs if j.failure] or (["a job stopped"] if self.barrier.broken else [])

    def release(self, plan: tuple[float, float, float]) -> list[str]:
        """Let the jobs into the next phase, with the step's plan turned into this node's clock; the jobs'
        failures when one failed in between."""
        assert self.jobs is not None
        self.schedule.warmup_end, self.schedule.measure_start, self.schedule.measure_end = (
            t + self.offset_s for t in plan)
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            return [j.failure for j in self.jobs.jobs if j.failure] or ["a job stopped"]
        return []

    def result(self) -> WorkerResult:
        assert self.jobs is not None
        return self.jobs.join()

    def stop(self) -> None:
        self.stop_event.set()
        self.barrier.abort()
        if self.jobs is not None:
            for conn in self.jobs.conns:
                with contextlib.suppress(Exception):  # best effort; closing ends the backend anyway
                    self.jobs.engine.cancel(conn, self.jobs.spec.dsn)
            for job in self.jobs.jobs:
                job.join(timeout=5)
            self.jobs.close()


@dataclass
class Placed:
    """One actor and what it reported when ready."""

    handle: Any
    spec: WorkerSpec
    node: dict[str, Any]
    pids: list[int]


class NodeLost(Exception):
    """A node stopped answering (it died, or Ray lost it): its jobs ended with it."""


def jobs_named(jobs: list[int]) -> str:
    return f"job {jobs[0]}" if len(jobs) == 1 else "jobs " + ", ".join(str(j) for j in jobs)


def node_named(node: dict[str, Any]) -> str:
    return f"{node.get('hostname') or '?'} ({node.get('address')}, Ray node {str(node.get('node_id'))[:8]})"


class RayJobs:
    """The jobs of one step as Ray actors. The step runner calls start(), wait() at each phase boundary,
    results(); stop() at any time ends the actors. Raises NodeLost or RuntimeError with the user's sentence."""

    def __init__(self, specs: list[WorkerSpec]) -> None:
        self.ray = _ray()
        self.specs = specs
        self.placed: list[Placed] = []
        self.group: Any = None
        self.clocks: dict[str, dict[str, float]] = {}  # node id -> offset_s, uncertainty_s

    def start(self) -> list[int]:
        ray = self.ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.group = placement_group([{"CPU": 1}] * len(self.specs), strategy="SPREAD")
        ready, _ = ray.wait([self.group.ready()], timeout=READY_TIMEOUT_S)
        if not ready:
            raise RuntimeError(f"the Ray cluster has no room for {len(self.specs)} job processes of one CPU each "
                               f"(it offers {cluster_cpus()} CPUs now); use fewer --driver-procs or add nodes")
        actor = ray.remote(num_cpus=1, max_concurrency=ACTOR_CONCURRENCY, max_restarts=0)(JobHost)
        handles = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i),
                                 name=None).remote(spec) for i, spec in enumerate(self.specs)]
        answers = self._get([h.ready.remote() for h in handles], READY_TIMEOUT_S,
                            [Placed(h, s, {}, []) for h, s in zip(handles, self.specs, strict=True)])
        for handle, spec, answer in zip(handles, self.specs, answers, strict=True):
            self.placed.append(Placed(handle, spec, answer["node"], answer["pids"]))
        for p, answer in zip(self.placed, answers, strict=True):
            if answer["error"]:
                raise RuntimeError(f"{jobs_named(p.spec.jobs)} on {node_named(p.node)}: {answer['error']}")
        self._measure_clocks()
        self._get([p.handle.start.remote(self.clocks[p.node["node_id"]]["offset_s"]) for p in self.placed],
                  READY_TIMEOUT_S)
        by_job = {j: pid for p in self.placed for j, pid in zip(p.spec.jobs, p.pids, strict=True)}
        return [by_job[j] for j in sorted(by_job)]

    def _measure_clocks(self) -> None:
        """Each node's clock less the runner's, from the fastest of a few round trips: the reply was read at some
        instant between sending and receiving, so the offset is known to half that round trip."""
        for p in self.placed:
            node = p.node["node_id"]
            if node in self.clocks:
                continue
            best: tuple[float, float] | None = None
            for _ in range(CLOCK_PINGS):
                sent = time.time()
                remote = self._get([p.handle.now.remote()], READY_TIMEOUT_S, [p])[0]
                received = time.time()
                half = (received - sent) / 2
                if best is None or half < best[1]:
                    best = (remote - (sent + received) / 2, half)
            assert best is not None
            self.clocks[node] = {"offset_s": best[0], "uncertainty_s": best[1]}

    def wait(self, timeout: float, plan: tuple[float, float, float]) -> None:
        failures = [f for fs in self._get([p.handle.arrive.remote(timeout) for p in self.placed], timeout + 30)
                    for f in fs]
        if failures:
            raise RuntimeError("; ".join(failures))
        failures = [f for fs in self._get([p.handle.release.remote(plan) for p in self.placed], timeout) for f in fs]
        if failures:
            raise RuntimeError("; ".join(failures))

    def results(self) -> list[tuple[Placed, WorkerResult]]:
        results = self._get([p.handle.result.remote() for p in self.placed], RESULT_TIMEOUT_S)
        self._release_actors()
        return list(zip(self.placed, results, strict=True))

    def _get(self, refs: list[Any], timeout: float, placed: list[Placed] | None = None) -> list[Any]:
        """Every reply, or NodeLost naming the node (and its jobs) whose actor is gone."""
        ray = self.ray
        placed = placed or self.placed
        pending = dict(zip(refs, placed, strict=True))
        deadline = time.monotonic() + timeout
        while pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()),
                               fetch_local=True)
            for ref in done:
                p = pending.pop(ref)
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    where = node_named(p.node) if p.node else "its node"
                    raise NodeLost(f"the load node {where} stopped answering: {jobs_named(p.spec.jobs)} ended with "
                                   f"it ({first_line(err)})") from None
            if pending and time.monotonic() >= deadline:
                p = next(iter(pending.values()))
                raise NodeLost(f"{jobs_named(p.spec.jobs)} on {node_named(p.node) if p.node else 'the cluster'} "
                               f"did not answer within {timeout:.0f} s")
        return ray.get(refs)

    def stop(self) -> None:
        ray = self.ray
        stops = [p.handle.stop.remote() for p in self.placed]
        with contextlib.suppress(Exception):
            ray.wait(stops, num_returns=len(stops), timeout=STOP_TIMEOUT_S)
        self._release_actors()

    def _release_actors(self) -> None:
        ray = self.ray
        for p in self.placed:
            with contextlib.suppress(Exception):
                ray.kill(p.handle)
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self.group)
            self.group = None

    def layout(self) -> list[dict[str, Any]]:
        """How the jobs were spread: per node, its jobs, cores, clock offset and its uncertainty."""
        nodes: dict[str, dict[str, Any]] = {}
        for p in self.placed:
            n = p.node
            entry = nodes.setdefault(n["node_id"], {"node_id": n["node_id"], "address": n["address"],
                                                     "hostname": n["hostname"], "cores": n["cores"],
                                                     "boot_id": n["boot_id"], "jobs": [], "processes": 0,
                                                     **self.clocks.get(n["node_id"], {})})
            entry["jobs"] = sorted(entry["jobs"] + p.spec.jobs)
            entry["processes"] += 1
        return sorted(nodes.values(), key=lambda e: e["jobs"][0])


def actors_for(jobs: int, requested: int | None) -> int:
    """Job processes on the cluster: as many as asked, else one per CPU the cluster offers; never more than jobs."""
    return max(1, min(jobs, requested or cluster_cpus() or 1))


__all__ = ["RayJobs", "JobHost", "NodeLost", "join", "leave", "actors_for", "split_jobs", "jobs_named"]
