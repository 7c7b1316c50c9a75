"""Group commit: how many commits one WAL flush serves, predicted from the load instead of measured.

PostgreSQL lets one backend at a time write and flush WAL (WALWriteLock); when it gets the lock it
flushes everything inserted so far, so every commit that arrived during the previous flush rides on
the next one. The CITI Technical Report 98-3 saw the effect (redo writes per request fall with clients) but had to plug in
the measured value per load level. Here the batch size follows from a finite-source argument:

while a flush of length F runs, the b jobs of its batch wait; each of the other N - b jobs asks for
a flush within F with probability p = 1 - exp(-F / T), T being a job's time between flush requests
outside the flush wait. The next batch holds those arrivals, or one job if none came:

    b = (N - b) p + (1 - p)^(N - b)

At one job b = 1; when jobs compute briefly compared with F (p -> 1) two groups alternate and b -> N/2,
which is what PostgreSQL shows on fast-committing loads (measured 2.2, 3.9, 7.1 at 4, 8, 16 jobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FlushState:
    batch: float  # commits per flush
    arrival_probability: float  # p: chance another job asks for a flush during one flush
    wait_s: float  # mean time a commit waits for its flush (the flush in progress, then its own)


def batch_size(jobs: float, p: float) -> float:
    """Solve b = (N - b) p + (1 - p)^(N - b) for b in [1, N] (bisection: the right side falls with b)."""
    if jobs <= 1 or p <= 0:
        return 1.0

    def excess(b: float) -> float:
        m = jobs - b
        none_came: float = (1 - p) ** m  # float ** float is typed Any: the chance no other job asked
        return m * p + none_came - b

    lo, hi = 1.0, float(jobs)
    if excess(lo) <= 0:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def flush_state(jobs: float, flush_s: float, request_gap_s: float) -> FlushState:
    """The batch and the wait of a commit for given flush time and time between a job's flush requests
    (outside the wait). A job leaves its flush when the next one starts; if it asks
    again while that flush runs (probability p, and only if someone is in it) it waits for the rest of
    it, F - E[t | t < F] with t its exponential request gap, and then for its own flush."""
    p = 1 - math.exp(-flush_s / request_gap_s) if request_gap_s > 0 else 1.0
    b = batch_size(jobs, p)
    next_flush_runs = 1 - (1 - p) ** max(0.0, jobs - b)
    # E[t | t < F] for an exponential request gap t
    into_flush = request_gap_s - flush_s * (1 - p) / p if p > 0 and request_gap_s > 0 else 0.0
    rest = max(0.0, flush_s - into_flush)
    return FlushState(b, p, flush_s + p * next_flush_runs * rest)
