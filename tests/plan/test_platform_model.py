"""A run confined to fewer cores models the cores it had, and takes how the CPU scales beyond them from the
host's probe, which its own steps cannot show (the second core of a virtual machine is rarely a whole core)."""

from __future__ import annotations

import dataclasses

import pytest
from storedruns import unpack

from capmark.driver import probe
from capmark.plan import calibrate, dbhost, dbmodel
from capmark.store import load_run

# the probe's record as a run stores it (driver/probe.py), for a host whose second core is 43 % of a core
PROBE = probe.PlatformScaling(cores=2, effective_cores={"1": 1.0, "2": 1.43, "4": 1.38}, growth=2 / 1.43 - 1,
                              statements_per_s_one=50.0, measured_at="2026-11-26T00:00:00+0000").record()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("runs")
    (run_id,) = unpack(results, "run-format-1")
    return load_run(results / run_id)


def _as_confined(run, cpus: int | None, probe: dict | None, quota: float | None = None):
    limits = {**({"cpus": cpus} if cpus else {}), **({"cpu_quota": quota} if quota else {})}
    env = {**run.environment, **({"platform": limits} if limits else {}),
           **({"platform_scaling": probe} if probe else {})}
    return dataclasses.replace(run, environment=env)


@pytest.mark.parametrize("quota,cpus,cores,speed", [(0.5, None, 1, 0.5), (1.0, None, 1, 1.0), (1.5, None, 2, 0.75),
                                                    (3.0, None, 2, 1.0), (1.5, 1, 1, 1.0), (0.25, 1, 1, 0.25)])
def test_a_cpu_quota_is_modelled_as_that_many_cores_worth_of_speed(quick_run, quota, cpus, cores, speed):
    """F cores' worth of CPU time on the 2-core host the run was measured on (or on the cores it was confined to):
    ceil(F) cores at F / ceil(F) of a core's speed, never more cores or speed than the server had. At 64 jobs the
    CPU-bound lookup then does that speed's share of what the same cores without a quota do."""
    test = next(t for t in quick_run.tests if t.workload == "srv-query1")
    limited = calibrate.calibrate(test, from_jobs=[1], host=dbhost.database_host(_as_confined(quick_run, cpus, None,
                                                                                              quota)))
    whole = calibrate.calibrate(test, from_jobs=[1], host=dbhost.database_host(_as_confined(quick_run, cores, None)))
    assert (limited.cores, limited.core_speed, limited.cores_from) == (cores, speed, dbhost.CORES_QUOTA)
    ratio = dbmodel.solve(limited, 64).throughput / dbmodel.solve(whole, 64).throughput
    assert ratio == pytest.approx(speed, rel=0.03)
    faster = dbmodel.solve(limited, 64, config=dbmodel.Config(cores, cpu_speed=2)).throughput
    assert faster / dbmodel.solve(limited, 64).throughput == pytest.approx(2.0, rel=0.03)


def test_a_run_confined_to_one_core_with_the_probe_predicts_two_cores_at_the_probes_capacity(quick_run):
    test = next(t for t in quick_run.tests if t.workload == "srv-query1")
    run = _as_confined(quick_run, 1, PROBE)
    model = calibrate.calibrate(test, from_jobs=[1], host=dbhost.database_host(run))
    assert (model.cores, model.cores_from) == (1, dbhost.CORES_CONFINED)
    assert model.cpu_growth == pytest.approx(PROBE["growth"])
    assert "probe" in (model.cpu_scaling.note or "")
    one = dbmodel.solve(model, 64, config=dbmodel.Config(1))
    two = dbmodel.solve(model, 64, config=dbmodel.Config(2))
    # CPU-bound at 64 jobs: two cores carry what the probe measured, 1.43 cores' worth, not twice one
    assert two.throughput / one.throughput == pytest.approx(1.43, rel=0.03)


def test_without_the_probe_the_same_run_assumes_independent_cores(quick_run):
    test = next(t for t in quick_run.tests if t.workload == "srv-query1")
    model = calibrate.calibrate(test, from_jobs=[1], host=dbhost.database_host(_as_confined(quick_run, 1, None)))
    assert model.cpu_growth == 0.0
    one = dbmodel.solve(model, 64, config=dbmodel.Config(1))
    two = dbmodel.solve(model, 64, config=dbmodel.Config(2))
    assert two.throughput / one.throughput == pytest.approx(2.0, rel=0.03)


def test_a_workloads_own_scaling_wins_over_the_probe_where_its_steps_show_one(quick_run):
    test = next(t for t in quick_run.tests if t.workload == "srv-query1")
    unconfined = calibrate.calibrate(test, host=dbhost.database_host(quick_run))
    with_probe = calibrate.calibrate(test, host=dbhost.database_host(_as_confined(quick_run, None, PROBE)))
    if unconfined.cpu_scaling.note:
        pytest.skip(f"the stored run's steps show no scaling of their own: {unconfined.cpu_scaling.note}")
    assert with_probe.cpu_growth == unconfined.cpu_growth


def test_the_report_states_the_platform_and_the_hosts_scaling():
    from capmark.report.console import platform_lines

    lines = platform_lines({"platform": {"cpus": 1, "words": "1 core"}, "platform_scaling": PROBE})
    assert lines[0].startswith("The server was confined to 1 core")
    assert "2 busy cores did 1.43 cores' worth" in lines[1] and "(29% less per core" in lines[1]
    assert "4 sessions did 1.38" in lines[1]
    assert platform_lines({"database_host": {"cores": 2}}) == []
