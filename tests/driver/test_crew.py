"""Where a process's jobs run their lookups together (driver/crew.py): only where the client has cores the database
server does not run on. Checked against a real process named as a server, on cores set with sched_setaffinity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to give the server and the client their own")

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


def test_a_client_on_the_servers_core_shares_it(server):
    assert shares(server.pid, [CORES[0]]) is True
    assert shares(server.pid, CORES) is True  # one core in common is enough to wait behind the server


def test_a_client_on_other_cores_has_cores_of_its_own(server):
    assert shares(server.pid, CORES[1:]) is False


def test_a_server_on_another_host_shares_no_core(server):
    """Not local: whatever runs under that pid here is not the server."""
    assert shares(server.pid, [CORES[0]], local=False) is False


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
