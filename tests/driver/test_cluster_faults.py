"""A Ray cluster that fails under a run, and cluster addresses that are wrong: a head node that dies mid-run fails the
run (exit 1) with one sentence naming the cluster, keeps the completed steps, and no line of Ray's reaches the
console (Ray's own messages go to its log file); a port outside 1-65535 is refused as such before anything is
contacted (exit 2)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from capmark.config import RunSpec
from capmark.errors import CapmarkError
from capmark.store import load_run

pytest.importorskip("ray")

CAPMARK = [str(Path(sys.executable).with_name("capmark"))]
RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _capmark(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([*CAPMARK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CAPMARK_DEBUG": "", **(env or {})}, **kw)


# Ray's client retries a lost head for 30 s before it gives up and capmark can say so; the test's run gives it 5 s
# (Ray's own setting): what capmark does once Ray gives up is the same, and 0 would turn reconnecting off instead
RAY_RECONNECT_GRACE_S = 5
HEAD_STARTS = 3  # a head whose client server never starts a session is started anew
JOIN_TRIES = 3  # a run whose join the head refused throughout capmark's own wait is started anew
# A head that has just started may fail a new client's first sessions: its client server's session process exits at
# once ("Initialization failure from server", as capmark's join knows: driver/cluster.py), or Ray's proxy then waits
# 30 s for that dead session's channel before the client hears of it (half the fault tests' setups in one clean-clone
# run). A client is tried again after a failure, for PROBE_S in all; one that has heard nothing after
# FIRST_ATTEMPT_S (a join takes 3-5 s here) is given up for a new one, each new one given twice as long.
PROBE_S = 60
FIRST_ATTEMPT_S = 10.0
RETRY_PAUSE_S = 1.0
PROBE = """
import sys, ray
ray.init(sys.argv[1], log_to_driver=False)
ray.shutdown()
"""


def _accepts_a_client(address: str) -> str | None:
    """None once a client has joined the head at address; else what the last attempt said."""
    deadline = time.monotonic() + PROBE_S
    attempt_s, said = FIRST_ATTEMPT_S, "(nothing)"
    while (left := deadline - time.monotonic()) > 0:
        try:
            probe = subprocess.run([sys.executable, "-c", PROBE, address], capture_output=True, text=True,
                                   timeout=min(attempt_s, left))
        except subprocess.TimeoutExpired:
            said, attempt_s = f"no session in {min(attempt_s, left):.0f} s", attempt_s * 2
            continue
        if probe.returncode == 0:
            return None
        said = (probe.stderr.strip().splitlines() or ["(nothing)"])[-1][-400:]
        time.sleep(RETRY_PAUSE_S)
    return said


def _start_head() -> tuple[str, int, Path]:
    """`ray start --head` in a temporary folder and a process group of its own; its client address, group and
    folder."""
    temp = Path(tempfile.mkdtemp(prefix="cmray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    client_port = _free_port()
    start = subprocess.Popen([RAY, "start", "--head", f"--port={_free_port()}", f"--ray-client-server-port={client_port}",
                              "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                              f"--temp-dir={temp}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    assert start.wait(timeout=120) == 0
    return f"ray://127.0.0.1:{client_port}", start.pid, temp  # the head's daemons stay in the group `ray start` led


def _kill(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(group, signal.SIGKILL)


@pytest.fixture()
def ray_head():
    """A one-node Ray cluster of its own, so that the test can kill every process of its head node and no other
    cluster's; ready when a client has joined it once (what is tested is the head's death, not its start)."""
    said = []
    for _ in range(HEAD_STARTS):
        address, group, temp = _start_head()
        refusal = _accepts_a_client(address)
        if refusal is None:
            break
        said.append(refusal)
        _kill(group)
    else:
        pytest.fail(f"no Ray head started here accepted a client in {HEAD_STARTS} starts of {PROBE_S} s each; Ray said: "
                    f"{said}")
    yield address, lambda: _kill(group), temp
    _kill(group)


def _stored_steps(results: Path) -> int:
    for db in results.glob("*/results.sqlite"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                return conn.execute("select count(*) from step").fetchone()[0]
        except sqlite3.Error:
            return 0
    return 0


def _head_said(temp: Path) -> str:
    """The last lines of the head's client-server logs: why it refused a session, for a failure message."""
    lines = [f"{log.name}: {line}" for log in sorted(temp.glob("session_*/logs/ray_client_server*.err"))
             for line in log.read_text(errors="replace").splitlines()[-5:]]
    return "\n".join(lines[-20:])


