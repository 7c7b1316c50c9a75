"""The first thing a reader wants of a run, per workload: how fast, how much per core, how long at the knee,
what limits it, how much room is left, and what the diagnosis says."""

from __future__ import annotations

from dataclasses import dataclass

from capmark.analysis.diagnosis import TestDiagnosis
from capmark.analysis.planning import Calibration
from capmark.measure import record
from capmark.results import TestResult


@dataclass(kw_only=True)
class Headline:
    """One workload's figures at a glance (None where the run cannot tell)."""

    workload: str
    unit: str
    throughput_label: str
    peak_throughput: float | None  # the highest measured on a valid step
    peak_jobs: int | None
    per_core: float | None  # the peak over the database host's cores
    cores: int | None
    knee_jobs: int | None  # the model's: where the response time reaches its knee rule
    knee_typical_s: float | None  # the median measured at a step at the knee, else the model's mean there
    knee_p95_s: float | None
    knee_from: str  # "median measured at N jobs" or "model mean"
    bottleneck: str | None  # the model's busiest station at its highest load
    capacity: float | None  # the model's highest throughput
    capacity_jobs: int | None
    headroom_pct: float | None  # capacity over the measured peak, in % beyond it
    diagnosis: str
    valid_steps: int  # the figures rest on these; the others failed a self-check
    steps: int
    peak_at_highest_step: bool  # the plan stopped there: more jobs may go faster still
    problem: str = ""  # why the model is missing, where it is
    peak_nopm: float | None = None  # new orders per minute at the peak step, for workloads that count them (tpcc)


def _valid_peak(test: TestResult) -> tuple[float | None, int | None, float | None]:
    """The highest throughput of a valid step, its jobs, and its NOPM where the workload counts new orders."""
    best: tuple[float | None, int | None, float | None] = (None, None, None)
    for step in test.steps:
        measured = record.of(step, test.per_unit)
        if not measured.valid or not measured.units:
            continue
        values = measured.kpm
        x = values.get("throughput")
        if x is not None and (best[0] is None or x > best[0]):
            best = (x, step.jobs, values.get("nopm"))
    return best


def _measured_at(test: TestResult, jobs: int) -> tuple[float | None, float | None, int | None]:
    """The median and p95 of the highest valid step at or below `jobs` jobs."""
    below = [s for s in test.steps if s.jobs <= jobs and record.of(s, test.per_unit).valid and s.units]
    if not below:
        return None, None, None
    step = max(below, key=lambda s: s.jobs)
    lat = record.of(step).latency
    return lat.p50_s, lat.p95_s, step.jobs


def headline(test: TestResult, calibration: Calibration | None, diagnosis: TestDiagnosis | None,
             problem: str = "") -> Headline:
    peak, peak_jobs, peak_nopm = _valid_peak(test)
    cores = calibration.calibration.cores if calibration else None
    curve = calibration.prediction if calibration else None
    knee = curve["knee_jobs"] if curve else None
    median = p95 = None
    knee_from = ""
    if curve and knee is not None:
        median, p95, at = _measured_at(test, int(knee))
        if at is not None and at == knee:
            knee_from = f"median measured at {at} jobs"
        else:
            point = next((p for p in curve["points"] if p["jobs"] == knee), None)
            median, p95 = (point["response_time_s"], point["p95_s"]) if point else (None, None)
            knee_from = "model mean"
    capacity = curve["max_throughput"] if curve else None
    return Headline(workload=test.workload, unit=test.unit, throughput_label=test.throughput_label,
                    peak_throughput=peak, peak_jobs=peak_jobs, per_core=peak / cores if peak and cores else None,
                    cores=cores, knee_jobs=knee, knee_typical_s=median, knee_p95_s=p95, knee_from=knee_from,
                    bottleneck=curve["bottleneck"] if curve else None, capacity=capacity,
                    capacity_jobs=curve["max_throughput_jobs"] if curve else None,
                    headroom_pct=(capacity / peak - 1) * 100 if capacity and peak else None,
                    diagnosis=diagnosis.headline if diagnosis else "not diagnosed (no measured step)",
                    valid_steps=sum(1 for s in test.steps if s.units and record.of(s, test.per_unit).valid),
                    steps=len(test.steps),
                    peak_at_highest_step=peak_jobs is not None and peak_jobs == max(s.jobs for s in test.steps),
                    problem=problem, peak_nopm=peak_nopm)
