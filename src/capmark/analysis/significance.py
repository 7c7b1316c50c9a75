"""Did a figure change between two runs, beyond what measuring it again would move it? Pure functions.

The samples of a figure are what its noise can be estimated from:

- repetitions (`--repeat K`): one value per valid repetition of a job count. They capture the variation from one
  measurement to the next (checkpoint timing, the machine's other load), so they are preferred wherever both runs
  have at least two;
- batch means of the 1 s throughput series: the window cut into consecutive batches of at least two seconds, as
  capmark.measure.noise does for its intervals. Neighbouring seconds are correlated (a checkpoint or a busy
  neighbour spans several), so treating 15 seconds as 15 independent samples would call noise a change; batch
  means of several seconds are much closer to independent. Only throughput has a 1 s series; the figures
  proportional to it (per job, rows, operations) share its samples, and the mean response time follows from it by
  Little's law, R = N / X - Z, in a closed loop. Batches of two or three seconds do not remove all correlation:
  for identical series whose seconds have a lag-1 correlation of 0.5, Welch's test on 12 s windows calls noise a
  change in about 25 % of pairs on the raw seconds and in about 14 % on batch means (5 % for independent seconds).
  And a single step measures its own window only: a change of the machine's background load between the two runs
  is a change to it, which only repetitions can tell apart.

The test is Welch's t-test (two-sided, unequal variances) on the logarithms of the samples, that is on the ratio
candidate / baseline. Performance figures vary by factors (a neighbour that takes a share of the CPU scales the
throughput), the change is reported as a ratio, and on the log scale the two runs' spreads are comparable even
when one runs ten times faster; on the raw scale the faster run's larger absolute spread would leave Welch's test
with one or two degrees of freedom. A batch or repetition value is a mean over many units and seconds, so it is
close to (log-)normal, which is what the t-test needs; a Mann-Whitney U test would need no normality, but with five
batches a side it cannot reach p-values much below 0.01, gives no interval for the change, and tests a shift of
the distributions rather than of the figure the report shows. A figure with a value of zero (no iowait) has no
ratio and is not tested.

The change is candidate / baseline - 1 in %, and its 95 % interval is Welch's interval of the difference of the
logarithms, exponentiated: the same test, so the interval excludes 0 % exactly when the (unadjusted) p-value is
below 5 %.

Many figures of several steps are tested per test; the p-values of one test are adjusted with Holm's step-down
method so that "no significant change" holds for the test as a whole at the 5 % level (the figures computed from
one step's batch means count as one hypothesis; with repetitions every figure is its own, which is conservative
where figures move together). The verdict follows pyperf's compare_to:
faster, slower or no significant change (for figures that are neither better high nor better low: higher, lower).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from capmark.measure.noise import BATCHES, MIN_BATCH_S
from capmark.measure.validity import full_seconds

ALPHA = 0.05  # the significance level of every verdict (family-wise per test after Holm's adjustment)
CONFIDENCE = 1 - ALPHA
# Samples whose logarithms differ by no more than this (a relative 1e-12) are equal but for float rounding: the
# t statistic of two such sets would divide by rounding noise.
NO_SPREAD = 1e-12

WELCH_REPETITIONS = "Welch t-test on the logarithms of the repetition values"
WELCH_BATCHES = "Welch t-test on the logarithms of batch means of the 1 s series"
NOT_TESTED = "not tested"


class Better(StrEnum):
    """Which way a figure improves."""

    HIGHER = "higher"  # throughput-type
    LOWER = "lower"  # latency- or cost-type
    NEITHER = "neither"  # descriptive (CPU busy, WAL per transaction): a change is reported, not judged


class Verdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    NO_CHANGE = "no significant change"
    HIGHER = "higher"
    LOWER = "lower"
    UNTESTED = "not tested"


@dataclass(frozen=True)
class Change:
    """One figure of one step, baseline against candidate."""

    baseline: float | None
    candidate: float | None
    change_pct: float | None  # candidate / baseline - 1, in %
    ci_low_pct: float | None  # the change's 95 % interval; None when not tested
    ci_high_pct: float | None
    p_value: float | None  # Welch's, two-sided
    test: str  # WELCH_REPETITIONS | WELCH_BATCHES | NOT_TESTED
    n_baseline: int
    n_candidate: int
    reason: str = ""  # why not tested

    @property
    def tested(self) -> bool:
        return self.p_value is not None


def change_pct(baseline: float | None, candidate: float | None) -> float | None:
    if baseline is None or candidate is None or not baseline:
        return None
    return (candidate / baseline - 1) * 100


def batch_means(series: Sequence[int | float]) -> list[float]:
    """The means of up to BATCHES consecutive batches of at least MIN_BATCH_S seconds of a 1 s series (its last,
    partial second left out; odd seconds dropped at the start, nearest the warm-up); [] when fewer than two fit."""
    seconds = [float(v) for v in full_seconds(list(series))]
    batches = min(BATCHES, len(seconds) // MIN_BATCH_S)
    if batches < 2:
        return []
    size = len(seconds) // batches
    kept = seconds[len(seconds) - batches * size:]
    return [statistics.fmean(kept[i * size:(i + 1) * size]) for i in range(batches)]


def little_response_times(throughputs: Sequence[float], jobs: int, think_s: float) -> list[float] | None:
    """Mean response time (s) of each batch from its throughput by Little's law, R = N / X - Z (closed loop);
    None when a batch completed nothing."""
    if any(x <= 0 for x in throughputs):
        return None
    return [jobs / x - think_s for x in throughputs]


def scaled_to(samples: Sequence[float], value: float) -> list[float]:
    """A step's batch means with their mean moved to the step's own figure, keeping their relative spread: the
    series leaves out the partial last second and Little's law holds only to a few per cent, while the report
    shows the step's figure."""
    mean = statistics.fmean(samples)
    return [v * value / mean for v in samples] if mean else list(samples)


