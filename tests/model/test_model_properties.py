"""Properties every solver must keep, on random models (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capmark.model import laws, mva

demand = st.floats(min_value=0.001, max_value=5.0)
demands = st.lists(demand, min_size=1, max_size=6)
think = st.floats(min_value=0.0, max_value=20.0)
population = st.integers(min_value=1, max_value=40)


def stations(ds):
    return [mva.Station(f"s{i}", demand=d) for i, d in enumerate(ds)]


@settings(max_examples=200, deadline=None)
@given(demands, think, population)
def test_exact_mva_keeps_the_bounds(ds, z, n):
    """Within the asymptotic bounds, no station beyond saturation, and more customers never give less throughput
    or a shorter response time (a recursion that drops or misplaces a term breaks one of these)."""
    r = mva.exact_mva(stations(ds), n, z)
    assert all(u <= 1 + 1e-9 for u in r.utilizations)
    if n > 1:
        fewer = mva.exact_mva(stations(ds), n - 1, z)
        assert r.throughput >= fewer.throughput * (1 - 1e-9)
        assert r.response_time >= fewer.response_time * (1 - 1e-9)
    b = laws.asymptotic_bounds(ds, z, n)
    assert b["throughput_lower"] * (1 - 1e-9) <= r.throughput <= b["throughput_upper"] * (1 + 1e-9)
    assert b["response_time_lower"] * (1 - 1e-9) <= r.response_time <= b["response_time_upper"] * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(demands, think)
def test_schweitzer_equals_exact_for_one_customer(ds, z):
    exact = mva.exact_mva(stations(ds), 1, z)
    approx = mva.schweitzer_mva(stations(ds), 1, z)
    assert approx.throughput == pytest.approx(exact.throughput, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(demands, think, st.integers(min_value=1, max_value=12))
def test_one_class_multiclass_equals_single_class(ds, z, n):
    single = mva.exact_mva(stations(ds), n, z)
    multi = mva.exact_mva_multiclass([[d] for d in ds], [n], [z])
    assert multi.throughput[0] == pytest.approx(single.throughput, rel=1e-9)
    assert multi.queue_lengths == pytest.approx(single.queue_lengths, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(demands, think, population)
def test_one_server_multiserver_equals_queueing_station(ds, z, n):
    plain = mva.exact_mva(stations(ds), n, z)
    as_ld = mva.exact_mva([mva.Station(f"s{i}", demand=d, service_time_with_n_present=[d] * n)
                           for i, d in enumerate(ds)], n, z)
    assert as_ld.throughput == pytest.approx(plain.throughput, rel=1e-6)
    assert as_ld.queue_lengths == pytest.approx(plain.queue_lengths, rel=1e-6, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(demands, think, st.integers(min_value=1, max_value=600))
def test_convolution_equals_the_mva_recursion(ds, z, n):
    rec = mva.exact_mva(stations(ds), n, z, method="recursion")
    conv = mva.exact_mva(stations(ds), n, z, method="convolution")
    assert conv.throughput == pytest.approx(rec.throughput, rel=1e-9)
    assert conv.queue_lengths == pytest.approx(rec.queue_lengths, rel=1e-7, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(demands, think, st.integers(min_value=1, max_value=30))
def test_linearizer_is_at_least_as_close_to_exact_as_schweitzer(ds, z, n):
    exact = mva.exact_mva(stations(ds), n, z).throughput
    lin = mva.linearizer(stations(ds), n, z).throughput
    bs = mva.schweitzer_mva(stations(ds), n, z).throughput
    assert abs(lin - exact) <= abs(bs - exact) * 1.05 + 1e-9
    assert lin == pytest.approx(exact, rel=0.02)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=6), demand, population)
def test_a_balanced_network_has_its_closed_form(k, d, n):
    """K equal queueing stations and no think time: X(N) = N / ((N + K - 1) D), a result that owes nothing to
    the recursion (Lazowska et al., Quantitative System Performance, balanced systems)."""
    r = mva.exact_mva(stations([d] * k), n, 0.0)
    assert r.throughput == pytest.approx(n / ((n + k - 1) * d), rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(demand, st.floats(min_value=0.01, max_value=20.0), population)
def test_one_station_with_think_time_is_the_machine_repairman(d, z, n):
    """One queueing station and N customers thinking Z: the finite-source queue, solved from its state
    probabilities p_k proportional to N! / (N - k)! (D / Z)^k; throughput = (1 - p_0) / D."""
    terms = [1.0]
    for k in range(1, n + 1):
        terms.append(terms[-1] * (n - k + 1) * d / z)
    p0 = 1.0 / sum(terms)
    r = mva.exact_mva(stations([d]), n, z)
    assert r.throughput == pytest.approx((1 - p0) / d, rel=1e-7)
