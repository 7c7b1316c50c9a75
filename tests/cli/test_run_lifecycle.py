"""The run lifecycle through the real command line on a real server: however a run ends (the server stops, a
connection is terminated, a job fails, the results disk fills, a signal, SIGKILL), its record says so, the
completed steps stay, and the exit code tells a script what happened."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from commandline import completed
from psycopg.conninfo import make_conninfo
from storedrows import stored

from capmark.config import ROWS_PER_SCALE
from capmark.engines.postgres import embedded

pytestmark = pytest.mark.db
SRC = str(Path(__file__).resolve().parents[2] / "src")
# Each step lasts 2 s: the tests act within about 0.1 s of seeing the step they wait for (a job running, a step
# stored), so the step after it is still running or not yet stored when they act. No assertion reads a figure.
SHORT = ["--warmup", "1", "--duration", "1"]
WAIT_S = 240  # a fresh data model plus a step on a busy 2-core machine


def start(*args: str, dsn: str, results: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "1000"}
    return subprocess.Popen([sys.executable, "-m", "capmark.cli", "run", *args, "--dsn", dsn,
                             "--results-dir", str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def capmark(*args: str) -> subprocess.CompletedProcess:
    """A command that reads the stored run, in this process (commandline.completed): the runs are the processes."""
    return completed(*args, env={"COLUMNS": "1000"})


def wait_for(condition: Callable[[], Any], what: str, proc: subprocess.Popen | None = None,
             timeout: float = WAIT_S) -> Any:
    """Poll until condition() is truthy; fail early, with capmark's output, if capmark ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"capmark ended (exit {proc.returncode}) before {what}: {err[-2000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def run_row(results: Path) -> tuple:
    (row,) = stored(results, "select status, reason from run")
    return row


def backends(dsn: str, where: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(f"select pid, application_name, state, query from pg_stat_activity where {where}"
                            ).fetchall()


def job_running(dsn: str, job: int) -> Callable[[], list[tuple]]:
    return lambda: backends(dsn, f"application_name = 'capmark job {job}' and state = 'active'")


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=180)
    assert "Traceback" not in err and "unexpected" not in err, err
    return proc.returncode, err


def report_json(folder: Path) -> dict:
    out = capmark("report", str(folder), "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# --- the server or a connection gives way mid-run -------------------------------------------------------------

@pytest.fixture
def private_server():
    """An embedded server of this test's own, which the test may stop. Its folder is outside pytest's private
    temporary tree, which the server's own system user (when tests run as root) could not enter."""
    base = Path(tempfile.mkdtemp(prefix="capmark-stop-"))
    base.chmod(0o755)
    data_dir = base / "data"
    url = embedded.start(data_dir)
    yield url, data_dir
    embedded.stop(data_dir)
    shutil.rmtree(base, ignore_errors=True)


def test_server_stopped_mid_run_fails_the_run_and_keeps_the_completed_step(private_server, tmp_path):
    url, data_dir = private_server
    proc = start("srv-query1", "--jobs", "1,2", *SHORT, dsn=url, results=tmp_path)
    wait_for(job_running(url, 2), "step 2", proc)
    embedded.stop(data_dir)
    code, err = finish(proc)
    assert code == 1
    assert "the server stopped during step 2 (2 jobs) of srv-query1" in err
    status, reason = run_row(tmp_path)
    assert status == "failed" and "server stopped during step 2" in reason
    assert stored(tmp_path, "select ordinal, jobs from step") == [(1, 1)]
    assert stored(tmp_path, "select status from test") == [("failed",)]
    folder = next(tmp_path.iterdir())
    assert (folder / "report.html").exists()
    assert report_json(folder)["run"]["status"] == "failed"  # not taken for killed: the process ended normally


def test_control_connection_terminated_fails_the_run_and_stores_no_empty_test(embedded_dsn, tmp_path):
    proc = start("srv-query1", "tp-light", "--jobs", "1", *SHORT, dsn=embedded_dsn, results=tmp_path)
    wait_for(job_running(embedded_dsn, 1), "the first step", proc)
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                     "where application_name = 'capmark control'")
    code, err = finish(proc)
    assert code == 1
    assert "terminated capmark's connection to the server during step 1 (1 job) of srv-query1" in err
    assert run_row(tmp_path)[0] == "failed"
    assert stored(tmp_path, "select workload, status from test") == [("srv-query1", "failed")]
    assert (next(tmp_path.iterdir()) / "report.html").exists()


