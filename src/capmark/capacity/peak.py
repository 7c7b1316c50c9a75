"""The peak period: the busiest window of an observation, and whether the load inside it was steady.

Bulumulle and Bordin (Capacity Planning as a Performance Tuning Tool, Sun BluePrints 2003) model the peak period:
by CPU for most systems, by disk IO where that matters more (a database server), here also by commits. A window
is consecutive usable intervals; one holding a broken interval, or a restart or statistics reset, is never chosen.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from capmark.capacity.workloads import Attribution, application_transactions
from capmark.errors import CapmarkError
from capmark.observations import Interval, IntervalStatus, Observation

PeakBy = Literal["cpu", "disk", "commits", "given"]
PEAK_BY: tuple[PeakBy, ...] = ("cpu", "disk", "commits")
DEFAULT_PEAK_LENGTH_S = 3600.0  # the case study's peak hour
MIN_PEAK_INTERVALS = 10  # fewer intervals give no rates' spread to judge steadiness nor points for the regression
STEADY_CV = 0.25  # a workload's rate varying more than this (std / mean) across the window is not a steady load
LITTLE_TOLERANCE = 0.25  # rate x response time vs sampled active sessions: beyond 25 % apart, say the data disagree
GAP_TOLERANCE = 0.5  # intervals further apart than 1.5 interval lengths are not consecutive (a collector pause)
BREAKING_EVENTS = ("restart", "reset", "backwards", "disconnected")


@dataclass(frozen=True, kw_only=True)
class PeakOptions:
    """How to choose the window: by a measure (`by`), or `given` as epoch seconds (start, end)."""

    by: PeakBy = "cpu"
    length_s: float = DEFAULT_PEAK_LENGTH_S
    given: tuple[float, float] | None = None


def check_peak_by(text: str) -> PeakBy:
    for p in PEAK_BY:
        if text == p:
            return p
    raise CapmarkError(f"--peak-by '{text}' is not known; use one of {', '.join(PEAK_BY)}.")


_WINDOW = re.compile(r"^\s*([^/]+?)\s*/\s*([^/]+?)\s*$")


def parse_peak(text: str) -> tuple[float, float]:
    """--peak START/END in ISO local time; END may be only a time (the same day as START): 2026-11-24T10:00/11:00."""
    m = _WINDOW.match(text)
    example = "e.g. --peak 2026-11-24T10:00/11:00"
    if not m:
        raise CapmarkError(f"--peak '{text}' is not a window; write START/END in local time, {example}.")
    try:
        start = datetime.fromisoformat(m.group(1))
    except ValueError:
        raise CapmarkError(f"--peak: '{m.group(1)}' is not a date and time; {example}.") from None
    end_text = m.group(2)
    try:
        end = datetime.fromisoformat(end_text) if "-" in end_text or "T" in end_text else \
            datetime.fromisoformat(f"{start.date().isoformat()}T{end_text}")
    except ValueError:
        raise CapmarkError(f"--peak: '{end_text}' is not a time or a date and time; {example}.") from None
    if end <= start:
        raise CapmarkError(f"--peak: the window ends ({end_text}) before it starts ({m.group(1)}); {example}.")
    return start.timestamp(), end.timestamp()


@dataclass(kw_only=True)
class WorkloadSteadiness:
    """A workload inside the window: its rate, how much the rate and its share of the mix varied interval to
    interval, and Little's law: rate x mean response time against the mean active sessions sampled."""

    name: str
    rate: float  # units per second
    rate_cv: float  # standard deviation / mean across the window's intervals
    mix_cv: float  # the same for its share of all modelled units
    response_time_s: float  # statements' execution time per unit
    little_sessions: float  # rate x response time
    sampled_sessions: float  # mean active sessions seen by the activity samples
    little_ratio: float  # little_sessions / sampled_sessions (1: the two agree)
    steady: bool


@dataclass(kw_only=True)
class PeakWindow:
    """The window chosen, the figures that chose it, and its steadiness."""

    by: PeakBy
    start: float  # epoch seconds
    end: float
    ordinals: list[int]
    value: float  # the mean of the measure over the window (CPU busy fraction, device utilisation, commits/s)
    busiest_device: str | None
    series: list[float]  # the measure per interval of the whole observation (NaN for broken ones)
    steadiness: list[WorkloadSteadiness] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def length_s(self) -> float:
        return self.end - self.start


def cpu_busy(interval: Interval) -> float | None:
    h = interval.host
    return h.busy_s / h.total_s if h is not None and h.total_s > 0 else None


