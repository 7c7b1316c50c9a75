"""pgbench's random functions, hashes and permutation, bit for bit.

The generator is PostgreSQL's own (pg_prng: xoroshiro128** seeded through splitmix64), and the seeds are
derived from the run's random seed in the order pgbench 18 derives them, so that a script run by capmark with
`--seed N` draws the same numbers as `pgbench --random-seed=N` does for the same client. The hashes and
permute() are pure functions of their arguments and equal pgbench's for every input.

Any object with the `RandomSource` methods may replace PgPrng (for example an adapter over numpy's
Generator); only the exact-match guarantee is lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from capmark.workloads.pgscript.errors import ExprError

M64 = (1 << 64) - 1  # uint64 arithmetic is done on Python ints masked to 64 bits
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

SPLITMIX_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment (golden ratio), as in pg_prng_seed
SPLITMIX_MUL1 = 0xBF58476D1CE4E5B9
SPLITMIX_MUL2 = 0x94D049BB133111EB
ZERO_STATE = (0x5851F42D4C957F2D, 0x14057B7EF767814F)  # pg_prng's replacement for an all-zero state (Knuth's LCG)
DOUBLE_BITS = 52  # pg_prng_double keeps 52 random bits: uniform on [0, 1) in steps of 2**-52

FNV_PRIME = 0x100000001B3
FNV_OFFSET_BASIS = 0xCBF29CE484222325
MM2_MUL = 0xC6A4A7935BD1E995
MM2_MUL_TIMES_8 = 0x35253C9ADE8F4CA8  # MM2_MUL * sizeof(int64), the murmur2 length term for one 8-byte key
MM2_ROT = 47
PERMUTE_ROUNDS = 6  # pgbench's choice: enough rounds for small sizes to reach every permutation about evenly

MIN_GAUSSIAN_PARAM = 2.0  # below this the gaussian's rejection loop would spin too often (pgbench's bound)
MIN_ZIPFIAN_PARAM = 1.001  # the rejection method needs s > 1 and is slow just above it
MAX_ZIPFIAN_PARAM = 1000.0


class RandomSource(Protocol):
    """What the random functions draw from; `getstate`/`setstate` let a retried transaction redraw the same."""

    def uint64(self) -> int: ...

    def uint64_range(self, lo: int, hi: int) -> int: ...

    def double(self) -> float: ...

    def double_normal(self) -> float: ...

    def getstate(self) -> object: ...

    def setstate(self, state: object) -> None: ...


def _rotl(x: int, bits: int) -> int:
    return ((x << bits) & M64) | (x >> (64 - bits))


def _splitmix64(state: int) -> tuple[int, int]:
    """One splitmix64 step: (new state, output)."""
    state = (state + SPLITMIX_GAMMA) & M64
    val = ((state ^ (state >> 30)) * SPLITMIX_MUL1) & M64
    val = ((val ^ (val >> 27)) * SPLITMIX_MUL2) & M64
    return state, val ^ (val >> 31)


class PgPrng:
    """PostgreSQL's pg_prng (xoroshiro128**): the generator pgbench draws every random value from."""

    __slots__ = ("s0", "s1")

    def __init__(self, seed: int = 0) -> None:
        self.s0 = self.s1 = 0
        self.seed(seed)

    def seed(self, seed: int) -> None:
        state, self.s0 = _splitmix64(seed & M64)
        _, self.s1 = _splitmix64(state)
        if self.s0 == 0 and self.s1 == 0:
            self.s0, self.s1 = ZERO_STATE

    def uint64(self) -> int:
        s0 = self.s0
        sx = self.s1 ^ s0
        val = (_rotl((s0 * 5) & M64, 7) * 9) & M64
        self.s0 = _rotl(s0, 24) ^ sx ^ ((sx << 16) & M64)
        self.s1 = _rotl(sx, 37)
        return val

    def uint64_range(self, lo: int, hi: int) -> int:
        """Uniform on [lo, hi] by bitmask rejection (fewer than two draws on average), as pg_prng_uint64_range."""
        if hi <= lo:
            return lo
        span = hi - lo
        shift = 64 - span.bit_length()
        while True:
            val = self.uint64() >> shift
            if val <= span:
                return lo + val

    def double(self) -> float:
        """Uniform on [0, 1) with 52 random bits."""
        return (self.uint64() >> (64 - DOUBLE_BITS)) * 2.0 ** -DOUBLE_BITS

    def double_normal(self) -> float:
        """A standard normal value by Box-Muller on two uniforms in (0, 1], as pg_prng_double_normal."""
        u1 = 1.0 - self.double()
        u2 = 1.0 - self.double()
        return math.sqrt(-2.0 * math.log(u1)) * math.sin(2.0 * math.pi * u2)

    def getstate(self) -> tuple[int, int]:
        return self.s0, self.s1

    def setstate(self, state: object) -> None:
        self.s0, self.s1 = state  # type: ignore[misc]


@dataclass(frozen=True)
class PgbenchSeeds:
    """The seeds pgbench 18 derives from --random-seed: one generator seed per client, then `:default_seed`."""

    clients: tuple[int, ...]
    default_seed: int  # as the int64 variable holds it

    def client_rng(self, client_id: int) -> PgPrng:
        return PgPrng(self.clients[client_id])


def pgbench_seeds(random_seed: int, clients: int) -> PgbenchSeeds:
    """pgbench seeds a base generator with --random-seed, draws each client's seed from it in client order, then
    draws `:default_seed` (the hash functions' default seed); reproducing that order reproduces its numbers."""
    base = PgPrng(random_seed)
    seeds = tuple(base.uint64() for _ in range(clients))
    return PgbenchSeeds(seeds, to_int64(base.uint64()))


