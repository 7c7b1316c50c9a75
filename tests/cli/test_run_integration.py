"""The real pipeline on a real PostgreSQL: measure, store, re-render; assertions on measured values."""

from __future__ import annotations

import math
import os
from pathlib import Path

import psycopg
import pytest
from commandline import completed
from liveruns import run_without_report
from psycopg.conninfo import make_conninfo
from scipy.stats import poisson

from capmark import api
from capmark.collect.procfs import CPU_FIELDS
from capmark.config import RunSpec
from capmark.engines.postgres.stats import total
from capmark.measure import kpm

pytestmark = pytest.mark.db
SHORT = {"warmup_s": 0.5, "duration_s": 2.0}
# /proc/stat's aggregate line: eight state counters in clock ticks, each delta off by less than one tick
STAT_RESOLUTION_S = len(CPU_FIELDS) / os.sysconf("SC_CLK_TCK")
# The OS snapshots bracket the measured window: before it, the sampler's connection is opened; after it, the
# sampler is stopped and the jobs' statistics flushed. Measured here: 10 to 80 ms (2 cores, 6 test runs
# sharing them); a window that took in the warm-up (>= 1 s) or the closing snapshot's sleep would not pass.
OS_WINDOW_SLACK_S = 0.3
# Two-sided probability that a correct Poisson generator falls outside the interval tested: one in a million.
POISSON_TAIL = 1e-6


def server_counted_units(workload: str, step) -> float:
    """Units as the server counted them, from per-table statistics only the jobs move: each srv-query1 unit is
    one index scan of item; each tp-light unit at update_pct=100 updates one account row."""
    tables = {r["relname"]: r for r in step.db_delta["tables"]}
    if workload == "srv-query1":
        return tables["item"]["idx_scan"]
    return tables["account"]["n_tup_upd"] + step.errors["update"]


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
            assert step.units > 0
            assert step.units == server_counted_units(test.workload, step)  # the driver's count is the server's
            assert len(step.series_units) == round(SHORT["duration_s"])  # one entry per second of the window
            assert all(n > 0 for n in step.series_units), step.series_units  # its time base is the window's
            assert sum(step.series_units) == server_counted_units(test.workload, step)
            assert 0 < values["rt_p50_ms"] <= values["rt_p95_ms"] <= values["rt_p99_ms"] <= values["rt_max_ms"]


def test_cpu_counters_cover_the_measured_window(server_run):
    """The wall clock is the independent instrument: every core spends every tick in some state, so the
    states' seconds over the OS window are cores x that window, which brackets the measured window."""
    if not server_run.target["local"]:
        pytest.skip("the database host is remote: no OS counters")
    for test in server_run.tests:
        for step in test.steps:
            cores = step.os["cores"]
            window = sum(step.os["cpu_seconds"].values()) / cores
            assert window <= step.elapsed_s + OS_WINDOW_SLACK_S, window
            if step.os["cpu_seconds"]["iowait"] <= STAT_RESOLUTION_S:
                # A tickless CPU's idle and iowait time is computed rather than sampled, and the kernel documents
                # iowait as unreliable: with IO waits in the window the states fall short of the wall clock
                # (measured here: 0.15-0.33 s of 4 CPU-seconds on tp-light). Without them they must cover it.
                assert step.elapsed_s - STAT_RESOLUTION_S <= window, window
            per_core_busy = sum(c["busy"] for c in step.os["per_cpu_pct"]) / cores
            assert per_core_busy == pytest.approx(step.os["cpu_pct"]["busy"], abs=100 * STAT_RESOLUTION_S / window)
            backends = step.process_cpu["client backends"]
            cpu_bound = test.workload == "srv-query1"  # its jobs never wait; tp-light's wait for WAL flushes
            assert backends["user_s"] + backends["sys_s"] > (0.2 * step.elapsed_s if cpu_bound else 0)


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
    env = {"CAPMARK_DSN": "postgresql://nobody@127.0.0.1:1/none", "CAPMARK_DATA_DIR": str(tmp_path / "no-server")}
    out = completed("report", str(folder), "--format", "json", env=env)
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
    run = run_without_report(spec)
    step = run.tests[0].steps[0]
    assert step.units > 0
    assert step.units == server_counted_units("srv-query1", step)
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


