"""The discrete-event simulation against closed forms and exact MVA, and its group commit against the submodel.

Tolerances come from the replications: the exact figure must lie in the simulation's 99 % interval (seeded,
so each check is repeatable), and that interval must be narrow (a few per cent), so a wide, noisy
simulation cannot pass by being vague.
"""

from __future__ import annotations

import random

import pytest

from capmark.model import mva
from capmark.model.open import mmm
from capmark.model.sim import (
    Fcfs,
    GroupCommit,
    ProcessorSharing,
    SimStation,
    Simulator,
    closed_network,
    mean_interval,
)
from capmark.plan.dbmodel import WAL_FLUSH, DbModel, solve
from capmark.plan.simulate import simulate

WIDE_INTERVAL = 0.2  # three replications of 2,000 units: an interval over a fifth of the figure says nothing
LEVEL = 0.99  # the interval the exact figure must fall in: 1 in 100 seeds would miss it by chance alone
NARROW = 0.03  # and its half width relative to the mean: a broken, noisy simulation would be wider


def _open_queue(rate: float, service: float, servers: int, units: int, seed: int) -> float:
    """Mean response time of Poisson arrivals at an FCFS queue with exponential service (after 10 % warm-up)."""
    rng = random.Random(seed)
    sim = Simulator()
    queue = Fcfs(sim, servers)
    warm = units // 10
    seen: list[float] = []

    def arrive(i: int) -> None:
        start = sim.now
        queue.request(rng.expovariate(1 / service), lambda _: seen.append(sim.now - start) if i >= warm else None)
        if i + 1 < units + warm:
            sim.after(rng.expovariate(rate), arrive, i + 1)

    sim.after(0.0, arrive, 0)
    sim.run()
    return sum(seen) / len(seen)


def _check(values: list[float], exact: float) -> None:
    iv = mean_interval(values, LEVEL)
    assert iv.low <= exact <= iv.high, f"exact {exact:.6g} outside the simulation's interval {iv.low:.6g}-{iv.high:.6g}"
    assert iv.half_width < NARROW * iv.mean, f"interval too wide: +-{iv.half_width / iv.mean:.1%}"


@pytest.mark.parametrize("servers, utilization", [(1, 0.7), (3, 0.8)])
def test_open_fcfs_queue_matches_mm1_and_mmm(servers: int, utilization: float) -> None:
    service = 0.01
    rate = utilization * servers / service
    runs = [_open_queue(rate, service, servers, 150_000, seed) for seed in range(6)]
    _check(runs, mmm(rate, 1 / service, servers).response_time)


@pytest.mark.parametrize("jobs", [1, 2, 4, 8])
def test_product_form_network_matches_exact_mva(jobs: int) -> None:
    demands = {"CPU": 0.004, "disk a": 0.003, "disk b": 0.002}
    think = 0.01
    stations = [SimStation(k, v) for k, v in demands.items()]
    runs = [closed_network(stations, jobs, think, units=15_000, warmup=1_000, seed=seed) for seed in range(5)]
    exact = mva.exact_mva([mva.Station(k, v) for k, v in demands.items()], jobs, think)
    _check([r.throughput for r in runs], exact.throughput)
    _check([r.response_time for r in runs], exact.response_time)
    for k, u in zip(demands, exact.utilizations, strict=True):
        assert sum(r.utilizations[k] for r in runs) / len(runs) == pytest.approx(u, rel=NARROW)


@pytest.mark.parametrize("cores, jobs", [(2, 1), (2, 3), (4, 6), (4, 12)])
def test_processor_sharing_over_cores_matches_multi_server_mva(cores: int, jobs: int) -> None:
    """Each of n jobs on m cores gets min(1, m/n) of a core: MVA's load-dependent m-server station."""
    stations = [SimStation("CPU", 0.004, "ps", cores), SimStation("disk", 0.001)]
    runs = [closed_network(stations, jobs, 0.004, units=15_000, warmup=1_000, seed=seed) for seed in range(5)]
    exact = mva.exact_mva([mva.Station("CPU", 0.004, servers=cores), mva.Station("disk", 0.001)], jobs, 0.004)
    _check([r.throughput for r in runs], exact.throughput)
    _check([r.response_time for r in runs], exact.response_time)


def test_processor_sharing_shares_equally() -> None:
    """Three jobs of 1 s on 2 cores: each runs at 2/3, so all finish together at 1.5 s; then a lone one runs alone."""
    sim = Simulator()
    cpu = ProcessorSharing(sim, 2)
    done: dict[str, float] = {}
    for name in "abc":
        cpu.request(1.0, lambda who: done.setdefault(who, sim.now), name)
    sim.at(1.5, lambda _: cpu.request(0.5, lambda who: done.setdefault(who, sim.now), "d"))
    sim.run()
    assert done["a"] == pytest.approx(1.5) and done["c"] == pytest.approx(1.5)
    assert done["d"] == pytest.approx(2.0)
    assert cpu.utilization(sim.now) == pytest.approx((1.5 * 2 + 0.5) / (2 * 2.0))