# Each step's warm-up and window: the second step's 3.5 s hold the signal or the head's death, sent a second after
# its jobs connected, with room for a slow poll
STEP_S = "3"


def _cluster_run_past_its_first_step(embedded_dsn: str, results: Path, address: str, head: Path,
                                     env: dict[str, str]) -> subprocess.Popen:
    """A two-step client-side run on the cluster, once its first step is stored. A join that Ray's client server
    refuses is tried anew (as a new run, up to JOIN_TRIES): what these tests check starts after the join, and
    capmark's own join already waits out a head's refusals for a while (driver/cluster.py)."""
    said = []
    for _ in range(JOIN_TRIES):
        run = _capmark("run", "srv-query1", "--mode", "client", "--jobs", "1,2", "--warmup", "0.5", "--duration",
                       STEP_S, "--dsn", embedded_dsn, "--results-dir", str(results), "--cluster", address, env=env)
        deadline = time.time() + 180
        while _stored_steps(results) < 1 and run.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if run.poll() is None and _stored_steps(results) == 1:
            return run
        out, err = run.communicate(timeout=60)
        said.append(err.strip())
        if "Could not join the Ray cluster" not in err:
            break
        for leftover in results.glob("*"):  # a run refused at its join stores nothing, but be sure
            shutil.rmtree(leftover)
    pytest.fail(f"the run did not get past its first step; capmark said {said}; the head's logs end with:\n"
                f"{_head_said(head)}")


def _into_the_second_step(dsn: str, run: subprocess.Popen) -> None:
    """Once both jobs of the second step have connected, one second more: inside its warm-up and window."""
    deadline = time.time() + 120
    while run.poll() is None and time.time() < deadline:
        with psycopg.connect(dsn, autocommit=True) as conn:
            jobs = conn.execute("select count(*) from pg_stat_activity where application_name like 'capmark job %'"
                                ).fetchone()[0]
        if jobs >= 2:
            break
        time.sleep(0.1)
    time.sleep(1.0)


def test_a_head_that_dies_mid_run_fails_the_run_in_one_sentence_and_ray_stays_off_the_console(embedded_dsn, tmp_path,
                                                                                             ray_head):
    address, kill_head, head = ray_head
    results, logs = tmp_path / "results", tmp_path / "logs"
    run = _cluster_run_past_its_first_step(embedded_dsn, results, address, head, {
        "CAPMARK_LOG_DIR": str(logs), "RAY_CLIENT_RECONNECT_GRACE_PERIOD": str(RAY_RECONNECT_GRACE_S)})
    _into_the_second_step(embedded_dsn, run)
    kill_head()
    out, err = run.communicate(timeout=180)
    assert run.returncode == 1, (out, err)
    # the console: capmark's own sentences only, however Ray's client ended (at start, during the run, at its death)
    text = " ".join(err.split())
    assert "unexpected" not in (out + err).lower() and "Traceback" not in out + err, (out, err)
    assert err.count("capmark:") == 1 and text.startswith("capmark: The run failed:"), err
    assert f"the Ray cluster at {address} stopped answering" in text, err
    ray_lines = [line for line in out.splitlines() if re.search(r"\bray\b", line, re.I)]
    assert all(line.startswith("Client-side jobs run on the Ray cluster at") for line in ray_lines), out
    # Ray's own account of it is in the log file the message names
    log = logs / "ray.log"
    assert str(log) in text, err
    assert "ray.util.client" in log.read_text(), log.read_text()
    # the completed step is kept, and the run says why it failed
    stored = load_run(next(results.iterdir()))
    assert stored.status == "failed" and address in stored.reason and "stopped answering" in stored.reason
    steps = stored.tests[0].steps
    assert [(s.jobs, s.status) for s in steps] == [(1, "ok")]