@dataclass(frozen=True)
class Welch:
    p_value: float
    ratio_low: float  # 95 % interval of candidate / baseline
    ratio_high: float


def welch_log(baseline: Sequence[float], candidate: Sequence[float]) -> Welch | None:
    """Welch's two-sided test of the logarithms of candidate against baseline, with the ratio's interval; None where
    it is undefined (no spread on either side)."""
    lb, lc = [math.log(v) for v in baseline], [math.log(v) for v in candidate]
    if max(lb) - min(lb) <= NO_SPREAD and max(lc) - min(lc) <= NO_SPREAD:
        return None
    from scipy import stats  # loaded on first use: a command starts without scipy

    result = stats.ttest_ind(lc, lb, equal_var=False)
    p = float(result.pvalue)
    if not math.isfinite(p):
        return None
    ci = result.confidence_interval(CONFIDENCE)
    return Welch(p, math.exp(float(ci.low)), math.exp(float(ci.high)))


def compare_samples(baseline_samples: Sequence[float], candidate_samples: Sequence[float],
                    baseline: float, candidate: float, test: str) -> Change:
    """Welch's test on the logarithms of two sample sets (each >= 2 values) and the interval of the ratio of their
    geometric means, beside the change of the two figures the report shows (their arithmetic means)."""
    nb, nc = len(baseline_samples), len(candidate_samples)
    if min(baseline_samples) <= 0 or min(candidate_samples) <= 0 or baseline <= 0 or candidate <= 0:
        return untested(baseline, candidate, "a value of zero has no ratio to judge", nb, nc)
    welch = welch_log(baseline_samples, candidate_samples)
    if welch is None:
        return untested(baseline, candidate, "no spread in either run's samples to judge the change by", nb, nc)
    return Change(baseline, candidate, change_pct(baseline, candidate), (welch.ratio_low - 1) * 100,
                  (welch.ratio_high - 1) * 100, welch.p_value, test, nb, nc)


def untested(baseline: float | None, candidate: float | None, reason: str, nb: int = 0, nc: int = 0) -> Change:
    return Change(baseline, candidate, change_pct(baseline, candidate), None, None, None, NOT_TESTED, nb, nc, reason)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: the family-wise error stays at most the level the adjusted p is held to."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def verdict(change: Change, better: Better, p_adjusted: float | None) -> Verdict:
    """faster/slower (or higher/lower for a figure that is neither better high nor low) when the adjusted p-value
    is below ALPHA, else no significant change; not tested without a p-value."""
    if p_adjusted is None or change.baseline is None or change.candidate is None:
        return Verdict.UNTESTED
    if p_adjusted >= ALPHA or change.candidate == change.baseline:
        return Verdict.NO_CHANGE
    up = change.candidate > change.baseline
    if better is Better.NEITHER:
        return Verdict.HIGHER if up else Verdict.LOWER
    return Verdict.FASTER if up == (better is Better.HIGHER) else Verdict.SLOWER
