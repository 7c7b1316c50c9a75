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


ARRIVALS = 20
ARRIVAL_GAP_S = 0.005
# A lookup that waits for its arrival starts when the kernel wakes the thread: tens of microseconds on an idle host,
# a few milliseconds when both cores are busy. A loop that ignores the arrivals starts all 20 within a millisecond
# of the call (its median lateness is then -47 ms), and one that sleeps a relative time from each lookup's end
# drifts by a lookup per arrival; the median lateness of 2 ms tells them apart on a busy host.
LATENESS_S = 0.002


def assert_paced_by_its_arrivals(session: Any, name: str) -> None:
    """With arrivals (a paced open loop), each lookup of the statement `name` waits for its own, starts at it, is
    timed from it, and an arrival after the batch's end ends the batch without a lookup."""
    loop = lookups(session, name)
    durations, ends = buffers(ARRIVALS)
    first = time.perf_counter() + 0.02
    arrivals = first + ARRIVAL_GAP_S * np.arange(ARRIVALS)
    starts = arrivals.copy()
    assert loop.run(10, FAR, durations, ends, 0, ARRIVALS, starts)[:2] == (ARRIVALS, None)
    lateness = starts - arrivals
    print(f"paced: lateness median {np.median(lateness) * 1e6:.0f} us, max {lateness.max() * 1e6:.0f} us")
    assert (lateness >= 0).all() and np.median(lateness) < LATENESS_S, lateness
    assert np.allclose(durations, ends - arrivals, rtol=0, atol=1e-9)  # from the arrival, not from the start
    assert (ends > starts).all()

    # the third arrival falls on the batch's end: two lookups, and the third's arrival is left as it was
    durations, ends = buffers(4)
    arrivals = time.perf_counter() + 0.01 + ARRIVAL_GAP_S * np.arange(4)
    starts = arrivals.copy()
    assert loop.run(10, float(arrivals[2]), durations, ends, 0, 4, starts)[:2] == (2, None)
    assert starts[2] == arrivals[2] and not durations[2:].any()

    # behind schedule: arrivals in the past start at once, and their latency holds the lag
    durations, ends = buffers(3)
    arrivals = time.perf_counter() - 0.05 + ARRIVAL_GAP_S * np.arange(3)
    starts = arrivals.copy()
    assert loop.run(10, FAR, durations, ends, 0, 3, starts)[:2] == (3, None)
    assert (starts - arrivals >= 0.04).all() and (durations >= starts - arrivals).all()
