"""The planning model without a database: group commit, what-if invariants, sizing, parsing."""

from __future__ import annotations

import math

import pytest

from capmark.errors import CapmarkError
from capmark.model import mva
from capmark.plan.dbmodel import Config, DbModel, solve, solve_open
from capmark.plan.groupcommit import batch_size, flush_state
from capmark.plan.predict import curve, job_grid
from capmark.plan.sizing import max_jobs, max_rate, parse_sla, sizing_range, smallest_change
from capmark.plan.whatif import evaluate, expand, growth_name, load_scenarios, parse_growth


def make_model(cpu_s: float = 100e-6, disk_s: float = 20e-6, flush_requests: float = 0.0, flush_cpu_s: float = 0.0,
               flush_device_s: float = 0.0, cores: int = 2, delay_s: float = 0.0, think_s: float = 0.0) -> DbModel:
    return DbModel(workload="synthetic", unit="transaction", cores=cores, cpu_s=cpu_s, devices={"sda": disk_s},
                   wal_device="sda" if flush_requests else None, flush_requests=flush_requests,
                   flush_cpu_s=flush_cpu_s, flush_device_s=flush_device_s, delay_s=delay_s, client_s=0.0,
                   think_s=think_s, p95_over_mean=1.5, p99_over_mean=2.0, calibrated_from=[1])


COMMIT_MODEL = dict(cpu_s=85e-6, disk_s=0.0, flush_requests=1.0, flush_cpu_s=48e-6, flush_device_s=80e-6)


def test_batch_size_limits():
    assert batch_size(1, 0.9) == 1.0
    assert batch_size(16, 0.0) == 1.0
    assert batch_size(16, 1.0) == pytest.approx(8.0, rel=1e-6)  # two groups alternate
    sizes = [batch_size(n, 0.6) for n in (2, 4, 8, 16, 32)]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    assert batch_size(8, 0.3) < batch_size(8, 0.6) < batch_size(8, 0.9)


def test_flush_state_one_job_waits_one_flush():
    st = flush_state(1, 100e-6, 50e-6)
    assert st.batch == 1.0 and st.wait_s == pytest.approx(100e-6)


def test_closed_model_one_job_has_no_queueing():
    m = make_model()
    p = solve(m, 1)
    assert p.response_time_s == pytest.approx(120e-6, rel=1e-9)
    assert p.throughput == pytest.approx(1 / 120e-6)
    assert p.stretch == pytest.approx(1.0)


def test_closed_model_matches_plain_mva_without_commits():
    m = make_model(cpu_s=100e-6, disk_s=60e-6, cores=2)
    ref = mva.exact_mva([mva.Station("cpu", demand=100e-6, servers=2), mva.Station("d", demand=60e-6)], 8)
    assert solve(m, 8).throughput == pytest.approx(ref.throughput, rel=1e-9)


def test_group_commit_lowers_flushes_and_cpu_per_unit_with_load():
    m = make_model(**COMMIT_MODEL)
    points = [solve(m, n) for n in (1, 2, 4, 8, 16)]
    flushes = [p.flushes_per_unit for p in points]
    assert flushes[0] == pytest.approx(1.0)
    assert all(a >= b - 1e-9 for a, b in zip(flushes, flushes[1:], strict=False)) and flushes[-1] < 0.3
    cpu = [p.demands_s["CPU"] for p in points]
    assert cpu[-1] < cpu[0]  # the flush CPU is shared by the batch
    for p in points:
        assert p.utilizations["WAL flush"] <= 1.0 + 1e-9 and p.utilizations["CPU"] <= 1.0 + 1e-9


def test_more_cpus_never_lower_throughput():
    for kwargs in (dict(), COMMIT_MODEL, dict(cpu_s=10e-6, disk_s=200e-6)):
        m = make_model(**kwargs)
        for jobs in (1, 4, 16, 64):
            xs = [solve(m, jobs, config=Config(c)).throughput for c in (1, 2, 4, 8)]
            assert all(b >= a * (1 - 1e-9) for a, b in zip(xs, xs[1:], strict=False)), (kwargs, jobs, xs)
        rs = [solve_open(m, 3000, Config(c)).response_time_s for c in (2, 4, 8)]
        assert all(b <= a * (1 + 1e-9) for a, b in zip(rs, rs[1:], strict=False))


