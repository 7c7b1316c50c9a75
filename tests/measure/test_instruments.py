"""What a step measures, on real servers: other sessions and programs are seen and flag the step, capmark's own
sampling is kept out of the workload's figures, figures per commit are per commit, a server cancel fails the
step, a storage step without eviction says so, the stress table is restored, and other applications' SQL text
is not stored unless asked for."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import autovacuum
import psutil
import psycopg
import pytest
from liveruns import run_without_report

from capmark import api
from capmark.collect import hosts
from capmark.config import RunSpec
from capmark.driver.groups import StepFailed
from capmark.driver.quiesce import quiesce
from capmark.driver.step import StepContext, StepPlan, run_step
from capmark.engines.postgres import connect, describe
from capmark.engines.postgres.engine import POSTGRESQL
from capmark.measure import kpm, record
from capmark.measure.demands import per_commit, sampler_cost, step_demands
from capmark.measure.validity import interference_problems, problems, storage_problems
from capmark.results import StepResult
from capmark.workloads import datamodel, registry
from capmark.workloads.base import Workload, procedure_sql

pytestmark = pytest.mark.db

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
SIZE = datamodel.size_for(1)


@pytest.fixture(scope="module")
def ctx(embedded_dsn: str) -> Iterator[StepContext]:
    control = connect(embedded_dsn, application_name="capmark control")
    info = describe(control, embedded_dsn, embedded=True)
    datamodel.setup(control, SIZE, say=lambda m: None)
    used = [registry.WORKLOADS[n] for n in ("srv-query1", "tp-light", "sto-random")]
    datamodel.install_procedures(control, [sql for w in used for sql in (*w.helpers_sql, w.procedure_sql)])
    # as a run does before a cached workload: a lookup whose pages come from disk keeps no core busy (a CI host
    # whose cache earlier modules had filled read 2.8 % busy at one job, its I/O pressure at 25 %)
    datamodel.warm_cache(control, sorted({t for w in used for t in w.warm}), say=lambda m: None)
    host = hosts.choose("local", embedded_dsn, control, info.data_directory, connect)
    info.postmaster_pid = host.postmaster_pid
    yield StepContext(dsn=embedded_dsn, info=info, control=control, host=host)
    control.close()


def measure(ctx: StepContext, workload: str | Workload, *, mode: str = "server", duration: float = 2.0,
            collectors: bool = True, settings: dict[str, str] | None = None, think: float = 0.0,
            all_statements: bool = False) -> StepResult:
    w = registry.WORKLOADS[workload] if isinstance(workload, str) else workload
    plan = StepPlan(1, 1, 0.5, duration, mode, collectors, settings or {}, think, all_statements=all_statements)
    step = run_step(ctx, w, w.resolve_params({}), SIZE, plan)
    step.measures = record.build(step)
    return step


@contextmanager
def busy_session(dsn: str, application_name: str) -> Iterator[None]:
    """Another client working on the server: short sleeps back to back, so it is active nearly all the time
    without competing for the CPU."""
    stop = threading.Event()
    conn = psycopg.connect(dsn, autocommit=True, application_name=application_name)

    def work() -> None:
        while not stop.is_set():
            conn.execute("select pg_sleep(0.05)")

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        conn.close()


# --- other sessions on the server ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def clean_step(ctx: StepContext) -> StepResult:
    """One undisturbed srv-query1 step, read by the tests of what a step on a quiet server must not count."""
    return measure(ctx, "srv-query1")


def test_a_clean_step_sees_no_other_session(clean_step):
    step = clean_step
    sessions = step.interference["sessions"]
    assert sessions["samples"] >= 15  # 10 Hz over 2 s: the detector looked
    assert sessions["active_samples"] == 0 and sessions["capmark_samples"] == 0
    # other programs on this shared host may flag it; no session on the server may
    assert not [p for p in interference_problems(step) if "session" in p or "capmark run" in p]


@pytest.mark.parametrize("application,words", [
    ("reporting app", "other sessions worked on the server"),
    ("capmark job 1", "another capmark run worked on the same server"),
])
def test_another_active_session_invalidates_the_step(ctx, application, words):
    with busy_session(ctx.dsn, application):
        step = measure(ctx, "srv-query1")
    found = [p for p in problems(step) if words in p]
    assert found, problems(step)
    assert application in found[0]  # the evidence names who it was
    sessions = step.interference["sessions"]
    share = sessions["capmark_samples"] if application.startswith("capmark") else sessions["active_samples"]
    assert share > 0.8 * sessions["samples"]  # active nearly all the time, and seen so


# --- other programs on the host -------------------------------------------------------------------------

def test_a_busy_program_on_the_host_flags_the_step_and_is_named(ctx):
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        step = measure(ctx, "srv-query1")
    finally:
        spinner.kill()
        spinner.wait()
    top = {p["pid"]: p for p in step.interference["processes"]["top"]}
    assert spinner.pid in top, top
    # a spinning core beside a one-job step is far more than a quarter of host busy: the step is left out
    flagged = [p for p in interference_problems(step) if "other programs on the host" in p]
    assert flagged and f"pid {spinner.pid}" in flagged[0]
    # and the remainder no longer holds it: the spinner's CPU (at least half a core over the window, even on a
    # busy host) is measured as another program's, and what is left as OS overhead is less than it
    d, _ = step_demands(step)
    others_s, remainder_s = d["host_other_programs_cpu_s"] * step.units, d["cpu_os_overhead_s"] * step.units
    assert others_s > 0.5 * step.elapsed_s
    assert remainder_s < others_s


def test_the_instance_and_the_driver_are_not_counted_as_other_programs(ctx, clean_step):
    step = clean_step
    named = {p["pid"] for p in step.interference["processes"]["top"]}
    postmaster = psutil.Process(ctx.info.postmaster_pid)
    assert os.getpid() not in named
    assert not named & {postmaster.pid, *(c.pid for c in postmaster.children())}
    # the job's backend burnt about a core for 2 s: had it been counted, it would top the list
    assert step.process_cpu["client backends"]["user_s"] > 0.5
    d, comps = step_demands(step)
    assert "remainder" in comps["cpu_os_overhead_s"].label


# --- capmark's own sampling is not workload -------------------------------------------------------------

def test_commits_per_unit_exclude_the_sampler(ctx):
    """tp-light in client mode commits once per unit; the sampler's ~20 transactions and the snapshots' must
    not show in the commits (think time keeps the units few, so they would be several per cent). Autovacuum is
    paused: a worker that vacuums tp-light's tables in the window commits transactions of its own (CI once counted
    1.5 % more commits than units, the step noting autovacuum), which is not what this checks."""
    with autovacuum.paused(ctx.control):
        step = measure(ctx, "tp-light", mode="client", think=0.002)
    assert step.units > 200
    figures = step.measured.kpm
    assert figures["commits_per_s"] / figures["throughput"] == pytest.approx(1.0, rel=0.01)
    cost = sampler_cost(step)
    assert cost["transactions"] >= 20  # 10 Hz for 2 s: they were there to be taken out
    assert step.process_cpu["capmark sampler"]["processes"] == 1  # its backend has a role of its own


def test_commits_are_the_same_with_and_without_collectors(ctx):
    """srv-query1 commits only at the end of each 1 s slice: 1 per 1 s window, whatever capmark samples."""
    with autovacuum.paused(ctx.control):
        quiesce(ctx.control, POSTGRESQL, [], ctx.host)
        on = measure(ctx, "srv-query1", collectors=True, duration=1.0)
        off = measure(ctx, "srv-query1", collectors=False, duration=1.0)
    assert kpm.workload_commits(on) == kpm.workload_commits(off) == 1


# --- per commit, not per unit ---------------------------------------------------------------------------

TWO_COMMITS = Workload(
    name="test-two-commits", family="TEST", description="two inserts, each committed", unit="pair",
    throughput_label="pairs/s", txn_types=("pair",), procedure="slice_test_two_commits",
    procedure_sql=procedure_sql("slice_test_two_commits", "", """
      insert into capmark.test_two_commits values (1);
      commit;
      insert into capmark.test_two_commits values (2);
      commit;
      {rec}"""), writes=True)


def test_wal_figures_per_commit_divide_by_commits(ctx):
    ctx.control.execute("create table if not exists capmark.test_two_commits (v int)")
    datamodel.install_procedures(ctx.control, [TWO_COMMITS.procedure_sql])
    try:
        with autovacuum.paused(ctx.control):  # its workers' commits (the new table's inserts call them) count too
            step = measure(ctx, TWO_COMMITS, duration=1.0)  # hundreds of commits a second: the ratios hold in 1 s
    finally:
        ctx.control.execute("drop table capmark.test_two_commits")
        ctx.control.execute("drop procedure capmark.slice_test_two_commits")
    pc = per_commit(step)
    assert pc["commits_per_unit"] == pytest.approx(2.0, rel=0.01)
    # one job, synchronous commit: every commit waits for one WAL flush of its own
    assert 0.9 < pc["wal_fsyncs_per_commit"] < 1.1
    assert 0.9 < step.measured.kpm["wal_fsyncs_per_commit"] < 1.1


# --- a server cancel fails the step ---------------------------------------------------------------------

def test_statement_timeout_fails_the_step_with_the_reason(ctx):
    # a slice runs up to 1 s; the server cancels it after 300 ms
    with pytest.raises(StepFailed, match=r"the server cancelled a statement \(statement_timeout = 300ms\)"):
        measure(ctx, "srv-query1", settings={"statement_timeout": "300ms"})


SLEEPER = Workload(
    name="test-sleeper", family="TEST", description="a 50 ms statement from the driver", unit="sleep",
    throughput_label="sleeps/s", txn_types=("sleep",), procedure="none", procedure_sql="",
    client_statements={"sleep": "select pg_sleep(0.05)"},
    client_unit=lambda session, rng, params, size: (session.run("sleep"), 0)[1])


def test_statement_timeout_fails_a_client_side_step_too(ctx):
    # a 50 ms statement under a 20 ms timeout: the first one, in the warm-up, is cancelled
    with pytest.raises(StepFailed, match=r"^job 1 failed in the warm-up: the server cancelled a statement "
                                         r"\(statement_timeout = 20ms\)"):
        measure(ctx, SLEEPER, mode="client", settings={"statement_timeout": "20ms"})


def test_a_client_side_step_within_statement_timeout_is_ok(ctx):
    step = measure(ctx, SLEEPER, mode="client", duration=1.0, settings={"statement_timeout": "2s"})
    assert step.status == "ok" and step.units >= 10


# --- storage steps without eviction --------------------------------------------------------------------

def test_storage_step_evicts_on_postgresql_18(ctx):
    step = measure(ctx, "sto-random")
    assert step.instruments["eviction"]["evicted"] is True
    assert storage_problems(step) == [] and not any("not evicted" in n for n in step.notes)


def _local_pg_answers() -> bool:
    try:
        psycopg.connect(LOCAL_PG, connect_timeout=3).close()
        return True
    except psycopg.Error:
        return False


@pytest.mark.skipif(not _local_pg_answers(), reason="no PostgreSQL at 127.0.0.1:5432")
def test_storage_step_without_eviction_is_noted_and_invalid(tmp_path):
    """PostgreSQL 15 has no pg_buffercache_evict_relation: the scale-1 block table (~200 MB) is less than four
    times the default 128 MB of shared buffers, so most reads are served by them."""
    run = run_without_report(RunSpec(workloads=["sto-random"], jobs=[1], warmup_s=1, duration_s=1, dsn=LOCAL_PG,
                                     results_dir=tmp_path))
    step = run.tests[0].steps[0]
    note = [n for n in step.notes if n.startswith("Shared buffers were not evicted")]
    assert note and "PostgreSQL 18" in note[0], step.notes
    assert step.instruments["eviction"]["evicted"] is False
    assert any("measures shared buffers, not storage" in p for p in problems(step))


# --- the stress table --------------------------------------------------------------------------------

def _stress_rows(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("select count(*), max(id) from capmark.stress_item").fetchone()


def test_the_stress_table_is_restored_before_each_stress_test(embedded_dsn, tmp_path):
    run_without_report(RunSpec(workloads=["stress-delete", "stress-insert"], jobs=[1], warmup_s=0, duration_s=1,
                               dsn=embedded_dsn, results_dir=tmp_path))
    rows, top = _stress_rows(embedded_dsn)
    assert top > SIZE.items  # the inserts went beyond the model's ids: the table drifted
    run_without_report(RunSpec(workloads=["stress-query"], jobs=[1], warmup_s=0, duration_s=1, dsn=embedded_dsn,
                               results_dir=tmp_path))
    assert _stress_rows(embedded_dsn) == (SIZE.items, SIZE.items)


def test_stress_delete_starts_from_the_full_table(embedded_dsn, tmp_path):
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("delete from capmark.stress_item where id <= %s", (SIZE.items // 2,))
    run = run_without_report(RunSpec(workloads=["stress-delete"], jobs=[1], warmup_s=0, duration_s=1, dsn=embedded_dsn,
                                     results_dir=tmp_path))
    step = run.tests[0].steps[0]
    deleted = sum(r.get("n_tup_del") or 0 for r in step.db_delta["tables"] if r["relname"] == "stress_item")
    # restored, a delete finds its row unless an earlier delete of the step drew the same id: n uniform draws from
    # N ids hit N (1 - (1 - 1/N)^n) distinct ones (9,567 of 10,056 at N = 100,000); with half the ids gone, half
    # of that would be found
    n, ids = step.units, SIZE.items
    distinct = ids * (1 - (1 - 1 / ids) ** n)
    assert deleted >= 0.97 * distinct, (deleted, distinct, n)


# --- other applications' SQL --------------------------------------------------------------------------

OTHER_QUERY = "select count(*) from public.cm_other_app_table"


@pytest.fixture
def other_application_sql(ctx) -> Iterator[int]:
    """Another application's statements in the same database: one by another role, one by capmark's."""
    c = ctx.control
    c.execute("create table if not exists public.cm_other_app_table (secret text)")
    c.execute("drop role if exists cm_other_app")
    c.execute("create role cm_other_app login")
    c.execute("grant select on public.cm_other_app_table to cm_other_app")
    dsn = psycopg.conninfo.make_conninfo(ctx.dsn, user="cm_other_app")
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute(OTHER_QUERY)
    c.execute(OTHER_QUERY + " where secret is not null")  # capmark's role, but not capmark's work
    yield c.execute("select 'cm_other_app'::regrole::oid").fetchone()[0]
    c.execute("drop table public.cm_other_app_table")
    c.execute("drop role cm_other_app")


def _stored_queries(step: StepResult) -> list[str]:
    return [r.get("query") or "" for r in step.db_after.get("statements", [])]


def test_other_applications_sql_is_not_stored_by_default(ctx, other_application_sql):
    step = measure(ctx, "srv-query1", duration=1.0)
    queries = _stored_queries(step)
    assert any("capmark.slice_srv_query1" in q for q in queries)  # capmark's own statements are kept
    assert not any("cm_other_app_table" in q for q in queries), queries
    assert "only statements run by capmark's role" in step.instruments["statements"]


def test_all_statements_stores_other_applications_sql(ctx, other_application_sql):
    step = measure(ctx, "srv-query1", duration=1.0, all_statements=True)
    stored = [r for r in step.db_after.get("statements", []) if "cm_other_app_table" in (r.get("query") or "")]
    own = ctx.control.execute("select current_user::regrole::oid").fetchone()[0]
    assert {own, other_application_sql} <= {r["userid"] for r in stored}  # both roles' statements
    assert "--all-statements" in step.instruments["statements"]


def test_run_notes_say_which_statements_rule_applied(embedded_dsn, tmp_path):
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[1], warmup_s=0, duration_s=1, dsn=embedded_dsn,
                                     results_dir=tmp_path))
    assert any("only statements run by capmark's role" in n for n in run.setup_notes)


def test_cli_accepts_all_statements(embedded_dsn, tmp_path):
    out = subprocess.run([sys.executable, "-m", "capmark.cli", "run", "srv-query1", "--jobs", "1", "--duration", "1s",
                          "--warmup", "0s", "--dsn", embedded_dsn, "--results-dir", str(tmp_path), "--all-statements"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert out.returncode == 0, out.stderr
    run = api.open_run(None, tmp_path)
    assert run.spec["all_statements"] is True
    assert any("--all-statements" in n for n in run.setup_notes)


def test_autovacuum_in_the_window_is_noted():
    from capmark.driver.step import autovacuum_note

    assert autovacuum_note([{"t": 1, "checkpoint": 0.0, "autovacuum": 0.0}]) == ""
    note = autovacuum_note([{"t": 1, "checkpoint": 0.0, "autovacuum": 0.0}, {"t": 2, "checkpoint": 0.0, "autovacuum": 0.5},
                            {"t": 3, "checkpoint": 0.0, "autovacuum": 1.0}, {"t": 4, "checkpoint": 0.0, "autovacuum": 0.0}])
    assert note.startswith("autovacuum worked during 38% of the window's samples (in seconds 2, 3)")
