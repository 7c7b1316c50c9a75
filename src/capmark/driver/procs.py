"""Client-side jobs in worker processes, so that the driver is not held to one core by Python's global lock.

Each worker process opens the connections of its jobs and runs them as threads, exactly as the threaded driver
does; all jobs of all processes and the step runner meet at one cross-process barrier, so every phase boundary
(start, end of warm-up, start and end of the window) is the same instant for every job. The wall-clock plan
lives in shared memory, written by the runner before it releases each phase. When the jobs are done, each
process sends back its jobs' tallies (histograms in the same bucket format, per-second series, errors,
schedule lag, round trips) and its own CPU over the window; the runner merges them as it merges threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from multiprocessing import connection as mp_connection
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from capmark.collect import netinfo
from capmark.collect import os as oscollect
from capmark.driver.jobs import Job, Pacing, Tally, crew_up, error_text, phase_after
from capmark.engines.base import TargetInfo
from capmark.workloads.base import DataSize, ParamValue

# Forkserver: a clean process (no threads, no open connections) forks each worker, with capmark's driver
# already imported, so a worker starts in tens of milliseconds and inherits nothing of the runner's sessions.
CONTEXT = mp.get_context("forkserver")
# the workloads and PostgreSQL's engine too: every worker unpickles its workload and connects through the engine
CONTEXT.set_forkserver_preload(["capmark.driver.procs", "capmark.workloads.registry", "capmark.engines.postgres.engine"])
READY_TIMEOUT_S = 60.0  # connecting and preparing a process's jobs; a server that slow fails the step
RESULT_TIMEOUT_S = 30.0  # sending a process's tallies back after its jobs ended
ENVIRON_PREFIX = "CAPMARK_"  # the variables of the runner a worker takes over (see WorkerSpec.environ)
POLL_S = 0.2  # how often the runner looks for a dead worker while it waits at the barrier
PR_SET_PDEATHSIG = 1  # Linux prctl: a signal for this process when its parent dies (no orphaned workers)


# The step's barrier and stop event are named semaphores, which multiprocessing's resource tracker (a process of
# its own) removes when capmark ends without removing them (a SIGKILL): it then warns about "leaked semaphore
# objects" on the user's terminal. The removal is the cleanup wanted; the warning is noise. The tracker takes its
# warning filters from this interpreter's -W options when it starts.
TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


def _quiet_resource_tracker() -> None:
    if TRACKER_QUIET not in sys.warnoptions:
        sys.warnoptions.append(TRACKER_QUIET)


def _in_the_forkserver() -> bool:
    """Whether this import is the forkserver's preload: multiprocessing's forkserver main is on the stack."""
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return True
        frame = frame.f_back
    return False


def _quiet_when_capmark_is_gone(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """The forkserver's hook for an error in a worker it has just forked: a worker whose data never came (capmark
    ended between asking for it and sending it, a SIGKILL between two steps) ends without a word, as the workers
    already running do; any other error is printed as before."""
    if issubclass(kind, _GONE):
        return
    sys.__excepthook__(kind, value, tb)


class WorkerFailed(Exception):
    """A worker process could not start its jobs or died; the message names the jobs."""


class JobsNotStarted(Exception):
    """A process's jobs could not connect or prepare their statements; the message says which, and why."""


@dataclass
class WorkerSpec:
    """Everything a worker process needs, picklable: the workload is named, not sent (it holds functions)."""

    dsn: str
    jobs: list[int]  # the job numbers this process runs (1-based, as in the threaded driver)
    workload: Any  # its name in the catalogue, or a recipe that rebuilds it (registry.reference)
    params: dict[str, ParamValue]
    size: DataSize
    mode: str
    info: TargetInfo
    pacing: Pacing
    session_settings: dict[str, str] = field(default_factory=dict)
    # capmark's variables in the runner's environment when the step starts: a worker is forked by the forkserver,
    # whose environment is the runner's when the first step started it
    environ: dict[str, str] = field(default_factory=lambda: capmark_environ(os.environ))


def capmark_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(ENVIRON_PREFIX)}


def take_environ(wanted: dict[str, str]) -> None:
    """Make this worker's capmark variables the runner's of this step."""
    for name in capmark_environ(os.environ).keys() - wanted.keys():
        del os.environ[name]
    os.environ.update(wanted)


@dataclass
class WorkerResult:
    """What one process sends back when its jobs are done."""

    jobs: list[int]
    tallies: list[Tally]
    failures: list[str]
    pid: int
    user_s: float = 0.0  # the process's CPU over the window (every thread of it)
    sys_s: float = 0.0
    run_delay_s: float | None = None  # time its threads waited for a CPU while runnable, over the window
    net_before: list[netinfo.NetReading] = field(default_factory=list)  # its connections' counters, before
    net_after: list[netinfo.NetReading] = field(default_factory=list)  # and after the window
    together: bool = False  # its jobs ran their lookups from one thread (driver/crew.py)


