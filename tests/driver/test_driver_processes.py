"""Client-side jobs in worker processes: the phases and the tallies stay exact across processes, and a worker
that dies, or an interrupt, ends the step with the reason and leaves no process or server session behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
import pytest
from liveruns import run_without_report

from capmark.config import RunSpec
from capmark.driver.procs import split_jobs, why_ended
from capmark.engines.base import LOOKUPS_ENV

pytestmark = pytest.mark.db

SRC = str(Path(__file__).resolve().parents[2] / "src")
CORES = os.cpu_count() or 1
JOBS = 2 * CORES  # more jobs than processes: some processes run several jobs as threads
WAIT_S = 120
# a failed job ends its step within the runner's countdown tick (0.25 s), the other jobs' next check of the stop flag
# and the report's writing (0.5 s measured); the window had 19.5 s left, which the step used to wait out
PROMPT_FAILURE_S = 8


def test_jobs_are_dealt_evenly_over_the_processes():
    assert split_jobs(5, 2) == [[1, 3, 5], [2, 4]]
    assert split_jobs(2, 8) == [[1], [2]]  # never more processes than jobs
    assert sorted(j for part in split_jobs(7, 3) for j in part) == list(range(1, 8))


def _statement_calls(step, text: str) -> int:
    rows = [r for r in step.db_delta.get("statements", []) if text in (r.get("query") or "")]
    return int(sum(r["calls"] for r in rows))


def test_processes_count_every_unit_the_server_ran(embedded_dsn, tmp_path):
    """One prepared lookup per unit: the units merged from every process equal the server's own count of the
    lookup, and the 1 s series add up to them; each process reports its CPU and its share of the jobs."""
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[JOBS], mode="client", warmup_s=0.5, duration_s=2.0,
                                     dsn=embedded_dsn, results_dir=tmp_path))
    step = run.tests[0].steps[0]
    assert step.status == "ok", step.notes
    workers = [p for p in step.driver_cpu["processes"] if p["jobs"]]
    assert len(workers) == min(JOBS, CORES)
    assert sorted(j for p in workers for j in p["jobs"]) == list(range(1, JOBS + 1))
    assert all(p["user_s"] + p["sys_s"] > 0 and p["pid"] != os.getpid() for p in workers)
    assert step.units > 1000
    assert _statement_calls(step, "from capmark.item where id = $1") == step.units
    assert sum(step.series_units) == step.units
    # the sampler watched the jobs' own sessions, wherever their processes are
    assert step.wait_samples > 10 and sum(step.waits.values()) >= step.wait_samples * JOBS * 0.9


def _capmark_run(*args: str, dsn: str, results: Path, lookups: str = "") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "1000",
           **({LOOKUPS_ENV: lookups} if lookups else {})}
    return subprocess.Popen([sys.executable, "-m", "capmark.cli", "run", *args, "--dsn", dsn, "--results-dir",
                             str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _job_sessions(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select pid, application_name from pg_stat_activity "
                            "where application_name like 'capmark job %'").fetchall()


def _workers(proc: subprocess.Popen) -> list[psutil.Process]:
    """The worker processes: forked by the forkserver, a child of capmark."""
    me = psutil.Process(proc.pid)
    return [p for p in me.children(recursive=True) if p.ppid() != proc.pid]


def _until(condition, what: str, proc: subprocess.Popen):
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"capmark ended (exit {proc.returncode}) before {what}: {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _nothing_left(dsn: str, descendants: list[psutil.Process]) -> None:
    deadline = time.time() + 10
    while time.time() < deadline and (_job_sessions(dsn) or any(p.is_running() and p.status() != "zombie"
                                                                   for p in descendants)):
        time.sleep(0.2)
    assert _job_sessions(dsn) == []
    assert [p.pid for p in descendants if p.is_running() and p.status() != "zombie"] == []


def test_a_worker_that_dies_fails_the_step_and_names_its_jobs(embedded_dsn, tmp_path):
    proc = _capmark_run("srv-query1", "--mode", "client", "--jobs", "2", "--driver-procs", "2", "--warmup", "1",
                        "--duration", "20", dsn=embedded_dsn, results=tmp_path)
    workers = _until(lambda: len(_workers(proc)) >= 2 and len(_job_sessions(embedded_dsn)) == 2 and _workers(proc),
                     "two worker processes with their sessions", proc)
    descendants = psutil.Process(proc.pid).children(recursive=True)
    victim = workers[0]
    victim.kill()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    text = " ".join(err.split())
    # how it ended (a signal, by name) and what its job was doing; no "unexpectedly", no meaningless exit code
    assert re.search(r"the process running job [12] was killed by SIGKILL (in the warm-up|while measuring)", text), text
    assert "unexpected" not in text and "exit code" not in text, text
    assert "Traceback" not in err
    _nothing_left(embedded_dsn, descendants)


def test_a_dead_workers_reason_says_how_it_ended_and_what_its_jobs_were_doing():
    assert why_ended([2], -signal.SIGKILL, "while measuring") == (
        "the process running job 2 was killed by SIGKILL while measuring")
    assert why_ended([1, 3], 0, "in the warm-up") == (
        "the process running jobs 1, 3 exited in the warm-up without sending its jobs' results")
    assert why_ended([1], 1, "while connecting") == "the process running job 1 crashed while connecting (exit status 1)"


@pytest.mark.parametrize(("signum", "jobs", "lookups"), [(signal.SIGINT, 2, ""), (signal.SIGTERM, 4, "together")],
                         ids=["SIGINT, a job a process", "SIGTERM, two jobs a process together"])
def test_an_interrupt_ends_every_worker_and_session(signum, jobs, lookups, embedded_dsn, tmp_path):
    """Whether each job waits on its own connection or one of a process's jobs drives them all (a crew)."""
    proc = _capmark_run("srv-query1", "--mode", "client", "--jobs", str(jobs), "--driver-procs", "2", "--warmup", "1",
                        "--duration", "20", dsn=embedded_dsn, results=tmp_path, lookups=lookups)
    _until(lambda: len(_job_sessions(embedded_dsn)) == jobs and _workers(proc), "the jobs at work", proc)
    descendants = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    _nothing_left(embedded_dsn, descendants)


