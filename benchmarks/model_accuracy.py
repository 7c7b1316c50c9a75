"""Accuracy of the calibrated model against the measured noise.

Measures srv-query1, tp-light, wal-lat1 and stress-mixed at 1, 2, 4, 8, 16 jobs with every step repeated
(`--repeat 3`, interleaved), calibrates each test on its steps with at most as many jobs as the database host
has cores, and scores the prediction of every other job count against the goal:

- throughput: median absolute error <= 5 %, max <= 10 %, on the raw errors: an error inside the step's measured
  95 % interval is shown beside it (as "within noise"), never counted as zero, and the interval is shown only where
  the step was measured at least MIN_REPETITIONS times (with 2 a Student t interval has t = 12.7 and excuses
  anything);
- mean response time: median <= 10 %; p95 of each transaction type: median <= 15 %;
- CPU utilisation within 5 points at every step.

A test is scored when it has at least 3 valid job counts. The "in noise" column counts the scored steps whose
error lies inside their measured interval (3 repetitions or more), for the reader to weigh; the goal is judged on
the raw errors. Pass several runs (`--run A --run B`, e.g. two separate
runs of this script and a run of the quick or full suite) to score them all in one table; each miss is given
with the figures that explain it.

    python benchmarks/model_accuracy.py                      # measure (about 14 minutes) and score
    python benchmarks/model_accuracy.py --run DIR [--run DIR2]   # score stored runs again
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from capmark import api
from capmark.config import RunSpec
from capmark.errors import CapmarkError
from capmark.plan.calibrate import WITHIN_NOISE, calibrate, validate
from capmark.plan.dbhost import database_host

WORKLOADS = ["srv-query1", "tp-light", "wal-lat1", "stress-mixed"]
JOBS = [1, 2, 4, 8, 16]
GOAL = {"x_median": 5.0, "x_max": 10.0, "r_median": 10.0, "p95_type_median": 15.0, "cpu_points": 5.0}
MIN_VALID_JOB_COUNTS = 3
MIN_REPETITIONS = 3  # below it a step's t interval is too wide to say anything (t = 12.7 at 2)


def _within_noise(row: dict[str, Any], repetitions: int) -> bool:
    """The throughput error lies inside the step's measured interval, and that interval means something."""
    return repetitions >= MIN_REPETITIONS and row["error_kind"]["throughput"] == WITHIN_NOISE


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def score(run, test) -> dict[str, Any] | None:
    host = database_host(run)
    try:
        cores = calibrate(test, host=host).cores
        valid_jobs = sorted({r["jobs"] for r in validate(test, host=host)["steps"] if r["valid"]})
        if len(valid_jobs) < MIN_VALID_JOB_COUNTS:
            return {"workload": test.workload, "skipped": f"{len(valid_jobs)} valid job count(s)"}
        from_jobs = [j for j in valid_jobs if j <= cores] or valid_jobs[:1]
        doc = validate(test, from_jobs=from_jobs, host=host)
    except CapmarkError as err:
        return {"workload": test.workload, "skipped": str(err)}
    scored = [r for r in doc["steps"] if r["valid"] and not r["calibration"]]
    if not scored:
        return {"workload": test.workload, "skipped": "no valid step beyond the calibration steps"}
    repetitions = int(run.spec.get("repeat") or 1)
    x_raw = [abs(r["error_pct"]["throughput"]) for r in scored if r["error_pct"]["throughput"] is not None]
    in_noise = sum(1 for r in scored if _within_noise(r, repetitions))
    r_err = [abs(r["error_pct"]["response_time_s"]) for r in scored if r["error_pct"]["response_time_s"] is not None]
    if any(r["by_type"] for r in scored):
        p95 = [abs(t["error_pct"]["p95_s"]) for r in scored for t in r["by_type"].values()
               if t["error_pct"]["p95_s"] is not None]
    else:
        p95 = [abs(r["error_pct"]["p95_s"]) for r in scored if r["error_pct"]["p95_s"] is not None]
    cpu = [abs(r["cpu_error_points"]) for r in scored if r["cpu_error_points"] is not None]
    s = {"workload": test.workload, "calibrated_on": doc["calibrated_from_jobs"],
         "x_median": _median(x_raw), "x_max": max(x_raw, default=None), "r_median": _median(r_err),
         "in_noise": in_noise, "scored_steps": len(scored), "repetitions": repetitions,
         "p95_type_median": _median(p95), "cpu_points": max(cpu, default=None),
         "cpu_growth": doc["calibration"].cpu_growth, "classes": len(doc["calibration"].types),
         "wait_cpu_us": doc["calibration"].wait_cpu_s * 1e6,
         "steps": [{"jobs": r["jobs"], "x_err": r["error_pct"]["throughput"], "x_kind": r["error_kind"]["throughput"],
                    "x_half_width_pct": (100 * r["measured_interval"]["throughput"]["half_width"]
                                         / r["measured"]["throughput"])
                    if r["measured_interval"]["throughput"] and repetitions >= MIN_REPETITIONS else None,
                    "r_err": r["error_pct"]["response_time_s"], "p95_err": r["error_pct"]["p95_s"],
                    "cpu_err": r["cpu_error_points"], "cpu_measured": r["measured"]["cpu_busy_pct"],
                    "batch": r["batch"], "bottleneck": r["model"]["bottleneck"],
                    "by_type": {k: v["error_pct"] for k, v in r["by_type"].items()}} for r in doc["steps"]]}
    s["missed"] = [k for k, limit in GOAL.items() if s[k] is not None and s[k] > limit]
    return s