def test_a_failed_test_fails_the_run_with_exit_1(embedded_dsn, tmp_path):
    proc = start("srv-query1", "--jobs", "1,2", *SHORT, dsn=embedded_dsn, results=tmp_path)
    (job,) = wait_for(job_running(embedded_dsn, 1), "the first step", proc)
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(%s)", (job[0],))
    code, err = finish(proc)
    assert code == 1 and "the run is stored but failed" in err
    status, reason = run_row(tmp_path)
    assert status == "failed" and reason.startswith("srv-query1: step 1 (1 job) failed")
    ((test_status, header),) = stored(tmp_path, "select status, header from test")
    assert test_status == "failed" and json.loads(header)["reason"].startswith("step 1 (1 job) failed")


@pytest.fixture
def limited_role(embedded_dsn: str):
    """A role that may hold three connections: the control, one job and the sampler of a one-job step."""
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        owner = conn.execute("select current_user").fetchone()[0]
        conn.execute("drop role if exists capmark_slots")
        conn.execute("create role capmark_slots login connection limit 3")
        conn.execute(f"grant {owner} to capmark_slots")  # owns capmark's objects like the usual user
    yield make_conninfo(embedded_dsn, user="capmark_slots")
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = 'capmark_slots'")
        # whatever the role created (the data model, when this test runs first) goes back to the usual owner
        conn.execute(f"reassign owned by capmark_slots to {owner}")
        conn.execute("drop owned by capmark_slots")
        conn.execute("drop role if exists capmark_slots")


def test_connection_slots_taken_between_steps_are_named_not_the_host(limited_role, tmp_path):
    proc = start("srv-query1", "--jobs", "1,2", *SHORT, dsn=limited_role, results=tmp_path)
    code, err = finish(proc)
    assert code == 1
    assert "during step 2 (2 jobs) of srv-query1" in err and "no connection slot free" in err
    assert "check the host" not in err
    assert run_row(tmp_path)[0] == "failed"
    assert stored(tmp_path, "select ordinal, jobs from step") == [(1, 1)]


def test_a_full_results_disk_fails_the_run_and_says_so(embedded_dsn, tmp_path):
    proc = start("srv-query1", "--jobs", "1,2", *SHORT, dsn=embedded_dsn, results=tmp_path)
    wait_for(lambda: stored(tmp_path, "select count(*) from step") == [(1,)], "the first stored step", proc)
    size = next(tmp_path.glob("*/results.sqlite")).stat().st_size
    _, hard = resource.prlimit(proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (size, hard))  # no file of capmark's may grow any more
    code, err = finish(proc)
    assert code == 1
    assert "results.sqlite could not be written while storing step 2 (2 jobs) of srv-query1" in err
    assert stored(tmp_path, "select ordinal from step") == [(1,)]
    assert run_row(tmp_path)[0] in ("failed", "running")  # the status is stored when the disk allows
    assert report_json(next(tmp_path.iterdir()))["run"]["status"] in ("failed", "killed")


# --- signals --------------------------------------------------------------------------------------------------

def setup_in_progress(dsn: str) -> Callable[[], list[tuple]]:
    """The control session inside the data setup's transaction (it has written: it holds a transaction id)."""
    return lambda: backends(dsn, "application_name = 'capmark control' and state = 'active' "
                                 "and backend_xid is not null")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_during_setup_exits_130_cancels_the_setup_and_stores_nothing(signum, embedded_dsn, tmp_path):
    before = model_items(embedded_dsn)  # the model other tests built (or none, when this test runs alone)
    proc = start("srv-query1", "--jobs", "1", "--scale", "2", *SHORT, dsn=embedded_dsn, results=tmp_path)
    wait_for(setup_in_progress(embedded_dsn), "the data setup", proc, timeout=60)
    proc.send_signal(signum)
    code, err = finish(proc)
    assert code == 130
    assert err.strip().splitlines() == ["capmark: Interrupted before anything was measured; nothing was stored."]
    assert not any(tmp_path.iterdir())
    wait_for(lambda: not backends(embedded_dsn, "application_name like 'capmark%'"), "capmark's sessions to end",
             timeout=10)
    assert model_items(embedded_dsn) == before != SCALE_2_ITEMS  # the setup was rolled back, not finished for nobody


SCALE_2_ITEMS = 2 * ROWS_PER_SCALE  # what --scale 2 would have left in capmark.meta, had its setup been committed


def model_items(dsn: str) -> int | None:
    """The items of capmark's data model as its meta table records them; None where no model was ever built."""
    with psycopg.connect(dsn) as conn:
        if conn.execute("select to_regclass('capmark.meta')").fetchone()[0] is None:
            return None
        row = conn.execute("select items from capmark.meta").fetchone()
        return row[0] if row else None


