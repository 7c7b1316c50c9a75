"""Where a process's jobs run their lookups together (driver/crew.py): only where the client has cores the database
server does not run on, checked against a real process named as a server, on cores set with sched_setaffinity; and
a crew never keeps a job waiting for a crewmate that has left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from capmark.driver.crew import CrewMember, LookupCrew

CORES = sorted(os.sched_getaffinity(0))
two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to give the server and the client their own")

CHECK = """\
import json, os, sys
from capmark.driver.crew import shares_cores
from capmark.engines.base import TargetInfo
pid, local, cores = int(sys.argv[1]), sys.argv[2] == "local", {int(c) for c in sys.argv[3].split(",")}
os.sched_setaffinity(0, cores)
info = TargetInfo(engine="postgresql", version="", version_num=0, dsn_redacted="", embedded=True, local=local,
                  postmaster_pid=pid)
print(json.dumps(shares_cores(info)))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A process the kernel names postgres (a copy of sleep under that name), on the first core only."""
    program = tmp_path / "postgres"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    proc = subprocess.Popen([str(program), "60"])
    os.sched_setaffinity(proc.pid, {CORES[0]})
    yield proc
    proc.kill()
    proc.wait()


def shares(pid: int, cores: list[int], local: bool = True) -> bool:
    out = subprocess.run([sys.executable, "-c", CHECK, str(pid), "local" if local else "remote",
                          ",".join(map(str, cores))], capture_output=True, text=True, check=True, timeout=60)
    return bool(json.loads(out.stdout))


@two_cores
def test_a_client_on_the_servers_core_shares_it(server):
    assert shares(server.pid, [CORES[0]]) is True
    assert shares(server.pid, CORES) is True  # one core in common is enough to wait behind the server


@two_cores
def test_a_client_on_other_cores_has_cores_of_its_own(server):
    assert shares(server.pid, CORES[1:]) is False


@two_cores
def test_a_server_on_another_host_shares_no_core(server):
    """Not local: whatever runs under that pid here is not the server."""
    assert shares(server.pid, [CORES[0]], local=False) is False


@two_cores
def test_a_pid_that_is_not_a_server_here_shares_no_core(tmp_path):
    """On a cluster's node the server's pid is another program's, or nobody's."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        os.sched_setaffinity(other.pid, {CORES[0]})
        assert shares(other.pid, [CORES[0]]) is False
    finally:
        other.kill()
        other.wait()
    assert shares(other.pid, [CORES[0]]) is False  # gone


def test_a_crewmate_that_leaves_releases_those_waiting_for_it():
    """A job that ends before it reaches a phase (a failure, a broken step barrier) aborts its crew: a crewmate
    waiting for it in that phase gets the broken barrier, which ends its job quietly, instead of waiting for ever."""
    crew = LookupCrew(2, key_max=10, stop=threading.Event())
    ended: list[BaseException] = []

    def waiting() -> None:
        try:
            crew.take_part(cast(CrewMember, object()), end=0.0)  # never run: its crewmate does not come
        except BaseException as err:  # noqa: BLE001 - what ended it is the check
            ended.append(err)

    thread = threading.Thread(target=waiting, daemon=True)
    thread.start()
    time.sleep(0.1)
    crew.abort()
    thread.join(5)
    assert not thread.is_alive() and len(ended) == 1 and isinstance(ended[0], threading.BrokenBarrierError)