def device_utilisation(interval: Interval) -> dict[str, float]:
    if interval.host is None or interval.length_s <= 0:
        return {}
    return {d.name: d.busy_s / interval.length_s for d in interval.host.devices}


def commits_per_s(interval: Interval) -> float | None:
    x = application_transactions(interval)
    return x / interval.length_s if x is not None and interval.length_s > 0 else None


def _measure(observation: Observation, by: PeakBy) -> tuple[list[float], str | None]:
    """The measure per interval (NaN where broken or missing) and, by disk, the device it follows."""
    ok = observation.usable()
    device: str | None = None
    if by == "disk":
        busy: dict[str, float] = {}
        for i in ok:
            for name, u in device_utilisation(i).items():
                busy[name] = busy.get(name, 0.0) + u
        if not busy:
            raise CapmarkError("The observation has no disk counters, so its peak cannot be found by disk; use "
                               "--peak-by cpu or commits.")
        device = max(busy, key=lambda n: busy[n])
    values = []
    for i in observation.intervals:
        v: float | None = None
        if i.status is IntervalStatus.OK:
            if by == "cpu":
                v = cpu_busy(i)
            elif by == "disk":
                v = device_utilisation(i).get(device or "")
            else:
                v = commits_per_s(i)
        values.append(math.nan if v is None else v)
    if by != "given" and all(math.isnan(v) for v in values):
        source = {"cpu": "host CPU counters", "disk": "disk counters", "commits": "pg_stat_database commits"}[by]
        raise CapmarkError(f"The observation has no {source}, so its peak cannot be found by {by}; use another "
                           "--peak-by or give the window with --peak.")
    return values, device


def _breaks(observation: Observation) -> list[float]:
    return [e.at for e in observation.events if e.kind in BREAKING_EVENTS]


def candidate_windows(observation: Observation, count: int) -> list[list[int]]:
    """Every run of `count` consecutive usable intervals (as indexes into observation.intervals) with no broken
    interval, gap or breaking event inside."""
    intervals = observation.intervals
    breaks = _breaks(observation)
    out = []
    for first in range(len(intervals) - count + 1):
        window = intervals[first:first + count]
        if any(i.status is not IntervalStatus.OK for i in window):
            continue
        gaps = any(b.start - a.end > GAP_TOLERANCE * a.length_s for a, b in zip(window, window[1:], strict=False))
        if gaps or any(window[0].start < at < window[-1].end for at in breaks):
            continue
        out.append(list(range(first, first + count)))
    return out


def window_count(observation: Observation, length_s: float) -> int:
    """How many intervals a window holds: the length over the interval, at least MIN_PEAK_INTERVALS; an observation
    shorter than the length gives all its usable intervals when they are at least MIN_PEAK_INTERVALS."""
    ok = observation.usable()
    step = observation.settings.interval_s or (ok[0].length_s if ok else 0.0)
    wanted = max(MIN_PEAK_INTERVALS, round(length_s / step)) if step > 0 else MIN_PEAK_INTERVALS
    if len(ok) >= wanted:
        return wanted
    if len(ok) >= MIN_PEAK_INTERVALS:
        return len(ok)
    raise CapmarkError(f"The observation holds {len(ok)} usable intervals, fewer than the {MIN_PEAK_INTERVALS} a peak "
                       f"window needs; observe longer (e.g. --for {MIN_PEAK_INTERVALS * step / 60:.0f}m or more) or "
                       "with a shorter --interval.")


