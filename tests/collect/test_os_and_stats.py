import os
import time

import psutil
import pytest

from capmark.collect import os as oscollect
from capmark.collect import procfs
from capmark.engines.postgres.stats import delta, total

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")  # /proc/stat counts in ticks: each delta is off by under one tick


def _stat() -> procfs.ProcStat:
    with open("/proc/stat") as fh:
        return procfs.parse_stat(fh.read())


def _burn_cpu(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_cpu_states_account_for_every_core_over_the_wall_clock():
    """Every core spends every tick in some state, so the states' seconds add up to cores x wall time: a field
    missed or misparsed, a wrong tick size, or per-core lines read as the total would not. The host was busy
    at least for the CPU this process burned meanwhile (its own counter, /proc/self/stat)."""
    wall0, own0 = time.monotonic(), psutil.Process().cpu_times()
    a = _stat()
    _burn_cpu(0.3)
    b = _stat()
    wall1, own1 = time.monotonic(), psutil.Process().cpu_times()
    cores = len(b.per_cpu)
    assert cores == os.cpu_count()
    seconds = oscollect.cpu_seconds(a.cpu, b.cpu)
    resolution = len(procfs.CPU_FIELDS) * TICK_S
    assert sum(seconds.values()) == pytest.approx(cores * (wall1 - wall0), abs=resolution + 0.01 * cores)
    busy = sum(seconds.values()) - seconds["idle"] - seconds["iowait"]
    own = own1.user + own1.system - own0.user - own0.system
    assert busy >= own - 2 * TICK_S >= 0.25
    pct = oscollect.cpu_percentages(a.cpu, b.cpu)
    per_core = [oscollect.cpu_percentages(x, y)["busy"] for x, y in zip(a.per_cpu, b.per_cpu, strict=True)]
    assert sum(per_core) / cores == pytest.approx(pct["busy"], abs=100 * resolution / (wall1 - wall0))


@pytest.mark.parametrize("title,role", [
    (["postgres: checkpointer "], "checkpointer"),
    (["postgres: 15/main: walwriter "], "walwriter"),
    (["postgres: background writer"], "background writer"),
    (["postgres: autovacuum worker"], "autovacuum"),
    (["postgres: io worker 2"], "io workers"),
    (["postgres: logical replication launcher"], "other"),
    (["postgres: postgres postgres [local] CALL"], "client backends"),
    (["postgres: 15/main: app db 127.0.0.1(5000) idle"], "client backends"),
])
def test_roles(title, role):
    assert oscollect.role_of(title, False) == role


def test_exited_processes_are_attributed_from_reaped_time():
    before = oscollect.ProcessSample({1: ("client backends", 1.0, 0.5, 0, 0), 2: ("checkpointer", 2.0, 1.0, 0, 0)},
                                     reaped_user_s=10.0, reaped_sys_s=5.0)
    after = oscollect.ProcessSample({2: ("checkpointer", 2.5, 1.0, 0, 0)}, reaped_user_s=11.5, reaped_sys_s=5.7)
    roles = oscollect.cpu_by_role(before, after)
    assert roles["checkpointer"]["user_s"] == pytest.approx(0.5)
    # pid 1 ended with 1.5 s user / 0.7 s sys in total; 1.0 / 0.5 were used before the interval
    assert roles["exited processes"]["user_s"] == pytest.approx(0.5)
    assert roles["exited processes"]["sys_s"] == pytest.approx(0.2)


def test_delta_matches_rows_by_key():
    before = {"io": [{"backend_type": "client backend", "object": "relation", "context": "normal", "reads": 5}]}
    after = {"io": [{"backend_type": "client backend", "object": "relation", "context": "normal", "reads": 9},
                    {"backend_type": "checkpointer", "object": "relation", "context": "normal", "reads": 2}]}
    d = delta(before, after)
    assert total(d["io"], "reads", backend_type="client backend") == 4
    assert total(d["io"], "reads") == 6
    assert total(d["io"], "nothing") is None
