"""Checks the engines' compiled lookup loops share (tests/engines/test_*_compiled_lookups.py): each loop against the
Python path it replaces, on the same connection."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pytest

from capmark.engines.base import CompiledKeyLookups

FAR = float("inf")  # a batch's end that never comes: the batch runs its limit
KEY_MAX = 8
DRAWS = 8_000
# each key's count is binomial(DRAWS, 1/KEY_MAX): 4.5 standard deviations leave a false alarm once in 10^5 runs,
# while a key never drawn (or drawn twice as often, as an off-by-one on the range's end gives) is far outside
SIGMAS = 4.5
DELAYS = 30
DELAY_S = 0.02
# the same 20 ms sleep timed in C and by perf_counter around the Python path's execution, alternately: the paths
# differ by tens of microseconds of client and protocol work (80 us measured on MariaDB, whose Python path sends a
# text EXECUTE), 0.4 % of the delay; a wrong clock or unit, or a lookup timed without its result, is not within 2 %
DELAY_AGREEMENT = 0.02


def lookups(session: Any, name: str, seed: int = 7) -> CompiledKeyLookups:
    loop = session.key_lookups(name, seed)
    assert loop is not None, "the compiled lookup loop is not built in this install"
    return loop


def buffers(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n), np.zeros(n)


def assert_uniform(counts: dict[int, int]) -> None:
    """The keys DRAWS lookups drew over 1..KEY_MAX, as the server stored them."""
    assert sorted(counts) == list(range(1, KEY_MAX + 1)), counts
    expected = DRAWS / KEY_MAX
    sigma = (DRAWS * (1 / KEY_MAX) * (1 - 1 / KEY_MAX)) ** 0.5
    assert all(abs(c - expected) < SIGMAS * sigma for c in counts.values()), counts


def assert_timed_like_the_python_path(session: Any, name: str) -> None:
    """The statement `name` sleeps DELAY_S: the loop's timings agree with perf_counter's around the Python path,
    land where asked in the buffers and are stamped on perf_counter's clock."""
    loop = lookups(session, name)
    durations, ends = buffers(DELAYS + 10)
    python_path, stamps = [], []
    for i in range(DELAYS):  # alternating, so that both see the host in the same state
        t0 = time.perf_counter()
        session.run(name, 1)
        python_path.append(time.perf_counter() - t0)
        before = time.perf_counter()
        assert loop.run(10, FAR, durations, ends, 10 + i, 1)[:2] == (1, None)  # from index 10
        stamps.append((before, time.perf_counter()))
    assert not durations[:10].any()  # nothing written before `start`
    timed = durations[10:]
    print(f"{DELAY_S * 1e3:.0f} ms sleep: p50 {statistics.median(timed) * 1e3:.3f} ms compiled, "
          f"{statistics.median(python_path) * 1e3:.3f} ms by perf_counter on the Python path")
    assert statistics.median(timed) == pytest.approx(statistics.median(python_path), rel=DELAY_AGREEMENT)
    assert timed.min() >= DELAY_S
    for (before, after), duration, end in zip(stamps, timed, ends[10:], strict=True):
        assert before < end - duration and end <= after  # perf_counter's clock, each lookup inside its call
