"""Client-side srv-query1 vs `sysbench oltp_point_select` on the same MySQL/MariaDB server, same run.

Both look up one row by primary key in a table of the same number of rows, with server-side prepared statements
(sysbench's default --db-ps-mode=auto; capmark's PREPARE/EXECUTE), one connection per thread. sysbench's table
lives in a database capmark_bench that this script creates (sysbench's own layout, sbtest1); capmark's in database
capmark. Rounds alternate capmark and sysbench at each thread count; the figures are medians of the rounds.

Throughput and the client's CPU per query are compared: capmark's driver processes (user + system over the window,
as the step records it) against sysbench's (its rusage over the run).

    python benchmarks/client_vs_sysbench.py --dsn mysql://root@127.0.0.1:3306/ [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
from urllib.parse import urlsplit

from _common import median, rounds_parser, run, target

from capmark.measure import kpm

BENCH_DATABASE = "capmark_bench"
THREADS = (1, 2, 4)
GOALS = {1: 0.95, 2: 0.85, 4: 0.85}  # capmark / sysbench throughput
CPU_GOAL = 1.5  # capmark's client CPU per query at most this many times sysbench's


def sysbench_args(dsn: str, table_size: int) -> list[str]:
    parts = urlsplit(dsn)
    args = ["oltp_point_select", f"--mysql-host={parts.hostname or '127.0.0.1'}",
            f"--mysql-port={parts.port or 3306}", f"--mysql-user={parts.username or 'root'}",
            f"--mysql-db={BENCH_DATABASE}", "--tables=1", f"--table-size={table_size}"]
    if parts.password:
        args.append(f"--mysql-password={parts.password}")
    return args


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


def capmark(ctx, threads: int, seconds: float) -> tuple[float, float]:  # noqa: ANN001 - the benchmark's StepContext
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
    print(f"{'threads':>7} {'capmark qps':>12} {'sysbench qps':>13} {'ratio':>6} {'goal':>5}  "
          f"{'capmark CPU/q':>13} {'sysbench CPU/q':>14} {'ratio':>6}  per-round ratios")
    for threads in THREADS:
        ours, theirs, our_cpu, their_cpu = [], [], [], []
        for _ in range(args.rounds):
            qps, cpu = capmark(ctx, threads, args.seconds)
            ours.append(qps)
            our_cpu.append(cpu)
            qps, cpu = sysbench(sb, threads, args.seconds)
            theirs.append(qps)
            their_cpu.append(cpu)
        ratio = median([o / t for o, t in zip(ours, theirs, strict=True)])
        cpu_ratio = median(our_cpu) / median(their_cpu)
        verdict = "met" if ratio >= GOALS[threads] and cpu_ratio <= CPU_GOAL else "MISSED"
        print(f"{threads:>7} {median(ours):>12,.0f} {median(theirs):>13,.0f} {ratio:>6.3f} {GOALS[threads]:>5.2f}  "
              f"{median(our_cpu) * 1e6:>11.1f}us {median(their_cpu) * 1e6:>12.1f}us {cpu_ratio:>6.2f}  "
              + ", ".join(f"{o / t:.3f}" for o, t in zip(ours, theirs, strict=True)) + f"  {verdict}")
    subprocess.run(["sysbench", *sb, "cleanup"], capture_output=True, check=False)
    ctx.control.query(f"DROP DATABASE IF EXISTS {BENCH_DATABASE}".encode())


if __name__ == "__main__":
    main()
