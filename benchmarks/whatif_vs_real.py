"""A what-if about cores, or about CPU speed, checked against the real change, on this host.

Cores (`--lever cores`): each workload is measured twice, side by side: with the embedded server confined to one core
(`--server-cpus 1`) and unconfined (all the host's cores). Then the model calibrated on the confined run predicts
the unconfined one (`whatif --cpus N`), and the model calibrated on the unconfined run predicts the confined one
(`whatif --cpus 1`), at every job count measured.

CPU speed (`--lever quota`): the same with the server under a CPU quota of half a core and of a whole one
(`--server-cpu-quota 0.5` and `1`); each run's model with the CPU twice (or half) as fast (`whatif --cpu-speed 2`,
`0.5`) predicts the other.

Disk speed (`--lever disk`): sto-random, wal-lat1 and dl-buffer with the server's reads and writes throttled to 300
and then 600 requests a second (`--server-iops`); each run's model with the disk twice (or half) as fast
(`whatif --disk-speed 2`, `0.5`) predicts the other.

Load (`--lever load`): each workload runs client-side as a closed loop (its jobs one after another) and as open
loops (`--rate`, Poisson arrivals over OPEN_JOBS jobs) at LOAD_SHARES of the closed loop's best throughput. The model
calibrated on the closed run's lowest step predicts each open step (the open model at its arrival rate), and the
model calibrated on the middle open step predicts the closed steps. An open step's mean response time counts from
the intended start, which holds the wait of an arrival for its own job to be free (schedule lag: the load
generator's queue, not the database host's); the response from the actual start is what the model is judged on,
and the lag is shown beside it.

The goal: throughput within 10 % and mean response time within 15 % at every job count where the platform is not
saturated, and the maximum throughput within 10 %.

The host's own CPU scaling (capmark's probe, measured once per host and recorded with every run) is what lets the
confined run's model know that this host's second core is not a whole core.

    python benchmarks/whatif_vs_real.py [--lever cores|quota|disk|load] [--jobs 1,2,4] [--duration 10s] [--workloads ...]
    python benchmarks/whatif_vs_real.py --lever cores|quota|disk --rounds 3   # alternating rounds, median errors
    python benchmarks/whatif_vs_real.py [--lever cores|quota|disk] --runs SMALLER_DIR LARGER_DIR   # score stored runs
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path

from capmark import api
from capmark.config import PlatformLimits, RunSpec, parse_duration
from capmark.errors import CapmarkError
from capmark.measure import record
from capmark.plan import dbmodel
from capmark.plan.calibrate import calibrate, offered_rate, response_from_start_s
from capmark.plan.dbhost import database_host
from capmark.results import RunResult, StepResult, TestResult
from capmark.store import load_run

WORKLOADS = ["srv-query1", "srv-report", "tp-light", "stress-mixed"]
GOAL_THROUGHPUT = 0.10
GOAL_RESPONSE = 0.15


DISK_WORKLOADS = ["sto-random", "wal-lat1", "dl-buffer"]  # random reads, commit flushes, inserts' flushes
IOPS = (300.0, 600.0)  # the disk lever's two platforms: the server's reads and writes throttled to R and 2R a second
QUOTAS = (0.5, 1.0)  # the quota lever's two platforms: half a core's worth of CPU time and a whole one's
# The load lever's open loops: arrival rates as shares of the closed loop's best throughput (light, middle, busy),
# spread over this many jobs so that an arrival seldom waits for its own job
LOAD_SHARES = (0.3, 0.5, 0.7)
OPEN_JOBS = 8


def measure(workloads: list[str], jobs: list[int], duration_s: float, limits: PlatformLimits,
            results: Path, mode: str = "server", rate: float = 0.0) -> RunResult:
    spec = RunSpec(workloads=workloads, jobs=jobs, warmup_s=3.0, duration_s=duration_s, results_dir=results,
                   platform=limits, mode=mode, rate=rate).validate()
    return api.run(spec)


def _lag_s(step: StepResult) -> float:
    """An open step's mean schedule lag (0 for a closed one)."""
    return (step.schedule_lag.summary()["mean_s"] or 0.0) if step.schedule_lag is not None else 0.0


