"""Client-side srv-query1 vs sysbench on the same MySQL/MariaDB server, same run.

Two sysbench references, both with prepared statements (binary protocol), one connection per thread, keys uniform
(--rand-type=uniform):
- the same lookup: sysbench runs srv-query1's statement on capmark's table (benchmarks/sysbench_srv_query1.lua);
  the goal is judged against this one;
- its own oltp_point_select (one char(120) column of sbtest1, a table of the same number of rows in a database
  capmark_bench that this script creates and drops), the lookup sysbench users know.
capmark runs its lookups through the compiled loop (binary protocol, timed in C) where it was built, and through its
Python path (text EXECUTE ... USING; CAPMARK_LOOKUPS=python). Rounds alternate all four at each thread count;
the figures are medians of the rounds, the ratios medians of each round's own ratio.

Throughput and the client's CPU per query are compared: capmark's driver processes (user + system over the window,
the runner's own process included, as the step records it) against sysbench's (its rusage over the run).

    python benchmarks/client_vs_sysbench.py --dsn mysql://root@127.0.0.1:3306/ [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from _common import median, rounds_parser, run, target

from capmark.engines.base import LOOKUPS_ENV
from capmark.engines.mysql.session import compiled_lookups
from capmark.measure import kpm

BENCH_DATABASE = "capmark_bench"
THREADS = (1, 2, 4)
GOALS = {1: 0.95, 2: 0.95, 4: 0.95}  # capmark / sysbench throughput
CPU_GOAL = 1.1  # capmark's client CPU per query at most this many times sysbench's (as against pgbench)


SAME_LOOKUP = str(Path(__file__).with_name("sysbench_srv_query1.lua"))


def connection_args(dsn: str, database: str) -> list[str]:
    parts = urlsplit(dsn)
    args = [f"--mysql-host={parts.hostname or '127.0.0.1'}", f"--mysql-port={parts.port or 3306}",
            f"--mysql-user={parts.username or 'root'}", f"--mysql-db={database}", "--rand-type=uniform"]
    if parts.password:
        args.append(f"--mysql-password={parts.password}")
    return args


def sysbench_args(dsn: str, table_size: int) -> list[str]:
    """sysbench's own oltp_point_select on its table of table_size rows."""
    return ["oltp_point_select", *connection_args(dsn, BENCH_DATABASE), "--tables=1", f"--table-size={table_size}"]


def same_lookup_args(dsn: str, items: int) -> list[str]:
    """srv-query1's lookup run by sysbench on capmark's table."""
    return [SAME_LOOKUP, *connection_args(dsn, "capmark"), f"--items={items}"]


def sysbench(args: list[str], threads: int, seconds: float) -> tuple[float, float]:
    """(queries per second, client CPU seconds per query) of one sysbench run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["sysbench", *args, f"--threads={threads}", f"--time={int(seconds)}",
                          "run"], capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    queries = float(re.search(r"queries:\s+(\d+)\s+\(([\d.]+) per sec", out).group(2))
    total = int(re.search(r"queries:\s+(\d+)", out).group(1))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return queries, cpu / total if total else float("nan")


def capmark(ctx, threads: int, seconds: float, path: str) -> tuple[float, float]:  # noqa: ANN001 - its StepContext
    """(queries per second, client CPU seconds per query) of one capmark step on the path named ("compiled" or
    "python"): the driver's processes read the path from the environment when they start."""
    os.environ[LOOKUPS_ENV] = path
    step = run(ctx, "srv-query1", threads, seconds, mode="client")
    cpu = (step.driver_cpu.get("user_s", 0.0) + step.driver_cpu.get("sys_s", 0.0)) / step.units
    return kpm.compute(step)[0]["throughput"], cpu


def main() -> None:
    ap = rounds_parser(__doc__)
    ap.set_defaults(rounds=3)
    args = ap.parse_args()
    if not args.dsn or not args.dsn.startswith(("mysql://", "mariadb://")):
        ap.error("give the server with --dsn mysql://user:password@host:3306/")
    if shutil.which("sysbench") is None:
        ap.error("sysbench is not installed (Debian: apt-get install sysbench)")
    ctx = target(args.dsn)
    ctx.control.query(b"SELECT items FROM capmark.meta")
    items = int(ctx.control.store_result().fetch_row(1)[0][0])
    ctx.control.query(f"CREATE DATABASE IF NOT EXISTS {BENCH_DATABASE}".encode())
    sb = sysbench_args(args.dsn, items)
    subprocess.run(["sysbench", *sb, "cleanup"], capture_output=True, check=False)
    subprocess.run(["sysbench", *sb, "prepare"], capture_output=True, check=True)
    subprocess.run(["sysbench", *sb, "--threads=1", "--time=2", "run"], capture_output=True, check=True)  # warm
    print(f"{ctx.info.version}; table size {items:,} rows; rounds={args.rounds}, {args.seconds:.0f} s each")
    same = same_lookup_args(args.dsn, items)
    paths = ("compiled", "python") if compiled_lookups() else ("python",)
    print(f"capmark's paths: {', '.join(paths)}" + ("" if len(paths) == 2 else " (the compiled loop was not built)"))
    print(f"{'threads':>7} {'capmark':>8} {'qps':>8} {'sysbench, same lookup':>22} {'ratio':>6} {'goal':>5}  "
          f"{'CPU/q':>7} {'sysbench':>8} {'ratio':>6}  {'oltp_point_select':>17} {'ratio':>6}  "
          f"per-round ratios to the same lookup")
    for threads in THREADS:
        qps: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for way in (*paths, "same", "point_select"):
                if way == "same":
                    q, c = sysbench(same, threads, args.seconds)
                elif way == "point_select":
                    q, c = sysbench(sb, threads, args.seconds)
                else:
                    q, c = capmark(ctx, threads, args.seconds, way)
                qps.setdefault(way, []).append(q)
                cpu.setdefault(way, []).append(c)
        for path in paths:
            per_round = [o / t for o, t in zip(qps[path], qps["same"], strict=True)]
            to_point = median([o / t for o, t in zip(qps[path], qps["point_select"], strict=True)])
            cpu_ratio = median(cpu[path]) / median(cpu["same"])
            verdict = "met" if median(per_round) >= GOALS[threads] and cpu_ratio <= CPU_GOAL else "MISSED"
            print(f"{threads:>7} {path:>8} {median(qps[path]):>8,.0f} {median(qps['same']):>22,.0f} "
                  f"{median(per_round):>6.3f} {GOALS[threads]:>5.2f}  {median(cpu[path]) * 1e6:>5.1f}us "
                  f"{median(cpu['same']) * 1e6:>6.1f}us {cpu_ratio:>6.2f}  {median(qps['point_select']):>17,.0f} "
                  f"{to_point:>6.3f}  " + ", ".join(f"{r:.3f}" for r in per_round) + f"  {verdict}")
    subprocess.run(["sysbench", *sb, "cleanup"], capture_output=True, check=False)
    ctx.control.query(f"DROP DATABASE IF EXISTS {BENCH_DATABASE}".encode())


if __name__ == "__main__":
    main()
