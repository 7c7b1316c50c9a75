import math
import random

import numpy as np
import pytest

from capmark.driver.histogram import (
    BUCKETS_PER_E,
    N_BUCKETS,
    RELATIVE_WIDTH,
    LatencyHistogram,
    bucket_bounds,
    bucket_of,
    merge_all,
)


def test_bucket_width_is_at_most_five_percent():
    assert RELATIVE_WIDTH <= 0.05
    for i in range(1, N_BUCKETS - 1):
        low, high = bucket_bounds(i)
        assert high / low - 1 == pytest.approx(RELATIVE_WIDTH)


def test_bucket_of_is_inside_its_bounds():
    rng = random.Random(1)
    for _ in range(10_000):
        x = math.exp(rng.uniform(math.log(1e-6), math.log(100)))
        low, high = bucket_bounds(bucket_of(x))
        assert low <= x * (1 + 1e-12) and x < high * (1 + 1e-12)
    assert bucket_of(0.0) == 0
    assert bucket_of(1e6) == N_BUCKETS - 1


def test_bucket_index_matches_the_plpgsql_formula():
    # the server computes floor(ln(us) * K); the client must agree at every scale
    for us in (1.5, 7.0, 123.4, 9999.0, 2.5e6):
        assert bucket_of(us / 1e6) == int(math.floor(math.log(us) * BUCKETS_PER_E))


def test_percentiles_within_bucket_resolution():
    rng = np.random.default_rng(7)
    samples = rng.lognormal(mean=math.log(200e-6), sigma=0.8, size=50_000)
    h = LatencyHistogram()
    for s in samples:
        h.record(float(s))
    assert h.total == len(samples)
    for q in (50, 90, 95, 99):
        exact = float(np.percentile(samples, q))
        assert h.percentile(q) == pytest.approx(exact, rel=RELATIVE_WIDTH)
    assert h.mean_s == pytest.approx(float(samples.mean()), rel=1e-9)
    assert h.observed_max_s == pytest.approx(float(samples.max()))


def test_merge_and_roundtrip():
    a, b = LatencyHistogram(), LatencyHistogram()
    for x in (1e-4, 2e-4, 3e-4):
        a.record(x)
    b.add_bucket_counts([0] * 100 + [5], sum_s=0.01)
    m = merge_all([a, b])
    assert m.total == 8
    assert m.sum_s == pytest.approx(0.0106)
    back = LatencyHistogram.from_dict(m.to_dict())
    assert back.counts == m.counts and back.total == 8
    assert back.max_s == pytest.approx(3e-4)


def test_empty_histogram_has_no_percentiles():
    h = LatencyHistogram()
    assert h.percentile(50) is None and h.mean_s is None and h.observed_max_s is None
