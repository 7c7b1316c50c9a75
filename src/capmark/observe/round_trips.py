"""The collector's round-trip probe: a few empty statements at each activity sample, summed up per interval.

An application's statement costs it more than the server's statistics time: the trip to the server and back, and
waking the backend and the client, which grows as the host's CPU fills. No database statistic holds that time; the
capacity model needs it for each workload's response time as its clients see it (capmark.capacity.round_trips).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capmark.observations import RoundTrips

# Probes at each activity sample (1 Hz by default): the first wakes a backend idle since the last sample, the others
# follow it at once, as the statements of a transaction follow one another. An idle probe's round trip takes about
# 20 us (its CPU, the backend's and the collector's, is less), so at the defaults the probes keep well under 0.02 % of
# one core busy; not measured by benchmarks/observe_cost.py yet.
PROBES_PER_SAMPLE = 5


@dataclass
class RoundTripLog:
    """The probes' times since the last interval ended."""

    seconds: list[float] = field(default_factory=list)

    def add(self, elapsed_s: float) -> None:
        self.seconds.append(elapsed_s)

    def take(self) -> RoundTrips | None:
        """The interval's summary (None: no probe), and a fresh start for the next interval."""
        times, self.seconds = self.seconds, []
        if not times:
            return None
        values = np.asarray(times)
        p50, p90 = np.percentile(values, [50, 90])
        return RoundTrips(probes=len(times), mean_s=float(values.mean()), p50_s=float(p50), p90_s=float(p90),
                          max_s=float(values.max()))