def to_int64(u: int) -> int:
    """The int64 with the same 64 bits as `u` (C's cast of a uint64)."""
    u &= M64
    return u - (1 << 64) if u >> 63 else u


# --- random distributions (pgbench's getrand, getExponentialRand, getGaussianRand, getZipfianRand) ----------


def check_range(lb: int, ub: int) -> None:
    """pgbench refuses an empty range, and a range whose size does not fit an int64."""
    if lb > ub:
        raise ExprError("empty range given to random")
    if ub - lb + 1 > INT64_MAX:
        raise ExprError("random range is too large")


def random_uniform(rng: RandomSource, lb: int, ub: int) -> int:
    """random(lb, ub): every integer of [lb, ub] equally likely."""
    check_range(lb, ub)
    return lb + rng.uint64_range(0, ub - lb)


def random_exponential(rng: RandomSource, lb: int, ub: int, param: float) -> int:
    """random_exponential(lb, ub, param): P(lb + k) is proportional to exp(-param * k / n) for n values; the
    density at ub + 1 is exp(-param) times the density at lb."""
    check_range(lb, ub)
    if not param > 0.0:  # NaN too
        raise ExprError(f"exponential parameter must be greater than zero (not {param:f})")
    cut = math.exp(-param)
    uniform = 1.0 - rng.double()  # in (0, 1]
    rand = -math.log(cut + (1.0 - cut) * uniform) / param  # in [0, 1)
    return lb + int((ub - lb + 1) * rand)


def random_gaussian(rng: RandomSource, lb: int, ub: int, param: float) -> int:
    """random_gaussian(lb, ub, param): a normal distribution centred on the middle of [lb, ub], cut at `param`
    standard deviations either side (param >= 2)."""
    check_range(lb, ub)
    if not param >= MIN_GAUSSIAN_PARAM:  # NaN too: the rejection loop would never end
        raise ExprError(f"gaussian parameter must be at least {MIN_GAUSSIAN_PARAM:f} (not {param:f})")
    while True:
        stdev = rng.double_normal()
        if -param <= stdev < param:
            break
    rand = (stdev + param) / (param * 2.0)  # in [0, 1)
    return lb + int((ub - lb + 1) * rand)


def random_zipfian(rng: RandomSource, lb: int, ub: int, param: float) -> int:
    """random_zipfian(lb, ub, s): P(lb + k - 1) proportional to 1 / k**s for k = 1..n, by Devroye's rejection
    method (Non-Uniform Random Variate Generation, p. 550)."""
    check_range(lb, ub)
    if not MIN_ZIPFIAN_PARAM <= param <= MAX_ZIPFIAN_PARAM:
        raise ExprError(f"zipfian parameter must be in range [{MIN_ZIPFIAN_PARAM:.3f}, {MAX_ZIPFIAN_PARAM:.0f}] "
                        f"(not {param:f})")
    return lb - 1 + _zipfian(rng, ub - lb + 1, param)


def _zipfian(rng: RandomSource, n: int, s: float) -> int:
    if n <= 1:
        return 1
    b = 2.0 ** (s - 1.0)
    while True:
        u = rng.double()
        v = rng.double()
        if u == 0.0:
            continue  # C's pow(0, -a) is +inf, which the bound x <= n rejects
        try:
            x = math.floor(math.pow(u, -1.0 / (s - 1.0)))
        except OverflowError:
            continue  # likewise an infinite x
        if x > n:
            continue
        t = (1.0 + 1.0 / x) ** (s - 1.0)
        if v * x * (t - 1.0) / (b - 1.0) <= t / b:
            return x


# --- hashes and permutation --------------------------------------------------------------------------------


def hash_fnv1a(val: int, seed: int) -> int:
    """FNV-1a over the 8 bytes of `val`, least significant first, starting from the offset basis xor seed."""
    result = FNV_OFFSET_BASIS ^ (seed & M64)
    for _ in range(8):
        result = ((result ^ (val & 0xFF)) * FNV_PRIME) & M64
        val >>= 8
    return to_int64(result)


def hash_murmur2(val: int, seed: int) -> int:
    """MurmurHash64A (Austin Appleby) of one 8-byte key."""
    result = (seed & M64) ^ MM2_MUL_TIMES_8
    k = ((val & M64) * MM2_MUL) & M64
    k ^= k >> MM2_ROT
    k = (k * MM2_MUL) & M64
    result = ((result ^ k) * MM2_MUL) & M64
    result ^= result >> MM2_ROT
    result = (result * MM2_MUL) & M64
    result ^= result >> MM2_ROT
    return to_int64(result)


def permute(val: int, size: int, seed: int) -> int:
    """permute(i, size, seed): a pseudorandom permutation of [0, size) chosen by `seed`, applied to i mod size.

    Six rounds of an odd multiply, xor and rotate on the lower and on the upper part of the range (modulo the
    largest power of two <= size), each followed by a random offset modulo size, as pgbench does."""
    if size <= 0:
        raise ExprError("permute size parameter must be greater than zero")
    if size < 2:
        return 0
    state = PgPrng(seed)
    v = (val & M64) % size
    masklen = size.bit_length() - 1
    mask = (1 << masklen) - 1
    for _ in range(PERMUTE_ROUNDS):
        m = (state.uint64() & mask) | 1
        r = state.uint64() & mask
        if v <= mask:
            v = ((v * m) ^ r) & mask
            v = ((v << 1) & mask) | (v >> (masklen - 1))
        m = (state.uint64() & mask) | 1
        r = state.uint64() & mask
        t = size - 1 - v
        if t <= mask:
            t = ((t * m) ^ r) & mask
            t = ((t << 1) & mask) | (t >> (masklen - 1))
            v = size - 1 - t
        v = (v + state.uint64_range(0, size - 1)) % size
    return v
