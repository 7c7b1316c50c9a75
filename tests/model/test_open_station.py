"""The open multi-class multi-server station against closed forms: one class is M/M/m (Erlang C), one server is the
product-form single queue D / (1 - rho) for every class."""

from __future__ import annotations

import math

import pytest

from capmark.model.open import mmm, open_multiclass_station


@pytest.mark.parametrize("servers, rate, service", [(1, 50.0, 0.01), (2, 150.0, 0.01), (4, 300.0, 0.01),
                                                     (16, 1400.0, 0.01), (64, 600.0, 0.1)])
def test_one_class_is_mmm(servers, rate, service):
    station = open_multiclass_station([rate], [service], servers)
    exact = mmm(rate, 1 / service, servers)
    assert station.utilization == pytest.approx(exact.utilization, rel=1e-12)
    assert station.residence_times[0] == pytest.approx(exact.response_time, rel=1e-12)


def test_one_server_several_classes_is_the_product_form_queue():
    station = open_multiclass_station([10.0, 20.0, 5.0], [0.01, 0.02, 0.04], 1, background_busy=0.1)
    rho = 0.1 + 0.1 + 0.4 + 0.2
    assert station.utilization == pytest.approx(rho)
    assert station.residence_times == pytest.approx([d / (1 - rho) for d in (0.01, 0.02, 0.04)], rel=1e-12)


def test_background_takes_capacity_and_saturation_is_infinite():
    quiet = open_multiclass_station([100.0], [0.01], 2)
    busy = open_multiclass_station([100.0], [0.01], 2, background_busy=0.8)
    assert busy.residence_times[0] > quiet.residence_times[0]
    full = open_multiclass_station([100.0, 0.0], [0.01, 0.0], 1, background_busy=0.1)
    assert full.utilization == pytest.approx(1.1) and math.isinf(full.residence_times[0])
    assert full.residence_times[1] == 0.0
