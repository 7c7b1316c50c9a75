"""Log-bucketed latency histogram shared by both execution modes and every stage after them.

Part of the shared vocabulary at the bottom of the import order (tests/code/test_layers.py): the driver fills it,
the workloads' PL/pgSQL loops compute its bucket index, results store it and the report reads it.

Bucket i holds latencies in [exp(i/K), exp((i+1)/K)) microseconds with K = 25, a relative
width of exp(1/25) - 1 = 4.08 % (at most 5 % was asked for). Bucket 0 also takes everything
below 1 us. The server-side PL/pgSQL loops compute the same index, so one format serves both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

BUCKETS_PER_E = 25
N_BUCKETS = 520  # exp(520/25) us ~ 18 minutes: anything slower lands in the last bucket
RELATIVE_WIDTH = math.exp(1 / BUCKETS_PER_E) - 1


def bucket_of(seconds: float) -> int:
    us = seconds * 1e6
    if us <= 1.0:
        return 0
    return min(N_BUCKETS - 1, int(math.log(us) * BUCKETS_PER_E))


def bucket_bounds(index: int) -> tuple[float, float]:
    """Lower and upper edge of a bucket, in seconds."""
    low = 0.0 if index == 0 else math.exp(index / BUCKETS_PER_E) * 1e-6
    return low, math.exp((index + 1) / BUCKETS_PER_E) * 1e-6


class _Histogram(TypedDict):
    counts: dict[str, int]  # bucket index (as JSON keys are text) -> units in it
    sum_s: float


class HistogramRecord(_Histogram, total=False):
    """A histogram as stored (LatencyHistogram.to_dict); from_dict reads max_s where present and needs no more."""

    max_s: float | None
    buckets_per_e: int


@dataclass
class LatencyHistogram:
    """Counts per bucket plus the exact sum (mean) and, where the mode knows it, the exact max."""

    counts: dict[int, int] = field(default_factory=dict)
    sum_s: float = 0.0
    max_s: float | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def record(self, seconds: float) -> None:
        i = bucket_of(seconds)
        self.counts[i] = self.counts.get(i, 0) + 1
        self.sum_s += seconds
        if self.max_s is None or seconds > self.max_s:
            self.max_s = seconds

    def add_durations(self, seconds: np.ndarray) -> None:
        """Record many latencies at once, as record() would one by one: the client-side driver keeps its
        per-unit work to two list appends and folds them here, thousands at a time."""
        if not len(seconds):
            return
        us = seconds * 1e6
        index = np.zeros(len(us), dtype=np.int64)
        above = us > 1.0
        index[above] = np.minimum(N_BUCKETS - 1, (np.log(us[above]) * BUCKETS_PER_E).astype(np.int64))
        buckets, counts = np.unique(index, return_counts=True)
        for i, c in zip(buckets.tolist(), counts.tolist(), strict=True):
            self.counts[i] = self.counts.get(i, 0) + c
        self.sum_s += float(seconds.sum())
        longest = float(seconds.max())
        if self.max_s is None or longest > self.max_s:
            self.max_s = longest

    def add_bucket_counts(self, counts: Iterable[int], sum_s: float) -> None:
        """Fold in a dense bucket array (as returned by a server-side slice)."""
        for i, c in enumerate(counts):
            if c:
                self.counts[i] = self.counts.get(i, 0) + int(c)
        self.sum_s += sum_s

    def merge(self, other: LatencyHistogram) -> None:
        for i, c in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + c
        self.sum_s += other.sum_s
        if other.max_s is not None and (self.max_s is None or other.max_s > self.max_s):
            self.max_s = other.max_s

    @property
    def mean_s(self) -> float | None:
        n = self.total
        return self.sum_s / n if n else None

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0..100), interpolated geometrically inside its bucket."""
        n = self.total
        if not n:
            return None
        rank = q / 100.0 * n
        seen = 0
        for i in sorted(self.counts):
            c = self.counts[i]
            if seen + c >= rank:
                low, high = bucket_bounds(i)
                frac = (rank - seen) / c if c else 0.0
                if low <= 0:
                    return high * frac
                return float(low * (high / low) ** frac)
            seen += c
        return bucket_bounds(max(self.counts))[1]

    @property
    def observed_max_s(self) -> float | None:
        """Exact max where recorded, else the upper edge of the highest non-empty bucket."""
        if self.max_s is not None:
            return self.max_s
        return bucket_bounds(max(self.counts))[1] if self.counts else None

    def summary(self) -> dict[str, float | None]:
        return {
            "mean_s": self.mean_s,
            "p50_s": self.percentile(50),
            "p90_s": self.percentile(90),
            "p95_s": self.percentile(95),
            "p99_s": self.percentile(99),
            "max_s": self.observed_max_s,
        }

    def to_dict(self) -> HistogramRecord:
        return HistogramRecord(counts={str(k): v for k, v in sorted(self.counts.items())}, sum_s=self.sum_s,
                               max_s=self.max_s, buckets_per_e=BUCKETS_PER_E)

    @classmethod
    def from_dict(cls, data: HistogramRecord) -> LatencyHistogram:
        return cls({int(k): int(v) for k, v in data["counts"].items()}, float(data["sum_s"]), data.get("max_s"))


def merge_all(histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
    merged = LatencyHistogram()
    for h in histograms:
        merged.merge(h)
    return merged
