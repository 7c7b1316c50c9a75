"""The noise floor of a measurement: how far a figure would move if the step were measured again.

Two 95 % confidence intervals, both Student t intervals on means:

- across repetitions (`--repeat K`): every KPM of a job count is measured K times; the interval is
  mean ± t(0.975, K-1) · s / sqrt(K) over the K repetition values (valid repetitions only);
- within one step, by batch means: the step's 1 s throughput series (its last, partial second left out) is
  cut into up to 5 consecutive batches of at least 2 s; the interval is the t interval over the batch means.
  Neighbouring seconds are correlated (a checkpoint spans several), batches of several seconds much less so,
  which is why the seconds themselves are not treated as independent samples. Only throughput has a 1 s series.

Plain data in, plain data out: no database, no rendering.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from capmark.measure import record
from capmark.measure.validity import full_seconds
from capmark.results import StepResult

CONFIDENCE = 0.95
# Five batches give the t interval 4 degrees of freedom (t = 2.78) while each batch of a 15 s step still spans
# three seconds; more batches of fewer seconds would be correlated with each other.
BATCHES = 5
# A batch shorter than 2 s is nearly a single second, and consecutive seconds are correlated.
MIN_BATCH_S = 2
REPETITIONS = "repetitions"
BATCH_MEANS = "batch means"
METHODS = {REPETITIONS: "Student t over the repetition values of the job count",
           BATCH_MEANS: f"Student t over up to {BATCHES} batch means of the step's 1 s throughput (batches of at "
                        f"least {MIN_BATCH_S} s)"}
# the KPMs whose interval the console shows beside the mean
SHOWN = ("throughput", "rt_mean_ms", "rt_p95_ms")


@dataclass(frozen=True)
class Interval:
    """mean ± half_width at CONFIDENCE; half_width is None when n < 2 (no spread to estimate)."""

    mean: float
    half_width: float | None
    method: str
    n: int

    def contains(self, value: float) -> bool:
        return self.half_width is not None and abs(value - self.mean) <= self.half_width

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "half_width": self.half_width, "method": self.method, "n": self.n}


@dataclass
class JobNoise:
    """The figures of one job count over its repetitions."""

    jobs: int
    repeats: list[int]  # the repetitions measured
    used: list[int]  # the valid ones, which the means and intervals are over
    kpms: dict[str, Interval] = field(default_factory=dict)  # across repetitions (one value each when K = 1)
    within: dict[int, Interval | None] = field(default_factory=dict)  # per repetition: throughput by batch means

    @property
    def valid(self) -> bool:
        return bool(self.used)

    def best(self, key: str) -> Interval | None:
        """The interval to show beside a KPM: across repetitions when there are several, else (throughput of a
        single repetition) its batch means."""
        across = self.kpms.get(key)
        if across is not None and across.half_width is not None:
            return across
        if key == "throughput" and len(self.used or self.repeats) == 1:
            return self.within.get((self.used or self.repeats)[0]) or across
        return across

    def to_dict(self) -> dict[str, object]:
        return {"jobs": self.jobs, "repeats": self.repeats, "used": self.used,
                "kpms": {k: v.to_dict() for k, v in self.kpms.items()},
                "within": {str(r): (i.to_dict() if i else None) for r, i in self.within.items()}}


# a half-width shown with two significant digits at most this many decimals (sub-microsecond in ms)
MAX_DIGITS = 6


def shown_digits(half_width: float | None, digits: int) -> int:
    """Decimals that show a half-width with two significant digits, never fewer than the figure's own."""
    if not half_width or not math.isfinite(half_width) or half_width <= 0:
        return digits
    return max(digits, min(MAX_DIGITS, 1 - math.floor(math.log10(half_width))))


def t_interval(values: list[float], method: str = REPETITIONS) -> Interval:
    """The Student t interval of the mean of values (half-width None for fewer than two)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(mean, None, method, n)
    from scipy import stats  # loaded on first use: a command starts without scipy

    t = float(stats.t.ppf((1 + CONFIDENCE) / 2, n - 1))
    return Interval(mean, t * statistics.stdev(values) / math.sqrt(n), method, n)


def batch_means(series: list[int]) -> Interval | None:
    """Throughput per second of a step with its batch-means interval; None when the window is too short for two
    batches."""
    seconds = [float(v) for v in full_seconds(series)]
    batches = min(BATCHES, len(seconds) // MIN_BATCH_S)
    if batches < 2:
        return None
    size = len(seconds) // batches
    kept = seconds[len(seconds) - batches * size:]  # any odd seconds dropped at the start, nearest the warm-up
    means = [statistics.fmean(kept[i * size:(i + 1) * size]) for i in range(batches)]
    return t_interval(means, BATCH_MEANS)


def repeat_of(step: StepResult) -> int:
    return getattr(step, "repeat", 1) or 1


def analyse(steps: list[StepResult], kpm_keys: list[str], per_unit: dict[str, float] | None = None
            ) -> list[JobNoise]:
    """Per job count (in increasing order): every numeric KPM's mean and interval over the valid repetitions
    (over all of them when none is valid), and each repetition's batch-means throughput interval."""
    out = []
    for jobs in sorted({s.jobs for s in steps}):
        mine = sorted((s for s in steps if s.jobs == jobs), key=repeat_of)
        good = [s for s in mine if record.of(s, per_unit).valid]
        noise = JobNoise(jobs, [repeat_of(s) for s in mine], [repeat_of(s) for s in good])
        values = [record.of(s, per_unit).kpm for s in (good or mine)]
        for key in kpm_keys:
            got = [x for v in values if isinstance(x := v.get(key), int | float) and math.isfinite(x)]
            if key != "jobs" and len(got) == len(values) and got:
                noise.kpms[key] = t_interval(got)
        noise.within = {repeat_of(s): batch_means(s.series_units) for s in mine}
        out.append(noise)
    return out


def repeats_of(steps: list[StepResult]) -> int:
    """How many repetitions a test's steps hold (1 for runs stored before repetitions existed)."""
    return max((repeat_of(s) for s in steps), default=1)
