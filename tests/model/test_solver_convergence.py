"""Every iterative solver says whether it settled: a solver held below the rounds it needs reports converged False
with a note (or a one-sentence error), and the same model with its normal limit settles. Each pair fails if the
flag were fixed at True, or if the error never came."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from capmark.analysis import document
from capmark.analysis.planning import Platform, Sizing
from capmark.errors import CapmarkError
from capmark.model import lqn, mva, usl
from capmark.model.open import effective_servers, quick_response_time
from capmark.model.sim import SimStation, closed_network
from capmark.plan import dbmodel, sizing
from capmark.plan.calibrate import Anchor, fit_flushes_and_delay
from capmark.plan.dbmodel import DbModel, solve, solve_open
from capmark.plan.simulate import simulate
from capmark.plan.sizing import max_jobs, max_rate, parse_sla, smallest_change
from capmark.plan.whatif import Scenario, evaluate
from capmark.report.planning import print_size

STATIONS = [mva.Station("cpu", demand=0.02), mva.Station("disk", demand=0.05), mva.Station("net", demand=0.01)]


def commit_model(delay_s: float = 0.0) -> DbModel:
    """A commit-heavy workload: its batch size and flush wait are a fixed point that needs dozens of rounds."""
    return DbModel(workload="commits", unit="transaction", cores=2, cpu_s=85e-6, devices={"sda": 0.0}, wal_device="sda",
                   flush_requests=1.0, flush_cpu_s=48e-6, flush_device_s=80e-6, delay_s=delay_s, client_s=0.0,
                   think_s=0.0, p95_over_mean=1.5, p99_over_mean=2.0, calibrated_from=[1])


# --- model/mva.py -------------------------------------------------------------------------------------------------

def test_bard_schweitzer_bisection_cut_short_is_flagged():
    settled = mva.approximate_mva(STATIONS, 50)
    assert settled.converged and settled.note is None and 20 < settled.iterations < mva.MAX_BISECTION_STEPS
    # the bound 1 / D_max: 50 customers on a 0.05 s bottleneck all but reach it
    assert settled.throughput == pytest.approx(20.0, rel=0.01)
    short = mva.approximate_mva(STATIONS, 50, max_steps=2)
    assert not short.converged and short.iterations == 2
    assert "stopped at its limit of 2 bisection steps" in (short.note or "")


def test_linearizer_bisection_cut_short_is_flagged():
    assert mva.linearizer(STATIONS, 10).converged
    short = mva.linearizer(STATIONS, 10, max_steps=3)
    assert not short.converged and "Linearizer" in (short.note or "")


def test_multiclass_schweitzer_out_of_sweeps_is_an_error():
    demands = [[0.02, 0.04], [0.05, 0.01]]
    settled = mva.schweitzer_multiclass(demands, [5, 5])
    assert 2 < settled.iterations < 10_000  # it needs several sweeps, so one is not enough
    with pytest.raises(CapmarkError, match=r"did not settle in 1 sweeps .*allow more sweeps"):
        mva.schweitzer_multiclass(demands, [5, 5], max_iter=1)
    with pytest.raises(CapmarkError, match="bisection steps"):
        mva.schweitzer_multiclass(demands, [5, 5], max_steps=2)


# --- model/lqn.py -------------------------------------------------------------------------------------------------

def _two_tier(users: int) -> tuple[list[lqn.Processor], list[lqn.Task]]:
    procs = [lqn.Processor("cpu"), lqn.Processor("disk")]
    tasks = [lqn.Task("users", [lqn.Entry("go", calls={"db": 1})], reference=True, population=users, think_time=0.1),
             lqn.Task("db", [lqn.Entry("db", phase1={"cpu": 0.01, "disk": 0.02}, phase2={"disk": 0.005})],
                      multiplicity=2)]
    return procs, tasks


def test_layered_model_out_of_rounds_is_an_error():
    settled = lqn.solve(*_two_tier(6))
    assert 2 < settled.iterations < 2000
    with pytest.raises(CapmarkError, match=r"did not settle in 2 rounds .*allow more rounds"):
        lqn.solve(*_two_tier(6), max_iter=2)


# --- model/open.py ------------------------------------------------------------------------------------------------

def test_effective_servers_root_search_cut_short_is_an_error():
    s, lam = 0.01, 150.0
    r = quick_response_time(s, lam, 2.5)
    assert effective_servers(s, lam, r) == pytest.approx(2.5, rel=1e-9)
    with pytest.raises(CapmarkError, match="did not settle in 1 root-finding steps"):
        effective_servers(s, lam, r, max_iter=1)


def test_effective_servers_without_a_root_in_range_is_one_sentence():
    # S lambda = 9,999 busy servers' worth: even 10,000 servers give R = 1.6 S, so R = 1.1 S has no M in range
    # (scipy's root search would raise ValueError: no sign change)
    with pytest.raises(CapmarkError, match="no effective number of servers"):
        effective_servers(0.01, 999_900.0, 0.011)


# --- model/usl.py -------------------------------------------------------------------------------------------------

def test_usl_fit_out_of_evaluations_is_an_error():
    n = [1, 2, 4, 8, 16]
    x = [usl.usl(k, 1000.0, 0.05, 0.001) for k in n]
    f = usl.fit(n, x)
    assert (f.sigma, f.kappa) == (pytest.approx(0.05, rel=1e-6), pytest.approx(0.001, rel=1e-6))
    with pytest.raises(CapmarkError, match="did not settle within 1 model evaluations"):
        usl.fit(n, x, max_evaluations=1)


# --- model/sim.py and plan/simulate.py ----------------------------------------------------------------------------

def test_closed_network_simulation_without_events_is_an_error():
    stations = [SimStation("cpu", 0.01)]
    assert closed_network(stations, 2, 0.0, units=200, warmup=20, seed=1).throughput > 0
    with pytest.raises(CapmarkError, match="stopped after 0 of 220 units"):
        closed_network(stations, 0, 0.0, units=200, warmup=20, seed=1)


def test_simulation_whose_replications_disagree_is_flagged():
    model = commit_model()
    enough = simulate(model, 4, units=20_000, replications=4)
    assert enough.converged and enough.rounds == 4
    few = simulate(model, 4, units=30, warmup=5, replications=2)
    assert not few.converged and few.rounds == 2
    assert any("replications disagree" in n for n in few.notes)


# --- plan/dbmodel.py ----------------------------------------------------------------------------------------------

def test_closed_fixed_point_out_of_rounds_says_so():
    model = commit_model()
    settled = solve(model, 8)
    assert settled.converged and 2 < settled.rounds < dbmodel.MAX_ROUNDS and settled.notes == []
    short = solve(model, 8, max_rounds=2)
    assert not short.converged and short.rounds == 2
    assert any("did not settle in 2 rounds" in n for n in short.notes)
    doc = short.to_dict()
    assert doc["converged"] is False and doc["rounds"] == 2


def test_open_fixed_point_out_of_rounds_says_so():
    model = commit_model()
    settled = solve_open(model, 4000.0)
    assert settled.converged and 1 < settled.rounds < dbmodel.MAX_ROUNDS
    short = solve_open(model, 4000.0, max_rounds=1)
    assert not short.converged and short.rounds == 1 and any("did not settle" in n for n in short.notes)


def test_open_model_grows_the_batch_instead_of_declaring_saturation_at_its_first_round():
    """At a batch of one (the first round) the flushes alone fill the WAL device at 1 / 80 us = 12,500 commits/s;
    one flusher batches whatever arrives during its flush, so the settled model carries more, and only the CPU
    without any flush work (2 cores / 85 us = 23,529/s) bounds it whatever the batch."""
    model = commit_model()
    above_first_round = solve_open(model, 12_600.0)
    assert not above_first_round.saturated and above_first_round.converged
    assert (above_first_round.batch or 0) > 2 and above_first_round.utilizations["WAL flush"] < 1
    beyond_cpu = solve_open(model, 24_000.0)
    assert beyond_cpu.saturated and beyond_cpu.converged  # saturated without any flush work: settled
    cap, _ = sizing.capacity(model)
    assert cap == pytest.approx(2 / 85e-6, rel=1e-3)
    short = solve_open(model, 16_000.0, max_rounds=1)  # the batch had no round to grow in
    assert short.saturated and not short.converged and any("might not" in n for n in short.notes)


def test_an_unsettled_network_solution_reaches_the_prediction(monkeypatch):
    monkeypatch.setattr(dbmodel, "EXACT_JOBS", 0)  # every round by Bard-Schweitzer
    assert solve(commit_model(), 8).converged
    monkeypatch.setattr(mva, "MAX_BISECTION_STEPS", 3)
    p = solve(commit_model(), 8)
    assert not p.converged and any("bisection steps" in n for n in p.notes)


def test_a_round_limit_below_one_is_refused():
    with pytest.raises(CapmarkError, match="at least 1 round"):
        solve(commit_model(), 4, max_rounds=0)


# --- plan/sizing.py -----------------------------------------------------------------------------------------------

def test_sizing_searches_name_the_loads_that_did_not_settle(monkeypatch):
    model = commit_model()
    sla = parse_sla("p95<400us")
    assert max_jobs(model, sla, 0.0).unsettled == [] and max_rate(model, sla).unsettled == []
    monkeypatch.setattr(dbmodel, "MAX_ROUNDS", 2)
    most = max_jobs(model, sla, 0.0)
    assert "2 jobs" in most.unsettled and "did not settle at" in (most.note or "")
    fastest = max_rate(model, sla)
    assert fastest.unsettled and fastest.note
    target = smallest_change(model, sla, 10_000.0)
    assert target["converged"] is False and target["unsettled_note"]


def test_jobs_search_at_its_limit_says_so(monkeypatch):
    model = commit_model()
    monkeypatch.setattr(sizing, "MAX_JOBS", 8)
    loose = max_jobs(model, parse_sla("mean<10s"), 0.0)
    assert loose.limit_reached and loose.jobs == 8
    tight = max_jobs(model, parse_sla("mean<300us"), 0.0)
    assert not tight.limit_reached and 1 <= tight.jobs < 8


def test_capacity_search_at_its_limit_says_so(monkeypatch):
    model = commit_model()
    cap, limit = sizing.capacity(model)
    assert not limit and solve_open(model, cap * 1.001).saturated and not solve_open(model, cap * 0.999).saturated
    monkeypatch.setattr(sizing, "MAX_CAPACITY_RATE", 100.0)
    rate, limit = sizing.capacity(model)
    assert limit and rate == 64.0  # the last doubling below the limit, not a saturation point
    assert max_rate(model, parse_sla("mean<10s")).limit_reached


def test_unsettled_sizing_reaches_the_console(monkeypatch):
    monkeypatch.setattr(dbmodel, "MAX_ROUNDS", 2)
    model = commit_model()
    sla = parse_sla("p95<400us")
    most, fastest = max_jobs(model, sla, 0.0), max_rate(model, sla)
    platform = Platform(cores=model.cores, cores_from=model.cores_from, cpu_from=model.cpu_from, notes=[])
    sizing_answer = Sizing(unit="transaction", sla=sla, calibrated_from=[1], think_s=0.0, platform=platform,
                           max_jobs=most.jobs,
                           at_max_jobs=most.at.to_dict() if most.at else None, one_more_job=most.beyond.to_dict(),
                           search_limit_reached=most.limit_reached, max_rate=fastest.rate,
                           at_max_rate=fastest.at.to_dict() if fastest.at else None,
                           rate_search_limit_reached=fastest.limit_reached, converged=False,
                           unsettled={"jobs": most.unsettled, "rate": fastest.unsettled},
                           unsettled_notes=[n for n in (most.note, fastest.note) if n], target=None)
    console = Console(record=True, width=300)
    print_size(document.TestAnswer(workload="commits", ordinal=1, answer=sizing_answer), console)
    assert "note: the model did not settle at" in console.export_text()


# --- plan/whatif.py -----------------------------------------------------------------------------------------------

def test_whatif_document_lists_unsettled_scenarios(monkeypatch):
    model = commit_model()
    scenarios = [Scenario("eight jobs", jobs=8)]
    assert evaluate(model, 1, 0.0, scenarios)["converged"] is True
    monkeypatch.setattr(dbmodel, "MAX_ROUNDS", 2)
    doc = evaluate(model, 1, 0.0, scenarios)
    assert doc["converged"] is False and doc["unconverged_scenarios"] == ["eight jobs"]
    row = doc["scenarios"][1]["prediction"]
    assert row["converged"] is False and row["rounds"] == 2


# --- plan/calibrate.py --------------------------------------------------------------------------------------------

def test_calibration_fixed_point_cut_short_is_noted():
    truth = commit_model(delay_s=40e-6)
    jobs = 4
    at = solve(truth, jobs)
    anchors = [Anchor(jobs=jobs, cycle_s=jobs / (at.throughput or math.nan),
                      flushes_per_unit=at.flushes_per_unit or 0.0)]
    fitted = fit_flushes_and_delay(commit_model(), anchors)
    assert fitted.notes == []
    assert jobs / (solve(fitted, jobs).throughput or math.nan) == pytest.approx(anchors[0].cycle_s, rel=1e-3)
    short = fit_flushes_and_delay(commit_model(), anchors, rounds=1, delay_rounds=1)
    assert any("calibration did not settle in 1 x 1 rounds" in n for n in short.notes)
