"""CPU capacity that does not scale with busy cores, and the transaction types of a mix as classes of the model."""

from __future__ import annotations

import numpy as np
import pytest

from capmark.histogram import LatencyHistogram
from capmark.plan import cpuscaling
from capmark.plan.dbmodel import Config, DbModel, mix_percentiles, solve, solve_open
from capmark.plan.mix import type_demands
from capmark.plan.simulate import simulate
from capmark.results import StepResult


def _cpu_model(cpu_s: float, growth: float, cores: int = 2, think_s: float = 0.0) -> DbModel:
    return DbModel(workload="cpu", unit="query", cores=cores, cpu_s=cpu_s, devices={}, wal_device=None,
                   flush_requests=0.0, flush_cpu_s=0.0, flush_device_s=0.0, delay_s=0.0, client_s=0.0,
                   think_s=think_s, p95_over_mean=1.0, p99_over_mean=1.0, cpu_growth=growth)


@pytest.mark.parametrize("jobs", [1, 2, 3, 6])
def test_slower_busy_cores_agree_between_mva_and_simulation(jobs):
    """Two implementations of the same definition: MVA's load-dependent station table and the simulation's
    processor sharing with slowed cores. An off-by-one in the table (the k-th core's slowdown applied to k - 1 or
    k + 1 jobs) moves the 2- and 3-job throughput by 10-30 % at this growth, far outside the simulation's
    interval."""
    model = _cpu_model(100e-6, 0.4, think_s=60e-6)
    mva = solve(model, jobs)
    sim = simulate(model, jobs, units=20_000, replications=4)
    lo, hi = sim.interval["throughput"]
    slack = 0.01 * sim.throughput  # the simulation's own approximation: exponential work, finite runs
    assert lo - slack <= mva.throughput <= hi + slack, (mva.throughput, sim.interval)
    assert mva.cpu_busy_pct == pytest.approx(sim.cpu_busy_pct, abs=2.0)


def test_saturated_throughput_is_the_effective_capacity():
    """With every core busy, 2 cores each 30 % slower serve 2 / (1.3 D) units per second, not 2 / D."""
    model = _cpu_model(100e-6, 0.3)
    capacity = 2 / (100e-6 * 1.3)
    assert solve(model, 64).throughput == pytest.approx(capacity, rel=1e-3)
    assert solve(model, 1).throughput == pytest.approx(1 / 100e-6, rel=1e-9)  # one busy core is not slowed
    # an open load saturates at that capacity too, not at the linear one
    assert not solve_open(model, 0.99 * capacity).saturated
    assert solve_open(model, 1.01 * capacity).saturated


def test_more_cores_extrapolate_the_slowdown():
    """A what-if with 8 cores: each busy core slows all by the calibrated growth, so 8 cores do
    8 / (1 + 7 g) cores' worth, Amdahl-like, instead of 8."""
    model = _cpu_model(100e-6, 0.1)
    x = solve(model, 400, config=Config(cores=8)).throughput
    assert x == pytest.approx(cpuscaling.effective_cores(8, 0.1) / 100e-6, rel=0.01)
    assert x < 0.6 * 8 / 100e-6


def test_growth_fit_refuses_what_noise_or_other_causes_would_explain():
    c = cpuscaling.CpuPoint
    close = cpuscaling.fit([c(1, 1.3, 10e-6), c(2, 1.6, 11e-6)], cores=2)
    assert close.growth == 0 and "too close" in close.note
    one = cpuscaling.fit([c(1, 1.2, 10e-6), c(1, 1.25, 10.5e-6)], cores=2)
    assert one.growth == 0 and one.note
    steep = cpuscaling.fit([c(1, 1.0, 10e-6), c(2, 2.0, 40e-6)], cores=2)
    assert steep.growth == cpuscaling.MAX_GROWTH and "bounded" in steep.note
    # a real rise: 12 % more CPU per unit with one more core busy, from two repetitions each
    real = cpuscaling.fit([c(1, 1.1, 10.0e-6), c(1, 1.1, 10.0e-6), c(2, 1.9, 10.96e-6), c(2, 1.9, 10.96e-6)], cores=2)
    assert real.growth == pytest.approx(0.96 / 0.8 / (10 - 0.1 * 1.2), rel=1e-6) and real.note is None


def _step(types: dict[str, tuple[int, float]]) -> StepResult:
    """A step whose types ran `units` units each of about `mean_s` (spread +-20 %)."""
    rng = np.random.default_rng(1)
    hists = {}
    for name, (units, mean_s) in types.items():
        h = LatencyHistogram()
        h.add_durations(rng.uniform(0.8 * mean_s, 1.2 * mean_s, units))
        hists[name] = h
    return StepResult(ordinal=1, jobs=1, status="ok", started_at="", elapsed_s=10.0, txn_types=list(types),
                      histograms=hists, errors={})