def find_peak(observation: Observation, attribution: Attribution, options: PeakOptions) -> PeakWindow:
    """The window of options.length_s with the highest mean measure (the earliest of equals), or the given one."""
    intervals = observation.intervals
    by: PeakBy = options.by if options.given is None else "given"
    if by == "given":  # the CPU series is only shown then: a window given needs no host counters
        try:
            values, device = _measure(observation, "cpu")
        except CapmarkError:
            values, device = [math.nan] * len(intervals), None
    else:
        values, device = _measure(observation, by)
    if options.given is not None:
        start, end = options.given
        first, last = observation.intervals[0].start if intervals else 0.0, intervals[-1].end if intervals else 0.0
        if not intervals or start < first - 1 or end > last + 1:
            raise CapmarkError(f"--peak: the window {_local(start)} to {_local(end)} is not inside the observation "
                               f"({_local(first)} to {_local(last)}); give a window inside it.")
        inside = [k for k, i in enumerate(intervals) if i.start >= start - 1 and i.end <= end + 1]
        bad = [intervals[k] for k in inside if intervals[k].status is not IntervalStatus.OK]
        if bad:
            raise CapmarkError(f"--peak: the window holds a broken interval at {_local(bad[0].start)} "
                               f"({bad[0].reason or 'broken'}); give a window without it.")
        if len(inside) < MIN_PEAK_INTERVALS:
            raise CapmarkError(f"--peak: the window holds {len(inside)} intervals, fewer than the "
                               f"{MIN_PEAK_INTERVALS} a peak needs; give a longer window.")
        if any(intervals[inside[0]].start < at < intervals[inside[-1]].end for at in _breaks(observation)):
            raise CapmarkError("--peak: the server restarted or its statistics were reset inside the window; give a "
                               "window without it.")
        chosen = inside
    else:
        count = window_count(observation, options.length_s)
        windows = candidate_windows(observation, count)
        if not windows:
            raise CapmarkError(f"No {count} consecutive intervals of the observation are free of broken intervals, "
                               "restarts and resets, so no peak can be chosen; observe longer.")
        scored = [(statistics.fmean(values[k] for k in w), -w[0], w) for w in windows
                  if not any(math.isnan(values[k]) for k in w)]
        if not scored:
            raise CapmarkError(f"No window of {count} intervals has the {by} measure in every interval; use another "
                               "--peak-by or give the window with --peak.")
        chosen = max(scored)[2]
    ordinals = [intervals[k].ordinal for k in chosen]
    value = statistics.fmean(values[k] for k in chosen if not math.isnan(values[k])) \
        if any(not math.isnan(values[k]) for k in chosen) else math.nan
    peak = PeakWindow(by=by, start=intervals[chosen[0]].start, end=intervals[chosen[-1]].end, ordinals=ordinals,
                      value=value, busiest_device=device, series=values)
    peak.steadiness = steadiness(attribution, ordinals)
    unsteady = [s.name for s in peak.steadiness if not s.steady]
    if unsteady:
        peak.notes.append(f"the load of {', '.join(unsteady)} was not steady inside the window (its rate varied by "
                          f"more than {STEADY_CV:.0%} or Little's law is off by more than {LITTLE_TOLERANCE:.0%}); a "
                          "model of a window's mean fits a steady load best")
    return peak


def held_out(observation: Observation, peak: PeakWindow, options: PeakOptions) -> list[int] | None:
    """Another busy window of the peak's length that does not overlap it (the busiest such by the same measure):
    the model calibrated on the peak predicts it. None when the observation has no room for one."""
    count = len(peak.ordinals)
    try:
        values, _ = _measure(observation, "cpu" if peak.by == "given" else peak.by)
    except CapmarkError:  # no measure to rank windows by (a given peak on an observation without host counters)
        return None
    taken = set(peak.ordinals)
    scored = [(statistics.fmean(values[k] for k in w), -w[0], w) for w in candidate_windows(observation, count)
              if not taken & {observation.intervals[k].ordinal for k in w}
              and not any(math.isnan(values[k]) for k in w)]
    if not scored:
        return None
    return [observation.intervals[k].ordinal for k in max(scored)[2]]


def _cv(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else math.nan


def steadiness(attribution: Attribution, ordinals: Sequence[int]) -> list[WorkloadSteadiness]:
    rows = []
    modelled = attribution.modelled
    per_interval = [attribution.intervals[o] for o in ordinals]
    totals = [sum(iu.workloads[n].units for n in modelled if n in iu.workloads) for iu in per_interval]
    whole = attribution.over(ordinals)
    length = sum(iu.length_s for iu in per_interval)
    samples = sum(iu.activity_samples for iu in per_interval)
    for name in modelled:
        w = whole[name]
        if w.units <= 0:
            continue
        rates = [iu.workloads[name].units / iu.length_s if name in iu.workloads else 0.0 for iu in per_interval]
        mix = [(iu.workloads[name].units if name in iu.workloads else 0.0) / t for iu, t in zip(per_interval, totals,
                                                                                               strict=True) if t > 0]
        rate = w.units / length
        response = w.exec_time_s / w.units
        little = rate * response
        sampled = w.active_samples / samples if samples > 0 else math.nan
        ratio = little / sampled if sampled > 0 else math.nan
        rate_cv, mix_cv = _cv(rates), _cv(mix)
        steady = not (rate_cv > STEADY_CV) and not (math.isfinite(ratio) and abs(ratio - 1) > LITTLE_TOLERANCE)
        rows.append(WorkloadSteadiness(name=name, rate=rate, rate_cv=rate_cv, mix_cv=mix_cv, response_time_s=response,
                                       little_sessions=little, sampled_sessions=sampled, little_ratio=ratio,
                                       steady=steady))
    return rows


def _local(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).isoformat(timespec="minutes")
