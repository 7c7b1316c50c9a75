"""The layered solver on the seed's two-tier Stress LQM (Tables 31-34) and on a model that must reduce to MVA."""

from __future__ import annotations

import math

import pytest

from capmark.model import lqn, mva
from capmark.model.cases import solve as solve_case
from capmark.model.examples import TABLE34_MODEL, stress_lqm


@pytest.mark.parametrize("method,rt_tol,util_tol", [("schweitzer", 0.07, 0.11), ("exact", 0.05, 0.06)])
def test_stress_lqm_reproduces_the_seeds_model_outputs(method, rt_tol, util_tol):
    for clients in range(1, 11):
        r = lqn.solve(*stress_lqm(clients), device_solver=method)
        i = clients - 1
        assert r.response_time * 1000 == pytest.approx(TABLE34_MODEL["response_ms"][i], rel=rt_tol), clients
        assert r.processor_utilization["oracle_cpu"] * 100 == pytest.approx(TABLE34_MODEL["oracle_cpu_pct"][i],
                                                                             rel=util_tol), clients
        assert r.processor_utilization["oracle_disk"] * 100 == pytest.approx(TABLE34_MODEL["oracle_disk_pct"][i],
                                                                              rel=util_tol), clients


def test_oracle_demands_match_table_33_model_column():
    procs, tasks = stress_lqm(1)
    r = lqn.solve(procs, tasks)
    # utilization / throughput = demand per request: 24.637 ms CPU and 31.066 ms disk in the seed's Table 33
    assert r.processor_utilization["oracle_cpu"] / r.throughput * 1000 == pytest.approx(24.637, rel=1e-3)
    assert r.processor_utilization["oracle_disk"] / r.throughput * 1000 == pytest.approx(31.066, rel=1e-3)


@pytest.mark.parametrize("n,z", [(1, 0.0), (3, 1.0), (8, 0.5)])
def test_infinite_tasks_with_one_phase_reduce_to_the_closed_network(n, z):
    demands = {"cpu": 0.02, "disk": 0.05, "net": 0.01}
    procs = [lqn.Processor(p) for p in demands]
    tasks = [lqn.Task("users", [lqn.Entry("go", calls={"server": 1})], reference=True, population=n, think_time=z),
             lqn.Task("server", [lqn.Entry("server", phase1=dict(demands))], multiplicity=math.inf)]
    layered = lqn.solve(procs, tasks, device_solver="exact")
    flat = mva.exact_mva([mva.Station(p, demand=d) for p, d in demands.items()], n, z)
    assert layered.throughput == pytest.approx(flat.throughput, rel=1e-6)
    assert layered.response_time == pytest.approx(flat.response_time, rel=1e-6)


def test_lqn_cases_and_bad_input():
    case = {"kind": "lqn", "model": {
        "processors": [{"name": "cpu"}],
        "tasks": [{"name": "u", "reference": True, "population": 2, "think_time": 1.0,
                   "entries": [{"name": "go", "calls": {"s": 1}}]},
                  {"name": "s", "multiplicity": 1, "entries": [{"name": "s", "phase1": {"cpu": 0.1},
                                                               "phase2": {"cpu": 0.05}}]}]}}
    out = solve_case(case)
    assert 0 < out["throughput"] < 2 / 1.1 and out["processor_utilization"]["cpu"] < 1
    bad = {"kind": "lqn", "model": {"processors": [], "tasks": case["model"]["tasks"]}}
    with pytest.raises(Exception, match="does not define"):
        solve_case(bad)
