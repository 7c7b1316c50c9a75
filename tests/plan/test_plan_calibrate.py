"""Calibration, validation, what-if and sizing on a stored real run (tests/fixtures/plan-cpu-commit.sqlite.gz),
recomputed from storage."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from commandline import completed

from capmark import api
from capmark.measure import record
from capmark.measure.demands import host_busy_s
from capmark.plan.calibrate import calibrate, validate
from capmark.plan.dbhost import database_host
from capmark.plan.dbmodel import solve
from capmark.plan.predict import curve
from capmark.store import load_run

# The model is calibrated on one step and predicts the others for the host's whole capacity. Scoring it is only
# fair when capmark had the host to itself: with other test runs on the same 2 cores, programs outside the instance
# and the driver took 35 to 97 % of the host's busy CPU and the model's throughput error was 43 to 50 % (srv-query1)
# and 34 to 81 % (wal-lat1) over three runs, all of it the capacity those programs took. The stored run was kept
# because they took at most 1.9 % in it.
OTHER_PROGRAMS_LIMIT = 0.10  # share of host busy CPU outside the instance and the driver, in any step
# On an otherwise idle host this machine's throughput drifts up to +-15 % between rounds of the same step; the
# median over the two predicted steps of a calibration step and a measured step that each drift that much stays
# within 25 %, which leaves the model itself ~10 points. A model that ignored the second core (x0.5 at 2 and 4
# jobs) or queued nothing (x2 at 4 jobs) misses by 50 % or more.
THROUGHPUT_MEDIAN_ERROR_PCT = 25.0
# That bound holds only while the machine drifts as it assumes (seen on this VM: 93,000 and 141,000 queries/s minutes
# apart): the stored run was kept because its one-job step, measured again right after it, gave the same throughput
# (317,737 and 317,747 queries/s).


def _other_programs_share(test) -> float:
    """The largest share of host busy CPU that neither the instance nor the driver used, over the test's steps."""
    shares = []
    for step in test.steps:
        busy = host_busy_s(step)
        own = sum(r["user_s"] + r["sys_s"] for r in step.process_cpu.values())
        own += step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
        shares.append(1 - own / busy if busy else 1.0)
    return max(shares)


@pytest.fixture(scope="module")
def run(cpu_and_commit_run, tmp_path_factory):
    """The shared run (tests/plan/conftest.py) in a folder of this module's: `size --save` writes into it."""
    folder = tmp_path_factory.mktemp("plan") / Path(cpu_and_commit_run.folder).name
    shutil.copytree(cpu_and_commit_run.folder, folder)
    return load_run(folder)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return completed(*args)


def test_calibration_reproduces_its_own_step_and_predicts_the_others(run):
    doc = api.calibrate(run.folder)
    cpu_test = next(t.answer for t in doc.tests if t.workload == "srv-query1")
    assert cpu_test is not None
    assert cpu_test.calibrated_from_jobs == [1] and [r["jobs"] for r in cpu_test.steps] == [1, 2, 4]
    first = cpu_test.steps[0]
    assert first["calibration"] and abs(first["error_pct"]["throughput"]) < 0.5
    for r in cpu_test.steps:
        assert r["model"]["bottleneck"] == "CPU"  # srv-query1 is CPU bound
        assert r["model"]["cpu_busy_pct"] <= 100.0 + 1e-6
    pred = cpu_test.prediction
    assert pred["points"][-1]["jobs"] == 8 and pred["max_throughput"] > 0
    assert pred["knee_jobs"] is not None and pred["knee_jobs"] > 1
    assert cpu_test.verdict["steps_scored"] == [2, 4]
    # the cores' capacity comes from the steps with at most as many jobs as cores, never from the 4-job step
    scaling = cpu_test.calibration.cpu_scaling
    cores = cpu_test.calibration.cores
    assert scaling is not None and scaling.points and all(p.jobs <= cores for p in scaling.points)
    assert len(scaling.effective_cores) == cores and scaling.effective_cores["1"] == 1.0
    others = _other_programs_share(run.test("srv-query1"))
    assert others <= OTHER_PROGRAMS_LIMIT, f"other programs used {others:.0%} of the stored run's busy CPU"
    assert cpu_test.verdict["throughput"]["median_abs_pct"] <= THROUGHPUT_MEDIAN_ERROR_PCT, cpu_test.verdict


def test_group_commit_is_predicted_for_commits(run):
    test = next(t for t in run.tests if t.workload == "wal-lat1")
    model = calibrate(test)
    assert model.flush_requests == pytest.approx(1.0, abs=0.1)  # one flush per commit at one job
    assert model.flush_device_s > 0
    doc = validate(test)
    by_jobs = {r["jobs"]: r for r in doc["steps"]}
    assert by_jobs[4]["batch"]["measured"] > 1.2  # PostgreSQL batched commits
    assert by_jobs[4]["batch"]["model"] > 1.2  # and the submodel predicts it, not plugs it in
    assert solve(model, 4).flushes_per_unit < solve(model, 1).flushes_per_unit


def test_invalid_steps_are_shown_and_not_calibrated_on(run):
    test = copy.deepcopy(next(t for t in run.tests if t.workload == "srv-query1"))
    step = test.steps[0]
    step.driver_cpu = {"user_s": step.elapsed_s * 0.95, "sys_s": 0.0}  # as if the generator had saturated
    step.measures = record.build(step, test.per_unit)  # a step's validity is decided when its record is built
    doc = validate(test)
    first = doc["steps"][0]
    assert not first["valid"] and "load generator was saturated" in first["invalid_because"][0]
    assert doc["calibrated_from_jobs"] == [2] and 1 not in doc["verdict"]["steps_scored"]


