"""Planning for a database on another host, on stored real runs: the cores and the CPU come from the stored run,
never from the machine analysing it; a run without the database host's CPU is refused in one sentence, or, with
--cores, answered from the wait samples and labelled as an estimate.

Every run here is a real measured run: one with the host metrics of the machine it ran on, stored in
tests/fixtures/plan-remote-query1.sqlite.gz, and one measured here with none (`--host-metrics none`). Where a test
compares two situations of the same run (the estimate with the measured CPU, a driver elsewhere with the driver
here), the second is a copy of the first with the stored step keys edited exactly as a run with that source stores
them (see _without_host_metrics and friends), and the refusals are checked on both the real run without host metrics
and the copy.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from commandline import completed
from liveruns import run_without_report
from storedruns import unpack
from typer.testing import CliRunner

from capmark import api
from capmark.cli import app
from capmark.config import RunSpec
from capmark.measure.demands import HOST_CPU_KEY, HOST_CPU_LABEL_NODE_EXPORTER, demands_of_test, host_busy_s
from capmark.measure.validity import problems
from capmark.plan.dbmodel import CPU_ESTIMATED
from capmark.plan.sizing import MAX_JOBS
from capmark.store import load_run

# The estimate stands for the CPU of the jobs' database sessions; a session waiting for a core looks the same in
# the wait samples as one running. So it is scored against the sessions' measured CPU only where the host had an
# idle core (busy below 90 % of its cores): there, over 18 srv-query1 one-job steps on this 2-core machine, it was
# 0.945 to 1.07 x their measured CPU; on a saturated host it was up to 2.8 x.
IDLE_CORE_LIMIT = 0.90
SESSIONS_ERROR = 0.10
# Against the model's whole measured CPU per unit (every database process and the kernel's remainder) it is scored
# only when capmark had the host to itself, as in test_plan_calibrate: other programs' CPU lands in that remainder
# (those that start and end inside the window). Over 11 such one-job steps (at most 10 % of the busy CPU outside
# the instance and the driver) it was 0.89 to 0.975 x the measured CPU: low by what the background processes and
# the kernel's own work add, which the sessions' samples cannot see. 15 % leaves room for the samples' noise
# (51 samples at 10 Hz: about 3 %).
OTHER_PROGRAMS_LIMIT = 0.10
ESTIMATE_ERROR = 0.15
NO_HOST_CPU_WORDS = ("no measurement of the database host's CPU", "--host-metrics sql", "--node-exporter URL",
                     "--cores N")

StepEdit = Callable[[dict[str, Any]], dict[str, Any]]
EnvEdit = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """srv-query1 is CPU bound: one job keeps a core busy, two keep both. Stored with its one-job step valid, an
    idle core beside it and other programs out of the host (tests/fixtures/README.md): a step during which they
    took the host is invalid and calibrates nothing."""
    results = tmp_path_factory.mktemp("remote")
    (run_id,) = unpack(results, "plan-remote-query1")
    return load_run(results / run_id)


def _needs_a_valid_step(run) -> None:
    why = problems(run.tests[0].steps[0])
    assert not why, f"the stored one-job step is invalid ({why[0]}): no model to compare with"


def _stored_copy(run, folder: Path, step_edit: StepEdit, env_edit: EnvEdit) -> Path:
    """A copy of a stored run with every stored step and the environment rewritten by the edits."""
    shutil.copytree(run.folder, folder)
    db = sqlite3.connect(folder / "results.sqlite")
    try:
        for rowid, raw in db.execute("select rowid, raw from step").fetchall():
            # the step's record is derived from it: an edited step goes without, to be rebuilt on loading
            edited = {k: v for k, v in json.loads(raw).items() if k != "measures"}
            db.execute("update step set raw = ? where rowid = ?", (json.dumps(step_edit(edited)), rowid))
        (env,) = db.execute("select environment from run").fetchone()
        db.execute("update run set environment = ?", (json.dumps(env_edit(json.loads(env))),))
        db.commit()
    finally:
        db.close()
    return folder


def _without_host_metrics(step: dict[str, Any]) -> dict[str, Any]:
    """A step as a run with no host metrics source stores it: no OS counters, no process CPU, nothing read from
    the host's /proc (its series, the instance's memory, the other programs, the sampler backend's CPU)."""
    interference = {k: v for k, v in step["interference"].items() if k != "processes"}
    return {**step, "os": {}, "process_cpu": {}, "os_series": [], "memory_series": [], "interference": interference,
            "driver_cpu": {**step["driver_cpu"], "sampler_backend_s": None}}


