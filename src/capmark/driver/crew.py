"""A crew: the jobs of one process whose units are one-key lookups, driven by one thread over all their connections.

With a thread a connection, each job sleeps and wakes for every lookup: 2.9 context switches a query at 8 jobs
against pgbench's 1.5, whose threads each multiplex their clients' connections and often find an answer already
there. In a crew the jobs still pass every phase of the step themselves (the step's barrier, their statistics
flushed on their own connections, their own tallies), but in each phase the last of them to arrive runs the batches
of them all at once (engines.base.run_together) while the others wait; each job then carries on with what its own
batches did, its failure its own.

A crew pays only where the client has cores of its own. There, at the same throughput as a thread a job, the
client's CPU per lookup was 0.93-1.02x pgbench's against 1.07-1.12x. Where the client shares the database server's
cores, a crew thread that waits for a CPU behind the server's processes stalls all its connections at once, where
a job's own thread stalls one: at 8 jobs on 2 shared cores, four sets of rounds gave crews 0.78-0.98x pgbench's
lookups against 0.89-1.05x for a thread a job (docs/benchmarks.md). So jobs run in crews where the client does
not share the server's cores (shares_cores).
"""

from __future__ import annotations

import os
import threading
from typing import Protocol

from capmark.engines.base import LookupBatch, TargetInfo, lookups_together_asked, run_together

SERVER_PROGRAMS = ("postgres", "mysqld", "mariadbd")  # /proc/<pid>/comm of a server's main process


def shares_cores(info: TargetInfo) -> bool:
    """Whether this process may run on a core the database server may run on: the server is on this host (and its
    main process is there under its pid) and their CPU affinities, which cpusets narrow, overlap."""
    pid = info.postmaster_pid
    if not info.local or pid is None:
        return False
    try:
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() not in SERVER_PROGRAMS:
                return False  # not the server: this process is on another host (a cluster's node)
        return bool(os.sched_getaffinity(pid) & os.sched_getaffinity(0))
    except OSError:  # no such process here, or not ours to read: the server runs elsewhere
        return False


def crews_wanted(info: TargetInfo) -> bool:
    """Whether a process's jobs run their lookups together: as CAPMARK_LOOKUPS says, else where the client has
    cores of its own."""
    asked = lookups_together_asked()
    return asked if asked is not None else not shares_cores(info)


class CrewMember(Protocol):
    """One job's lookups in a phase: its next batch, and what it makes of the batch's outcome."""

    def next_batch(self) -> LookupBatch: ...

    def ran(self, done: int, error: Exception | None, failed_at: float) -> bool:
        """Take the outcome of the batch; False once the job's phase is over (or it must stop). Raises what ends
        the job (a broken connection, a statement the server cancelled)."""
        ...

    def finish(self) -> None: ...


class LookupCrew:
    """The jobs of one process that run together. Each calls take_part once a phase with its part; the phase's
    lookups run when all are there, in the thread of the last to arrive, and take_part returns in each job's own
    thread when the phase is over for all, raising what ended that job's part."""

    def __init__(self, size: int, key_max: int, stop: threading.Event) -> None:
        self.key_max = key_max
        self.stop = stop
        self._parts: list[tuple[CrewMember, float]] = []
        self._failures: dict[int, BaseException] = {}  # by id of the part, for its own job to raise
        self._lock = threading.Lock()
        self._all_here = threading.Barrier(size, action=self._run_phase)

    def take_part(self, part: CrewMember, end: float) -> None:
        """Run `part` (until perf_counter passes `end`) with the crew's other jobs' parts of this phase."""
        with self._lock:
            self._parts.append((part, end))
        self._all_here.wait()  # a BrokenBarrierError when a job of the crew failed before it got here: abort()
        failure = self._failures.pop(id(part), None)
        if failure is not None:
            raise failure

    def abort(self) -> None:
        """A job of the crew has failed: the others must not wait for it."""
        self._all_here.abort()

    def _run_phase(self) -> None:
        """The phase's batches, round after round, until every part is over: run in the last job's thread, with
        the others waiting at the crew's barrier (a failure of one part ends the others' phase too, as the step
        fails with it)."""
        with self._lock:
            parts, self._parts = self._parts, []
        end = min(end for _, end in parts)
        going = [part for part, _ in parts]
        try:
            while going and not self.stop.is_set():
                outcomes = run_together([part.next_batch() for part in going], self.key_max, end)
                still = []
                for part, outcome in zip(going, outcomes, strict=True):
                    try:
                        if part.ran(*outcome):
                            still.append(part)
                    except Exception as err:
                        self._failures[id(part)] = err
                if len(still) < len(going) and self._failures:
                    break
                going = still
            for part, _ in parts:
                part.finish()
        except Exception as err:  # the batches themselves could not run: every job of the crew says why
            for part, _ in parts:
                self._failures.setdefault(id(part), err)