def _poisson_range(rate: float, duration_s: float) -> tuple[int, int]:
    """Counts a Poisson process of this rate gives over the window with probability 1 - POISSON_TAIL. A job's
    arrivals start when it is released into the window, a few ms after the window opens: allow 50 ms."""
    low = poisson.ppf(POISSON_TAIL / 2, rate * (duration_s - 0.05))
    high = poisson.ppf(1 - POISSON_TAIL / 2, rate * duration_s)
    return int(low), int(high)


def _statement(step, prefix: str) -> dict:
    rows = [r for r in step.db_delta.get("statements", []) if (r.get("query") or "").startswith(prefix)]
    assert len(rows) == 1, rows
    return rows[0]


# A workload of each open-loop path: stress-query's unit runs in Python, srv-query1's lookup in the engine's
# compiled loop, which waits for each arrival in C
OPEN_LOOP_STATEMENTS = {"stress-query": "select id, val, payload from capmark.stress_item",
                        "srv-query1": "select id, grp, qty, price, name from capmark.item where id"}


@pytest.mark.parametrize("workload", OPEN_LOOP_STATEMENTS)
def test_open_loop_rate_is_met_and_lag_is_measured(embedded_dsn, tmp_path, workload):
    """3,000 Poisson arrivals (sd 55): the exact Poisson interval at one in a million is about +-9 %."""
    rate, duration = 1000.0, 3.0
    spec = RunSpec(workloads=[workload], jobs=[2], mode="client", rate=rate, dsn=embedded_dsn,
                   results_dir=tmp_path, warmup_s=0.5, duration_s=duration)
    run = run_without_report(spec)
    test = run.tests[0]
    step = test.steps[0]
    if workload == "srv-query1":
        assert run.environment["capmark"]["lookups"] == "compiled loop"
    values, _ = kpm.compute(step, test.per_unit)
    low, high = _poisson_range(rate, duration)
    assert step.schedule_lag is not None
    arrivals = step.schedule_lag.total  # every arrival due in the window: served, failed or left in the backlog
    assert low <= arrivals <= high, (low, arrivals, high)
    assert low <= step.units <= arrivals  # the generator served them
    calls = _statement(step, OPEN_LOOP_STATEMENTS[workload])
    assert calls["calls"] == step.units  # the server ran one query per unit
    assert values["lag_p99_ms"] is not None and "lag_p99_ms" in test.kpms
    # a unit's latency counts from its intended start: its lag plus at least the server's execution of it
    server_exec_s = calls["total_exec_time"] / 1000 / calls["calls"]
    assert step.latency.mean_s - step.schedule_lag.mean_s >= server_exec_s


# Time per unit a job spends outside the unit and its think time (waking from the think, the loop): measured
# 0.16 to 0.93 ms per cycle here with 1 to 8 jobs while other test runs kept the 2 cores busy.
DRIVER_OVERHEAD_S = 1e-3


def test_think_time_bounds_a_closed_loop(embedded_dsn, tmp_path):
    """The interactive response time law N = X (R + Z + overhead). The think times are exponential with mean Z,
    so their mean over n units has sd Z / sqrt(n): 8 jobs for 3 s give ~2,000 units, an sd of ~2 % of the
    cycle, where one job for 2 s (~200 units) would only allow +-28 % at 4 sd."""
    jobs, think = 8, 0.01
    spec = RunSpec(workloads=["stress-query"], jobs=[jobs], mode="client", think_s=think, dsn=embedded_dsn,
                   results_dir=tmp_path, warmup_s=0.5, duration_s=3.0)
    step = run_without_report(spec).tests[0].steps[0]
    cycle = jobs * step.elapsed_s / step.units  # R + Z + overhead, as the step lived it
    law = step.latency.mean_s + think
    noise = 4 * think / math.sqrt(step.units)
    assert law - noise <= cycle <= law + noise + DRIVER_OVERHEAD_S, (cycle, law, noise)

