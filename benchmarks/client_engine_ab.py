r"""The same pgbench script test run three ways, in alternating rounds: capmark with --client-engine python, capmark
with --client-engine pgbench, and plain pgbench. Per job count: median throughput, p50 and p95 latency, and client
CPU per transaction (capmark: its driver processes over the window, the runner's own included; plain pgbench: the
process's rusage over its whole run, divided by its transactions).

    python benchmarks/client_engine_ab.py [--rounds 5] [--seconds 5] [--job-counts 1,2,4,8] [--dsn DSN]
                                          [--script lookup|tpcb-like|srv-query1]

lookup: the example of docs/scripts.md (random_zipfian, \gset, \if); tpcb-like: pgbench's own default transaction,
as the catalogue's pgbench-tpcb runs it client-side (its history table grows over the rounds, for every engine
alike); srv-query1: the catalogue's prepared primary-key lookup, which the pgbench engine runs as its pgbench script
(plain pgbench runs that script with the table's size written in).
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from _common import median, pgbench_path, rounds_parser, target

from capmark.driver.pgbench_engine import _conninfo
from capmark.driver.step import StepPlan, run_step
from capmark.measure import kpm
from capmark.workloads import datamodel, registry, scripts
from capmark.workloads.pgbench import TPCB_LIKE_SCRIPT

SCRIPT = """\\set aid random_zipfian(1, 100000 * :scale, 1.5)
SELECT qty FROM capmark.item WHERE id = :aid \\gset it_
\\if :it_qty > 50
  SELECT id AS big_qty FROM capmark.item WHERE id = 1;
\\else
  SELECT id AS small_qty FROM capmark.item WHERE id = 2;
\\endif
"""
SEED = 42
WARMUP_S = 1.0
# capmark's two engines, the pgbench engine with the step's sampler and host collectors off (what they cost it), and
# pgbench alone
WAYS = ("python", "pgbench", "pgbench-no-collectors", "plain pgbench")


def capmark_round(ctx, workload, jobs: int, seconds: float, engine: str, collectors: bool = True) -> dict[str, float]:
    plan = StepPlan(1, jobs, WARMUP_S, seconds, "client", client_engine=engine, collectors=collectors)
    step = run_step(ctx, workload, workload.resolve_params({}), datamodel.size_for(1), plan)
    if step.status != "ok":
        raise SystemExit(f"{engine} at {jobs} jobs: {'; '.join(step.notes)}")
    tput = kpm.compute(step)[0]["throughput"]
    lat = step.latency.summary()
    cpu = step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
    return {"tps": tput, "p50_ms": lat["p50_s"] * 1000, "p95_ms": lat["p95_s"] * 1000,
            "cpu_us": cpu / step.units * 1e6 if step.units else float("nan")}


def pgbench_round(dsn: str, script: Path, jobs: int, seconds: float, cores: int) -> dict[str, float]:
    """Plain pgbench, cut as capmark cuts its window: the transactions that ended between WARMUP_S after the first
    one began and `seconds` later (its own "tps" would include the connections' start); CPU by rusage over the run,
    per transaction of the whole run."""
    with tempfile.TemporaryDirectory(prefix="capmark-ab-") as folder:
        conninfo, password = _conninfo(dsn)
        env = {"PGPASSWORD": password} if password else {}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(pgbench_path()), "-n", "-M", "prepared", "-c", str(jobs), "-j", str(min(jobs, cores)),
                        "-T", str(math.ceil(WARMUP_S + seconds) + 1), "--random-seed", str(SEED), "-s", "1", "-l",
                        "--log-prefix", f"{folder}/log", "-f", str(script), conninfo],
                       check=True, capture_output=True, env={**os.environ, **env})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ends = [(int(f[4]) + int(f[5]) / 1e6, int(f[2])) for p in Path(folder).glob("log*")
                for f in (line.split() for line in p.read_text().splitlines()) if f[2].isdigit()]
    first = min(end - lat / 1e6 for end, lat in ends)
    window = [lat for end, lat in ends if first + WARMUP_S <= end < first + WARMUP_S + seconds]
    n = len(window)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"tps": n / seconds, "p50_ms": float(np.percentile(window, 50)) / 1000,
            "p95_ms": float(np.percentile(window, 95)) / 1000, "cpu_us": cpu / len(ends) * 1e6 if ends else float("nan")}


def main() -> None:
    ap = rounds_parser(__doc__)
    ap.add_argument("--job-counts", default="1,2,4,8", help="job counts to measure, e.g. 1,2,4,8")
    ap.add_argument("--script", choices=("lookup", "tpcb-like", "srv-query1"), default="lookup", help="which script")
    ap.add_argument("--ways", default=",".join(WAYS),
                    help=f"which of {', '.join(WAYS)} to run (comma-separated; plain pgbench is always run)")
    args = ap.parse_args()
    counts = [int(x) for x in args.job_counts.split(",")]
    ctx = target(args.dsn)
    with tempfile.TemporaryDirectory(prefix="capmark-ab-script-") as folder:
        path = Path(folder) / f"{args.script}.sql"
        if args.script == "tpcb-like":
            path.write_text(TPCB_LIKE_SCRIPT)
            workload = registry.get("pgbench-tpcb")
        elif args.script == "srv-query1":
            workload = registry.get("srv-query1")
            recipe = scripts.pgbench_recipe(workload)
            assert recipe is not None
            path.write_text(recipe.sources[0].text.replace(":items", str(datamodel.size_for(1).items)))
        else:
            path.write_text(SCRIPT)
            workload = scripts.script_workload(scripts.load_sources([str(path)]), scripts.ScriptOptions(seed=SEED))
        chosen = set(args.ways.split(",")) | {"plain pgbench"}
        unknown = chosen - set(WAYS)
        if unknown:
            raise SystemExit(f"--ways: unknown {', '.join(sorted(unknown))}; choose from {', '.join(WAYS)}")
        ways = tuple(w for w in WAYS if w in chosen)
        results: dict[tuple[str, int], list[dict[str, float]]] = {}
        for r in range(args.rounds):
            for jobs in counts:
                order = ways if r % 2 == 0 else tuple(reversed(ways))
                for way in order:
                    if way == "plain pgbench":
                        figures = pgbench_round(ctx.dsn, path, jobs, args.seconds, os.cpu_count() or 1)
                    else:
                        figures = capmark_round(ctx, workload, jobs, args.seconds, way.removesuffix("-no-collectors"),
                                                collectors=not way.endswith("-no-collectors"))
                    results.setdefault((way, jobs), []).append(figures)
        # x pgbench: the ratio of the medians; per round: the median of each round's own ratio (the host's drift
        # between rounds cancels), and the range of those ratios
        print(f"{'jobs':>4} {'engine':<24} {'tps':>10} {'x pgbench':>9} {'per round':>20} {'p50 ms':>8} "
              f"{'p95 ms':>8} {'CPU us/txn':>10}")
        for jobs in counts:
            plain = [f["tps"] for f in results[("plain pgbench", jobs)]]
            base = median(plain)
            for way in ways:
                rows = results[(way, jobs)]
                tps = median([f["tps"] for f in rows])
                ratios = sorted(f["tps"] / p for f, p in zip(rows, plain, strict=True))
                per_round = f"{median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
                print(f"{jobs:>4} {way:<24} {tps:>10,.0f} {tps / base:>9.3f} {per_round:>20} "
                      f"{median([f['p50_ms'] for f in rows]):>8.3f} {median([f['p95_ms'] for f in rows]):>8.3f} "
                      f"{median([f['cpu_us'] for f in rows]):>10.1f}")


if __name__ == "__main__":
    main()