def test_io_bound_model_gains_nothing_from_cpus_but_from_disks():
    m = make_model(cpu_s=10e-6, disk_s=400e-6)
    base = solve(m, 32)
    assert base.bottleneck == "disk sda"
    more_cpus = solve(m, 32, config=Config(8))
    assert more_cpus.throughput == pytest.approx(base.throughput, rel=0.01)
    faster_disk = solve(m, 32, config=Config(2, disk_speed=2.0))
    assert faster_disk.throughput == pytest.approx(2 * base.throughput, rel=0.05)
    two_disks = solve(m, 32, config=Config(2, disks=2))
    assert two_disks.throughput > 1.8 * base.throughput


def test_growth_raises_utilization_proportionally_below_saturation():
    m = make_model()
    base = solve_open(m, 2000)
    for g in parse_growth("20%x3"):
        p = solve_open(m, 2000 * g)
        for name in ("CPU", "disk sda"):
            assert p.utilizations[name] == pytest.approx(g * base.utilizations[name], rel=1e-9)
        assert p.response_time_s > base.response_time_s


def test_open_model_flags_saturation():
    m = make_model(cpu_s=100e-6, cores=2)
    assert solve_open(m, 19_000).saturated is False
    sat = solve_open(m, 21_000)
    assert sat.saturated and sat.throughput is None and sat.bottleneck == "CPU"


def test_growth_parsing_and_names():
    factors = parse_growth("20%x3")
    assert factors == pytest.approx([1.2, 1.44, 1.728])
    assert [growth_name(g) for g in factors] == ["BL+20%", "BL+44%", "BL+72.8%"]
    assert parse_growth("5%") == pytest.approx([1.05])
    with pytest.raises(CapmarkError, match="20%x3"):
        parse_growth("twenty")


def test_whatif_rows_and_changes_vs_baseline():
    m = make_model()
    doc = evaluate(m, 1, 0.0, expand("", {"growth": "20%x3", "cpus": 4}))
    names = [s["name"] for s in doc["scenarios"]]
    assert names == ["Baseline", "Baseline (open)", "cpus 4 BL+20%", "cpus 4 BL+44%", "cpus 4 BL+72.8%"]
    assert doc["scenarios"][2]["change_vs_baseline_pct"]["throughput"] == pytest.approx(20.0)
    assert doc["scenarios"][2]["changes"] == {"growth": pytest.approx(1.2), "cpus": 4}


def test_scenario_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[scenario]]\nname = "fast disks"\ndisk_speed = 2\n\n[[scenario]]\nname = "grow"\n'
                    'growth = "10%x2"\ncpus = 4\n')
    scenarios = load_scenarios(path)
    assert [s.name for s in scenarios] == ["fast disks", "grow BL+10%", "grow BL+21%"]
    assert scenarios[0].disk_speed == 2.0 and scenarios[2].cpus == 4
    path.write_text('[[scenario]]\nname = "bad"\ncpu = 4\n')
    with pytest.raises(CapmarkError, match="Unknown scenario setting 'cpu'"):
        load_scenarios(path)
    path.write_text('[[scenario]]\nname = "bad"\ncpus = -1\n')
    with pytest.raises(CapmarkError, match="positive"):
        load_scenarios(path)


def test_sla_parsing():
    sla = parse_sla("p95<5ms")
    assert (sla.metric, sla.limit_s) == ("p95", pytest.approx(0.005))
    assert parse_sla("mean <= 250us").limit_s == pytest.approx(250e-6)
    assert parse_sla("p99<1s").metric == "p99"
    for bad in ("p95>5ms", "fast", "p50<1ms"):
        with pytest.raises(CapmarkError):
            parse_sla(bad)


@pytest.mark.parametrize("kwargs", [dict(), COMMIT_MODEL])
def test_sizing_returns_a_load_that_meets_the_sla_and_one_more_that_does_not(kwargs):
    m = make_model(**kwargs)
    limit = solve(m, 6).p95_s * 1.001
    sla = parse_sla(f"p95<{limit * 1e6:.3f}us")
    most = max_jobs(m, sla, 0.0)
    jobs, at, beyond = most.jobs, most.at, most.beyond
    assert jobs >= 6 and not most.limit_reached and most.unsettled == []
    assert at is not None and at.p95_s <= sla.limit_s
    assert beyond.jobs == jobs + 1 and beyond.p95_s > sla.limit_s
    fastest = max_rate(m, sla)
    rate, at_rate = fastest.rate, fastest.at
    assert not fastest.limit_reached
    assert at_rate is not None and at_rate.p95_s <= sla.limit_s * (1 + 1e-6)
    assert solve_open(m, rate * 1.01).p95_s is None or solve_open(m, rate * 1.01).p95_s > sla.limit_s