def _database_host(env: dict[str, Any], source: str, driver_on_host: bool, cores: int | None,
                   reason: str = "") -> dict[str, Any]:
    """The environment a run with this source stores: the database host apart, the load host as before."""
    load_host = env.get("load_host") or env.get("host")
    env = {k: v for k, v in env.items() if k != "host"}
    return {**env, "load_host": load_host, "database_host": {
        "source": source, "cores": cores, "cpu_model": None, "memory_bytes": None, "kernel": None, "boot_id": None,
        "cannot_see": [], "driver_on_host": driver_on_host, "reason": reason}}


def _as_stored_before_host_sources(env: dict[str, Any]) -> dict[str, Any]:
    """An old local run's environment: one "host", this machine, with 5 cores recorded; no database host apart."""
    machine = env.get("load_host") or env["host"]
    rest = {k: v for k, v in env.items() if k not in ("database_host", "load_host")}
    return {**rest, "host": {**machine, "logical_cores": 5}}


def _source(source: str, driver_on_host: bool, keep_processes: bool = True) -> StepEdit:
    def edit(step: dict[str, Any]) -> dict[str, Any]:
        out = {**step, "os": {**step["os"], "source": source, "driver_on_host": driver_on_host}}
        return out if keep_processes else {**out, "process_cpu": {}}
    return edit


@pytest.fixture(scope="module")
def no_host_metrics(measured, tmp_path_factory) -> Path:
    """The run as `--host-metrics none` stores it (TODO(lead): a real run with it, see the module's docstring)."""
    return _stored_copy(measured, tmp_path_factory.mktemp("none") / "run", _without_host_metrics,
                        lambda env: _database_host(env, "none", False, None, "no host metrics were asked for"))


@pytest.fixture(scope="module")
def measured_without_host_metrics(embedded_dsn, tmp_path_factory) -> Path:
    """A real run with --host-metrics none: the server runs here, but capmark is told not to look."""
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[1, 2], warmup_s=0.0, duration_s=1.0, dsn=embedded_dsn,
                                     results_dir=tmp_path_factory.mktemp("real-none"), host_metrics="none"))
    assert run.environment["database_host"]["source"] == "none"
    assert all(s.os == {} and s.process_cpu == {} for s in run.tests[0].steps)
    return Path(run.folder)


@pytest.fixture(scope="module")
def driver_elsewhere(measured, tmp_path_factory) -> Path:
    """The run as the SQL source stores it for a database on another host than capmark's driver."""
    cores = measured.tests[0].steps[0].os["cores"]
    return _stored_copy(measured, tmp_path_factory.mktemp("sql") / "run", _source("sql", False),
                        lambda env: _database_host(env, "sql", False, cores))


@pytest.fixture(scope="module")
def old_remote(measured, tmp_path_factory) -> Path:
    """A run stored before the host metrics sources, of a database on another host: no OS counters at all."""
    def env_edit(env: dict[str, Any]) -> dict[str, Any]:
        return {**env, "database": {**env["database"], "local": False}}
    return _stored_copy(measured, tmp_path_factory.mktemp("old") / "run", _without_host_metrics, env_edit)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return completed(*args)


def _calibrate_json(folder: Path, *options: str) -> str:
    out = CliRunner().invoke(app, ["calibrate", str(folder), "--format", "json", *options])
    assert out.exit_code == 0, out.output
    return out.stdout


def _outside_share(step) -> float:
    """The share of host busy CPU that neither the instance nor the driver used (as in test_plan_calibrate)."""
    busy = host_busy_s(step)
    own = sum(r["user_s"] + r["sys_s"] for r in step.process_cpu.values())
    own += step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
    return 1 - own / busy if busy else 1.0


