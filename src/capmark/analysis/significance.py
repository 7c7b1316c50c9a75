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
  Little's law, R = N / X - Z, in a closed loop. A single step measures its own window only: a change of the
  machine's background load between the two runs is a change to it, which only repetitions can tell apart.

The test is Welch's t-test (two-sided, unequal variances) on the samples. A batch or repetition value is a mean
over many units and seconds, so it is close to normal, which is what the t-test needs; a Mann-Whitney U test would
need no normality but with five batches a side it cannot reach p-values much below 0.01, gives no interval for the
change, and tests a shift of the distributions rather than of the means the report shows.

The change is candidate / baseline - 1 in %, and its 95 % interval is the set of ratios r for which Welch's test of
the candidate against r x baseline does not reject at 5 %: the same test inverted (Fieller's interval with Welch's
degrees of freedom), so an interval excludes 0 % exactly when the p-value is below 5 %, and it widens on the side
where a noisy baseline leaves the ratio uncertain (it may be open on that side).

Many figures of several steps are tested per test; the p-values of one test are adjusted with Holm's step-down
method so that "no significant change" holds for the test as a whole at the 5 % level (the figures that share one
series are counted separately, which makes it a little conservative). The verdict follows pyperf's compare_to:
faster, slower or no significant change (for figures that are neither better high nor better low: higher, lower).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from scipy import optimize, stats

from capmark.measure.noise import BATCHES, MIN_BATCH_S
from capmark.measure.validity import full_seconds

ALPHA = 0.05  # the significance level of every verdict (family-wise per test after Holm's adjustment)
CONFIDENCE = 1 - ALPHA
# Ratios searched for the interval's ends: a change beyond x1000 either way is no longer a measurement of the same
# thing; the interval is then reported open on that side.
RATIO_SPAN = 1000.0

WELCH_REPETITIONS = "Welch t-test on repetition values"
WELCH_BATCHES = "Welch t-test on batch means of the 1 s series"
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
    ci_low_pct: float | None  # the change's 95 % interval; None: open on that side (or not tested)
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
    """The samples with their mean moved to the step's own figure, keeping their relative spread: the series
    leaves out the partial last second and Little's law holds only to a few per cent, while the report shows
    the step's figure. Welch's test of a ratio is unchanged by a common factor, the interval then centres on it."""
    mean = statistics.fmean(samples)
    return [v * value / mean for v in samples] if mean else list(samples)


def welch_p(baseline: Sequence[float], candidate: Sequence[float], ratio: float = 1.0) -> float | None:
    """Two-sided p-value of Welch's t-test of candidate against ratio x baseline; None where it is undefined
    (no spread on either side)."""
    scaled = [v * ratio for v in baseline]
    if statistics.pvariance(scaled) == 0 and statistics.pvariance(candidate) == 0:
        return None
    p = float(stats.ttest_ind(candidate, scaled, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def ratio_interval(baseline: Sequence[float], candidate: Sequence[float]) -> tuple[float | None, float | None]:
    """The ratios r (candidate / baseline) that Welch's test of candidate vs r x baseline keeps at ALPHA; either end
    None where the test keeps every ratio up to RATIO_SPAN on that side (too noisy a baseline)."""
    mb, mc = statistics.fmean(baseline), statistics.fmean(candidate)
    if mb <= 0 or mc < 0:
        return None, None
    centre = mc / mb

    def gap(r: float) -> float:
        p = welch_p(baseline, candidate, r)
        return (p if p is not None else 1.0) - ALPHA

    low_end, high_end = 0.0, max(centre, 1e-12) * RATIO_SPAN
    low = optimize.brentq(gap, low_end, centre, xtol=1e-12) if centre > 0 and gap(low_end) < 0 else None
    high = optimize.brentq(gap, centre, high_end, xtol=1e-12) if gap(high_end) < 0 else None
    return low, high


def compare_samples(baseline_samples: Sequence[float], candidate_samples: Sequence[float],
                    baseline: float, candidate: float, test: str) -> Change:
    """Welch's test and the change's interval of two sample sets (each >= 2 values), centred on the two figures."""
    nb, nc = len(baseline_samples), len(candidate_samples)
    b = scaled_to(baseline_samples, baseline)
    c = scaled_to(candidate_samples, candidate)
    p = welch_p(b, c)
    if p is None:
        return untested(baseline, candidate, "no spread in either run's samples to judge the change by", nb, nc)
    low, high = ratio_interval(b, c)
    return Change(baseline, candidate, change_pct(baseline, candidate),
                  (low - 1) * 100 if low is not None else None, (high - 1) * 100 if high is not None else None,
                  p, test, nb, nc)


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