@pytest.mark.parametrize("address", ["ray://127.0.0.1:99999", "ray://127.0.0.1:0", "ray://127.0.0.1:abc",
                                     "127.0.0.1:70000", "ray://[::1]:65536", "ray://head:00000"])
def test_a_port_outside_1_to_65535_is_refused_as_such(address):
    with pytest.raises(CapmarkError, match=r"port .* is not a number from 1 to 65535"):
        RunSpec(workloads=["srv-query1"], mode="client", cluster=address).validate()


def test_a_wrong_port_exits_2_before_anything_is_contacted(tmp_path):
    run = _capmark("run", "srv-query1", "--mode", "client", "--dsn", "postgresql://nobody@127.0.0.1:1/none",
                   "--results-dir", str(tmp_path / "results"), "--cluster", "ray://127.0.0.1:99999",
                   env={"CAPMARK_LOG_DIR": str(tmp_path / "logs")})
    out, err = run.communicate(timeout=60)
    assert run.returncode == 2, (out, err)
    text = " ".join(err.split())
    assert text == ("capmark: The port '99999' in --cluster 'ray://127.0.0.1:99999' is not a number from 1 to 65535; "
                    "write e.g. ray://HEAD:10001."), err
    assert "refused" not in text and not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


def test_sigterm_on_a_cluster_run_interrupts_it_as_anywhere(embedded_dsn, tmp_path, ray_head):
    """Joining a cluster (ray.init) sets a SIGTERM handler of Ray's that exits at once: capmark's own must stay, so
    the run is marked interrupted and exits 130, as without a cluster."""
    address, _kill_head, head = ray_head
    results = tmp_path / "results"
    run = _cluster_run_past_its_first_step(embedded_dsn, results, address, head, {"CAPMARK_LOG_DIR": str(tmp_path / "logs")})
    _into_the_second_step(embedded_dsn, run)
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, (out, err)
    assert "Traceback" not in err and "unexpected" not in err.lower(), err
    stored = load_run(next(results.iterdir()))
    assert stored.status == "interrupted" and [s.jobs for s in stored.tests[0].steps] == [1], stored.status


THREADS_AFTER_JOIN = """
import sys, threading
from capmark.driver import cluster
cluster._ray_to_log_file("ray://127.0.0.1:10001")

def _run():  # as a thread of Ray's client is named when the head dies under it
    raise ConnectionError("the head is gone (Ray's thread)")

def capmark_bug():
    raise ValueError("capmark's own thread")

for target, name in ((_run, None), (capmark_bug, "capmark-overrun")):
    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join()
print("went on", flush=True)
"""


def test_an_error_that_ends_one_of_rays_threads_goes_to_its_log_and_capmarks_own_reaches_the_console(tmp_path):
    """When the head dies, Ray's client threads can end with an exception, which Python prints on the terminal as
    a traceback; once a cluster is joined it goes to Ray's log file. A capmark thread's error is still printed."""
    done = subprocess.run([sys.executable, "-c", THREADS_AFTER_JOIN], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CAPMARK_LOG_DIR": str(tmp_path)})
    assert done.returncode == 0 and done.stdout == "went on\n", done
    assert "the head is gone" not in done.stderr, done.stderr
    assert "ValueError: capmark's own thread" in done.stderr, done.stderr
    log = (tmp_path / "ray.log").read_text()
    assert "ConnectionError: the head is gone (Ray's thread)" in log and "Traceback" in log, log
    assert "capmark's own thread" not in log, log
