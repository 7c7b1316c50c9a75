import math
import random

import numpy as np
import pytest

from capmark.histogram import (
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


# The server-side loops fold K * ln(1e6) into one constant (floor(ln(s) * K + K ln 1e6)) where the client
# computes floor(ln(us) * K): the two round differently only within a few float ulps of a bucket edge.
# EDGE_ULPS_REL is the measured width of that zone (1e-15 disagrees, 1e-14 agrees everywhere); the server's
# latencies are differences of microsecond clock readings, which never come that close to an irrational edge.
EDGE_ULPS_REL = 1e-13


def _server_buckets(dsn: str, latencies: list[float], type_index: int) -> list[int]:
    """Run the PL/pgSQL that the slice procedures use (workloads.base.record) on given latencies."""
    import psycopg

    from capmark.workloads.base import CLOCK, record

    step = record("t1", "t0", type_index).replace(CLOCK, "x")  # the unit 'ends' at x, having begun at 0
    with psycopg.connect(dsn) as conn:
        conn.execute(f"""
            create function pg_temp.server_buckets(lat float8[]) returns int[] language plpgsql as $$
            declare
              h int[] := array_fill(0, array[{(type_index + 1) * N_BUCKETS}]); b int; t0 float8 := 0; t1 float8;
              x float8; found int[] := '{{}}';
            begin
              foreach x in array lat loop
                {step}
                found := found || (b - 1 - {type_index * N_BUCKETS});
              end loop;
              return found;
            end $$""")
        return conn.execute("select pg_temp.server_buckets(%s)", (latencies,)).fetchone()[0]


def _latencies_around_every_edge() -> list[float]:
    out = [0.0, 1e-9, 5e-7, 1e-6, 1.5e-6, 1e3, 1e6]  # below 1 us, the 1 us floor, beyond the last bucket
    for i in range(N_BUCKETS + 1):
        edge = math.exp(i / BUCKETS_PER_E) * 1e-6
        out += [edge * (1 - EDGE_ULPS_REL), edge * (1 + EDGE_ULPS_REL)]
    rng = random.Random(3)
    out += [math.exp(rng.uniform(math.log(1e-7), math.log(1e4))) for _ in range(20_000)]
    out += [k * 1e-6 for k in range(1, 20_001)]  # whole microseconds, as clock_timestamp() gives them
    return out


@pytest.mark.db
@pytest.mark.parametrize("type_index", [0, 2])
def test_server_bucket_index_equals_the_client_histogram(embedded_dsn, type_index):
    """The same latency lands in the same bucket whether the server's loop or the Python driver timed it."""
    latencies = _latencies_around_every_edge()
    server = _server_buckets(embedded_dsn, latencies, type_index)
    wrong = [(x, s, bucket_of(x)) for x, s in zip(latencies, server, strict=True) if s != bucket_of(x)]
    assert not wrong, f"{len(wrong)} of {len(latencies)} latencies differ, e.g. (seconds, server, client): {wrong[:5]}"


@pytest.mark.db
def test_server_and_client_differ_by_at_most_one_bucket_exactly_on_an_edge(embedded_dsn):
    edges = [math.exp(i / BUCKETS_PER_E) * 1e-6 for i in range(1, N_BUCKETS)]
    server = _server_buckets(embedded_dsn, edges, 0)
    assert all(abs(s - bucket_of(x)) <= 1 for x, s in zip(edges, server, strict=True))


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


def test_many_latencies_at_once_land_where_one_by_one_would():
    """The client-side driver folds its units in bulk: every bucket count, the sum and the max must be those of
    recording them one at a time (a bucket off by one, a lost unit below 1 us, or the last bucket's cap would
    show), over seven decades of latency."""
    rng = random.Random(7)
    values = [10 ** rng.uniform(-7.5, 3.5) for _ in range(50_000)] + [0.0, 1e-6, 2e-6, 1e9]
    one_by_one, in_bulk = LatencyHistogram(), LatencyHistogram()
    for v in values:
        one_by_one.record(v)
    in_bulk.add_durations(np.asarray(values[:20_000]))
    in_bulk.add_durations(np.asarray(values[20_000:]))
    assert in_bulk.counts == one_by_one.counts
    assert in_bulk.total == len(values)
    assert in_bulk.max_s == one_by_one.max_s == 1e9
    assert in_bulk.sum_s == pytest.approx(one_by_one.sum_s, rel=1e-12)
