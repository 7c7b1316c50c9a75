"""A client-side run killed with SIGKILL at any moment: its worker processes (and the forkserver and resource
tracker multiprocessing started for it) end within seconds, quietly, and so do its server sessions.

The workers are forked by multiprocessing's forkserver, which stays alive as long as any process holds its
"alive" pipe; a worker that kept it would keep the forkserver (its parent, whose death it waits for) alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import psycopg
import pytest

pytestmark = pytest.mark.db

SRC = str(Path(__file__).resolve().parents[2] / "src")
TAG = "CAPMARK_TEST_KILL_TAG"  # inherited by every process the run starts, however deep
START_S = 180  # data setup on a fresh server included
GONE_S = 10


class Run:
    """A `capmark run` in a subprocess, its output read as it comes, its descendants tracked until the kill."""

    def __init__(self, dsn: str, results: Path, jobs: str) -> None:
        self.tag = uuid.uuid4().hex
        env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200",
               TAG: self.tag}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "capmark.cli", "run", "srv-query1", "--mode", "client", "--jobs", jobs,
             "--warmup", "1s", "--duration", "3s", "--dsn", dsn, "--results-dir", str(results)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(s, b), daemon=True)
                        for s, b in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()
        self.seen: dict[int, psutil.Process] = {}

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def track(self) -> list[psutil.Process]:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for child in children:
            self.seen.setdefault(child.pid, child)
        return children

    def workers(self) -> list[psutil.Process]:
        """Processes forked by the forkserver (a child of capmark): the job workers."""
        out = []
        for child in self.track():
            with _gone():
                if child.ppid() != self.proc.pid:
                    out.append(child)
        return out

    def until(self, condition, what: str) -> None:
        deadline = time.time() + START_S
        while time.time() < deadline:
            self.track()
            if condition():
                return
            if self.proc.poll() is not None:
                pytest.fail(f"capmark ended (exit {self.proc.returncode}) before {what}: {''.join(self.err)[-2000:]}")
            time.sleep(0.02)
        self.kill()
        pytest.fail(f"timed out waiting for {what}")

    def kill(self) -> None:
        self.track()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def tagged(self) -> list[int]:
        """Processes still alive that the run started (they carry its tag in their environment)."""
        found = []
        for p in psutil.process_iter():
            with _gone():
                if p.pid != self.proc.pid and p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TAG) == self.tag:
                    found.append(p.pid)
        return found


class _gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> bool:
        return kind is not None and issubclass(kind, (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess))


def _sessions(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select pid, application_name, state, query from pg_stat_activity "
                            "where application_name like 'capmark%' and pid <> pg_backend_pid()").fetchall()


def _alive(processes: list[psutil.Process]) -> list[int]:
    left = []
    for p in processes:
        with _gone():
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
    return left


def _starting(run: Run, dsn: str) -> None:
    """The first step's worker processes exist and are connecting or preparing: none has reported ready yet."""
    run.until(lambda: run.workers(), "the first worker process")


def _mid_step(run: Run, dsn: str) -> None:
    run.until(lambda: len([s for s in _sessions(dsn) if s[1].startswith("capmark job")]) == 2 and run.workers(),
              "the jobs at work")
    time.sleep(2.5)  # into the measured window


def _between_steps(run: Run, dsn: str) -> None:
    run.until(lambda: any("step 1 (" in line for line in run.out), "the end of the first step")


MOMENTS = {"starting": _starting, "mid-step": _mid_step, "between-steps": _between_steps}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_killed_client_side_run_leaves_no_worker_session_or_traceback(moment, embedded_dsn, tmp_path):
    run = Run(embedded_dsn, tmp_path, "2,4")
    MOMENTS[moment](run, embedded_dsn)
    run.kill()
    descendants = list(run.seen.values())
    deadline = time.time() + GONE_S
    while time.time() < deadline and (_alive(descendants) or run.tagged() or _sessions(embedded_dsn)):
        time.sleep(0.2)
    left, tagged, sessions = _alive(descendants), run.tagged(), _sessions(embedded_dsn)
    for pid in set(left + tagged):  # clean up after a failure, so later tests are not disturbed
        with _gone():
            psutil.Process(pid).kill()
    for reader in run.readers:
        reader.join(timeout=5)
    err = "".join(run.err)
    assert left == [] and tagged == [], f"processes left {GONE_S} s after the kill: {left + tagged}; stderr: {err}"
    assert sessions == [], f"server sessions left {GONE_S} s after the kill: {sessions}"
    assert not any(r.is_alive() for r in run.readers), "the run's output stayed open after the kill"
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert "unexpected" not in err.lower(), err
    assert "Warning" not in err and "leaked" not in err, err  # e.g. the resource tracker's leaked semaphores


# capmark killed in the instant between the forkserver forking a worker and capmark sending the worker its data:
# the connection is made as multiprocessing makes it, then the process ends before anything is sent.
KILLED_WHILE_A_WORKER_STARTS = """
import os
import multiprocessing.forkserver as forkserver
from capmark.driver import procs

connect = forkserver.connect_to_new_process

def connect_and_die(fds):
    sentinel, _ = connect(fds)
    forkserver.read_signed(sentinel)  # the forkserver has forked the worker
    os._exit(0)

forkserver.connect_to_new_process = connect_and_die
if __name__ == "__main__":
    procs.CONTEXT.Process(target=print).start()
"""


def test_a_kill_while_a_worker_is_forked_leaves_no_traceback(tmp_path):
    """The worker the forkserver forked reads no data and ends without a word: before, the forkserver printed its
    EOFError's traceback on the terminal of a killed capmark (seen once in the between-steps case above)."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED_WHILE_A_WORKER_STARTS)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=SRC))
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