class _SharedTime:
    """One instant of the plan, kept in the shared array at a fixed place."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, schedule: SharedSchedule, owner: type | None = None) -> float:
        return schedule.values[self.index]

    def __set__(self, schedule: SharedSchedule, value: float) -> None:
        schedule.values[self.index] = value


class SharedSchedule:
    """The step's wall-clock plan in shared memory: the runner writes it, every job in every process reads it."""

    warmup_end = _SharedTime(0)
    measure_start = _SharedTime(1)
    measure_end = _SharedTime(2)

    def __init__(self) -> None:
        self.values = CONTEXT.Array("d", 3, lock=False)


def _die_with_parent() -> None:
    """End this worker, quietly, when capmark ends, however it ends (a SIGKILL included).

    A worker's parent is the forkserver, not capmark, so the parent-death signal fires when the forkserver ends;
    and the forkserver ends only when every holder of its "alive" pipe has closed it, which multiprocessing hands
    to every process it forks. A worker that kept it kept its own parent alive: the forkserver, the workers and
    their sessions outlived a killed capmark. So the worker closes it (the forkserver then ends with capmark) after
    asking for the signal: while the worker holds the pipe its parent cannot have ended before the prctl.

    The signal is the backstop; first a watchdog thread waits on capmark's end of the pipe multiprocessing keeps
    for it (multiprocessing.parent_process().sentinel) and ends the worker as soon as capmark is gone, closing
    its connections so that their server sessions end at once."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


_GONE = (BrokenPipeError, ConnectionResetError, EOFError)  # capmark's end of the pipe closed: it has ended
if _in_the_forkserver():  # the forkserver reports a failed fork's error through sys.excepthook, on the user's terminal
    sys.excepthook = _quiet_when_capmark_is_gone


def _watch_parent(conns: list[Any]) -> None:
    """A daemon thread that ends the worker without a word once capmark has ended (see _die_with_parent)."""
    parent = mp.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        mp_connection.wait([parent.sentinel])
        _leave(conns)

    threading.Thread(target=watch, name="capmark-parent-watch", daemon=True).start()


def _leave(conns: list[Any], status: int = 0) -> None:
    """Close the connections (their server sessions end now) and end the process: nobody is left to report to."""
    for conn in list(conns):
        with contextlib.suppress(Exception):
            conn.close()
    os._exit(status)


class JobsInProcess:
    """The jobs one process runs (a worker process of this host, or a Ray actor on a cluster node): each job's
    connection opened and its statements prepared, the jobs run as threads, and their tallies with the process's
    CPU over the window handed back. Raises (with the connections closed) when a job cannot start."""

    def __init__(self, spec: WorkerSpec, barrier: Any, schedule: Any, stop_event: Any,
                 opened: list[Any] | None = None) -> None:
        from capmark.engines import registry as engines
        from capmark.workloads import registry

        self.spec = spec
        self.engine = engines.named(spec.info.engine)
        workload = registry.resolve(spec.workload)
        self.conns: list[Any] = opened if opened is not None else []  # filled as they open
        doing = "could not connect"
        try:
            for index in spec.jobs:
                conn = self.engine.connect(spec.dsn, application_name=f"capmark job {index}")
                self.conns.append(conn)
                self.engine.set_session(conn, spec.session_settings)
            doing = "could not prepare their statements"
            self.jobs = [Job(index, conn, workload, spec.params, spec.size, spec.mode, spec.info, barrier, schedule,
                             stop_event, spec.pacing) for index, conn in zip(spec.jobs, self.conns, strict=True)]
            crew_up(self.jobs)
        except Exception as err:
            self.close()
            text = error_text(err, self.engine).rstrip(".")
            raise JobsNotStarted(f"{doing}: {text[:1].lower()}{text[1:]}") from None
        except BaseException:
            self.close()
            raise
        self.clock = WindowCpu(self.conns)
        self.jobs[0].on_window = self.clock.mark

    @property
    def backend_pids(self) -> list[int]:
        return [self.engine.backend_pid(c) for c in self.conns]

    def start(self) -> None:
        for job in self.jobs:
            job.start()

    def join(self, timeout: float | None = None) -> WorkerResult:
        """Wait for the jobs to end (the last phase, or a stop), close their connections, and say what they did."""
        for job in self.jobs:
            job.join(timeout)
        self.close()
        user_s, sys_s, delay_s = self.clock.window()
        return WorkerResult(self.spec.jobs, [j.tally for j in self.jobs], [j.failure for j in self.jobs if j.failure],
                            os.getpid(), user_s, sys_s, delay_s, *self.clock.network(),
                            together=self.jobs[0].crew is not None)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(Exception):
                conn.close()


def worker_main(spec: WorkerSpec, barrier: Any, schedule: SharedSchedule, stop: Any, pipe: Connection) -> None:
    """A worker process: connect, report the backends, run the jobs, send the tallies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner handles Ctrl-C and stops the jobs through `stop`
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    conns: list[Any] = []  # the connections open so far, for the watchdog to close
    _watch_parent(conns)
    take_environ(spec.environ)
    try:
        try:
            jobs = JobsInProcess(spec, barrier, schedule, _EventView(stop), opened=conns)
        except JobsNotStarted as err:
            pipe.send(("failed", str(err)))
            return
        pipe.send(("ready", jobs.backend_pids))
        jobs.start()
        pipe.send(("done", jobs.join()))
    except _GONE:
        _leave(conns)
    except Exception as err:  # noqa: BLE001 - a fault of capmark's: one line for the runner, no traceback here
        with contextlib.suppress(*_GONE, OSError):
            pipe.send(("crashed", f"{type(err).__name__}: {first_line(err)}"))
        _leave(conns, 1)