def test_flushes_go_to_the_types_whose_latency_holds_them():
    """tp-light: 0.2 flushes per unit, each 1 ms alone; reads take 40 us, updates 1.3 ms. Only the updates can
    have waited for a flush, one each; the reads none."""
    types = {t.name: t for t in type_demands([_step({"read": (8000, 40e-6), "update": (2000, 1.3e-3)})], 0.2, 1e-3)}
    assert types["update"].flush_requests == pytest.approx(1.0, rel=1e-6)
    assert types["read"].flush_requests == 0
    assert types["read"].share == pytest.approx(0.8)
    # what is left of the update beyond its flush is 0.3 ms against the read's 0.04 ms
    assert types["update"].scale / types["read"].scale == pytest.approx(0.3e-3 / 40e-6, rel=0.02)


def test_a_type_holds_whole_flushes_only():
    """stress-mixed: query, insert, update, delete a quarter each, 0.75 flushes per unit. The longest type could
    hold 1.4 flushes by its latency, but a commit flushes once: whole ones only, so each writer gets one."""
    step = _step({"query": (2500, 50e-6), "insert": (2500, 1.2e-3), "update": (2500, 1.3e-3),
                  "delete": (2500, 1.4e-3)})
    types = {t.name: t for t in type_demands([step], 0.75, 1e-3)}
    assert [types[n].flush_requests for n in ("query", "insert", "update", "delete")] == pytest.approx([0, 1, 1, 1])


def test_flushes_no_type_can_hold_were_not_waited_for():
    """stress-mixed as measured: 0.444 flushes per unit of 24.7 us each, but only the inserts (25 %, 25 us)
    can have waited for one; the updates (60 %, 14 us) cannot hold a flush and did not slow down when the
    inserts' flushes did. The other 0.19 flushes per unit were no unit's wait (the WAL writer's), so no type
    gets them, and the types' work outside flushes still averages to the mean unit's."""
    step = _step({"query": (1000, 5e-6), "insert": (2500, 25e-6), "update": (6000, 14e-6), "delete": (500, 13e-6)})
    types = {t.name: t for t in type_demands([step], 0.444, 24.7e-6)}
    assert types["insert"].flush_requests == pytest.approx(1.0)
    assert types["update"].flush_requests == types["query"].flush_requests == types["delete"].flush_requests == 0
    assert sum(t.share * t.scale for t in types.values()) == pytest.approx(1.0)
    assert types["update"].scale / types["query"].scale == pytest.approx(14 / 5, rel=0.03)


def _mix_model() -> DbModel:
    """A tp-light-like calibrated model: reads 80 % never flush, updates wait for a 1 ms flush."""
    model = DbModel(workload="mix", unit="transaction", cores=2, cpu_s=60e-6, devices={"wal": 0.0}, wal_device="wal",
                    flush_requests=0.2, flush_cpu_s=100e-6, flush_device_s=900e-6, delay_s=20e-6, client_s=0.0,
                    think_s=0.0, p95_over_mean=1.5, p99_over_mean=2.0)
    model.types = type_demands([_step({"read": (8000, 60e-6), "update": (2000, 1.2e-3)})], 0.2, 1e-3)
    model.type_reference = solve(model, 1).parts
    return model


def test_reads_of_a_mix_do_not_wait_for_the_updates_flushes():
    """At 16 jobs the flusher batches and the commits wait longer; the reads, which commit nothing to flush,
    meet only the CPU queue. Giving them a share of the flush wait (one class) would put their mean near the
    mix's."""
    model = _mix_model()
    p = solve(model, 16)
    read, update = p.by_type["read"], p.by_type["update"]
    assert p.parts["flush"] > 1.5 * model.type_reference["flush"]  # the flush waits did grow
    assert read["response_time_s"] < 0.5 * p.response_time_s < update["response_time_s"]
    assert read["throughput"] == pytest.approx(0.8 * p.throughput)
    assert update["p95_s"] > update["response_time_s"] > 1.2e-3


