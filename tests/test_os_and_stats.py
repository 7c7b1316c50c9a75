import pytest

from capmark.collect import os as oscollect
from capmark.collect.pgstats import delta, total


def test_cpu_percentages_sum_to_100():
    a = oscollect.read_proc_stat()
    sum(range(2_000_000))
    b = oscollect.read_proc_stat()
    pct = oscollect.cpu_percentages(a.cpu, b.cpu)
    states = sum(pct[k] for k in oscollect.CPU_FIELDS)
    assert states == pytest.approx(100.0)
    assert 0 <= pct["busy"] <= 100


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
