"""The clients' round trips in the baseline model: how many a unit makes, the curve fitted on the collector's probes,
and what the model's response times do with them as the load and the cores change."""

from __future__ import annotations

import dataclasses
import math

import pytest
from capacity.synthetic import APPS, QUERY, Truth, build

from capmark.capacity import PeakOptions, baseline, solve
from capmark.capacity.demands import CPU
from capmark.capacity.round_trips import fit, per_unit, wait_factor
from capmark.capacity.workloads import WorkloadRules, WorkloadUse, attribute

IDLE_S, QUEUE_S = 30e-6, 40e-6
ORDERS, LOOKUPS = APPS["orders"], APPS["lookups"]
PEAK = PeakOptions(by="cpu", length_s=600)


def probed(**kw: float) -> Truth:
    return Truth(round_trip_idle_s=IDLE_S, round_trip_queue_s=QUEUE_S, **kw)


@pytest.mark.parametrize("busy", [0.1, 0.5, 0.8, 0.95])
def test_the_wait_factor_is_the_mmc_wait_in_service_times(busy):
    """Against the closed forms: M/M/1 waits rho / (1 - rho) service times, M/M/2 rho^2 / (1 - rho^2)."""
    assert wait_factor(1, busy) == pytest.approx(busy / (1 - busy), rel=1e-12)
    assert wait_factor(2, busy) == pytest.approx(busy ** 2 / (1 - busy ** 2), rel=1e-12)
    assert wait_factor(2, 0.0) == 0.0 and wait_factor(2, 1.0) == math.inf


def test_a_unit_makes_a_round_trip_a_statement_and_its_blocks_hidden_begin_and_commit():
    """orders (BEGIN, UPDATE, INSERT, END) make four whether the statistics show its BEGIN and END or, as with a
    client that prepares them, not; an autocommit lookup makes one."""
    obs, _ = build()
    shown = attribute(obs, WorkloadRules()).over([i.ordinal for i in obs.usable()])
    hidden_obs = dataclasses.replace(obs, intervals=[
        dataclasses.replace(i, statements=[s for s in i.statements if s.query_id not in (QUERY["begin"], QUERY["end"])])
        for i in obs.intervals])
    hidden = attribute(hidden_obs, WorkloadRules()).over([i.ordinal for i in hidden_obs.usable()])
    assert shown[ORDERS].transaction_ends > 0 and hidden[ORDERS].transaction_ends == 0
    assert per_unit(shown[ORDERS]) == pytest.approx(4.0, rel=0.01)
    assert per_unit(hidden[ORDERS]) == pytest.approx(4.0, rel=0.01)
    assert per_unit(shown[LOOKUPS]) == pytest.approx(1.0, rel=1e-9)


def test_a_few_shown_transaction_ends_do_not_hide_the_other_blocks_begin_and_commit():
    """Orders (BEGIN, UPDATE, INSERT, END) from a client that prepares BEGIN and END, whose statistics still show a
    few blocks' (26 of 11,368 in a recorded production): 4 round trips a unit, not the 2.005 calls a unit that
    counting by calls alone gave once any end was shown."""
    units, shown = 11_368.0, 26.0
    use = WorkloadUse(units=units, calls=2 * units + 2 * shown, transaction_ends=shown)
    assert per_unit(use) == pytest.approx(4.0, rel=1e-9)
    assert per_unit(WorkloadUse(units=units, calls=4 * units, transaction_ends=units)) == pytest.approx(4.0)
    assert per_unit(WorkloadUse(units=units, calls=3 * units, transaction_ends=units)) == pytest.approx(3.0)


def test_the_curve_fitted_on_the_probes_recovers_the_idle_trip_and_its_growth():
    """Intervals 20-60 % busy with 3 % noise on each interval's mean: the idle trip and the trip on an 80 % busy host
    (beyond every interval) within 3 %. Caught: an inverted fit, a curve in the wrong busy or the wrong cores."""
    truth = probed()
    obs, _ = build(truth)
    peak = [i for i in obs.usable() if 30 <= i.ordinal < 40]
    curve, said = fit(obs, peak, truth.cores)
    assert curve is not None and curve.queue_s > 0, said
    assert curve.high_busy < 0.8
    assert curve.idle_s == pytest.approx(IDLE_S, rel=0.03)
    assert curve.at(0.8) == pytest.approx(IDLE_S + QUEUE_S * wait_factor(truth.cores, 0.8), rel=0.03)


def test_without_probes_the_model_is_the_servers_time_alone():
    doc = baseline(build()[0], None, PEAK)
    assert doc.model.round_trip is None and not doc.model.round_trips
    assert any("no round-trip probe" in n for n in doc.demands.notes)
    assert all(r.round_trips_s == 0 for r in doc.at_peak)


def test_the_peaks_measured_response_holds_its_round_trips_and_the_model_meets_it():
    """On the peak the measured time is the server's plus the probes' round trips, and the model, which grows its
    round trips with its own CPU, lands on it: a model that added them on one side only would be 4 x 60 us apart."""
    doc = baseline(build(probed())[0], None, PEAK)
    for check in doc.validation.responses:
        row = next(r for r in doc.at_peak if r.name == check.workload)
        assert row.round_trips_s > 0
        assert check.modelled_s == pytest.approx(check.measured_s, rel=0.02), check


def test_the_round_trips_grow_with_the_load_and_shrink_with_more_cores():
    doc = baseline(build(probed())[0], None, PEAK)
    model = doc.model
    at_peak = solve(model)
    grown = solve(model, {n: 1.5 * r for n, r in model.rates.items()})
    wider = solve(model, {n: 1.5 * r for n, r in model.rates.items()}, cpus=8)
    trips = model.round_trips[ORDERS]
    assert trips == pytest.approx(4.0, rel=0.01)
    per_trip = {k: s.round_trips_s[ORDERS] / trips for k, s in (("peak", at_peak), ("grown", grown),
                                                                 ("wider", wider))}
    assert per_trip["peak"] == pytest.approx(model.round_trip.at(at_peak.utilisation[CPU]), rel=1e-9)
    # 1.5x the rates: the CPU's wait factor grows faster than the load, and the trips with it
    assert per_trip["grown"] - IDLE_S > 1.5 * (per_trip["peak"] - IDLE_S) * 0.97
    assert per_trip["wider"] < per_trip["peak"]
