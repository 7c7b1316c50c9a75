"""A server on another host: its OS counters read through the database connection must agree with this
machine's /proc where both can see the same host, and a role that may not read them gets no host figures
and the reason, never figures of the wrong machine.

The machine's PostgreSQL 15 on 127.0.0.1 stands in for the remote server: reached over TCP, named in the DSN
by a host name that is not this machine's (libpq's hostaddr connects to 127.0.0.1), so capmark treats it as
remote. Both sources then read the same kernel, at the same instants, in the same step.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psutil
import psycopg
import pytest
from liveruns import run_without_report
from psycopg.conninfo import make_conninfo

from capmark import api
from capmark.collect import hosts
from capmark.collect import os as oscollect
from capmark.config import RunSpec
from capmark.driver import step as stepmod
from capmark.driver.step import StepContext, StepPlan, run_step
from capmark.engines import registry as engines
from capmark.engines.postgres import connect, describe
from capmark.errors import CapmarkError
from capmark.measure import record
from capmark.measure.demands import step_demands
from capmark.plan.calibrate import calibrate
from capmark.plan.dbmodel import solve
from capmark.results import StepResult, TestResult
from capmark.workloads import datamodel, registry

pytestmark = pytest.mark.db

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
# The same server under a name that is not this machine's: capmark must not look at its own /proc for it.
REMOTE_LOOKING = "host=db.remote.example hostaddr=127.0.0.1 port=5432 user=postgres dbname=postgres"
SIZE = datamodel.size_for(1)
# The two sources read one after the other, a few milliseconds apart, over a 3 s window: busy shares may differ
# by the CPU of those milliseconds, device bytes by the writes in them (a commit-bound step writes ~20 MB/s).
BUSY_POINTS = 2.0
# A srv-query1 job keeps one core busy (100 / cores % of the host); a CI host whose neighbours took time from it
# read 31 % of 50 % (psutil agreeing). An idle host reads a few %: at 0.4 of one job's share the figure is real.
ONE_JOB_BUSY_SHARE = 0.4
SHARE = 0.05


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


needs_pg15 = pytest.mark.skipif(not _answers(LOCAL_PG), reason="the machine's PostgreSQL on 127.0.0.1:5432 is "
                                "not running")


class Tee:
    """The SQL source as the step uses it, with this machine's /proc read right after it by the main thread:
    two real readings of one kernel, to compare. Everything the step gets comes from the SQL source."""

    def __init__(self, primary: hosts.ProcHost, shadow: hosts.ProcHost) -> None:
        self.primary, self.shadow = primary, shadow
        self.shadow_readings: list[dict] = []

    def __getattr__(self, name: str):
        return getattr(self.primary, name)

    def counters(self, devices: list[str]):
        out = self.primary.counters(devices)
        if threading.current_thread() is threading.main_thread():
            stat, disks, mem, pressure = self.shadow.counters(devices)
            self.shadow_readings.append({"stat": stat, "disks": disks, "mem": mem, "pressure": pressure,
                                         "psutil": psutil.cpu_times()})
        return out

    def instance(self):
        out = self.primary.instance()
        if threading.current_thread() is threading.main_thread() and self.shadow_readings:
            self.shadow_readings[-1]["procs"] = self.shadow.instance()
        return out


@pytest.fixture(scope="module")
def remote_ctx() -> Iterator[tuple[StepContext, Tee]]:
    if not _answers(LOCAL_PG):
        pytest.skip("the machine's PostgreSQL on 127.0.0.1:5432 is not running")
    control = connect(REMOTE_LOOKING, application_name="capmark control")
    info = describe(control, REMOTE_LOOKING, embedded=False)
    datamodel.setup(control, SIZE, say=lambda m: None)
    used = [registry.WORKLOADS[n] for n in ("srv-query1", "tp-light")]
    datamodel.install_procedures(control, [sql for w in used for sql in (*w.helpers_sql, w.procedure_sql)])
    # as a run does before a cached workload: a lookup whose pages come from disk keeps no core busy (a CI host
    # whose cache earlier modules had filled read 2.8 % busy at one job, its I/O pressure at 25 %)
    datamodel.warm_cache(control, sorted({t for w in used for t in w.warm}), say=lambda m: None)
    source = hosts.choose("auto", REMOTE_LOOKING, control, info.data_directory, connect)
    assert source.name == "sql"  # not local: the DSN names another host
    local = hosts.local_source(source.postmaster_pid)
    tee = Tee(source, local)
    devices = [d for d in [source.data_device(info.data_directory)[0]] if d]
    assert devices == [d for d in [local.data_device(info.data_directory)[0]] if d]
    yield StepContext(dsn=REMOTE_LOOKING, info=info, control=control, host=tee, devices=devices), tee  # type: ignore[arg-type]
    source.close()
    control.close()


def _measure(ctx: StepContext, tee: Tee, workload: str, jobs: int
             ) -> tuple[StepResult, StepResult, list[dict[str, Any]]]:
    """One real step through the SQL source, the same step as this machine's /proc saw it, and the readings (no
    warm-up: the two sources read the same instants, whatever the step does in its first second)."""
    tee.shadow_readings.clear()
    w = registry.WORKLOADS[workload]
    step = run_step(ctx, w, w.resolve_params({}), SIZE, StepPlan(1, jobs, 0.0, 3.0, "server"))
    before, after = tee.shadow_readings[0], tee.shadow_readings[-1]
    local = StepResult(**{**step.__dict__})
    local.os = stepmod._os_summary(*(stepmod._OsReading(r["stat"], r["disks"], r["mem"], r["pressure"], r.get("procs"))
                                     for r in (before, after)), step.elapsed_s, tee.shadow)
    for pid in tee.primary.own_pids():
        oscollect.relabel(after["procs"], pid, oscollect.SAMPLER_ROLE)
    local.process_cpu = oscollect.cpu_by_role(before["procs"], after["procs"])
    for s in (step, local):
        s.measures = record.build(s)
    return step, local, list(tee.shadow_readings)


@pytest.fixture(scope="module")
def cpu_steps(remote_ctx) -> list[tuple[StepResult, StepResult, list[dict[str, Any]]]]:
    ctx, tee = remote_ctx
    return [_measure(ctx, tee, "srv-query1", jobs) for jobs in (1, 2)]


def psutil_busy_pct(before: Any, after: Any) -> float:
    """The host's busy share between two psutil readings: another program's parser of the kernel's CPU times (not
    capmark's), so a fault in capmark's reading of /proc/stat, local or through SQL, shows as a disagreement."""
    states = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    delta = {k: getattr(after, k) - getattr(before, k) for k in states}
    return 100.0 * (1 - (delta["idle"] + delta["iowait"]) / sum(delta.values()))


@needs_pg15
def test_host_cpu_through_sql_agrees_with_psutil(cpu_steps):
    for sql, _local, readings in cpu_steps:
        reference = psutil_busy_pct(readings[0]["psutil"], readings[-1]["psutil"])
        print(f"{sql.jobs} job(s): host busy {sql.os['cpu_pct']['busy']:.2f} % through SQL, {reference:.2f} % by psutil")
        assert sql.os["source"] == "sql"
        assert sql.os["driver_on_host"]  # same kernel (boot id): the driver's CPU is host CPU
        assert sql.os["cores"] == psutil.cpu_count()
        assert sql.os["cpu_pct"]["busy"] == pytest.approx(reference, abs=BUSY_POINTS)
        assert sql.os["cpu_pct"]["busy"] > ONE_JOB_BUSY_SHARE * 100 / sql.os["cores"]  # the figure is load, not idle


@needs_pg15
def test_cpu_per_unit_by_role_through_sql_agrees_with_local_proc(cpu_steps):
    for sql, local, _readings in cpu_steps:
        d_sql, _ = step_demands(sql)
        d_local, _ = step_demands(local)
        backends = d_local["cpu_client_backends_s"]
        print(f"{sql.jobs} job(s): client backends {d_sql['cpu_client_backends_s'] * 1e6:.3f} us/query through SQL, "
              f"{backends * 1e6:.3f} us/query from local /proc")
        assert backends and backends > 1e-6  # microseconds per query: measured, not zero
        assert d_sql["cpu_client_backends_s"] == pytest.approx(backends, rel=SHARE)
        # the SQL source's own session is capmark's cost, not the workload's
        assert sql.process_cpu["capmark sampler"]["processes"] == 2


@needs_pg15
def test_device_bytes_through_sql_agree_with_local_proc(remote_ctx):
    ctx, tee = remote_ctx
    if not ctx.devices:
        pytest.skip("the data directory is not on a block device of this machine")
    sql, local, _ = _measure(ctx, tee, "tp-light", 2)
    dev = ctx.devices[0]
    written = local.os["disks"][dev]["sectors_written"]
    print(f"tp-light: {sql.os['disks'][dev]['sectors_written'] * 512 / 1e6:.3f} MB written through SQL, "
          f"{written * 512 / 1e6:.3f} MB from local /proc")
    assert written * 512 > 1 << 20  # tp-light commits: megabytes of WAL
    assert sql.os["disks"][dev]["sectors_written"] == pytest.approx(written, rel=SHARE)


@needs_pg15
def test_the_model_from_sql_figures_predicts_what_the_local_one_does(cpu_steps):
    models = []
    for which in (0, 1):
        test = TestResult(ordinal=1, workload="srv-query1", family="SRV", description="", unit="query",
                          throughput_label="qps", mode="server", params={}, kpms=[], per_unit={}, status="ok",
                          steps=[triple[which] for triple in cpu_steps])
        models.append(calibrate(test))
    sql_model, local_model = models
    print(f"CPU per query: {sql_model.cpu_s * 1e6:.4f} us from SQL figures, {local_model.cpu_s * 1e6:.4f} us "
          f"from local ones; cores {sql_model.cores}")
    assert sql_model.cores == local_model.cores == cpu_steps[0][1].os["cores"]
    for jobs in (1, 2, 4, 8):
        print(f"{jobs} jobs: {solve(sql_model, jobs).throughput:,.0f} /s from SQL figures, "
              f"{solve(local_model, jobs).throughput:,.0f} /s from local ones")
        assert solve(sql_model, jobs).throughput == pytest.approx(solve(local_model, jobs).throughput, rel=0.02)


# --- a role that may not read the host's files -------------------------------------------------------------

@pytest.fixture(scope="module")
def unprivileged_dsn() -> Iterator[str]:
    """A role of its own with a database of its own: no superuser, no pg_read_server_files."""
    if not _answers(LOCAL_PG):
        pytest.skip("the machine's PostgreSQL on 127.0.0.1:5432 is not running")
    suffix = uuid.uuid4().hex[:8]
    role, db = f"capmark_remote_{suffix}", f"capmark_remote_{suffix}"
    with psycopg.connect(LOCAL_PG, autocommit=True) as admin:
        admin.execute(f"create role {role} login")
        admin.execute(f"create database {db} owner {role}")
    yield make_conninfo(REMOTE_LOOKING, user=role, dbname=db)
    with psycopg.connect(LOCAL_PG, autocommit=True) as admin:
        admin.execute(f"drop database {db} with (force)")
        admin.execute(f"drop role {role}")


@needs_pg15
def test_asking_for_sql_metrics_without_the_grant_says_which_grant(unprivileged_dsn):
    with connect(unprivileged_dsn) as conn, pytest.raises(CapmarkError) as err:
        hosts.choose("sql", unprivileged_dsn, conn, None, connect)
    role = conninfo_user(unprivileged_dsn)
    assert f"GRANT pg_read_server_files, pg_monitor TO {role}" in str(err.value)
    assert "pg_read_binary_file" in str(err.value)


@needs_pg15
def test_a_run_without_host_access_has_no_host_figures_and_says_why(unprivileged_dsn, tmp_path):
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[1], warmup_s=0.5, duration_s=2.0, dsn=unprivileged_dsn,
                                     results_dir=tmp_path))
    assert run.status == "complete"
    env = run.environment["database_host"]
    assert env["source"] == "none" and env["cores"] is None
    assert "GRANT pg_read_server_files" in env["reason"]
    assert run.target["capabilities"]["os"]["available"] is False
    step = run.tests[0].steps[0]
    assert step.os == {} and step.process_cpu == {} and step.units > 0
    assert "database host's CPU counters were not measured" in step.measured.unavailable["cpu_busy_pct"]
    with pytest.raises(CapmarkError, match="no measurement of the database host's CPU"):
        api.calibrate(run.folder)


def conninfo_user(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(dsn)["user"])


def test_asking_for_sql_metrics_from_an_engine_that_cannot_read_files_says_so():
    """Reading /proc through SQL is the PostgreSQL engine's extra (collect/hosts.py asks the DSN's engine for it):
    another engine gets one sentence naming it, before anything connects."""
    with pytest.raises(CapmarkError, match="MySQL/MariaDB does not have; use --host-metrics local"):
        hosts.choose("sql", "mysql://capmark@db.remote.example/capmark", None, None, None)
    with pytest.raises(CapmarkError, match="MySQL/MariaDB does not have"):
        hosts.sql_source("mysql://capmark@db.remote.example/capmark")


@needs_pg15
def test_local_host_metrics_for_a_server_on_another_host_are_refused_naming_the_host():
    """The engine finds the server's process on this machine; for a host that is not this one it must find none,
    or capmark would report this machine's CPU as the database host's."""
    with connect(REMOTE_LOOKING) as conn:
        with pytest.raises(CapmarkError) as err:
            hosts.choose("local", REMOTE_LOOKING, conn, None, connect)
        auto = hosts.choose("auto", REMOTE_LOOKING, conn, None, connect)
        auto.close()
        assert auto.name == "sql"
    assert str(err.value) == ("--host-metrics local cannot see the server: the database host 'db.remote.example' is "
                              "remote, so OS counters of the database host are not visible; use --host-metrics sql "
                              "or --node-exporter URL.")
    with connect(LOCAL_PG) as conn:
        postmaster, why = engines.for_dsn(LOCAL_PG).server_process(conn, LOCAL_PG)
        assert why == "" and postmaster == psutil.Process(conn.info.backend_pid).ppid()
