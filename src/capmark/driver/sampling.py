"""Sampled latency timing in server-side slices: how many units to time, and the sample scaled to every unit.

Timing a unit inside PL/pgSQL costs two clock reads, a bucket and a count: about 1-2 us, which is 10-20 % of
a cached primary-key lookup and would show in its throughput. So a slice may time only every k-th unit (a
systematic sample) while it still counts every unit and its busy time still runs from the first unit's start
to the last one's end: unit counts and the mean stay exact. Each slice's sampled histogram is scaled to that
slice's exact count of each type, in whole units. k is the smallest that keeps timing at or below 2 % of a
unit, and never so large that a type's percentiles would rest on fewer than 10,000 timed units in a step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from capmark.histogram import N_BUCKETS, bucket_of

TIMING_SHARE = 0.02  # timing may cost at most 2 % of a unit's time
SAMPLE_TARGET = 10_000  # a type's percentiles rest on at least this many timed units per step...
SAMPLE_MARGIN = 2.0  # ...even if its rate halves after the estimate (a shared machine drifts by +-15 %)
MAX_EVERY = 1_000  # a sampled slice checks its deadline at timed units only: this bounds its overrun
# The slice calibrates timing on a round around an empty unit; between real units a round costs no more: the timed
# unit runs through the same statements as the others, so only the round's own statements are added (srv-query1 on
# a 2-core VM: callgrind counts about 8,400 instructions per round, 30 % of a 28,000-instruction lookup, where the
# calibration measures 1.2 us of a 3.4 us lookup, 36 %; benchmarks/instructions_per_unit.py). It was 2.7 while the
# timed unit was a separate copy of the unit and the calibration timed the clock reads alone.
IN_LOOP_FACTOR = 1.0


def every_for(timing_s: float, mean_unit_s: float, expected_units: Sequence[float] | None) -> int:
    """The k of the next slice: time every k-th unit.

    timing_s is what timing one unit costs in the slice's calibration and mean_unit_s a unit's mean time, both
    measured by the slices; expected_units is each type's expected count in the step (None while the step's
    window is not known).
    """
    if not (0 < timing_s < math.inf and 0 < mean_unit_s < math.inf):
        return 1
    every = min(MAX_EVERY, math.ceil(IN_LOOP_FACTOR * timing_s / (TIMING_SHARE * mean_unit_s)))
    if expected_units is not None:
        seen = [n for n in expected_units if n > 0]
        every = min(every, int(min(seen) // (SAMPLE_TARGET * SAMPLE_MARGIN)) if seen else 1)
    return max(1, every)


def scale_counts(sampled: Sequence[int], units: int) -> list[int]:
    """Bucket counts of a sample scaled to `units` whole units: each bucket gets its share rounded down and
    the units left over go to the buckets with the largest remainders, so the counts add up to `units`."""
    timed = sum(sampled)
    if timed == units:
        return list(sampled)
    if timed == 0:
        raise ValueError("an empty sample cannot be scaled")
    parts = [divmod(c * units, timed) for c in sampled]
    out = [q for q, _ in parts]
    short = units - sum(out)
    for i in sorted(range(len(parts)), key=lambda j: -parts[j][1])[:short]:
        out[i] += 1
    return out


@dataclass
class SliceSampling:
    """One job's sampling: the k its next slice uses, and what its measured slices timed and counted."""

    every: int = 1  # the first slice times every unit (it measures the unit and the cost of timing it)
    # least cost of timing a unit and least mean unit seen: the machine's other load only ever inflates them,
    # and inflates them unequally (a preempted calibration takes 4 ms), so k comes from the undisturbed pair
    timing_s: float = math.inf
    mean_unit_s: float = math.inf
    rates: list[float] = field(default_factory=list)  # units per busy second of each type, last slice
    units: list[int] = field(default_factory=list)  # in the measured window, per type
    timed: list[int] = field(default_factory=list)
    shape: list[list[int]] = field(default_factory=list)  # timed counts per type and bucket, measured window
    every_used: set[int] = field(default_factory=set)

    def next_every(self, job_seconds: float | None) -> int:
        """k for the next slice; job_seconds is the measured window times the step's jobs, once known."""
        expected = [r * job_seconds for r in self.rates] if job_seconds else None
        self.every = every_for(self.timing_s, self.mean_unit_s, expected)
        return self.every

    def fold(self, hist: Sequence[int], units: Sequence[int], busy_s: float, timing_s: float,
             measure: bool) -> list[list[int]]:
        """One slice's histograms per type, scaled to its exact counts; notes what the next k needs."""
        ntypes = len(units)
        total = sum(units)
        self.timing_s = min(self.timing_s, timing_s)
        if total and busy_s > 0:
            self.mean_unit_s = min(self.mean_unit_s, busy_s / total)
            self.rates = [n / busy_s for n in units]
        per_type = [list(hist[t * N_BUCKETS:(t + 1) * N_BUCKETS]) for t in range(ntypes)]
        if not measure:
            return per_type
        if not self.units:
            self.units, self.timed = [0] * ntypes, [0] * ntypes
            self.shape = [[0] * N_BUCKETS for _ in range(ntypes)]
        self.every_used.add(self.every)
        scaled = []
        for t, (counts, n) in enumerate(zip(per_type, units, strict=True)):
            self.units[t] += n
            self.timed[t] += sum(counts)
            self.shape[t] = [a + b for a, b in zip(self.shape[t], counts, strict=True)]
            scaled.append(self._scaled(counts, n, busy_s / total if total else 0.0, t))
        return scaled

    def _scaled(self, counts: list[int], units: int, mean_s: float, t: int) -> list[int]:
        """A type's counts scaled to its units; a type none of whose units in the slice was timed takes the
        shape of its units timed so far in the window, or else the bucket of the slice's mean unit."""
        if sum(counts) or not units:
            return scale_counts(counts, units)
        if sum(self.shape[t]):
            return scale_counts(self.shape[t], units)
        out = [0] * N_BUCKETS
        out[bucket_of(mean_s)] = units
        return out


def record(instruments: dict, jobs: Sequence[SliceSampling], names: Sequence[str]) -> list[str]:
    """Store how the step's latencies were sampled (instruments['latency_sampling']); returns the notes that
    say so for each type whose units were not all timed. Nothing for a step without server-side slices."""
    measured = [j for j in jobs if j.units]
    if not measured:
        return []
    used = set().union(*(j.every_used for j in measured))
    per_type = {}
    notes = []
    for t, name in enumerate(names):
        units = sum(j.units[t] for j in measured)
        timed = sum(j.timed[t] for j in measured)
        per_type[name] = {"units": units, "timed": timed}
        if timed < units:
            notes.append(f"Latency of {name} sampled: 1 in {_every_text(min(used), max(used))} units timed "
                         f"({timed:,} of {units:,}); its percentiles are scaled from the timed units, its count "
                         "and mean cover every unit.")
    instruments["latency_sampling"] = {"every_min": min(used), "every_max": max(used), "types": per_type}
    return notes


def _every_text(low: int, high: int) -> str:
    return str(low) if low == high else f"{low} to {high}"