def load_lever(workloads: list[str], jobs: list[int], duration_s: float, results: Path) -> None:
    """Closed against open loops of each workload, each predicted from the other (the module's docstring)."""
    closed = measure(workloads, jobs, duration_s, PlatformLimits(), results, mode="client")
    print(f"Closed run {closed.folder}")
    print("| workload | prediction | load | measured [units/s] | predicted | error | measured RT from start [ms] | "
          "schedule lag [ms] | predicted RT [ms] | error | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for test in closed.tests:
        measured = _measured(test)
        if not measured:
            print(f"| {test.workload} | | no valid closed step |")
            continue
        best = max(x for x, _ in measured.values())
        opens = []
        for share in LOAD_SHARES:
            run = measure([test.workload], [OPEN_JOBS], duration_s, PlatformLimits(), results, mode="client",
                          rate=round(share * best))
            opens.append((share, run, run.tests[0]))
        try:
            model = calibrate(test, host=database_host(closed))
        except CapmarkError as err:
            print(f"| {test.workload} | closed -> open | not calibrated: {err} |")
            continue
        for share, _, open_test in opens:
            for s in open_test.steps:
                if s.status != "ok" or not s.units:
                    continue
                if not record.of(s).valid:
                    print(f"| {test.workload} | closed -> open | {share:.0%} of best | not scored: "
                          f"{'; '.join(record.of(s).problems)} |")
                    continue
                p = dbmodel.solve_open(model, offered_rate(s))
                mx, mr = s.units / s.elapsed_s, response_from_start_s(s)
                px, pr = p.throughput, p.response_time_s
                if px is None or pr is None:
                    print(f"| {test.workload} | closed -> open | {share:.0%} | {mx:,.0f} | saturated | | "
                          f"{mr * 1e3:.3f} | {_lag_s(s) * 1e3:.3f} | | | missed |")
                    continue
                ex, er = px / mx - 1, pr / mr - 1
                ok = abs(ex) <= GOAL_THROUGHPUT and abs(er) <= GOAL_RESPONSE
                print(f"| {test.workload} | closed -> open | {share:.0%} of best | {mx:,.0f} | {px:,.0f} | {ex:+.1%} | "
                      f"{mr * 1e3:.3f} | {_lag_s(s) * 1e3:.3f} | {pr * 1e3:.3f} | {er:+.1%} | "
                      f"{'met' if ok else 'missed'} |")
        middle = opens[len(opens) // 2]
        try:
            reverse = calibrate(middle[2], host=database_host(middle[1]))
        except CapmarkError as err:
            print(f"| {test.workload} | open -> closed | not calibrated: {err} |")
            continue
        predicted = {j: dbmodel.solve(reverse, j) for j in sorted(measured)}
        for j in sorted(measured):
            mx, mr = measured[j]
            px, pr = predicted[j].throughput or 0.0, predicted[j].response_time_s or 0.0
            ex, er = px / mx - 1, pr / mr - 1 if mr else float("nan")
            ok = abs(ex) <= GOAL_THROUGHPUT and abs(er) <= GOAL_RESPONSE
            print(f"| {test.workload} | open ({middle[0]:.0%}) -> closed | {j} jobs | {mx:,.0f} | {px:,.0f} | {ex:+.1%} | "
                  f"{mr * 1e3:.3f} | | {pr * 1e3:.3f} | {er:+.1%} | {'met' if ok else 'missed'} |")
        peak_p = max(p.throughput or 0.0 for p in predicted.values())
        print(f"| {test.workload} | open ({middle[0]:.0%}) -> closed | max | {best:,.0f} | {peak_p:,.0f} | "
              f"{peak_p / best - 1:+.1%} | | | | | {'met' if abs(peak_p / best - 1) <= GOAL_THROUGHPUT else 'missed'} |")


def _measured(test: TestResult) -> dict[int, tuple[float, float]]:
    """Per job count: median throughput and mean response time over its steps."""
    by_jobs: dict[int, list[tuple[float, float]]] = {}
    for s in test.steps:
        if s.status == "ok" and s.units:
            by_jobs.setdefault(s.jobs, []).append((s.measures.throughput, s.measures.latency.mean_s or 0.0))
    return {j: (statistics.median(x for x, _ in v), statistics.median(r for _, r in v)) for j, v in by_jobs.items()}


Platform = Callable[[dbmodel.DbModel], dbmodel.Config]  # the platform predicted for, from the source's model


def predict(source: RunResult, test: TestResult, platform: Platform,
            jobs: list[int]) -> dict[int, tuple[float, float, bool]]:
    model = calibrate(test, host=database_host(source))
    out = {}
    for j in jobs:
        p = dbmodel.solve(model, j, config=platform(model))
        out[j] = (p.throughput or 0.0, p.response_time_s or 0.0, p.saturated)
    return out


Predictions = Iterator[tuple[str, dict[int, tuple[float, float]], dict[int, tuple[float, float, bool]] | CapmarkError]]


def _predictions(source: RunResult, target: RunResult, platform: Platform) -> Predictions:
    """For each test of the source that the target ran too: its workload, the target's measured figures per job
    count, and the source's model's predictions of them (or why it could not be calibrated)."""
    for test in source.tests:
        other = next((t for t in target.tests if t.workload == test.workload), None)
        if other is None:
            continue
        measured = _measured(other)
        try:
            yield test.workload, measured, predict(source, test, platform, sorted(measured))
        except CapmarkError as err:
            yield test.workload, measured, err


def errors(source: RunResult, target: RunResult, platform: Platform) -> dict[tuple[str, int | str], tuple[float, float]]:
    """Per (workload, job count or "max"): the prediction's throughput and response-time errors (predicted /
    measured - 1; response NaN for "max"), for every test the source could be calibrated on."""
    out: dict[tuple[str, int | str], tuple[float, float]] = {}
    for workload, measured, predicted in _predictions(source, target, platform):
        if isinstance(predicted, CapmarkError):
            continue
        for j in sorted(measured):
            (mx, mr), (px, pr, _) = measured[j], predicted[j]
            out[(workload, j)] = (px / mx - 1, pr / mr - 1 if mr else float("nan"))
        peak_m, peak_p = max(x for x, _ in measured.values()), max(x for x, _, _ in predicted.values())
        out[(workload, "max")] = (peak_p / peak_m - 1, float("nan"))
    return out


def rounds_table(pairs: list[tuple[RunResult, RunResult]], up: Platform, down: Platform,
                 names: tuple[str, ...]) -> list[str]:
    """Alternating rounds: each round's smaller and larger run predict each other; the median error over the
    rounds per workload, direction and job count, with the rounds' own spread (min..max) beside it."""
    lines = ["| workload | prediction | jobs | throughput error, median | rounds | response error, median | goal |",
             "|---|---|---|---|---|---|---|"]
    for label, direction in ((f"{names[0]} -> {names[1]}", lambda s, b: errors(s, b, up)),
                             (f"{names[1]} -> {names[0]}", lambda s, b: errors(b, s, down))):
        per_round = [direction(small, large) for small, large in pairs]
        keys = [k for k in per_round[0] if all(k in r for r in per_round)]
        for workload, jobs in keys:
            ex = [r[(workload, jobs)][0] for r in per_round]
            er = [r[(workload, jobs)][1] for r in per_round]
            mex = statistics.median(ex)
            mer = statistics.median(er) if jobs != "max" else float("nan")
            ok = abs(mex) <= GOAL_THROUGHPUT and (jobs == "max" or abs(mer) <= GOAL_RESPONSE)
            resp = "" if jobs == "max" else f"{mer:+.1%}"
            lines.append(f"| {workload} | {label} | {jobs} | {mex:+.1%} | {min(ex):+.1%}..{max(ex):+.1%} | {resp} | "
                         f"{'met' if ok else 'missed'} |")
    return lines


def compare(source: RunResult, target: RunResult, platform: Platform, label: str) -> list[str]:
    lines = []
    for workload, measured, predicted in _predictions(source, target, platform):
        if isinstance(predicted, CapmarkError):
            lines.append(f"| {workload} | {label} | not calibrated: {predicted} |")
            continue
        for j in sorted(measured):
            mx, mr = measured[j]
            px, pr, _ = predicted[j]
            ex, er = px / mx - 1, pr / mr - 1 if mr else float("nan")
            ok = abs(ex) <= GOAL_THROUGHPUT and abs(er) <= GOAL_RESPONSE
            lines.append(f"| {workload} | {label} | {j} | {mx:,.0f} | {px:,.0f} | {ex:+.1%} | {mr * 1e3:.3f} | "
                         f"{pr * 1e3:.3f} | {er:+.1%} | {'met' if ok else 'missed'} |")
        peak_m, peak_p = max(x for x, _ in measured.values()), max(x for x, _, _ in predicted.values())
        lines.append(f"| {workload} | {label} | max | {peak_m:,.0f} | {peak_p:,.0f} | {peak_p / peak_m - 1:+.1%} "
                     f"| | | | {'met' if abs(peak_p / peak_m - 1) <= GOAL_THROUGHPUT else 'missed'} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lever", choices=("cores", "quota", "disk", "load"), default="cores")
    ap.add_argument("--workloads")
    ap.add_argument("--jobs", default="1,2,4")
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--results", type=Path, default=Path("results-whatif-vs-real"))
    ap.add_argument("--runs", nargs=2, type=Path, metavar=("SMALLER", "LARGER"))
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of both platforms (median errors)")
    args = ap.parse_args()
    host_cores = os.cpu_count() or 1
    args.workloads = args.workloads or ",".join(DISK_WORKLOADS if args.lever == "disk" else WORKLOADS)
    if args.lever == "load":
        load_lever(args.workloads.split(","), [int(j) for j in args.jobs.split(",")],
                   parse_duration(args.duration, "duration"), args.results)
        return
    if args.lever == "cores":
        limits = (PlatformLimits(cpus=1), PlatformLimits())
        names = ("1 core", f"{host_cores} cores")
        up: Platform = lambda model: dbmodel.Config(host_cores)  # noqa: E731 - one line each, side by side
        down: Platform = lambda model: dbmodel.Config(1)  # noqa: E731
    elif args.lever == "disk":
        limits = tuple(PlatformLimits(read_iops=r, write_iops=r) for r in IOPS)
        names = tuple(f"{r:g} IOPS" for r in IOPS)
        up = lambda model: dbmodel.Config(model.cores, disk_speed=IOPS[1] / IOPS[0])  # noqa: E731
        down = lambda model: dbmodel.Config(model.cores, disk_speed=IOPS[0] / IOPS[1])  # noqa: E731
    else:
        limits = tuple(PlatformLimits(cpu_quota=q) for q in QUOTAS)
        names = tuple(f"quota {q:g}" for q in QUOTAS)
        up = lambda model: dbmodel.Config(model.cores, cpu_speed=QUOTAS[1] / QUOTAS[0])  # noqa: E731
        down = lambda model: dbmodel.Config(model.cores, cpu_speed=QUOTAS[0] / QUOTAS[1])  # noqa: E731
    workloads, jobs = args.workloads.split(","), [int(j) for j in args.jobs.split(",")]
    duration = parse_duration(args.duration, "duration")

    def measure_both() -> tuple[RunResult, RunResult]:
        """One run on each platform, the smaller first."""
        return (measure(workloads, jobs, duration, limits[0], args.results),
                measure(workloads, jobs, duration, limits[1], args.results))

    if args.rounds > 1 and not args.runs:
        pairs = []
        for k in range(args.rounds):
            pairs.append(measure_both())
            print(f"round {k + 1}: {names[0]} {pairs[-1][0].folder}, {names[1]} {pairs[-1][1].folder}", flush=True)
        scaling = pairs[0][1].environment.get("platform_scaling") or pairs[0][0].environment.get("platform_scaling")
        print(f"{args.rounds} alternating rounds; host probe: {scaling}")
        print("\n".join(rounds_table(pairs, up, down, names)))
        return
    if args.runs:
        smaller, larger = load_run(args.runs[0]), load_run(args.runs[1])
    else:
        smaller, larger = measure_both()
    scaling = larger.environment.get("platform_scaling") or smaller.environment.get("platform_scaling")
    print(f"Run on {names[0]} {smaller.folder}, on {names[1]} {larger.folder}; host probe: {scaling}")
    print("| workload | prediction | jobs | measured [units/s] | predicted | error | measured RT [ms] | "
          "predicted RT [ms] | error | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for line in compare(smaller, larger, up, f"{names[0]} -> {names[1]}") + \
            compare(larger, smaller, down, f"{names[1]} -> {names[0]}"):
        print(line)


if __name__ == "__main__":
    main()