def test_sigterm_during_a_step_marks_the_test_interrupted(embedded_dsn, tmp_path):
    proc = start("srv-query1", "--jobs", "1,2", *SHORT, dsn=embedded_dsn, results=tmp_path)
    wait_for(job_running(embedded_dsn, 2), "step 2", proc)
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 130
    assert run_row(tmp_path) == ("interrupted", "interrupted during step 2 (2 jobs) of srv-query1")
    assert stored(tmp_path, "select status from test") == [("interrupted",)]
    assert stored(tmp_path, "select ordinal from step") == [(1,)]


def test_a_killed_run_is_reported_as_killed(embedded_dsn, tmp_path):
    proc = start("srv-query1", "--jobs", "1,2", *SHORT, dsn=embedded_dsn, results=tmp_path)
    wait_for(lambda: stored(tmp_path, "select count(*) from step") == [(1,)], "the first stored step", proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert run_row(tmp_path)[0] == "running"  # as the process left it
    out = capmark("report", "--results-dir", str(tmp_path), "--format", "json")  # the latest run
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["run"]["status"] == "killed"
    assert doc["run"]["reason"] == f"the run's process (pid {proc.pid}) is gone: it was killed or crashed"
    assert [t["status"] for t in doc["tests"]] == ["killed"]
    assert [s["jobs"] for s in doc["tests"][0]["steps"]] == [1]


def test_a_killed_capmark_leaves_no_statement_of_its_control_session_running(embedded_dsn):
    """SIGKILL cannot be handled: the control session asks the server to watch for its client instead."""
    child = f"""
import psycopg
from capmark.engines.postgres.engine import POSTGRESQL
conn = psycopg.connect({embedded_dsn!r}, autocommit=True, application_name="capmark control test")
POSTGRESQL.prepare_control(conn)
conn.execute("select pg_sleep(120)")
"""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", child], env=env, stderr=subprocess.PIPE, text=True)
    query = "application_name = 'capmark control test' and state = 'active'"
    wait_for(lambda: backends(embedded_dsn, query), "the long statement", proc, timeout=60)
    proc.kill()
    proc.communicate()
    killed_at = time.time()
    wait_for(lambda: not backends(embedded_dsn, query), "the statement to end", timeout=30)
    assert time.time() - killed_at < 10  # the check interval (2 s) and some noise, not the statement's 120 s


def test_ctrl_c_while_the_embedded_server_initialises_exits_130_with_one_line(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="capmark-init-"))  # outside pytest's tree, closed to the server's user
    base.chmod(0o755)
    data_dir = base / "pg"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "1000"}
    proc = subprocess.Popen([sys.executable, "-m", "capmark.cli", "db", "start", "--data-dir", str(data_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(data_dir.exists, "initdb to begin", proc, timeout=60)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert err.strip().splitlines() == ["capmark: interrupted."]
    finally:
        proc.kill()
        proc.communicate()
        if (data_dir / "postmaster.pid").exists():
            embedded.stop(data_dir)
        shutil.rmtree(base, ignore_errors=True)


class _InterruptedWhileShown:
    """A front end interrupted (Ctrl-C) while it shows a test that has ended: the test has no reason to give."""

    def say(self, message: str) -> None: ...

    def test_started(self, test: Any, plan: list[int]) -> None: ...

    def step_progress(self, test: Any, jobs: int, phase: str, seconds_left: float) -> None: ...

    def step_done(self, test: Any, step: Any) -> None: ...

    def test_done(self, test: Any) -> None:
        raise KeyboardInterrupt


def test_an_interrupt_while_an_ended_test_is_shown_keeps_the_run_and_says_so(embedded_dsn, tmp_path):
    """Seen as 'unexpected IndexError' when SIGINT came after the last step was stored: the message was built from
    the ended test's empty reason."""
    from capmark import runner
    from capmark.config import RunSpec
    from capmark.errors import RunInterrupted

    spec = RunSpec(workloads=["srv-query1"], jobs=[1], warmup_s=0, duration_s=1.0, dsn=embedded_dsn,
                   results_dir=tmp_path)
    with pytest.raises(RunInterrupted, match=r"^Interrupted; the completed steps are stored in "):
        runner.run(spec, _InterruptedWhileShown())  # type: ignore[arg-type]
    assert stored(tmp_path, "select count(*) from step") == [(1,)]