def test_a_stored_run_gives_the_same_answers_on_another_machine(measured, no_host_metrics, tmp_path, monkeypatch):
    """The model's cores come from the run (the step, else the recorded database host, else for old local runs the
    recorded machine), never from the machine doing the analysis."""
    _needs_a_valid_step(measured)
    recorded = _stored_copy(measured, tmp_path / "recorded", lambda s: {**s, "os": {k: v for k, v in s["os"].items()
                                                                                 if k != "cores"}},
                            lambda env: _database_host(env, "local", True, 3))
    old_local = _stored_copy(measured, tmp_path / "old-local", lambda s: {**s, "os": {k: v for k, v in s["os"].items()
                                                                                   if k != "cores"}},
                             _as_stored_before_host_sources)
    cases = [(Path(measured.folder), ()), (recorded, ()), (old_local, ()), (no_host_metrics, ("--cores", "2"))]
    here = [_calibrate_json(folder, *options) for folder, options in cases]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    there = [_calibrate_json(folder, *options) for folder, options in cases]
    assert there == here
    cores = [json.loads(doc)["tests"][0]["calibration"] for doc in here]
    assert [(c["cores"], c["cores_from"]) for c in cores] == [
        (measured.tests[0].steps[0].os["cores"], "measured"), (3, "recorded with the run"),
        (5, "recorded with the run"), (2, "stated with --cores")]


@pytest.mark.parametrize("copy", [pytest.param("measured_without_host_metrics", marks=pytest.mark.db),
                                  "no_host_metrics", "old_remote"])
def test_without_the_host_cpu_planning_is_refused_in_one_sentence(copy, request):
    folder = request.getfixturevalue(copy)
    for command in (["calibrate"], ["whatif", "--cpus", "4"], ["size", "--sla", "mean<1ms"]):
        out = _cli(*command, str(folder))
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        text = " ".join(out.stderr.split())
        assert text.startswith("capmark: Run ") and all(w in text for w in NO_HOST_CPU_WORDS), (command, text)
        assert text.count(". ") == 0 and "Traceback" not in out.stderr and out.stdout == "", command


def test_stated_cores_override_the_measured_ones_and_say_so(measured):
    _needs_a_valid_step(measured)
    t = api.calibrate(measured.folder, cores=4).to_json()["tests"][0]
    measured_cores = measured.tests[0].steps[0].os["cores"]
    assert t["calibration"]["cores"] == 4 and t["calibration"]["cores_from"] == "stated with --cores"
    assert f"as stated with --cores (the run recorded {measured_cores})" in " ".join(t["calibration"]["notes"])
    out = _cli("calibrate", f"{measured.folder}:srv-query1", "--cores", "4")
    assert out.returncode == 0 and "4 cores (stated with --cores)" in " ".join(out.stdout.split()), out.stderr


def test_a_driver_elsewhere_is_the_client_tier(measured, driver_elsewhere):
    _needs_a_valid_step(measured)
    local = api.calibrate(measured.folder).to_json()["tests"][0]["calibration"]
    remote = api.calibrate(str(driver_elsewhere)).to_json()["tests"][0]["calibration"]
    step = measured.tests[0].steps[0]
    driver = (step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]) / step.units
    assert local["client_s"] == 0.0
    assert remote["client_s"] == pytest.approx(driver)
    # the host's busy CPU is the same either way: the driver's share is in the remainder once it is not the driver's
    assert remote["cpu_s"] == pytest.approx(local["cpu_s"])


SERIES_AGREE = 0.05  # the 1 s series and the window's readings are a few milliseconds apart at each end of the window


def test_host_cpu_without_processes_is_the_database_cpu(measured, tmp_path):
    _needs_a_valid_step(measured)
    folder = _stored_copy(measured, tmp_path / "node", _source("node-exporter", True, keep_processes=False),
                          lambda env: _database_host(env, "node-exporter", True, measured.tests[0].steps[0].os["cores"]))
    test = api.tests_of(str(folder))[1][0]
    rows = {r["key"]: r for r in demands_of_test(test)["components"]}
    assert rows[HOST_CPU_KEY]["label"] == HOST_CPU_LABEL_NODE_EXPORTER
    assert "cpu_os_overhead_s" not in rows and "cpu_client_backends_s" not in rows
    step = test.steps[0]
    driver = step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
    # the host's own 1 s series (another reading than the window's two): busy core-seconds over the window
    cores = step.os["cores"]
    series = step.os_series
    series_busy_s = sum(p["cpu_busy_pct"] / 100 * cores * (p["t"] - (series[i - 1]["t"] if i else 0.0))
                        for i, p in enumerate(series))
    assert rows[HOST_CPU_KEY]["values"][0] == pytest.approx((series_busy_s - driver) / step.units, rel=SERIES_AGREE)
    calibration = api.calibrate(str(folder)).to_json()["tests"][0]["calibration"]
    # the driver runs there too; the model keeps the CPU one busy core would spend (the step kept `busy` busy)
    busy = host_busy_s(step) / step.elapsed_s
    one_core = 1 + calibration["cpu_growth"] * (max(1.0, busy) - 1)
    assert calibration["cpu_s"] * one_core == pytest.approx(host_busy_s(step) / step.units)


