"""CPU capacity that does not scale with busy cores, and the transaction types of a mix as classes of the model."""

from __future__ import annotations

import numpy as np
import pytest

from capmark.driver.histogram import LatencyHistogram
from capmark.plan import cpuscaling
from capmark.plan.dbmodel import Config, DbModel, solve, solve_open
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
