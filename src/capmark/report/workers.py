"""Drawing a report's parts in forked worker processes, one per core capmark may use.

Drawing the figures is most of a report's cost (docs/architecture.md), and each test's part is drawn from its own
documents, so the tests are shared among forked copies of capmark, which hand back their sections through a pipe.
A copy needs no transfer of the run (it inherits it) and costs milliseconds to start. Whatever happens, no worker
outlives capmark: the kernel ends each when capmark ends, SIGKILL included, and an interrupted capmark ends them
before it says so. A worker that fails or dies (out of memory, a crash) leaves its share to the process itself,
which then draws it or raises the same error where it can be reported.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

Item = TypeVar("Item")
Drawn = TypeVar("Drawn")

MIN_ITEMS = 2  # one test's part is drawn in the process itself: there is nothing to share
# Each worker is a copy of capmark that grows by matplotlib's drawing state (about 100 MB); beyond a few, the page
# waits on the analysis done before the drawing anyway.
MAX_WORKERS = 8
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal the kernel sends a process when its parent ends
_ENDING = {signal.SIGINT, signal.SIGTERM}


def worker_count(items: int) -> int:
    """How many workers draw `items` parts; 0 where they are drawn in the process itself."""
    if items < MIN_ITEMS or not sys.platform.startswith("linux"):  # the parent-death signal is Linux's
        return 0
    # a copy made while another thread holds a lock (the console's, a connection's) would wait on it for ever
    if threading.active_count() > 1:
        return 0
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # a cluster run's gRPC threads are no Python threads
        return 0
    workers = min(items, len(os.sched_getaffinity(0)), MAX_WORKERS)
    return workers if workers >= 2 else 0


def forked_map(draw: Callable[[Item], Drawn], items: Sequence[Item]) -> list[Drawn]:
    """[draw(item) for item in items], shared among forked workers where worker_count allows; in order."""
    workers = worker_count(len(items))
    if not workers:
        return [draw(item) for item in items]
    done: dict[int, Drawn] = {}
    children: dict[int, tuple[int, list[int]]] = {}  # pid -> (the pipe's read end, the indices it draws)
    parent = os.getpid()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING)  # until every worker is known and set up
    try:
        for w in range(workers):
            share = list(range(w, len(items), workers))
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                _work(parent, read, write, draw, [items[i] for i in share])
            os.close(write)  # the next worker must not hold it: the pipe would never end
            children[pid] = (read, share)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for pid in list(children):
            read, share = children[pid]
            with os.fdopen(read, "rb") as pipe:
                data = pipe.read()
            del children[pid]
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) == 0:
                done.update(zip(share, pickle.loads(data), strict=True))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for pid, (read, _) in children.items():  # interrupted: the workers still drawing are ended
            with contextlib.suppress(OSError):
                os.close(read)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return [done[i] if i in done else draw(items[i]) for i in range(len(items))]


def _work(parent: int, read: int, write: int, draw: Callable[[Item], Drawn], share: list[Item]) -> NoReturn:
    """A worker: its share drawn and written to the pipe, then gone without running capmark's exit handlers. Ctrl-C
    is capmark's to handle (it ends the workers), and SIGTERM ends a worker quietly instead of running capmark's
    handler (a traceback of its own); both stay blocked until then."""
    code = 1
    try:
        os.close(read)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _ENDING)
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == parent:  # else capmark ended before the kernel was asked to end this worker with it
            data = pickle.dumps([draw(item) for item in share])
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
            code = 0
    finally:
        os._exit(code)
