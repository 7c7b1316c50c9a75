"""Accuracy of the calibrated model: run srv-query1, tp-light and wal-lat1 at 1, 2, 4, 8, 16 jobs, calibrate
on the lowest step(s) and score the prediction of every other step against the planning issue's goal
(throughput median <= 5 %, max <= 10 %; mean response time median <= 10 %; CPU within 5 points).

    python benchmarks/model_accuracy.py                 # measure (about 7 minutes) and score
    python benchmarks/model_accuracy.py --run RUN_DIR   # score a stored run again
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from capmark import api
from capmark.config import RunSpec
from capmark.plan.calibrate import validate

WORKLOADS = ["srv-query1", "tp-light", "wal-lat1"]
GOAL = {"x_median": 5.0, "x_max": 10.0, "r_median": 10.0, "cpu_points": 5.0}


def score(test, from_jobs: list[int] | None) -> dict:
    doc = validate(test, from_jobs)
    v = doc["verdict"]
    return {"workload": test.workload, "calibrated_on": doc["calibrated_from_jobs"],
            "x_median": v["throughput"]["median_abs_pct"], "x_max": v["throughput"]["max_abs_pct"],
            "r_median": v["response_time_s"]["median_abs_pct"], "p95_median": v["p95_s"]["median_abs_pct"],
            "cpu_points": v["cpu_busy_max_points"],
            "per_step": [(r["jobs"], r["error_pct"]["throughput"], r["error_pct"]["response_time_s"],
                          r["cpu_error_points"], r["batch"]["measured"], r["batch"]["model"]) for r in doc["steps"]],
            "usl_median": doc["usl"].get("median_abs_pct")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a stored run folder to score instead of measuring")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per step")
    ap.add_argument("--dsn", help="measure this PostgreSQL instead of the embedded one")
    ap.add_argument("--json", type=Path, help="also write the scores here")
    args = ap.parse_args()
    if args.run:
        run = api.open_run(str(args.run))
    else:
        run = api.run(RunSpec(workloads=WORKLOADS, jobs=[1, 2, 4, 8, 16], warmup_s=5.0, duration_s=args.seconds,
                                 dsn=args.dsn, results_dir=Path("capmark-results")))
    print(f"run {run.run_id} ({run.folder})")
    scores = []
    for test in run.tests:
        if test.workload not in WORKLOADS:
            continue
        for from_jobs in (None, [1, 2]):
            s = score(test, from_jobs)
            scores.append(s)
            met = all(s[k] is not None and s[k] <= GOAL[k] for k in GOAL)
            print(f"{s['workload']:<11} calibrated on {s['calibrated_on']!s:<7} X median {s['x_median']:5.1f} % max "
                  f"{s['x_max']:5.1f} % | R median {s['r_median']:5.1f} % | p95 median {s['p95_median']:5.1f} % | CPU "
                  f"max {s['cpu_points']:4.1f} pts | USL median {s['usl_median'] or 0:4.1f} % | goal "
                  f"{'met' if met else 'missed'}")
            for jobs, ex, er, cpu, bm, bp in s["per_step"]:
                batch = f" batch measured {bm:.2f} model {bp:.2f}" if bm and bp else ""
                print(f"    {jobs:>3} jobs: X {ex:+6.1f} %  R {er:+6.1f} %  CPU {cpu:+5.1f} pts{batch}")
    if args.json:
        args.json.write_text(json.dumps({"run": run.run_id, "goal": GOAL, "scores": scores}, indent=1))


if __name__ == "__main__":
    main()