def _fmt(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def report(scores: list[dict[str, Any]]) -> None:
    print(f"{'workload':<22} {'calib':<7} {'X med':>6} {'X max':>6} {'in noise':>8} {'R med':>6} "
          f"{'p95 med':>7} {'CPU pts':>7} {'CPU rise':>14}  goal")
    for s in scores:
        if "skipped" in s:
            print(f"{s['workload']:<22} not scored: {s['skipped']}")
            continue
        verdict = "met" if not s["missed"] else "missed " + ", ".join(s["missed"])
        rise = (f"{s['wait_cpu_us']:.1f} us/wait" if s["wait_cpu_us"] else f"{s['cpu_growth'] * 100:+.1f} %/core")
        print(f"{s['workload']:<22} {s['calibrated_on']!s:<7} {_fmt(s['x_median']):>6} {_fmt(s['x_max']):>6} "
              f"{(str(s['in_noise']) + '/' + str(s['scored_steps'])) if s['repetitions'] >= MIN_REPETITIONS else 'n/a':>8} "
              f"{_fmt(s['r_median']):>6} "
              f"{_fmt(s['p95_type_median']):>7} {_fmt(s['cpu_points']):>7} {rise:>14}  {verdict}")
        if s["missed"]:
            for st in s["steps"]:
                b = st["batch"]
                batch = (f" batch {b['measured']:.2f}/{b['model']:.2f}" if b["measured"] and b["model"] else "")
                types = " ".join(f"{k} p95 {v['p95_s']:+.0f}%" for k, v in st["by_type"].items()
                                 if v["p95_s"] is not None)
                print(f"    {st['jobs']:>3} jobs: X {_fmt(st['x_err'])} % (±{_fmt(st['x_half_width_pct'])}) "
                      f"R {_fmt(st['r_err'])} % p95 {_fmt(st['p95_err'])} % CPU {_fmt(st['cpu_err'])} pts of "
                      f"{_fmt(st['cpu_measured'])} %{batch} {st['bottleneck']} {types}")
    scored = [s for s in scores if "skipped" not in s]
    met = [s for s in scored if not s["missed"]]
    print(f"\n{len(met)} of {len(scored)} scored tests meet every goal")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, action="append", help="a stored run folder to score instead of measuring")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per step")
    ap.add_argument("--dsn", help="measure this PostgreSQL instead of the embedded one")
    ap.add_argument("--json", type=Path, help="also write the scores here")
    args = ap.parse_args()
    runs = [api.open_run(str(r)) for r in args.run] if args.run else [api.run(RunSpec(
        workloads=WORKLOADS, jobs=JOBS, warmup_s=3.0, duration_s=args.seconds, repeat=MIN_REPETITIONS, dsn=args.dsn,
        results_dir=Path("capmark-results")))]
    scores = []
    for run in runs:
        print(f"run {run.run_id} ({run.folder})")
        for test in run.tests:
            s = score(run, test)
            if s is not None:
                s["run"] = run.run_id
                scores.append(s)
    report(scores)
    if args.json:
        args.json.write_text(json.dumps({"goal": GOAL, "scores": scores}, indent=1))


if __name__ == "__main__":
    main()
