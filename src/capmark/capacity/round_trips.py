"""The clients' round trips in a workload's response time: how many a unit makes, and what one costs as the CPU fills.

A unit's time as its client sees it is its statements' time at the server (pg_stat_statements) plus one round trip
for each statement it sends: the trip to the server and back and the wake-ups of the backend and the client, which
no database statistic times (an autocommit statement's round trip even happens while its backend is idle). The
collector times its own round trips (capmark.observe.round_trips); on a production whose clients run where the
collector runs, those are theirs. A wake-up waits for a free core, so a round trip grows with the CPU's queue: the
curve here is the idle host's round trip plus a part proportional to the mean wait for one of c cores at the host's
utilisation (Erlang C), both fitted on the observation's intervals. On the tests' small production (2 cores), a
monitor's empty-statement round trip averaged 61, 108 and 213 us with the host 15, 43 and 68 % busy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from capmark.capacity.peak import cpu_busy
from capmark.capacity.workloads import WorkloadUse
from capmark.model.open import erlang_c
from capmark.observations import Interval, Observation

# A unit whose calls exceed one a unit by more than this sends several statements; below it, the few extra calls are
# a workload's rare second statement (an error's ROLLBACK, a session's SET), not a transaction block.
SEVERAL_STATEMENTS = 1.05
# A transaction block's BEGIN and COMMIT are round trips of their own, which pg_stat_statements does not show for
# clients that prepare them (pgbench -M prepared): a unit that sends several statements makes them, shown or not.
# The statistics may show a few (a recorded pgbench production showed 26 ENDs for 11,368 orders), so only the
# blocks whose ends are shown are counted by their calls. Statements sent together (several in one query string,
# or pipelined) take fewer round trips than this counts.
BLOCK_TRIPS = 2.0
# Intervals with probes needed to fit the curve; with fewer, the round trip is taken to be the same at every load.
MIN_FIT_INTERVALS = 6
# The host's busy must range over at least this much between the fitted intervals to tell the queue's part from the
# noise of the probes; narrower, the round trip is taken to be the same at every load.
MIN_BUSY_RANGE = 0.10


def wait_factor(cores: int, busy: float) -> float:
    """The mean wait for one of `cores` servers at utilisation `busy`, in units of the mean service time (M/M/c):
    zero on an idle host, without bound on a full one."""
    if busy <= 0:
        return 0.0
    if busy >= 1:
        return math.inf
    return erlang_c(cores, cores * busy) / (cores * (1 - busy))


@dataclass(frozen=True, kw_only=True)
class RoundTripCurve:
    """One round trip's mean seconds as a function of the host's CPU utilisation: idle_s + queue_s x wait_factor."""

    idle_s: float
    queue_s: float  # seconds per unit of the wait factor (0: the same at every load)
    cores: int  # the observed host's
    intervals: int  # what it was fitted on
    low_busy: float
    high_busy: float
    at_peak_s: float  # the probes' mean over the peak window, as measured

    def at(self, busy: float, cores: int | None = None) -> float:
        """A round trip on a host of `cores` cores (default: the observed one's) with its CPU `busy`; without bound
        on a full host."""
        if busy >= 1:
            return math.inf
        return self.idle_s + self.queue_s * wait_factor(cores or self.cores, busy)


def per_unit(use: WorkloadUse) -> float:
    """Round trips a unit of the workload makes: one a statement call, and a transaction block's BEGIN and COMMIT
    where it sends several statements, as many of them as the statistics do not show."""
    if use.units <= 0:
        return 0.0
    calls = use.calls / use.units
    shown = min(1.0, use.transaction_ends / use.units)  # the blocks whose BEGIN and END are among the calls
    if calls - BLOCK_TRIPS * shown > SEVERAL_STATEMENTS:
        calls += BLOCK_TRIPS * (1.0 - shown)
    return max(1.0, calls)


def measured_s(intervals: Sequence[Interval]) -> float | None:
    """The probes' mean round trip over the intervals (None: none was probed)."""
    probed = [i.round_trips for i in intervals if i.round_trips is not None and i.round_trips.probes > 0]
    probes = sum(r.probes for r in probed)
    return sum(r.mean_s * r.probes for r in probed) / probes if probes else None


def fit(observation: Observation, peak: Sequence[Interval], cores: int) -> tuple[RoundTripCurve | None, str]:
    """The curve fitted on the observation's usable intervals (weighted by their probes), and a sentence for the
    model's notes. None where the observation holds no probe (recorded by an older capmark)."""
    at_peak = measured_s(peak)
    if at_peak is None:
        return None, ("the observation holds no round-trip probe (it was recorded by an older capmark), so each "
                      "workload's mean response time is its statements' time at the server alone")
    points = [(b, i.round_trips.mean_s, i.round_trips.probes) for i in observation.usable()
              if i.round_trips is not None and i.round_trips.probes > 0 and (b := cpu_busy(i)) is not None]
    busy = [p[0] for p in points]
    flat = RoundTripCurve(idle_s=at_peak, queue_s=0.0, cores=cores, intervals=len(points),
                          low_busy=min(busy, default=math.nan), high_busy=max(busy, default=math.nan),
                          at_peak_s=at_peak)
    if len(points) < MIN_FIT_INTERVALS or max(busy) - min(busy) < MIN_BUSY_RANGE:
        return flat, (f"a round trip is taken to cost what the collector measured at the peak, "
                      f"{at_peak * 1e6:.0f} us, at every load: its {len(points)} probed intervals do not vary enough "
                      "in the host's busy to tell how it grows")
    x = np.array([wait_factor(cores, b) for b in busy])
    y = np.array([p[1] for p in points])
    w = np.array([float(p[2]) for p in points])
    slope, intercept = _weighted_line(x, y, w)
    if slope <= 0 or intercept <= 0:  # no growth told from the noise, or a line that needs a negative idle trip
        return flat, (f"a round trip is taken to cost what the collector measured at the peak, {at_peak * 1e6:.0f} us, "
                      f"at every load: over {len(points)} intervals with the host {min(busy):.0%} to {max(busy):.0%} "
                      "busy it did not grow with the CPU's queue")
    curve = RoundTripCurve(idle_s=intercept, queue_s=slope, cores=cores, intervals=len(points), low_busy=min(busy),
                           high_busy=max(busy), at_peak_s=at_peak)
    return curve, (f"a round trip to the server took {at_peak * 1e6:.0f} us at the peak (the collector's probes); "
                   f"fitted over {len(points)} intervals with the host {min(busy):.0%} to {max(busy):.0%} busy, it "
                   f"grows with the CPU's queue from {intercept * 1e6:.0f} us on an idle host, to "
                   f"{curve.at(0.8) * 1e6:.0f} us at 80 % busy")


def _weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Slope and intercept of the weighted least-squares line through (x, y)."""
    mx, my = np.average(x, weights=w), np.average(y, weights=w)
    sxx = float(np.sum(w * (x - mx) ** 2))
    if sxx <= 0:
        return 0.0, float(my)
    slope = float(np.sum(w * (x - mx) * (y - my)) / sxx)
    return slope, float(my - slope * mx)