def _estimate(no_host_metrics: Path) -> dict[str, Any]:
    return api.calibrate(str(no_host_metrics), cores=2).to_json()["tests"][0]["calibration"]


def test_stated_cores_estimate_the_cpu_and_say_so(no_host_metrics):
    estimated = _estimate(no_host_metrics)
    assert estimated["cpu_from"] == CPU_ESTIMATED and estimated["cpu_s"] > 0
    assert any(n.startswith("ESTIMATE:") for n in estimated["notes"])
    out = _cli("calibrate", str(no_host_metrics), "--cores", "2")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "(estimated from wait samples)" in text and "ESTIMATE" in text


def test_the_estimate_is_the_sessions_cpu(measured, no_host_metrics):
    step = measured.tests[0].steps[0]
    sessions = step.process_cpu["client backends"]
    sessions_s = (sessions["user_s"] + sessions["sys_s"]) / step.units
    ratio = _estimate(no_host_metrics)["cpu_s"] / sessions_s
    busy = host_busy_s(step) / (step.elapsed_s * step.os["cores"])
    print(f"srv-query1 at 1 job: estimate / measured CPU of the client backends = {ratio:.3f} (host {busy:.0%} busy)")
    if busy > IDLE_CORE_LIMIT:
        pytest.skip(f"the host was {busy:.0%} busy: its sessions waited for a core, which the samples count as CPU")
    assert abs(ratio - 1) <= SESSIONS_ERROR, ratio


def test_the_estimate_is_close_to_the_measured_cpu(measured, no_host_metrics, driver_elsewhere):
    _needs_a_valid_step(measured)
    reference = api.calibrate(str(driver_elsewhere)).to_json()["tests"][0]["calibration"]  # the same run, host CPU measured
    assert reference["cpu_from"] == "measured"
    ratio = _estimate(no_host_metrics)["cpu_s"] / reference["cpu_s"]
    outside = _outside_share(measured.tests[0].steps[0])
    print(f"srv-query1 at 1 job: estimate / measured CPU per unit = {ratio:.3f} ({outside:.0%} of the busy CPU "
          "outside the instance and the driver)")
    if outside > OTHER_PROGRAMS_LIMIT:
        pytest.skip(f"{outside:.0%} of the host's busy CPU was neither the instance's nor the driver's: the measured "
                    "CPU holds other programs, the estimate cannot be scored against it")
    assert abs(ratio - 1) <= ESTIMATE_ERROR, ratio


def test_an_estimated_cpu_answers_whatif_and_size(measured, no_host_metrics):
    base = api.whatif(str(no_host_metrics), changes={"jobs": 4}, cores=2).to_json()["tests"][0]
    more = api.whatif(str(no_host_metrics), changes={"jobs": 4, "cpus": 4}, cores=2).to_json()["tests"][0]
    assert base["platform"]["cpu_from"] == CPU_ESTIMATED and base["platform"]["notes"]
    two, four = base["scenarios"][1]["prediction"], more["scenarios"][1]["prediction"]
    assert two["bottleneck"] == "CPU"
    assert four["throughput"] > 1.5 * two["throughput"]  # CPU bound at 4 jobs on 2 cores: twice the cores
    mean_s = measured.tests[0].steps[0].latency.mean_s
    sla = f"mean<{4 * mean_s * 1e6:.0f}us"  # four times the one-job response time: a few jobs on 2 cores
    sized = api.size(str(no_host_metrics), sla_text=sla, cores=2).to_json()["tests"][0]
    assert not sized["search_limit_reached"] and 1 <= sized["max_jobs"] < MAX_JOBS, sized["max_jobs"]
    assert sized["platform"]["cpu_from"] == CPU_ESTIMATED
    table = _cli("size", str(no_host_metrics), "--sla", sla, "--cores", "2")
    assert table.returncode == 0 and "estimated from wait samples" in " ".join(table.stdout.split()), table.stderr