def test_calibrate_command_json_recomputes_from_storage(run):
    out = _cli("calibrate", f"{run.folder}:srv-query1", "--from-steps", "1,2", "--up-to", "16", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "capmark.calibrate/2"
    t = doc["tests"][0]
    assert t["calibrated_from_jobs"] == [1, 2] and t["prediction"]["points"][-1]["jobs"] == 16
    assert json.loads(_cli("calibrate", f"{run.folder}:srv-query1", "--from-steps", "1,2", "--up-to", "16",
                           "--format", "json").stdout) == doc


def test_whatif_command_growth_and_cpus(run):
    out = _cli("whatif", f"{run.folder}:wal-lat1", "--growth", "20%x3", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["tests"][0]["scenarios"]
    assert [r["name"] for r in rows] == ["Baseline", "Baseline (open)", "BL+20%", "BL+44%", "BL+72.8%"]
    assert all(r["prediction"]["model"] and r["prediction"]["calibrated_from"] == [1] for r in rows)
    out = _cli("whatif", f"{run.folder}:srv-query1", "--cpus", "4", "--jobs", "4", "--format", "json")
    rows = json.loads(out.stdout)["tests"][0]["scenarios"]
    assert [r["name"] for r in rows] == ["Baseline", "jobs 4, cpus 4"]
    assert rows[1]["change_vs_baseline_pct"]["throughput"] > 50  # CPU bound at one job per core: more jobs and cores
    table = _cli("whatif", f"{run.folder}:srv-query1", "--cpus", "4")
    assert table.returncode == 0 and "Baseline" in table.stdout


def test_size_command_and_saved_tables_in_report(run):
    out = _cli("size", f"{run.folder}:srv-query1", "--sla", "mean<0.05ms", "--target-tps", "1000", "--save",
               "--format", "json")
    assert out.returncode == 0, out.stderr
    t = json.loads(out.stdout)["tests"][0]
    assert not t["search_limit_reached"]
    assert t["max_jobs"] >= 1 and t["at_max_jobs"]["response_time_s"] <= 5e-5 < t["one_more_job"]["response_time_s"]
    assert t["target"]["meets_now"]
    html = (Path(run.folder) / "report.html").read_text()
    assert "Sizing for mean&lt;0.05ms" in html and "Quick anticipation" in html
    # a CPU-only unit far below a scheduler slice: its p95 does not grow with jobs, so the search hits its limit
    p95 = json.loads(_cli("size", f"{run.folder}:srv-query1", "--sla", "p95<1ms", "--format", "json").stdout)
    assert p95["tests"][0]["search_limit_reached"]


def test_size_carries_the_range_of_the_demands_spread_to_every_output(run):
    """wal-lat1's flush time varies across its calibration steps: the sizing's answers carry the range the spread
    gives, a lower rate at the end with more demand (the most jobs, set by the CPU whose fit claims no spread, move
    less than a job), in the JSON, the console and the saved HTML; srv-query1, with no spread, carries none."""
    args = ("size", f"{run.folder}:wal-lat1", "--sla", "mean<0.5ms", "--save")
    t = json.loads(_cli(*args, "--format", "json").stdout)["tests"][0]
    jobs, rates = t["max_jobs_range"], t["max_rate_range"]
    assert jobs[0] <= t["max_jobs"] <= jobs[1], (jobs, t["max_jobs"])
    assert rates[0] < t["max_rate"] < rates[1], (rates, t["max_rate"])
    span = f"{rates[0]:,.0f} to {rates[1]:,.0f}"
    table = " ".join(_cli(*args).stdout.split())  # the console wraps at its width
    assert span in table, table
    assert span in (Path(run.folder) / "report.html").read_text()
    plain = json.loads(_cli("size", f"{run.folder}:srv-query1", "--sla", "mean<1ms", "--format", "json").stdout)
    assert plain["tests"][0]["max_jobs_range"] is None


def test_planning_commands_reject_bad_input(run):
    for args, needle in ((["size", str(run.folder), "--sla", "fast"], "SLA 'fast' is not valid"),
                         (["whatif", str(run.folder), "--growth", "lots"], "growth 'lots' is not valid"),
                         (["whatif", str(run.folder)], "at least one change"),
                         (["calibrate", str(run.folder), "--from-steps", "3"], "no valid step with [3] jobs")):
        out = _cli(*args)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


def test_anticipate_command(run):
    out = _cli("anticipate", f"{run.folder}:srv-query1", "--at", "4", "--servers", "4", "--format", "json")
    assert out.returncode == 0, out.stderr
    t = json.loads(out.stdout)["tests"][0]
    assert t["measured"]["jobs"] == 4 and t["effective_servers"] > 0
    assert t["change"]["response_time_s"] < t["measured"]["response_time_s"]


def test_a_cpu_demand_fitted_exactly_through_two_steps_claims_no_spread(cpu_and_commit_run):
    """Within 2 cores the run has steps at 1 and 2 jobs: the CPU growth (srv-query1) and the commit-wait CPU
    (wal-lat1) are fitted through exactly those two, so their CPU per unit agrees by construction and says nothing
    about how sure the model is. No range may rest on it; wal-lat1's flush time, held as one value, has a spread."""
    host = database_host(cpu_and_commit_run, None)
    models = {t.workload: calibrate(t, None, host) for t in cpu_and_commit_run.tests}
    assert models["srv-query1"].demand_spread is None
    assert curve(models["srv-query1"], 8).max_throughput_range is None
    spread = models["wal-lat1"].demand_spread
    assert spread is not None and "cpu" not in spread and spread["flush_cpu"] > 0.01, spread
