"""Calibrate a closed queueing model from measured service demands and validate it against every step.

The model of a test (first slice of the planning issue): the database host's CPU as a multi-server
station (m = its cores) with the CPU demand of the database (backends, background processes and OS
overhead; not the capmark driver), each data device as a queueing station with its busy time per unit,
and a delay station for the rest of the measured response time at the calibration step (commit flush
waits, lock waits, network: time that does not queue for CPU or disk in this model). Jobs are the
population, with no think time (closed loop). The calibration averages the demands of the chosen steps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from capmark.measure import kpm
from capmark.measure.demands import step_demands
from capmark.model import mva, usl
from capmark.results import TestResult

MODEL_NAME = "closed MVA: CPU (m-server, exact load-dependent) + data devices + calibrated delay"


@dataclass
class Calibration:
    steps: list[int]  # job counts the demands come from
    cores: int
    cpu_s: float
    devices: dict[str, float]
    delay_s: float
    p95_over_mean: float  # response-time shape at calibration, to approximate p95 from the mean
    stations: list[mva.Station] = field(default_factory=list)


def _cpu_s(d: dict[str, float | None]) -> float:
    return sum(v for k, v in d.items() if k.startswith("cpu_") and v is not None
               and k not in ("cpu_driver_s", "cpu_host_busy_s"))


def calibrate(test: TestResult, from_jobs: list[int] | None = None) -> Calibration:
    chosen = [s for s in test.steps if s.status == "ok" and (not from_jobs or s.jobs in from_jobs)]
    if not chosen:
        chosen = [min((s for s in test.steps if s.status == "ok"), key=lambda s: s.jobs)]
    if from_jobs is None:
        chosen = [min(chosen, key=lambda s: s.jobs)]
    cores = int(chosen[0].os.get("cores") or os.cpu_count() or 1)
    cpu, devices, residual, shape = 0.0, {}, 0.0, 0.0
    for step in chosen:
        d, _ = step_demands(step)
        c = _cpu_s(d)
        devs = {k[5:-7]: v for k, v in d.items() if k.startswith("disk_") and k.endswith("_busy_s") and v is not None}
        lat = step.latency.summary()
        mean = lat["mean_s"] or 0.0
        # what the model's stations would give at this step's population, minus what was measured
        base = mva.exact_mva(_stations(c, devs, 0.0, cores), step.jobs)
        residual += max(0.0, step.jobs / (step.units / step.elapsed_s) - base.response_time)
        cpu += c
        for k, v in devs.items():
            devices[k] = devices.get(k, 0.0) + v
        shape += (lat["p95_s"] or mean) / mean if mean else 1.0
    n = len(chosen)
    cal = Calibration([s.jobs for s in chosen], cores, cpu / n, {k: v / n for k, v in devices.items()}, residual / n,
                      shape / n)
    cal.stations = _stations(cal.cpu_s, cal.devices, cal.delay_s, cores)
    return cal


def _stations(cpu_s: float, devices: dict[str, float], delay_s: float, cores: int) -> list[mva.Station]:
    out = [mva.Station("cpu", demand=max(cpu_s, 1e-12), servers=max(1, cores))]
    out += [mva.Station(f"disk {k}", demand=max(v, 1e-12)) for k, v in devices.items()]
    if delay_s > 0:
        out.append(mva.Station("other (delay)", demand=delay_s, kind="delay"))
    return out


def predict(cal: Calibration, jobs: int) -> dict[str, Any]:
    r = mva.exact_mva(cal.stations, jobs)
    util = dict(zip([s.name for s in cal.stations], r.utilizations, strict=True))
    queueing = [s for s in cal.stations if s.kind != "delay"]
    bottleneck = max(queueing, key=lambda s: util[s.name]).name
    return {"jobs": jobs, "throughput": r.throughput, "response_time_s": r.response_time,
            "p95_s": r.response_time * cal.p95_over_mean, "cpu_busy_pct": util["cpu"] * 100,
            "utilizations": util, "bottleneck": bottleneck}


def _err(model: float | None, measured: float | None) -> float | None:
    return (model / measured - 1) * 100 if model is not None and measured else None


def validate(test: TestResult, from_jobs: list[int] | None = None) -> dict[str, Any]:
    """Measured vs model for every step, the verdict, and the USL as an empirical second model."""
    cal = calibrate(test, from_jobs)
    rows = []
    for step in test.steps:
        values, _ = kpm.compute(step, test.per_unit)
        p = predict(cal, step.jobs)
        measured = {"throughput": values["throughput"], "response_time_s": (values["rt_mean_ms"] or 0) / 1000,
                    "p95_s": (values["rt_p95_ms"] or 0) / 1000, "cpu_busy_pct": values["cpu_busy_pct"]}
        rows.append({"jobs": step.jobs, "valid": step.status == "ok", "calibration": step.jobs in cal.steps,
                     "measured": measured, "model": p,
                     "error_pct": {k: _err(p[k], measured[k]) for k in ("throughput", "response_time_s", "p95_s")},
                     "cpu_error_points": (p["cpu_busy_pct"] - measured["cpu_busy_pct"]
                                          if measured["cpu_busy_pct"] is not None else None)})
    scored = [r for r in rows if r["valid"] and not r["calibration"]]
    verdict = {}
    for key in ("throughput", "response_time_s"):
        errs = sorted(abs(r["error_pct"][key]) for r in scored if r["error_pct"][key] is not None)
        verdict[key] = {"median_abs_pct": errs[len(errs) // 2] if errs else None, "max_abs_pct": errs[-1] if errs
                        else None}
    cpu_pts = [abs(r["cpu_error_points"]) for r in scored if r["cpu_error_points"] is not None]
    verdict["cpu_busy_max_points"] = max(cpu_pts) if cpu_pts else None
    usl_fit = None
    valid = [r for r in rows if r["valid"]]
    if len(valid) >= 4:
        f = usl.fit([r["jobs"] for r in valid], [r["measured"]["throughput"] for r in valid])
        usl_fit = {"sigma": f.sigma, "kappa": f.kappa, "lambda": f.lam, "r_squared": f.r_squared,
                   "peak_concurrency": f.peak_concurrency, "peak_throughput": f.peak_throughput,
                   "predicted": [f.throughput(r["jobs"]) for r in valid]}
    return {"workload": test.workload, "model": MODEL_NAME, "calibrated_from_jobs": cal.steps,
            "calibration": {"cores": cal.cores, "cpu_demand_s": cal.cpu_s, "device_demands_s": cal.devices,
                            "delay_s": cal.delay_s, "p95_over_mean": cal.p95_over_mean,
                            "p95_note": "model p95 = model mean x the calibration steps' measured p95/mean"},
            "steps": rows, "verdict": verdict,
            "usl": usl_fit or {"note": "the USL needs at least 4 valid steps"}}

