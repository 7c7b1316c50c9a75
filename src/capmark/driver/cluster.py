"""Client-side jobs on a Ray cluster: the load comes from several hosts, the step stays one step.

Ray places the job processes (actors, one placement bundle of one CPU each, spread over the nodes), carries
the calls between them and the step runner, and tells when a node is gone; capmark writes no agent of its own.
Each actor runs its share of the jobs as threads, exactly as a local worker process does (procs.JobsInProcess).
There is no barrier across hosts, so the runner plays it: it waits until every actor's jobs have reached their
local barrier, then releases them all with the step's plan in the runner's clock; each actor turns that plan
into its own node's clock with the offset measured when the step started (a few round-trip pings, keeping the
fastest), so every job ends its window at the same instant wherever it runs. Each actor sends back its jobs'
tallies and its process's CPU over the window, with the node it ran on.

Ray's own messages (its loggers and its warnings) go to a log file, never to the terminal; a cluster that is gone
mid-run (its head node dead or unreachable, the connection to it lost) raises ClusterLost, which ends the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import platformdirs

from capmark.collect.hostsource import local_boot_id
from capmark.driver.jobs import Schedule
from capmark.driver.procs import JobsInProcess, WorkerResult, WorkerSpec, first_line, split_jobs, take_environ
from capmark.errors import CapmarkError

CLOCK_PINGS = 8  # round trips per node; the fastest bounds the clock offset most tightly
READY_TIMEOUT_S = 120.0  # placing the actors (a new worker process each) and connecting their jobs
RESULT_TIMEOUT_S = 60.0  # an actor's tallies after its jobs ended
STOP_TIMEOUT_S = 10.0
REACH_TIMEOUT_S = 3.0  # a cluster's head answers a TCP connect within this, or the address is wrong
ARRIVE_POLL_S = 0.001  # how often an actor looks whether its jobs have all reached the barrier
ACTOR_CONCURRENCY = 4  # an actor answers "stop" while it waits for its jobs at a phase boundary

INSTALL_HINT = "install it with pip install 'capmark[cluster]' on this host and on every node of the cluster"
LOG_DIR_ENV = "CAPMARK_LOG_DIR"  # where Ray's log file goes (default: capmark's log folder, platformdirs)
LOG_NAME = "ray.log"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

@dataclass
class _Joined:
    """The cluster this process joined (Ray's state is global): its address, and where Ray's log goes."""

    address: str | None = None
    log: Path | None = None


_joined = _Joined()


class ClusterNode(TypedDict):
    """A node of the cluster as the run records it (its environment's cluster.nodes)."""

    node_id: str
    address: str
    cpus: int  # Ray's logical CPUs on it


class Cluster(TypedDict):
    """The cluster a run joined, as stored in its environment (`cluster`)."""

    address: str
    nodes: list[ClusterNode]  # those alive when the run joined
    ray_version: str


def _ray() -> Any:
    # A Ray call made while no cluster is joined (or after the connection to it was lost) must fail, not start a new
    # local Ray cluster on this host, which is what Ray does by default.
    os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
    try:
        import ray
        import ray._private.auto_init_hook as auto_init
    except ImportError:
        raise CapmarkError(f"--cluster needs Ray, which is not installed; {INSTALL_HINT}.") from None
    auto_init.enable_auto_connect = False  # read when Ray was imported, maybe before the line above
    return ray


def join(address: str) -> Cluster:
    """Join the Ray cluster at address (ray://HEAD:10001, or auto for the cluster this host has joined) once per
    run; returns what the run records about it. One sentence when it cannot."""
    ray = _ray()
    if not ray.is_initialized():
        _answers(address)
        log = _ray_to_log_file(address)
        _joined.log = log
        sigterm = signal.getsignal(signal.SIGTERM)  # ray.init puts its own in, which exits at once
        try:
            # configure_logging: Ray sets its format and level on its logger's handlers (the log file's); without
            # it, Ray would take that handler away, and its messages would reach the terminal after all
            _init(ray, address)
        except Exception as err:  # noqa: BLE001 - Ray raises several kinds for an unreachable or unknown address
            raise CapmarkError(f"Could not join the Ray cluster at {address}: {first_line(err)}; start one "
                               "with ray start --head on the head node (and ray start --address HEAD:6379 on the "
                               "others), then pass --cluster ray://HEAD:10001, or --cluster auto on a node of it."
                               ) from None
        finally:
            if threading.current_thread() is threading.main_thread() and sigterm is not None:
                signal.signal(signal.SIGTERM, sigterm)  # capmark's: a run ends interrupted, exit 130
        _attach(log)  # again: the loggers of Ray's client modules that ray.init imported
        _client_stream_to_log(ray)
        _joined.address = address
    with lost_as_one_sentence():
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    return Cluster(address=address, nodes=[ClusterNode(node_id=n["NodeID"], address=n["NodeManagerAddress"],
                                                       cpus=int(n.get("Resources", {}).get("CPU", 0))) for n in nodes],
                   ray_version=ray.__version__)


# A head that has just started, or a busy one, answers on its client port before its client server can start a
# session for a new driver ("Initialization failure from server"); the join is tried again for this long before it
# counts as failed. 10 s was seen to run out on a loaded 2-core host whose head had accepted a client moments before.
JOIN_STARTING_HEAD_S = 30.0
JOIN_RETRY_PAUSE_S = 1.0


def _init(ray: Any, address: str) -> None:
    deadline = time.monotonic() + JOIN_STARTING_HEAD_S
    while True:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="INFO", configure_logging=True)
            return
        except Exception as err:  # noqa: BLE001 - Ray raises its ConnectionError, or others, for a head starting up
            if "Initialization failure from server" not in str(err) or time.monotonic() > deadline:
                raise
            with contextlib.suppress(Exception):
                ray.shutdown()
            time.sleep(JOIN_RETRY_PAUSE_S)


def log_file() -> Path:
    """Ray's log file on this host: CAPMARK_LOG_DIR/ray.log, else ray.log in capmark's log folder."""
    return Path(os.environ.get(LOG_DIR_ENV) or platformdirs.user_log_dir("capmark")).expanduser() / LOG_NAME


class _RayLog(logging.FileHandler):
    """The handler that takes Ray's log records to the log file (one at a time on the "ray" logger)."""


def _ray_to_log_file(address: str) -> Path:
    """From now on in this process, Ray's log records and warnings go to the log file instead of the terminal:
    Ray's client reports a lost connection, its reconnection attempts and their end as log lines and warnings of
    its own, from its own threads."""
    path = log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as err:
        raise CapmarkError(f"Could not write Ray's log file {path} ({err.strerror or err}); set "
                           f"{LOG_DIR_ENV} to a folder you can write.") from None
    _attach(path)
    # a record of a logger with no handler goes to Python's last resort, stderr: in a cluster run that is Ray's (a
    # ray.init from one of its client threads after the head died logs before it sets up any handler)
    if not isinstance(logging.lastResort, _RayLog):
        last = _RayLog(path, encoding="utf-8")
        last.setLevel(logging.WARNING)
        last.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.lastResort = last
    if warnings.showwarning is not _show_warning:
        _show_warning.previous = warnings.showwarning  # type: ignore[attr-defined]
        warnings.showwarning = _show_warning
    if threading.excepthook is not _thread_error:
        _thread_error.previous = threading.excepthook  # type: ignore[attr-defined]
        threading.excepthook = _thread_error
    logging.getLogger("ray").info("capmark (process %d) joins the Ray cluster at %s", os.getpid(), address)
    return path


def _attach(path: Path) -> None:
    """The log file as the only handler of Ray's logger, and of each of its module loggers that keeps its records
    to itself (the client's log stream does): Ray's own handler writes to the terminal, and without any handler
    Python prints a warning there."""
    names = ["ray", *(name for name, lg in logging.Logger.manager.loggerDict.items()
                      if name.startswith("ray.") and isinstance(lg, logging.Logger) and not lg.propagate)]
    for name in names:
        logger = logging.getLogger(name)
        if any(isinstance(h, _RayLog) and h.baseFilename == os.path.abspath(path) for h in logger.handlers):
            continue
        for old in list(logger.handlers):
            logger.removeHandler(old)
            if isinstance(old, _RayLog):
                old.close()
        handler = _RayLog(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
        logger.propagate = False


def _client_stream_to_log(ray: Any) -> None:
    """What the cluster's side of a Ray client connection prints (its process's stdout and stderr, streamed to this
    one) goes to the log file too; Ray's client would print it on the terminal."""
    with contextlib.suppress(Exception):  # not a client connection (--cluster auto, a head's GCS address)
        log_client = ray.util.client.ray.get_context().client_worker.log_client
        log_client.stdstream = lambda level, msg: logging.getLogger("ray.util.client.logsclient").log(
            logging.WARNING if level == -2 else logging.INFO, "%s", msg.rstrip())


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """Ray's warnings to its log file; every other warning as before."""
    if f"{os.sep}ray{os.sep}" in filename:
        if _joined.log:
            _attach(_joined.log)
        logging.getLogger("ray").warning("%s", warnings.formatwarning(message, category, filename, lineno, line).strip())
    else:
        _show_warning.previous(message, category, filename, lineno, file, line)  # type: ignore[attr-defined]


_show_warning.previous = warnings.showwarning  # type: ignore[attr-defined]

CAPMARK_THREAD_PREFIX = "capmark-"  # capmark names its threads so; an error in one of them is capmark's own


def _thread_error(args: threading.ExceptHookArgs) -> None:
    """An exception that ends one of Ray's or gRPC's threads (the client's threads raise when the head dies) goes
    to Ray's log file, with its traceback; Python would print it on the terminal. An error in a thread of capmark's
    own is printed as before."""
    if args.exc_type is SystemExit:  # as Python's own hook: a thread that exits says nothing
        return
    thread_name = args.thread.name if args.thread else ""
    frames = traceback.extract_tb(args.exc_traceback) if args.exc_traceback else []
    theirs = any(f"{os.sep}ray{os.sep}" in f.filename or f"{os.sep}grpc{os.sep}" in f.filename for f in frames)
    if theirs or not thread_name.startswith(CAPMARK_THREAD_PREFIX):
        logging.getLogger("ray").warning("A thread of Ray's client (%s) ended with an error:\n%s", thread_name,
                                         "".join(traceback.format_exception(args.exc_type, args.exc_value,
                                                                            args.exc_traceback)).rstrip())
    else:
        _thread_error.previous(args)  # type: ignore[attr-defined]


_thread_error.previous = threading.excepthook  # type: ignore[attr-defined]


class ClusterLost(CapmarkError):
    """The cluster this process joined is gone mid-run (its head node dead or unreachable, or Ray's connection to it
    lost for good): the run cannot go on. Its message names the cluster and where Ray's own account of it is."""


def _gone() -> bool:
    """Whether the cluster is gone: Ray no longer connected to it, or nothing answering at its address."""
    try:
        if not _ray().is_initialized():
            return True
    except Exception:  # noqa: BLE001 - Ray's client raises when its connection is closed
        return True
    address = _joined.address
    if address and address != "auto":
        try:
            _answers(address)
        except CapmarkError:
            return True
    return False


def _lost(err: BaseException) -> ClusterLost:
    logging.getLogger("ray").warning("capmark: the Ray cluster at %s is gone: %s: %s", _joined.address,
                                     type(err).__name__, err)
    return ClusterLost(f"the Ray cluster at {_joined.address or 'auto'} stopped answering (its head node is gone or "
                       f"unreachable; Ray's own messages are in {_joined.log or log_file()}); start the cluster "
                       "again and rerun")


@contextlib.contextmanager
def lost_as_one_sentence() -> Iterator[None]:
    """Whatever Ray raises once the cluster is gone becomes ClusterLost; while it is there, errors go on as they
    are (a node lost, a job's failure)."""
    try:
        yield
    except ClusterLost:
        raise
    except Exception as err:
        if _gone():
            raise _lost(err) from None
        raise


def _answers(address: str) -> None:
    """Refuse at once an address where nothing listens (Ray's client would retry it for half a minute)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):  # config's check, for callers in code
        raise CapmarkError(f"The port '{port}' in --cluster '{address}' is not a number from 1 to 65535; write e.g. "
                           "ray://HEAD:10001.")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as err:
        raise CapmarkError(f"Could not join the Ray cluster at {address}: nothing answers there "
                           f"({err.strerror or err}); check the address, or start the cluster with ray start --head "
                           "on its head node.") from None


def leave() -> None:
    """Disconnect from the cluster (the cluster itself goes on; when it is gone, there is nothing to leave)."""
    ray = _ray()
    with contextlib.suppress(Exception):  # Ray's client raises on a connection that is already closed
        if ray.is_initialized():
            ray.shutdown()
    _joined.address = None


def cluster_cpus() -> int:
    """CPUs the cluster has for actors (Ray's logical CPUs, one per core unless a node was started otherwise), all of
    them: a step's layout follows the cluster, not the CPUs the previous step's actors, released a moment before,
    still held (Ray returns them a little later; the step's placement waits for them)."""
    with lost_as_one_sentence():
        return int(_ray().cluster_resources().get("CPU", 0))


def free_cpus() -> int:
    """CPUs of the cluster no actor holds now."""
    with lost_as_one_sentence():
        return int(_ray().available_resources().get("CPU", 0))


@dataclass(frozen=True)
class NodeFacts:
    """The node an actor runs on, as the actor sees it."""

    node_id: str  # Ray's
    address: str
    hostname: str
    cores: int
    boot_id: str | None  # the running kernel's: the same on the database host means the same machine

    @property
    def named(self) -> str:
        return f"{self.hostname or '?'} ({self.address}, Ray node {self.node_id[:8]})"


def _node_facts() -> NodeFacts:
    import ray

    return NodeFacts(ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), socket.gethostname(),
                     os.cpu_count() or 1, local_boot_id())


@dataclass(frozen=True)
class Ready:
    """An actor's answer once its jobs are connected: why they could not be, or their backends, and its node."""

    error: str | None
    pids: list[int]
    node: NodeFacts


class JobHost:
    """The body of one Ray actor: its share of the step's jobs as threads of one process on some node."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.barrier = threading.Barrier(len(spec.jobs) + 1)
        self.schedule = Schedule()
        self.stop_event = threading.Event()
        self.offset_s = 0.0
        self.error: str | None = None
        self.jobs: JobsInProcess | None = None
        take_environ(spec.environ)  # an actor has its node's environment: capmark's variables are the runner's
        try:
            self.jobs = JobsInProcess(spec, self.barrier, self.schedule, self.stop_event)
        except Exception as err:  # noqa: BLE001 - the runner reports it for these jobs
            self.error = first_line(err)

    def ready(self) -> Ready:
        return Ready(self.error, self.jobs.backend_pids if self.jobs else [], _node_facts())

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
    node: NodeFacts | None  # None until it answered
    pids: list[int]


class NodeLost(Exception):
    """A node stopped answering (it died, or Ray lost it): its jobs ended with it."""


def jobs_named(jobs: list[int]) -> str:
    return f"job {jobs[0]}" if len(jobs) == 1 else "jobs " + ", ".join(str(j) for j in jobs)


@dataclass(frozen=True)
class ClockOffset:
    """A node's clock less the runner's, known to within half the fastest round trip."""

    offset_s: float
    uncertainty_s: float


class NodeLayout(TypedDict):
    """How a step's jobs were spread: one node, its jobs and job processes, and its clock (instruments.cluster)."""

    node_id: str
    address: str
    hostname: str
    cores: int
    boot_id: str | None
    jobs: list[int]
    processes: int
    offset_s: NotRequired[float]  # where the clock was measured
    uncertainty_s: NotRequired[float]


class RayJobs:
    """The jobs of one step as Ray actors. The step runner calls start(), wait() at each phase boundary,
    results(); stop() at any time ends the actors. Raises NodeLost or RuntimeError with the user's sentence."""

    def __init__(self, specs: list[WorkerSpec]) -> None:
        self.ray = _ray()
        self.specs = specs
        self.placed: list[Placed] = []
        self.group: Any = None
        self.clocks: dict[str, ClockOffset] = {}  # by node id

    def start(self) -> list[int]:
        with lost_as_one_sentence():
            return self._start()

    def _start(self) -> list[int]:
        ray = self.ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.group = placement_group([{"CPU": 1}] * len(self.specs), strategy="SPREAD")
        ready, _ = ray.wait([self.group.ready()], timeout=READY_TIMEOUT_S)
        if not ready:
            raise RuntimeError(f"the Ray cluster has no room for {len(self.specs)} job processes of one CPU each "
                               f"(it has {cluster_cpus()} CPUs, {free_cpus()} of them free now); use fewer "
                               "--driver-procs or add nodes")
        actor = ray.remote(num_cpus=1, max_concurrency=ACTOR_CONCURRENCY, max_restarts=0)(JobHost)
        handles = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i),
                                 name=None).remote(spec) for i, spec in enumerate(self.specs)]
        answers = self._get([h.ready.remote() for h in handles], READY_TIMEOUT_S,
                            [Placed(h, s, None, []) for h, s in zip(handles, self.specs, strict=True)])
        for handle, spec, answer in zip(handles, self.specs, answers, strict=True):
            self.placed.append(Placed(handle, spec, answer.node, answer.pids))
        for answer, spec in zip(answers, self.specs, strict=True):
            if answer.error:
                raise RuntimeError(f"{jobs_named(spec.jobs)} on {answer.node.named}: {answer.error}")
        self._measure_clocks()
        self._get([p.handle.start.remote(self.clocks[_node(p).node_id].offset_s) for p in self.placed],
                  READY_TIMEOUT_S)
        by_job = {j: pid for p in self.placed for j, pid in zip(p.spec.jobs, p.pids, strict=True)}
        return [by_job[j] for j in sorted(by_job)]

    def _measure_clocks(self) -> None:
        """Each node's clock less the runner's, from the fastest of a few round trips: the reply was read at some
        instant between sending and receiving, so the offset is known to half that round trip."""
        for p in self.placed:
            node = _node(p).node_id
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
            self.clocks[node] = ClockOffset(*best)

    def wait(self, timeout: float, plan: tuple[float, float, float]) -> None:
        with lost_as_one_sentence():
            self._wait(timeout, plan)

    def _wait(self, timeout: float, plan: tuple[float, float, float]) -> None:
        failures = [f for fs in self._get([p.handle.arrive.remote(timeout) for p in self.placed], timeout + 30)
                    for f in fs]
        if failures:
            raise RuntimeError("; ".join(failures))
        failures = [f for fs in self._get([p.handle.release.remote(plan) for p in self.placed], timeout) for f in fs]
        if failures:
            raise RuntimeError("; ".join(failures))

    def results(self) -> list[tuple[Placed, WorkerResult]]:
        with lost_as_one_sentence():
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
                    where = p.node.named if p.node else "its node"
                    raise NodeLost(f"the load node {where} stopped answering: {jobs_named(p.spec.jobs)} ended with "
                                   f"it ({first_line(err)})") from None
            if pending and time.monotonic() >= deadline:
                p = next(iter(pending.values()))
                raise NodeLost(f"{jobs_named(p.spec.jobs)} on {p.node.named if p.node else 'the cluster'} "
                               f"did not answer within {timeout:.0f} s")
        return ray.get(refs)

    def stop(self) -> None:
        ray = self.ray
        with contextlib.suppress(Exception):  # a cluster that is gone took the actors with it
            stops = [p.handle.stop.remote() for p in self.placed]
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

    def layout(self) -> list[NodeLayout]:
        """How the jobs were spread: per node, its jobs, cores, clock offset and its uncertainty."""
        nodes: dict[str, NodeLayout] = {}
        for p in self.placed:
            n = _node(p)
            entry = nodes.get(n.node_id)
            if entry is None:
                entry = nodes[n.node_id] = NodeLayout(node_id=n.node_id, address=n.address, hostname=n.hostname,
                                                      cores=n.cores, boot_id=n.boot_id, jobs=[], processes=0)
                clock = self.clocks.get(n.node_id)
                if clock is not None:
                    entry["offset_s"], entry["uncertainty_s"] = clock.offset_s, clock.uncertainty_s
            entry["jobs"] = sorted(entry["jobs"] + p.spec.jobs)
            entry["processes"] += 1
        return sorted(nodes.values(), key=lambda e: e["jobs"][0])


def _node(p: Placed) -> NodeFacts:
    """The node of an actor that has answered (every one has, once start() placed them)."""
    assert p.node is not None
    return p.node


def actors_for(jobs: int, requested: int | None) -> int:
    """Job processes on the cluster: as many as asked, else one per CPU the cluster offers; never more than jobs."""
    return max(1, min(jobs, requested or cluster_cpus() or 1))


__all__ = ["RayJobs", "JobHost", "NodeLost", "ClusterLost", "join", "leave", "log_file", "actors_for", "split_jobs",
           "jobs_named"]
