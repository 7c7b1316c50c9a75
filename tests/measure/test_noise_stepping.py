"""The noise floor's interval math, the interleaved order of repetitions, and auto stepping's decisions (pure)."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats

from capmark.histogram import LatencyHistogram
from capmark.measure import noise
from capmark.measure.stepping import (
    FLAT_RISE,
    RT_BLOWUP,
    chain,
    interleave,
    next_jobs,
    stop,
    worst_case_steps,
)
from capmark.plan.calibrate import MODEL_ERROR, NO_INTERVAL, WITHIN_NOISE, _error_kind, _separation
from capmark.results import StepResult, TestResult


def scipy_half_width(values: list[float]) -> float:
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values), scale=stats.sem(values))
    return (hi - lo) / 2


@pytest.mark.parametrize("values", [[10.0, 12.0], [100.0, 101.0, 99.5, 103.0], [5.0, 5.0, 5.1, 4.9, 5.2, 5.0, 4.7]])
def test_t_interval_matches_scipy(values):
    got = noise.t_interval(values)
    assert got.mean == pytest.approx(statistics.fmean(values))
    assert got.half_width == pytest.approx(scipy_half_width(values), rel=1e-9)
    assert got.n == len(values) and got.method == noise.REPETITIONS


def test_t_interval_known_case():
    # two values 10 and 12: s = sqrt(2), t(0.975, 1) = 12.706: half-width 12.706 * sqrt(2) / sqrt(2) = 12.706
    assert noise.t_interval([10.0, 12.0]).half_width == pytest.approx(12.7062, abs=1e-3)
    one = noise.t_interval([7.0])
    assert one.half_width is None and not one.contains(7.0)
    assert noise.t_interval([3.0, 3.0, 3.0]).half_width == 0.0


def test_batch_means_groups_whole_batches_of_the_series():
    # 11 whole seconds (a 12th, partial one is left out): 5 batches of 2 s, the odd first second dropped
    series = [999, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 3]
    got = noise.batch_means(series)
    means = [11.0, 15.0, 19.0, 23.0, 27.0]
    assert got.method == noise.BATCH_MEANS and got.n == 5
    assert got.mean == pytest.approx(19.0)
    assert got.half_width == pytest.approx(scipy_half_width(means))


def test_batch_means_needs_two_batches():
    assert noise.batch_means([10, 10, 10]) is None  # 3 seconds: kept whole, one batch of 2 s only
    assert noise.batch_means([10, 11, 10, 12, 5]) is not None  # 4 whole seconds: two batches


def step(jobs: int, repeat: int, units: int, series: list[int] | None = None, status: str = "ok") -> StepResult:
    """A one-second step whose jobs, throughput and response time balance (Little's law), as a valid step's do."""
    hist = LatencyHistogram()
    for _ in range(units):
        hist.record(jobs / units)
    return StepResult(ordinal=0, jobs=jobs, status=status, started_at="", elapsed_s=1.0, txn_types=["q"],
                      histograms={"q": hist}, errors={}, series_units=series or [], repeat=repeat)


def test_analyse_means_and_intervals_over_repetitions_and_leaves_invalid_ones_out():
    steps = [step(1, 1, 100), step(2, 1, 180), step(2, 2, 200), step(1, 2, 110), step(1, 3, 5, status="failed")]
    rows = {r.jobs: r for r in noise.analyse(steps, ["throughput", "rt_mean_ms"])}
    one = rows[1]
    assert one.repeats == [1, 2, 3] and one.used == [1, 2]  # the failed repetition is left out of the mean
    assert one.kpms["throughput"].mean == pytest.approx(105.0)
    assert one.kpms["throughput"].half_width == pytest.approx(scipy_half_width([100.0, 110.0]))
    assert one.kpms["throughput"].contains(105.0)
    assert rows[2].kpms["throughput"].mean == pytest.approx(190.0)
    assert rows[2].kpms["rt_mean_ms"].mean == pytest.approx(1000 * (2 / 180 + 2 / 200) / 2, rel=0.05)


def test_one_repetition_shows_throughput_by_batch_means():
    series = [100, 102, 98, 101, 99, 103, 97, 100, 101, 99, 100, 50]
    row = noise.analyse([step(1, 1, 1000, series=series)], ["throughput", "rt_mean_ms"])[0]
    best = row.best("throughput")
    assert best.method == noise.BATCH_MEANS and best.half_width is not None
    assert row.best("rt_mean_ms").half_width is None  # a response time has no 1 s series


def test_stored_steps_without_a_repetition_read_as_the_first():
    old = step(1, 1, 10).to_dict()
    del old["repeat"]
    test = TestResult.from_dict({"ordinal": 1, "workload": "w", "family": "SRV", "description": "", "unit": "query",
                                 "throughput_label": "qps", "mode": "server", "params": {}, "kpms": ["throughput"],
                                 "steps": [old]})
    assert test.steps[0].repeat == 1 and test.stepping == {}
    assert noise.repeats_of(test.steps) == 1


def test_interleaved_order_reverses_every_other_pass():
    order = interleave([1, 2, 4, 8, 16], 2)
    assert [j for _, j in order] == [1, 2, 4, 8, 16, 16, 8, 4, 2, 1]
    assert [r for r, _ in order] == [1] * 5 + [2] * 5
    assert [j for _, j in interleave([1, 2], 3)] == [1, 2, 2, 1, 1, 2]
    assert interleave([4], 1) == [(1, 4)]


def curve(points: dict[int, tuple[float, float]]) -> list[tuple[int, float, float]]:
    return [(j, x, r) for j, (x, r) in points.items()]


def walk(truth, max_jobs: int) -> list[int]:
    """The steps auto stepping takes on a curve given as a function jobs -> (throughput, response time)."""
    measured, taken = [], []
    while (j := next_jobs(measured, max_jobs)) is not None:
        assert j not in taken, f"{j} measured twice"
        taken.append(j)
        measured.append((j, *truth(j)))
        assert len(taken) <= worst_case_steps(max_jobs)
    return taken


def test_auto_stepping_on_a_plateau_stops_after_two_flat_steps_and_names_the_knee():
    def plateau(j):  # linear to 4 jobs, then flat at 400
        x = 100.0 * min(j, 4)
        return x, j / x
    taken = walk(plateau, 64)
    assert taken == [1, 2, 4, 8, 6]  # the bend 4 -> 8 gets its midpoint, the second flat step after 4
    knee = stop([(j, *plateau(j)) for j in taken], 64)
    assert knee.rule == "throughput flat" and knee.jobs == 4 and knee.stopped_at == 8


def test_a_bend_gets_one_midpoint_only():
    def bend(j):  # doubling 4 -> 8 adds 30 %, 8 -> 16 another 30 %, then flat
        x = {1: 100.0, 2: 200.0, 4: 400.0, 6: 480.0, 8: 520.0, 16: 676.0}.get(j, 700.0)
        return x, j / x
    taken = walk(bend, 64)
    assert taken[:6] == [1, 2, 4, 8, 6, 16]  # no midpoint of 6 -> 8 nor of 8 -> 16 (no new bend)
    assert 12 not in taken and 7 not in taken


def test_auto_stepping_on_a_retrograde_curve():
    def retro(j):  # peaks at 8 jobs, then falls
        x = 100.0 * j / (1 + 0.02 * (j - 1) * j)
        return x, j / x
    taken = walk(retro, 128)
    assert max(taken) <= 32
    knee = stop([(j, *retro(j)) for j in taken], 128)
    assert knee.rule in ("throughput flat", "response time") and 4 <= knee.jobs <= 16


def test_auto_stepping_stops_when_the_response_time_blows_up():
    def queue(j):  # throughput still rising 10 % per doubling, response time growing with the jobs
        x = 100.0 * (1.1 ** math.log2(j)) if j > 1 else 100.0
        return x, 0.01 * j
    taken = walk(queue, 256)
    knee = stop([(j, *queue(j)) for j in taken], 256)
    assert knee.rule == "response time"
    assert knee.jobs == min(j for j in taken if 0.01 * j > RT_BLOWUP * 0.01)
    assert max(taken) == knee.jobs  # nothing measured past the blow-up


def test_auto_stepping_stops_at_the_bound():
    def linear(j):
        return 100.0 * j, 0.01
    assert walk(linear, 12) == [1, 2, 4, 8, 12]
    knee = stop([(j, *linear(j)) for j in (1, 2, 4, 8, 12)], 12)
    assert knee.rule == "bound" and knee.jobs is None and "12 jobs" in knee.text
    assert walk(linear, 1) == [1]
    assert chain(12) == [1, 2, 4, 8, 12] and chain(16) == [1, 2, 4, 8, 16]


def test_at_the_bound_a_bend_still_gets_its_midpoint_and_a_flat_end_is_named():
    def flat_at_two(j):  # the throughput falls from 2 to 4 jobs: one flat step, then the bound
        x = {1: 100.0, 2: 200.0, 3: 195.0}.get(j, 190.0)
        return x, j / x
    taken = walk(flat_at_two, 4)
    assert taken == [1, 2, 4, 3]
    knee = stop([(j, *flat_at_two(j)) for j in taken], 4)
    assert knee.rule == "throughput flat" and knee.jobs == 2
    half = stop([(j, *flat_at_two(j)) for j in (1, 2, 4)], 4)  # without the midpoint: the bound, but not "rising"
    assert half.rule == "bound" and "probably near 2 jobs" in half.text and "still rising" not in half.text


def test_one_flat_step_is_not_enough():
    pts = [(1, 100.0, 0.01), (2, 200.0, 0.01), (4, 400.0 * (1 + FLAT_RISE / 2) / 2, 0.01)]
    assert next_jobs(pts, 64) is not None


def test_noise_and_model_error_are_told_apart():
    assert _error_kind(105.0, 100.0, {"half_width": 6.0}) == WITHIN_NOISE
    assert _error_kind(110.0, 100.0, {"half_width": 6.0}) == MODEL_ERROR
    assert _error_kind(110.0, 100.0, None) == NO_INTERVAL
    rows = [{"error_pct": {"throughput": e, "response_time_s": 0.0}, "error_kind": {"throughput": k,
             "response_time_s": NO_INTERVAL}} for e, k in ((2.0, WITHIN_NOISE), (12.0, MODEL_ERROR),
                                                          (-20.0, MODEL_ERROR), (30.0, NO_INTERVAL))]
    sep = _separation(rows)["throughput"]
    assert (sep["within_noise"], sep["model_error"], sep["no_interval"]) == (1, 1 + 1, 1)
    assert sep["model_error_median_abs_pct"] == pytest.approx(16.0)