class _EventView:
    """A multiprocessing Event where the jobs expect a threading.Event (is_set and wait)."""

    def __init__(self, event: Any) -> None:
        self.event = event

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)

    def set(self) -> None:
        self.event.set()


class WindowCpu:
    """The process's CPU, run delay and its connections' traffic before the window and after it."""

    def __init__(self, conns: list[Any]) -> None:
        self.conns = conns
        self.marks: list[tuple[float, float, dict[int, float]]] = []
        self.net: list[Any] = []

    def mark(self) -> None:
        times = os.times()
        self.marks.append((times.user, times.system, oscollect.own_run_delay()))
        self.net.append(netinfo.read_all(self.conns))

    def network(self) -> tuple[list[netinfo.NetReading], list[netinfo.NetReading]]:
        return (self.net[0], self.net[-1]) if len(self.net) >= 2 else ([], [])

    def window(self) -> tuple[float, float, float | None]:
        if len(self.marks) < 2:
            return 0.0, 0.0, None
        (u0, s0, d0), (u1, s1, d1) = self.marks[0], self.marks[-1]
        return u1 - u0, s1 - s0, oscollect.run_delay_between(d0, d1)


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def split_jobs(jobs: int, procs: int) -> list[list[int]]:
    """Job numbers 1..jobs dealt round-robin over the processes, so that each runs as even a share as can be."""
    procs = max(1, min(procs, jobs))
    return [list(range(p + 1, jobs + 1, procs)) for p in range(procs)]


@contextlib.contextmanager
def _main_module_kept_out() -> Iterator[None]:
    """A worker started meanwhile does not import the main module again. multiprocessing has every worker import
    the starting program's main module (capmark's command line, or pytest), in case the worker's function lives
    there: 110 ms of imports a worker, each step. worker_main lives here, preloaded in the forkserver, so the
    worker is told of a main module with nothing to import."""
    main = sys.modules["__main__"]
    try:
        sys.modules["__main__"] = types.ModuleType("__main__")
        yield
    finally:
        sys.modules["__main__"] = main