def test_sizing_carries_the_range_its_demands_spread_gives():
    """One core and nothing else: closed, the mean response time of N jobs is N D, so the most jobs within 1 ms is
    the whole part of 1 ms / D; open (M/M/1), the highest rate is (1 - D / 1 ms) / D. At D (1 -+ 10 %) both ends are
    exactly those; a spread applied the wrong way, or to a demand other than the CPU's, fails."""
    m = make_model(cpu_s=100e-6, disk_s=0.0, cores=1)
    m.demand_spread = {"cpu": 0.10, "devices": 0.50}
    sla = parse_sla("mean<1ms")
    jobs, rates = sizing_range(m, sla)
    assert jobs == [9, 11]  # 1 ms / 110 us = 9.1, 1 ms / 90 us = 11.1

    def mm1(demand_s: float) -> float:
        return (1 - demand_s / 1e-3) / demand_s

    assert rates == pytest.approx([mm1(110e-6), mm1(90e-6)], rel=1e-4)
    assert sizing_range(make_model(), sla) == (None, None)  # no spread measured: no range claimed


def test_smallest_change_meets_the_sla_at_the_target():
    m = make_model(cpu_s=100e-6, disk_s=10e-6)
    sla = parse_sla("mean<300us")
    target = 19_000.0  # near the 2-core limit of 20,000/s
    out = smallest_change(m, sla, target)
    assert not out["meets_now"] and out["smallest"] in ("cores", "cpu_speed")
    cores = out["options"]["cores"]["value"]
    assert sla.met(solve_open(m, target, Config(cores))) and not sla.met(solve_open(m, target, Config(cores - 1)))
    speed = out["options"]["cpu_speed"]["value"]
    assert sla.met(solve_open(m, target, Config(2, cpu_speed=speed)))
    assert out["options"]["disk_speed"]["value"] is None  # the CPU limits, not the disk


def test_curve_knee_and_maximum():
    m = make_model()
    c = curve(m, 64)
    assert [p.jobs for p in c.points] == job_grid(64)
    r1 = c.points[0].response_time_s
    knee = next(p for p in c.points if p.jobs == c.knee_jobs)
    assert knee.response_time_s >= 2 * r1
    before = [p for p in c.points if p.jobs < c.knee_jobs]
    assert all(p.response_time_s < 2 * r1 for p in before)
    assert c.max_throughput == pytest.approx(max(p.throughput for p in c.points))
    assert c.max_throughput <= 2 / 100e-6 * (1 + 1e-9) and not math.isnan(c.max_throughput)


def test_the_maximum_throughput_range_moves_the_bottlenecks_demand_by_its_own_spread():
    """Saturated, throughput is the bottleneck's servers over its demand: with each demand moved by its own spread
    the range is exactly that at either end. A spread applied to the wrong station, or the wrong way, fails."""
    cpu_bound = make_model(cpu_s=100e-6, disk_s=20e-6, cores=2)
    cpu_bound.demand_spread = {"cpu": 0.10, "devices": 0.50}  # the disk stays far from the CPU's 50 us per core
    low, high = curve(cpu_bound, 64).max_throughput_range
    assert (low, high) == pytest.approx((2 / 110e-6, 2 / 90e-6), rel=1e-3)
    io_bound = make_model(cpu_s=50e-6, disk_s=200e-6, cores=2)
    io_bound.demand_spread = {"cpu": 0.30, "devices": 0.10}
    low, high = curve(io_bound, 64).max_throughput_range
    assert (low, high) == pytest.approx((1 / 220e-6, 1 / 180e-6), rel=1e-3)
    assert curve(make_model(), 64).max_throughput_range is None  # no spread measured: no range claimed


def test_each_scenario_carries_the_range_its_demands_spread_gives():
    """A closed scenario saturated on 2 cores runs at 2 / D at either end of the CPU's spread; an open one at a
    rate the larger demand cannot carry has no throughput or response time at that end (saturated), while the
    smaller demand carries the rate."""
    m = make_model(cpu_s=100e-6, disk_s=1e-6, cores=2)
    m.demand_spread = {"cpu": 0.10}
    doc = evaluate(m, 64, 0.0, expand("", {"rate": 19_000.0}))
    closed, opened = doc["scenarios"][0]["spread_range"], doc["scenarios"][-1]["spread_range"]
    assert closed["throughput"] == pytest.approx([2 / 110e-6, 2 / 90e-6], rel=1e-3)
    assert closed["response_time_s"][0] < closed["response_time_s"][1]  # less demand, less time
    assert opened["throughput"][0] is None and opened["response_time_s"][1] is None  # 19,000/s > 2 / 110 us
    assert opened["throughput"][1] == pytest.approx(19_000.0)
    assert evaluate(make_model(), 1, 0.0, [])["scenarios"][0]["spread_range"] is None  # no spread, no range