def test_group_commit_takes_every_commit_written_before_it_starts() -> None:
    """A commit during a flush waits for the next flush, which takes all of them; one at a time."""
    sim = Simulator()
    flushes: list[float] = []

    def flush(done):  # a 1 s flush
        flushes.append(sim.now)
        sim.after(1.0, done)

    gc = GroupCommit(sim, flush)
    back: dict[str, float] = {}
    sim.at(0.0, lambda _: gc.commit(lambda who: back.setdefault(who, sim.now), "first"))
    for t, who in ((0.2, "b"), (0.5, "c"), (0.9, "d")):
        sim.at(t, lambda w: gc.commit(lambda x: back.setdefault(x, sim.now), w), who)
    sim.at(3.0, lambda _: gc.commit(lambda who: back.setdefault(who, sim.now), "late"))
    sim.run()
    assert flushes == [0.0, 1.0, 3.0]
    assert back == {"first": 1.0, "b": 2.0, "c": 2.0, "d": 2.0, "late": 4.0}
    assert (gc.flushes, gc.commits) == (3, 5)


def _commit_model(cpu_s: float, flush_device_s: float, cores: int = 2, think_s: float = 0.0) -> DbModel:
    return DbModel(workload="t", unit="transaction", cores=cores, cpu_s=cpu_s, devices={"wal": 0.0}, wal_device="wal",
                   flush_requests=1.0, flush_cpu_s=0.0, flush_device_s=flush_device_s, delay_s=0.0, client_s=0.0,
                   think_s=think_s, p95_over_mean=1.0, p99_over_mean=1.0)


def test_one_job_never_batches() -> None:
    p = simulate(_commit_model(50e-6, 500e-6), 1, units=3_000, replications=2)
    assert p.batch == 1.0 and p.flushes_per_unit == 1.0
    # alone, a unit is its CPU and its flush: the throughput follows with nothing in between
    lo, hi = p.interval["throughput"]
    assert lo <= 1 / 550e-6 <= hi


@pytest.mark.parametrize("jobs", [4, 8, 16])
def test_slow_flush_batches_half_the_jobs(jobs: int) -> None:
    """Flush far slower than the CPU: the commits of one flush all arrive during the next, two groups alternate
    and the batch is N/2 (the group-commit submodel's limit) — flushes per unit fall as 2/N."""
    p = simulate(_commit_model(5e-6, 1e-3), jobs, units=4_000, replications=2)
    assert p.batch == pytest.approx(jobs / 2, rel=0.01)
    assert p.flushes_per_unit == pytest.approx(2 / jobs, rel=0.01)
    assert p.utilizations[WAL_FLUSH] > 0.99


@pytest.mark.parametrize("jobs", [4, 8, 16])
def test_batch_agrees_with_group_commit_submodel(jobs: int) -> None:
    """Flush comparable with the time between commits: the submodel's finite-source batch. It is an approximation
    (exponential gaps, one flush length), so the tolerance is the batch's own interval plus 5 % for it; at these
    loads the two have agreed within 2 %."""
    model = _commit_model(400e-6, 200e-6, cores=8, think_s=1e-3)
    runs = [simulate(model, jobs, seed=s, units=4_000, replications=2) for s in range(3)]
    iv = mean_interval([r.batch for r in runs], LEVEL)
    analytic = solve(model, jobs).batch
    assert abs(iv.mean - analytic) <= iv.half_width + 0.05 * analytic
    if jobs >= 8:
        assert iv.mean > 1.2  # it batches at all


def test_batch_rises_and_flushes_fall_with_jobs() -> None:
    model = _commit_model(50e-6, 300e-6)
    preds = [simulate(model, n, units=3_000, replications=2) for n in (1, 2, 4, 8, 16)]
    batches = [p.batch for p in preds]
    assert batches == sorted(batches) and batches[-1] > 4
    flushes = [p.flushes_per_unit for p in preds]
    assert flushes == sorted(flushes, reverse=True)


def test_same_seed_same_answer() -> None:
    model = _commit_model(50e-6, 300e-6)
    a, b = (simulate(model, 4, seed=7, units=2_000, replications=2) for _ in range(2))
    c = simulate(model, 4, seed=8, units=2_000, replications=2)
    assert a == b
    assert a.throughput != c.throughput


def test_prediction_intervals_cover_a_long_run_of_the_same_model() -> None:
    """A short simulation's intervals must hold what a run twenty times as long (another seed) finds, and be narrow
    enough to say something: an interval from the wrong spread, or not scaled to the replications, misses or is
    useless. (An interval that merely contains its own mean would pass either way.)"""
    model = _commit_model(50e-6, 300e-6)
    p = simulate(model, 4, units=2_000, replications=3)
    long = simulate(model, 4, seed=99, units=40_000, replications=2)
    for key, reference in (("throughput", long.throughput), ("response_time_s", long.response_time_s)):
        lo, hi = p.interval[key]
        assert lo <= reference <= hi, (key, lo, hi, reference)
        assert hi - lo < WIDE_INTERVAL * reference, (key, lo, hi)
    assert p.p95_s <= p.p99_s and p.converged
    assert "3 replications" in p.method
    assert set(p.utilizations) >= {"CPU", "disk wal", WAL_FLUSH}