def test_a_mix_p95_is_the_slow_types_upper_quantile():
    """tp-light's reads (80 %) all finish within 10 us, so 5 % of all units slower than t means a quarter of the
    updates (20 %): the mix's p95 is the updates' 75th percentile and its p99 their 95th. A weighted mean of the
    types' p95 (0.8 x 8 + 0.2 x 250 = 56 us) or one class's exponential tail would miss it by a factor."""
    types = {"read": {"share": 0.8, "quantiles_s": [5e-6, 6e-6, 7e-6, 8e-6, 10e-6]},
             "update": {"share": 0.2, "quantiles_s": [100e-6, 150e-6, 200e-6, 250e-6, 400e-6]}}
    p95, p99 = mix_percentiles(types)
    assert p95 == pytest.approx(150e-6, rel=1e-6)
    assert p99 == pytest.approx(250e-6, rel=1e-6)
    # one type alone: its own percentiles back
    alone = mix_percentiles({"update": {"share": 1.0, "quantiles_s": types["update"]["quantiles_s"]}})
    assert alone == pytest.approx((250e-6, 400e-6), rel=1e-6)


def test_the_flush_waits_for_a_core_only_where_the_cpu_queues():
    """The flusher sleeps in fsync and must then get a core: its flush grows with the CPU's queue, not with the
    jobs. Alone it takes its CPU and device time; at 8 jobs on a CPU-bound commit load it takes longer; at 8 jobs
    on a load whose CPU is nearly idle it does not."""
    def commit_model(cpu_s: float) -> DbModel:
        return DbModel(workload="c", unit="transaction", cores=2, cpu_s=cpu_s, devices={"wal": 0.0},
                       wal_device="wal", flush_requests=1.0, flush_cpu_s=10e-6, flush_device_s=20e-6, delay_s=0.0,
                       client_s=0.0, think_s=0.0, p95_over_mean=1.0, p99_over_mean=1.0)

    busy, idle = commit_model(40e-6), commit_model(0.5e-6)
    assert solve(busy, 1).flush_s == pytest.approx(30e-6, rel=1e-9)
    assert solve(busy, 8).flush_s > 1.5 * 30e-6
    assert solve(idle, 8).flush_s == pytest.approx(30e-6, rel=0.05)


def test_cpu_rise_goes_to_commit_waits_where_the_steps_differ_in_them():
    """wal-lat1 as measured on 2 cores: 24 us of CPU per commit alone (0.8 cores busy), 38 us at 2 jobs (1.13
    busy) where 0.64 commits per unit met another's flush. Per busy core that rise would be +170 % (bounded,
    and 8 cores would then do 1.2 cores' worth); per wait it is 22 us, which a sleep, a wake-up and a lock
    hand-off cost. Steps that do not differ in their waits leave it to the cores."""
    c = cpuscaling.CpuPoint
    commits = cpuscaling.fit([c(1, 0.80, 24e-6, 0.0), c(2, 1.13, 38e-6, 0.64)], cores=2)
    assert commits.growth == 0 and commits.wait_cpu_s == pytest.approx(14e-6 / 0.64, rel=1e-6)
    lookups = cpuscaling.fit([c(1, 1.0, 4.1e-6, 0.0), c(2, 1.9, 4.6e-6, 0.0)], cores=2)
    assert lookups.wait_cpu_s == 0 and lookups.growth == pytest.approx(0.5e-6 / 0.9 / 4.1e-6, rel=1e-6)
    # no more than a wait can cost: a rise of 200 us per wait is something else
    assert cpuscaling.fit([c(1, 0.8, 24e-6, 0.0), c(2, 1.1, 150e-6, 0.6)], cores=2).wait_cpu_s == \
        cpuscaling.MAX_WAIT_CPU_S


def test_commit_waits_raise_the_cpu_per_commit_and_saturate_with_the_flusher():
    """The model calibrated as above: one job pays no wait; from a few jobs on almost every commit meets another's
    flush, so the CPU per commit rises by most of one wait's cost and then stays, whatever the jobs (wal-lat1
    measured 38-41 us at 4-16 jobs). A wait charged per job or per batch-mate would keep growing."""
    model = DbModel(workload="wal", unit="transaction", cores=2, cpu_s=24e-6, devices={"wal": 0.0},
                    wal_device="wal", flush_requests=1.0, flush_cpu_s=4e-6, flush_device_s=16e-6, delay_s=0.0,
                    client_s=0.0, think_s=0.0, p95_over_mean=1.2, p99_over_mean=1.5, wait_cpu_s=22e-6)
    lone = solve(model, 1)
    assert lone.demands_s["CPU"] == pytest.approx(24e-6 + 4e-6, rel=1e-6)
    per_commit = {}
    for jobs in (8, 16, 64):
        p = solve(model, jobs)
        per_commit[jobs] = p.demands_s["CPU"] - p.flushes_per_unit * 4e-6  # outside the flushes' own CPU
        assert 24e-6 + 0.5 * 22e-6 <= per_commit[jobs] <= 24e-6 + 22e-6 + 1e-12, (jobs, per_commit)
    assert per_commit[64] == pytest.approx(per_commit[8], rel=0.02)
