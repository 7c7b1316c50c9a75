"""The open loop's arrivals for the compiled lookup loop (driver/jobs.PoissonArrivals): whatever share of each batch
the loop starts, the arrivals handed out are one Poisson process of the rate asked for."""

from __future__ import annotations

import threading
import time

import numpy as np
from scipy import stats

from capmark.driver.jobs import PoissonArrivals

RATE = 625.0  # a job's share of 5,000 arrivals a second over 8 jobs
SPAN_S = 200.0  # 125,000 arrivals: a standard deviation of 0.28 % of the count
SIGMAS = 4.5  # a false alarm once in 10^5 runs; redrawing the gap that crossed a batch's horizon gave +3 % (10 sd)
KS_ALPHA = 1e-5
FAR = float("inf")  # a phase that does not end


def handed_out(started_share: float, seed: int) -> np.ndarray:
    """The arrivals of SPAN_S seconds as a loop starting `started_share` of each batch (at least one) takes them,
    from a start long past, so that every arrival is due and none is waited for."""
    start = time.perf_counter() - 1e6
    arrivals = PoissonArrivals(RATE, start, seed)
    never = threading.Event()
    taken: list[np.ndarray] = []
    rng = np.random.default_rng(seed)
    while True:
        due = arrivals.next(256, FAR, never)
        assert due is not None
        assert due[-1] - due[0] <= arrivals.HORIZON_S  # a batch reaches no further than the horizon
        started = len(due) if started_share >= 1 else max(1, int(rng.binomial(len(due), started_share)))
        taken.append(due[:started])
        arrivals.used(started)
        if due[started - 1] - start >= SPAN_S:
            break
    times = np.concatenate(taken) - start
    return times[times < SPAN_S]


def test_the_arrivals_are_as_many_as_the_rate_gives_and_their_gaps_exponential():
    """Batches started whole and batches cut short (a failed lookup ends a batch early) hand out the same process."""
    expected = RATE * SPAN_S
    for share in (1.0, 0.3):
        times = handed_out(share, seed=11)
        assert abs(len(times) - expected) < SIGMAS * expected ** 0.5, (share, len(times), expected)
        assert (np.diff(times) > 0).all()  # each arrival handed out once, in order
        gaps = np.diff(np.concatenate([[0.0], times]))
        assert stats.kstest(gaps, "expon", args=(0, 1 / RATE)).pvalue > KS_ALPHA, share


def test_a_stop_while_waiting_for_the_first_arrival_ends_the_wait():
    arrivals = PoissonArrivals(0.01, time.perf_counter(), seed=3)  # the first arrival some hundred seconds away
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    assert arrivals.next(256, FAR, stop) is None


def test_an_arrival_after_the_phase_is_handed_out_without_waiting_for_it():
    """At a low rate the next arrival may come long after the phase ends: the job must end the phase on time, not
    sleep until shortly before that arrival."""
    now = time.perf_counter()
    arrivals = PoissonArrivals(0.01, now, seed=3)  # the first arrival some hundred seconds away
    due = arrivals.next(256, now + 0.01, threading.Event())
    assert due is not None and due[0] > now + 1 and time.perf_counter() - now < 0.5
