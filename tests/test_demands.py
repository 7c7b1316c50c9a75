"""Service demands on real runs of the embedded PostgreSQL (issue 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capmark import api
from capmark.config import RunSpec
from capmark.measure.demands import demands_of_test, per_commit, step_demands
from capmark.measure.reconcile import reconcile
from capmark.store import load_run

pytestmark = pytest.mark.db


@pytest.fixture(scope="module")
def runs(embedded_dsn, tmp_path_factory):
    folder = tmp_path_factory.mktemp("demands")
    cpu = api.run(RunSpec(workloads=["srv-query1"], jobs=[2], warmup_s=0.5, duration_s=2.0, dsn=embedded_dsn,
                          results_dir=folder))
    wal = api.run(RunSpec(workloads=["wal-lat1"], jobs=[1, 8], warmup_s=0.5, duration_s=2.0, dsn=embedded_dsn,
                          results_dir=folder))
    dbwr = api.run(RunSpec(workloads=["dbwr-thr"], jobs=[1], warmup_s=0.5, duration_s=2.5, dsn=embedded_dsn,
                           results_dir=folder))
    return {"cpu": cpu, "wal": wal, "dbwr": dbwr}


def test_cpu_closure_on_a_cpu_bound_step(runs):
    step = runs["cpu"].tests[0].steps[0]
    d, _ = step_demands(step)
    cpu = sum(v for k, v in d.items() if k.startswith("cpu_") and k != "cpu_host_busy_s" and v is not None)
    assert cpu == pytest.approx(d["cpu_host_busy_s"], rel=0.01)
    assert d["cpu_os_overhead_s"] >= -0.01 * d["cpu_host_busy_s"]  # processes never exceed what the host did
    assert d["cpu_client_backends_s"] > 0.8 * d["cpu_host_busy_s"]  # srv-query1 is backend CPU


def test_group_commit_shows_in_wal_fsyncs_per_commit(runs):
    one, eight = runs["wal"].tests[0].steps
    assert per_commit(one)["wal_fsyncs_per_commit"] == pytest.approx(1.0, abs=0.05)
    assert per_commit(eight)["wal_fsyncs_per_commit"] < 0.8
    doc = demands_of_test(runs["wal"].tests[0])
    assert any("WAL fsyncs falls" in note for note in doc["varies"])


def test_forced_checkpoints_are_attributed_to_the_checkpointer(runs):
    d, _ = step_demands(runs["dbwr"].tests[0].steps[0])
    assert d["db_writes_checkpointer_blocks"] > 0
    assert d["db_writes_checkpointer_blocks"] > d["db_writes_backends_blocks"]


def test_cached_reads_reach_no_device(runs):
    step = runs["cpu"].tests[0].steps[0]
    d, _ = step_demands(step)
    device_reads = sum(v for k, v in d.items() if k.startswith("disk_") and k.endswith("_read_bytes"))
    assert device_reads < 1.0  # bytes per query: every read hit shared buffers
    assert d["db_reads_blocks"] < 0.001
    pairs = {p["name"]: p for p in reconcile(step)}
    assert pairs["process CPU vs host busy CPU"]["agree"]


def test_demands_from_storage_equal_demands_computed_live(runs):
    for run in runs.values():
        stored = load_run(Path(run.folder))
        for live_test, stored_test in zip(run.tests, stored.tests, strict=True):
            assert json.dumps(demands_of_test(live_test), sort_keys=True, default=str) == \
                json.dumps(demands_of_test(stored_test), sort_keys=True, default=str)


def test_demands_command_prints_json(runs):
    doc = api.demands(f"{runs['wal'].folder}:wal-lat1")
    assert doc["schema"] == "capmark.demands/1"
    assert [t["workload"] for t in doc["tests"]] == ["wal-lat1"]
    keys = {c["key"] for c in doc["tests"][0]["components"]}
    assert {"cpu_client_backends_s", "cpu_os_overhead_s", "wal_bytes", "wal_fsyncs"} <= keys


def test_nested_statements_show_per_statement_costs(embedded_dsn, tmp_path):
    run = api.run(RunSpec(workloads=["tp-light"], jobs=[1], warmup_s=0.5, duration_s=1.5, dsn=embedded_dsn,
                          params={"update_pct": "100"}, nested_statements=True, results_dir=tmp_path))
    statements = demands_of_test(run.tests[0])["statements"][-1]
    update = [s for s in statements if s["query"].startswith("update capmark.account")]
    assert update and update[0]["calls"] >= run.tests[0].steps[0].units * 0.99
    assert update[0]["wal_bytes_per_call"] > 0
