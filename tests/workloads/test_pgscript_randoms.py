"""pgbench's random functions: its generator and seeding (bit for bit), its documented distributions (checked
by moments and goodness of fit against the formulas, with bounds from the sample size), its hashes and its
permutation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from capmark.workloads.pgscript import randoms
from capmark.workloads.pgscript.errors import ExprError
from capmark.workloads.pgscript.randoms import PgPrng, pgbench_seeds

DRAWS = 20_000  # enough for the bounds below to catch a shifted or reshaped distribution, and cheap
SIGMAS = 5.0  # a correct generator strays this far about once in 1.7 million checks
FIT_P = 1e-6  # chi-square significance: a false alarm one time in a million


def test_seeding_and_draws_equal_pgbench_18():
    """Values pgbench 18.6 printed with debug() for `pgbench -c 1 -t 1 --random-seed=42`: random(1, 1000000),
    random_gaussian(1, 1000, 2.5), random_exponential(1, 1000, 3.0), random_zipfian(1, 1000, 1.07) in that
    order, then the hashes and permute with :default_seed."""
    seeds = pgbench_seeds(42, 1)
    assert seeds.default_seed == 4306334408478191133
    rng = seeds.client_rng(0)
    assert randoms.random_uniform(rng, 1, 1000000) == 668251
    assert randoms.random_gaussian(rng, 1, 1000, 2.5) == 777
    assert randoms.random_exponential(rng, 1, 1000, 3.0) == 20
    assert randoms.random_zipfian(rng, 1, 1000, 1.07) == 134
    assert randoms.hash_murmur2(12345, seeds.default_seed) == -9195922694672952628
    assert randoms.hash_fnv1a(-7, 99) == 4753769516686241720
    assert randoms.permute(17, 1000, seeds.default_seed) == 149


def test_each_client_gets_its_own_stream():
    seeds = pgbench_seeds(7, 3)
    firsts = {seeds.client_rng(i).uint64() for i in range(3)}
    assert len(firsts) == 3 and seeds.default_seed not in seeds.clients


def test_state_can_be_saved_and_restored_for_a_retry():
    rng = PgPrng(5)
    saved = rng.getstate()
    first = [rng.uint64() for _ in range(3)]
    rng.setstate(saved)
    assert [rng.uint64() for _ in range(3)] == first


def test_doubles_are_in_the_unit_interval_with_52_bits():
    rng = PgPrng(11)
    values = [rng.double() for _ in range(1000)]
    assert all(0.0 <= v < 1.0 and (v * 2**52).is_integer() for v in values)


def _pmf_uniform(lb, ub):
    n = ub - lb + 1
    return np.arange(lb, ub + 1), np.full(n, 1.0 / n)


def _pmf_exponential(lb, ub, p):
    n = ub - lb + 1
    k = np.arange(n)
    return lb + k, (np.exp(-p * k / n) - np.exp(-p * (k + 1) / n)) / (1.0 - math.exp(-p))


def _pmf_gaussian(lb, ub, p):
    n = ub - lb + 1
    k = np.arange(n)
    phi = stats.norm.cdf
    return lb + k, (phi(-p + 2 * p * (k + 1) / n) - phi(-p + 2 * p * k / n)) / (2 * phi(p) - 1)


def _pmf_zipfian(lb, ub, s):
    k = np.arange(1, ub - lb + 2, dtype=float)
    w = k ** -s
    return lb - 1 + k.astype(int), w / w.sum()


@pytest.mark.parametrize(("draw", "args", "pmf"), [
    (randoms.random_uniform, (1, 100), _pmf_uniform(1, 100)),
    (randoms.random_uniform, (-5, 5), _pmf_uniform(-5, 5)),
    (randoms.random_exponential, (1, 100, 5.0), _pmf_exponential(1, 100, 5.0)),
    (randoms.random_exponential, (0, 9, 0.5), _pmf_exponential(0, 9, 0.5)),
    (randoms.random_gaussian, (1, 100, 2.5), _pmf_gaussian(1, 100, 2.5)),
    (randoms.random_gaussian, (1, 20, 5.0), _pmf_gaussian(1, 20, 5.0)),
    (randoms.random_zipfian, (1, 100, 1.5), _pmf_zipfian(1, 100, 1.5)),
    (randoms.random_zipfian, (1, 1000, 1.07), _pmf_zipfian(1, 1000, 1.07)),
], ids=["uniform", "uniform-neg", "exponential", "exponential-flat", "gaussian", "gaussian-wide", "zipf-1.5",
        "zipf-1.07"])
def test_distributions_follow_pgbench_s_documented_formulas(draw, args, pmf):
    """The sample mean and variance are within 5 standard errors of the pmf's (standard errors from the pmf's
    own variance and fourth moment at this sample size), and a chi-square test does not reject the pmf."""
    xs, ps = pmf
    rng = PgPrng(20240611)
    sample = np.array([draw(rng, *args) for _ in range(DRAWS)])
    assert sample.min() >= xs[0] and sample.max() <= xs[-1]
    mean = float((xs * ps).sum())
    var = float(((xs - mean) ** 2 * ps).sum())
    mu4 = float(((xs - mean) ** 4 * ps).sum())
    assert abs(sample.mean() - mean) < SIGMAS * math.sqrt(var / DRAWS)
    assert abs(sample.var(ddof=1) - var) < SIGMAS * math.sqrt((mu4 - var**2) / DRAWS)
    observed = np.array([(sample == x).sum() for x in xs], dtype=float)
    expected = ps * DRAWS
    keep = expected >= 5.0  # pool the sparse tail into one bin, as the chi-square approximation needs
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    assert chi2 < stats.chi2.isf(FIT_P, len(obs) - 1)


def test_uniform_reaches_both_ends_and_one_value_ranges():
    rng = PgPrng(3)
    assert {randoms.random_uniform(rng, 1, 6) for _ in range(500)} == {1, 2, 3, 4, 5, 6}
    assert randoms.random_uniform(rng, 7, 7) == 7
    assert randoms.random_zipfian(rng, 4, 4, 2.0) == 4
    top = randoms.INT64_MAX - 1
    assert 1 <= randoms.random_uniform(rng, 1, top) <= top


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8, 100, 1000, 1021])
def test_permute_is_a_permutation_of_the_range(size):
    for seed in (0, 1, -12345):
        images = [randoms.permute(i, size, seed) for i in range(size)]
        assert sorted(images) == list(range(size))
        assert [randoms.permute(i + size, size, seed) for i in range(min(size, 10))] == images[:10]


def test_permute_depends_on_the_seed():
    one = [randoms.permute(i, 100, 1) for i in range(100)]
    two = [randoms.permute(i, 100, 2) for i in range(100)]
    assert one != two and one != list(range(100))


@pytest.mark.parametrize(("call", "message"), [
    (lambda r: randoms.random_uniform(r, 2, 1), "empty range"),
    (lambda r: randoms.random_gaussian(r, 1, 10, math.nan), "gaussian parameter"),
    (lambda r: randoms.random_exponential(r, 1, 10, -1.0), "exponential parameter"),
    (lambda r: randoms.random_zipfian(r, 1, 10, 1.0005), "zipfian parameter"),
    (lambda r: randoms.permute(1, -3, 0), "permute size"),
])
def test_bad_parameters_are_refused(call, message):
    with pytest.raises(ExprError, match=message):
        call(PgPrng(0))
