"""Signals at every moment of a run, server-side and client-side, through the real `capmark` command.

SIGINT, SIGTERM and SIGKILL each arrive at four moments: at start (while Python loads the command line), during
preparation (connected, no job running yet), mid-step (the second of two steps is measuring) and while storing
(both steps stored, the run finishing and writing its report). Whatever the moment: no traceback and no
"unexpected" on the terminal, at most one line on stderr, the documented exit code, no process or database
session of the run left behind after a few seconds, and the results folder holds either nothing or a run whose
record says how it ended and keeps every step it completed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from commandline import completed
from storedrows import stored

pytestmark = pytest.mark.db

SRC = str(Path(__file__).resolve().parents[2] / "src")
PLAN = ["srv-query1", "--jobs", "1,2", "--warmup", "0s"]
# The mid-step signal must land inside step 2's window, found active by polling the server: 2 s leaves room for a
# slow poll on a busy machine. At the other moments the window's length plays no part (the signal comes before any
# step, or after both are stored), so they measure 1 s steps.
WINDOW_S = {"mid-step": "2s"}
OTHER_WINDOW_S = "1s"
GONE_WITHIN_S = 10  # server-side loops end with their 1 s slice; killed clients are noticed within 2 s
WAIT_S = 240  # a fresh data model plus a step on a busy 2-core machine
START_S = 0.3  # after the interpreter is up (~50 ms) and long before the command line has loaded (~1 s)
INTERRUPTED = 130


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "1000"}


def backends(dsn: str, where: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(f"select pid, application_name, state from pg_stat_activity where {where}").fetchall()


def capmark_sessions(dsn: str) -> set[int]:
    return {row[0] for row in backends(dsn, "application_name like 'capmark%' and pid <> pg_backend_pid()")}


def wait_for(condition: Callable[[], Any], what: str, proc: subprocess.Popen, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"capmark ended (exit {proc.returncode}) before {what}")
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def descendants(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def report_json(results: Path) -> dict:
    out = completed("report", "--results-dir", str(results), "--format", "json")  # reading it needs no process
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


MOMENTS = ["start", "preparation", "mid-step", "storing"]
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


def _reach(moment: str, proc: subprocess.Popen, dsn: str, results: Path, before: set[int]) -> None:
    if moment == "start":
        time.sleep(START_S)
    elif moment == "preparation":  # connected, and no job has started
        wait_for(lambda: any(name == "capmark control" for _, name, _ in backends(dsn, "true"))
                 and not backends(dsn, "application_name like 'capmark job%'"), "the preparation", proc)
    elif moment == "mid-step":
        wait_for(lambda: backends(dsn, "application_name = 'capmark job 2' and state = 'active'"), "step 2", proc)
    else:
        wait_for(lambda: stored(results, "select count(*) from step") == [(2,)], "both steps stored", proc)


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("name", list(SIGNALS))
@pytest.mark.parametrize("mode", ["server", "client"])
def test_a_signal_at_any_moment_ends_the_run_cleanly(mode: str, name: str, moment: str, embedded_dsn: str,
                                                     tmp_path: Path) -> None:
    results, out, err = tmp_path / "results", tmp_path / "stdout", tmp_path / "stderr"
    before = capmark_sessions(embedded_dsn)
    # stdout and stderr to files: a pipe would stay open as long as any orphan holds it
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "capmark", "run", *PLAN, "--duration",
                                 WINDOW_S.get(moment, OTHER_WINDOW_S), "--mode", mode, "--dsn", embedded_dsn,
                                 "--results-dir", str(results)], stdout=stdout, stderr=stderr, env=_env())
    try:
        _reach(moment, proc, embedded_dsn, results, before)
        family = descendants(proc)
        proc.send_signal(SIGNALS[name])
        code = proc.wait(timeout=120)
        killed_at = time.monotonic()
        still = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        while still and time.monotonic() - killed_at < GONE_WITHIN_S:
            time.sleep(0.1)
            still = [p for p in still if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not still, f"processes of the run left behind: {[p.cmdline() for p in still]}"
        while capmark_sessions(embedded_dsn) - before and time.monotonic() - killed_at < GONE_WITHIN_S:
            time.sleep(0.1)
        assert not capmark_sessions(embedded_dsn) - before, "database sessions of the run left behind"
    finally:
        proc.kill()
        proc.wait()
    said = err.read_text()
    assert "Traceback" not in said and "unexpected" not in said and "Error" not in said, said
    lines = said.strip().splitlines()
    folders = list(results.glob("*/results.sqlite")) if results.exists() else []

    if name == "SIGKILL":
        assert code == -signal.SIGKILL
        assert not lines, said  # a killed process says nothing; nothing it started may speak for it
        if moment == "start":
            assert not folders
        elif stored(results, "select count(*) from run") == [(1,)]:
            doc = report_json(results)
            steps = [s["jobs"] for t in doc["tests"] for s in t["steps"]]
            assert doc["run"]["status"] in (("killed", "complete") if moment == "storing" else ("killed",))
            assert steps == {"preparation": [], "mid-step": [1], "storing": [1, 2]}[moment]
        else:  # killed before the run record was written: a folder without a run is no run to any command
            assert moment == "preparation"
        return

    assert len(lines) <= 1 and all(line.startswith("capmark: ") for line in lines), said
    if moment == "storing":  # the signal may come after the last word: then the run is simply complete
        assert code in (0, INTERRUPTED)
        assert stored(results, "select ordinal from step order by test_ordinal, ordinal") == [(1,), (2,)]
        assert stored(results, "select status from run")[0][0] in ("complete", "interrupted")
        for page in results.glob("*/report.html"):  # never half a page
            assert page.read_text().rstrip().endswith("</html>")
        return
    assert code == INTERRUPTED, said
    if moment == "mid-step":
        assert stored(results, "select status from run") == [("interrupted",)]
        assert stored(results, "select ordinal from step") == [(1,)]
        assert lines == [f"capmark: Interrupted during step 2 (2 jobs) of srv-query1; the completed steps are stored "
                         f"in {folders[0].parent}."]
        assert (folders[0].parent / "report.html").exists()  # the completed step is reported too
    else:  # nothing measured yet: no run folder that would look like a run
        assert not folders
        assert lines in (["capmark: interrupted."], ["capmark: Interrupted before anything was measured; nothing was "
                                                     "stored."]) or lines[0].endswith(
            ", before anything was measured; nothing was stored."), said