@pytest.mark.parametrize("lookups", ["together", "apart"])
def test_a_job_whose_session_ends_fails_the_step_at_once_by_its_own_number(lookups, embedded_dsn, tmp_path):
    """Two jobs a process, running their lookups together or each on its own: the server ends job 3's session; the
    step fails with job 3 named (not the crew's leader), the run ends with exit 1 at once, not at the end of its
    20 s window (as it did before), and no process or session is left."""
    proc = _capmark_run("srv-query1", "--mode", "client", "--jobs", "4", "--driver-procs", "2", "--warmup", "0",
                        "--duration", "20", dsn=embedded_dsn, results=tmp_path, lookups=lookups)
    sessions = _until(lambda: len(s := _job_sessions(embedded_dsn)) == 4 and _workers(proc) and s,
                      "the jobs at work", proc)
    descendants = psutil.Process(proc.pid).children(recursive=True)
    (victim,) = [pid for pid, name in sessions if name == "capmark job 3"]
    time.sleep(0.5)  # into the window
    ended = time.monotonic()
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(%s)", (victim,))
    _, err = proc.communicate(timeout=120)
    text = " ".join(err.split())
    assert proc.returncode == 1 and "job 3 failed while measuring" in text, err
    assert time.monotonic() - ended < PROMPT_FAILURE_S, "the step waited for the window's end instead of failing"
    assert "Traceback" not in err
    _nothing_left(embedded_dsn, descendants)


MAIN_SCRIPT = """\
import sys
with open(sys.argv[1], "a") as marks:  # every import of this file, as the program or again in a worker
    marks.write(__name__ + "\\n")
if __name__ == "__main__":
    import time
    from capmark.driver import procs
    kept_out = procs.CONTEXT.Process(target=time.sleep, args=(0,))
    with procs._main_module_kept_out():
        kept_out.start()
    kept_out.join()
    ordinary = procs.CONTEXT.Process(target=time.sleep, args=(0,))
    ordinary.start()
    ordinary.join()
    print(sys.modules["__main__"].__file__)
"""


def test_a_job_process_does_not_import_the_programs_main_module_again(tmp_path):
    """multiprocessing has every forkserver child import the starting program's main module (capmark's command
    line, or pytest: 110 ms a job process, each step); a job process starts without it, and the program's main
    module is its own again afterwards. The ordinary start beside it shows the import this avoids."""
    script, marks = tmp_path / "program.py", tmp_path / "marks"
    script.write_text(MAIN_SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(marks)], capture_output=True, text=True, timeout=WAIT_S,
                         env=dict(os.environ, PYTHONPATH=SRC))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(script)
    assert marks.read_text().split() == ["__main__", "__mp_main__"]  # the program, then the ordinary child only
