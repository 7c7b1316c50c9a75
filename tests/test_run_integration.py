"""The real pipeline on a real PostgreSQL: measure, store, re-render; assertions on measured values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from capmark import api
from capmark.collect.pgstats import total
from capmark.config import RunSpec
from capmark.measure import kpm

pytestmark = pytest.mark.db
SHORT = {"warmup_s": 1.0, "duration_s": 2.0}


@pytest.fixture(scope="module")
def server_run(target_dsn: str, tmp_path_factory: pytest.TempPathFactory):
    results = tmp_path_factory.mktemp("results")
    spec = RunSpec(workloads=["srv-query1", "tp-light"], jobs=[1, 2], params={"update_pct": "100"},
                   dsn=target_dsn, results_dir=results, **SHORT)
    return api.run(spec)


def test_every_step_measured_something(server_run):
    assert server_run.status == "complete"
    assert [t.workload for t in server_run.tests] == ["srv-query1", "tp-light"]
    for test in server_run.tests:
        assert [s.jobs for s in test.steps] == [1, 2]
        for step in test.steps:
            values, _ = kpm.compute(step)
            assert step.status == "ok", step.notes
            assert values["throughput"] > 0
            assert step.latency.total == step.units > 0
            assert sum(step.series_units) == step.units  # the 1 s series accounts for every unit
            assert 0 < values["rt_p50_ms"] <= values["rt_p95_ms"] <= values["rt_p99_ms"] <= values["rt_max_ms"]


def test_cpu_percentages_are_sane(server_run):
    if not server_run.target["local"]:
        pytest.skip("the database host is remote: no OS counters")
    for test in server_run.tests:
        for step in test.steps:
            pct = step.os["cpu_pct"]
            states = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
            assert all(0.0 <= pct[s] <= 100.0 for s in states)
            assert sum(pct[s] for s in states) == pytest.approx(100.0, abs=0.5)
            assert step.process_cpu["client backends"]["user_s"] > 0


def test_commits_cover_the_committed_transactions(server_run):
    tp = server_run.test("tp-light")
    for step in tp.steps:
        commits = total(step.db_delta["database"], "xact_commit")
        assert commits >= step.units - sum(step.errors.values())


def test_updates_write_wal_and_lookups_do_not(server_run):
    q1 = server_run.test("srv-query1").steps[-1]
    tp = server_run.test("tp-light").steps[-1]
    wal_q1 = total(q1.db_delta["lsn"], "wal_lsn_bytes")
    wal_tp = total(tp.db_delta["lsn"], "wal_lsn_bytes")
    assert wal_tp / tp.units > 50  # every transaction updates a row: at least a WAL record each
    assert wal_q1 / q1.units < 0.5  # lookups: almost none
    assert tp.histograms["update"].total == tp.units  # update_pct=100: every transaction is an update


def test_report_rerenders_without_a_database(server_run, tmp_path):
    folder = Path(server_run.folder)
    (folder / "report.html").unlink()
    env = {**os.environ, "CAPMARK_DSN": "postgresql://nobody@127.0.0.1:1/none",
           "CAPMARK_DATA_DIR": str(tmp_path / "no-server")}
    out = subprocess.run([sys.executable, "-m", "capmark.cli", "report", str(folder), "--format", "json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    html = (folder / "report.html").read_text()
    assert "srv-query1" in html and "<svg" in html
    for external in ('src="http', "href=\"http", "<link", "<script src", "url(http"):
        assert external not in html  # self-contained: opens offline
    import json

    data = json.loads(out.stdout)
    assert data["schema"] == "capmark.run/1"
    assert data["tests"][0]["steps"][0]["kpm"]["throughput"] > 0
    assert not (tmp_path / "no-server").exists()


def test_client_mode_measures_round_trips(target_dsn, tmp_path):
    spec = RunSpec(workloads=["srv-query1"], jobs=[1], mode="client", dsn=target_dsn, results_dir=tmp_path,
                   **SHORT)
    run = api.run(spec)
    step = run.tests[0].steps[0]
    assert step.units > 0
    assert step.round_trips == step.units  # one prepared statement per query
    assert step.latency.max_s is not None  # the client knows the exact maximum


def test_password_never_stored(target_dsn, tmp_path):
    # trust authentication ignores the password, so the run succeeds and we can look for it everywhere
    dsn = make_conninfo(target_dsn, password="Sup3rSecretPw")
    run = api.run(RunSpec(workloads=["srv-query1"], jobs=[1], dsn=dsn, results_dir=tmp_path, warmup_s=0,
                          duration_s=1))
    for path in Path(run.folder).iterdir():
        assert b"Sup3rSecretPw" not in path.read_bytes(), path


def test_no_job_backend_left_behind(target_dsn):
    with psycopg.connect(target_dsn, autocommit=True) as conn:
        left = conn.execute("select count(*) from pg_stat_activity where application_name like 'capmark job%'"
                            ).fetchone()[0]
    assert left == 0


def test_open_loop_rate_is_met_and_lag_is_measured(embedded_dsn, tmp_path):
    spec = RunSpec(workloads=["stress-query"], jobs=[2], mode="client", rate=400.0, dsn=embedded_dsn,
                   results_dir=tmp_path, warmup_s=0.5, duration_s=3.0)
    test = api.run(spec).tests[0]
    step = test.steps[0]
    values, _ = kpm.compute(step, test.per_unit)
    assert values["throughput"] == pytest.approx(400, rel=0.2)  # Poisson arrivals over 3 s
    assert step.schedule_lag is not None and step.schedule_lag.total == step.units
    assert values["lag_p99_ms"] is not None and "lag_p99_ms" in test.kpms
    assert step.latency.percentile(50) >= step.schedule_lag.percentile(50)  # latency includes any lag


def test_think_time_bounds_a_closed_loop(embedded_dsn, tmp_path):
    spec = RunSpec(workloads=["stress-query"], jobs=[1], mode="client", think_s=0.01, dsn=embedded_dsn,
                   results_dir=tmp_path, warmup_s=0.5, duration_s=2.0)
    step = api.run(spec).tests[0].steps[0]
    per_s = step.units / step.elapsed_s
    # the interactive response time law: X = N / (R + Z), with N = 1 job and Z = 10 ms
    assert per_s == pytest.approx(1 / (step.latency.mean_s + 0.01), rel=0.25)