class ProcessJobs:
    """The jobs of one step, in worker processes. The runner calls start(), then wait() at each phase
    boundary (as it would at the threads' barrier), then results(); stop() at any time ends everything."""

    def __init__(self, specs: list[WorkerSpec], jobs: int) -> None:
        _quiet_resource_tracker()
        self.specs = specs
        self.barrier = CONTEXT.Barrier(jobs + 1)
        self.schedule = SharedSchedule()
        self.stop_event = CONTEXT.Event()
        self.procs: list[Any] = []
        self.pipes: list[Connection] = []
        self.pids: list[int] = []
        self.failures: list[str] = []
        self._results: list[WorkerResult] = []
        self.boundaries = 0  # phase boundaries passed: what the jobs are doing (jobs.PHASES)
        self.connected = False

    @property
    def phase(self) -> str:
        return phase_after(self.boundaries) if self.connected else "while connecting"

    def start(self) -> list[int]:
        """Start every process; returns the jobs' backend pids in job order once all are connected."""
        for spec in self.specs:
            ours, theirs = CONTEXT.Pipe(duplex=False)
            proc = CONTEXT.Process(target=worker_main, args=(spec, self.barrier, self.schedule, self.stop_event,
                                                              theirs), name=f"capmark-jobs-{spec.jobs[0]}",
                                   daemon=True)
            with _main_module_kept_out():
                proc.start()
            theirs.close()
            self.procs.append(proc)
            self.pipes.append(ours)
        by_job: dict[int, int] = {}
        for spec, pipe, proc in zip(self.specs, self.pipes, self.procs, strict=True):
            message = self._receive(pipe, proc, READY_TIMEOUT_S, spec)
            if message[0] != "ready":
                raise WorkerFailed(f"{_jobs_named(spec.jobs)} {message[1]}")
            by_job.update(zip(spec.jobs, message[1], strict=True))
        self.pids = [by_job[j] for j in sorted(by_job)]
        self.connected = True
        return self.pids

    def _receive(self, pipe: Connection, proc: Any, timeout: float, spec: WorkerSpec) -> tuple:
        deadline = time.monotonic() + timeout
        while not pipe.poll(POLL_S):
            if not proc.is_alive():
                raise WorkerFailed(why_ended(spec.jobs, proc.exitcode, self.phase))
            if time.monotonic() > deadline:
                raise WorkerFailed(f"the process running {_jobs_named(spec.jobs)} did not answer within "
                                   f"{timeout:.0f} s {self.phase}")
        try:
            message = pipe.recv()
        except (EOFError, OSError):  # it ended without a word: how it ended is in its exit status
            proc.join(timeout=2)
            raise WorkerFailed(why_ended(spec.jobs, proc.exitcode, self.phase)) from None
        if message[0] == "crashed":
            raise WorkerFailed(f"the process running {_jobs_named(spec.jobs)} failed {self.phase}: {message[1]}")
        return message

    def wait(self, timeout: float) -> None:
        """Meet the jobs at the barrier. A barrier wait cannot poll (a timeout breaks it for every party), so a
        helper thread waits while this one watches the processes: a dead one breaks the barrier, and the step
        fails with the jobs' own reasons or the name of the process that died."""
        passed: list[bool] = []

        def waiter() -> None:
            try:
                self.barrier.wait(timeout=timeout)
                passed.append(True)
            except threading.BrokenBarrierError:
                passed.append(False)

        thread = threading.Thread(target=waiter, name="capmark-barrier", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(POLL_S)
            if thread.is_alive() and any(not proc.is_alive() for proc in self.procs):
                self.barrier.abort()
        if not passed or not passed[0]:
            raise WorkerFailed(self._why_broken())
        self.boundaries += 1

    def failed(self) -> bool:
        """A job has failed (it broke the barrier) or a process has died."""
        return bool(self.barrier.broken) or any(not proc.is_alive() for proc in self.procs)

    def _why_broken(self) -> str:
        """The jobs' own failures when their processes could send them, and how each process that could not
        send its jobs' results ended."""
        self.stop_event.set()
        self.barrier.abort()
        self._collect(quick=True)
        failures = [f for r in self._results for f in r.failures] + self.failures
        return "; ".join(failures) or f"a job stopped responding {self.phase}"

    def _collect(self, quick: bool = False) -> None:
        timeout = 2.0 if quick else RESULT_TIMEOUT_S
        got = {tuple(r.jobs) for r in self._results}
        for spec, pipe, proc in zip(self.specs, self.pipes, self.procs, strict=True):
            if tuple(spec.jobs) in got:
                continue
            try:
                message = self._receive(pipe, proc, timeout, spec)
            except WorkerFailed as err:
                if not quick:
                    raise
                self.failures.append(str(err))
                continue
            if message[0] == "done":
                self._results.append(message[1])

    def results(self) -> list[WorkerResult]:
        """Every process's tallies, after the last phase; the processes have then ended."""
        self._collect()
        for proc in self.procs:
            proc.join(timeout=5)
        return sorted(self._results, key=lambda r: r.jobs[0])

    def stop(self) -> None:
        """End the jobs and their processes (Ctrl-C, a failure elsewhere): their connections close with them."""
        self.stop_event.set()
        with contextlib.suppress(Exception):
            self.barrier.abort()
        for proc in self.procs:
            proc.join(timeout=5)
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for pipe in self.pipes:
            pipe.close()


def why_ended(jobs: list[int], exitcode: int | None, phase: str) -> str:
    """How the process running `jobs` ended without sending their results, and what they were doing then."""
    who = f"the process running {_jobs_named(jobs)}"
    if exitcode is None:
        return f"{who} stopped answering {phase}"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"{who} was killed by {name} {phase}"
    if exitcode == 0:
        return f"{who} exited {phase} without sending its jobs' results"
    return f"{who} crashed {phase} (exit status {exitcode})"


def _jobs_named(jobs: list[int]) -> str:
    return f"job {jobs[0]}" if len(jobs) == 1 else "jobs " + ", ".join(str(j) for j in jobs)
