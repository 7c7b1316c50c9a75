"""Client-side driver vs pgbench at 1, 2, 4 and 8 jobs: throughput and the client's CPU per query.

Same server, same run, alternating rounds: capmark's client-side srv-query1 (its driver in worker processes, its
lookups in the compiled loop where it was built, a process's jobs together from one of its threads or each in its
own as the client's cores decide (driver/crew.py); with --together or --apart also each way wherever the client
runs (CAPMARK_LOOKUPS=together, =apart); through the Python path (CAPMARK_LOOKUPS=python); with --threads also the
old way, every job a thread of one process) against pgbench running the same prepared lookup as a custom script
with -c N -j min(N, cores). The client CPU per query is the CPU of every driver process over the measured window
(capmark) or of the pgbench process over its run (its own rusage), divided by the queries. Figures are medians
over the rounds.

With --client-cores the embedded server's processes are held to the last core and the clients (capmark's and
pgbench) to the others, as if the load came from a host of its own (the affinities are restored at the end).

With --rate R both sides run an open loop of R arrivals a second over the jobs (capmark --rate, pgbench -R): then
the throughput is the rate on both, and what differs is the client's CPU per query and the latency (pgbench's
average from its report, capmark's mean, both from each transaction's scheduled start).

    python benchmarks/driver_scaling.py [--rounds 3] [--seconds 5] [--jobs 1,2,4,8] [--together] [--apart] [--threads]
        [--client-cores] [--rate R]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import subprocess
import tempfile
from collections.abc import Iterator

import psutil
from _common import cores, median, pgbench_path, run, target

from capmark.engines.base import LOOKUPS_ENV
from capmark.engines.postgres import connect
from capmark.engines.postgres.session import compiled_lookups

SCRIPT = """\\set k random(1, {items})
SELECT id, grp, qty, price, name FROM capmark.item WHERE id = :k;
"""


def pgbench(dsn: str, jobs: int, seconds: float, script: str, rate: float) -> tuple[float, float, float]:
    """Transactions per second, pgbench's own CPU seconds per transaction and its average latency (s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    paced = ["-R", str(rate)] if rate else []
    out = subprocess.run([str(pgbench_path()), dsn, "-M", "prepared", "-c", str(jobs), "-j", str(min(jobs, cores())),
                          "-T", str(int(seconds)), "-n", *paced, "-f", script], capture_output=True, text=True,
                         check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tps = float(re.search(r"tps = ([\d.]+)", out.stdout).group(1))
    done = int(re.search(r"number of transactions actually processed: (\d+)", out.stdout).group(1))
    latency = float(re.search(r"latency average = ([\d.]+) ms", out.stdout).group(1)) / 1e3
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return tps, cpu / done, latency


def capmark(ctx, jobs: int, seconds: float, procs: int | None, path: str, rate: float) -> tuple[float, float, float]:
    """(queries per second, driver CPU seconds per query, mean latency in s) of one step, its lookups on the path
    named."""
    os.environ[LOOKUPS_ENV] = path
    step = run(ctx, "srv-query1", jobs, seconds, mode="client", driver_procs=procs, rate=rate)
    cpu = step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
    return step.units / step.elapsed_s, cpu / step.units, step.latency.mean_s


def context_switches() -> int:
    """The whole machine's context switches since boot (/proc/stat): the client's sleeps and wake-ups and the
    server's, for the queries of one side at a time (capmark's include its warm-up and pauses: an upper bound)."""
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("ctxt "):
                return int(line.split()[1])
    return 0


@contextlib.contextmanager
def client_cores(server_pid: int | None, wanted: bool) -> Iterator[None]:
    """The server's processes on the last core, this process (and what it starts) on the others."""
    mine = os.sched_getaffinity(0)
    if not wanted or server_pid is None or len(mine) < 2:
        yield
        return
    last = max(mine)
    server = [psutil.Process(server_pid), *psutil.Process(server_pid).children(recursive=True)]
    before = {p.pid: os.sched_getaffinity(p.pid) for p in server}
    for p in server:
        os.sched_setaffinity(p.pid, {last})  # backends started later inherit the postmaster's
    os.sched_setaffinity(0, mine - {last})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
        for pid, cores_before in before.items():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(pid, cores_before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="measure this PostgreSQL instead of the embedded one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--jobs", default="1,2,4,8")
    ap.add_argument("--together", action="store_true",
                    help="also measure the compiled loop with each process's jobs run together from one thread")
    ap.add_argument("--apart", action="store_true",
                    help="also measure the compiled loop with each job in a thread of its own")
    ap.add_argument("--no-python", action="store_true", help="leave out the Python path")
    ap.add_argument("--threads", action="store_true", help="also measure the jobs as threads of one process")
    ap.add_argument("--client-cores", action="store_true",
                    help="the server on the last core, the clients on the others (the embedded server)")
    ap.add_argument("--rate", type=float, default=0.0, help="an open loop of this many arrivals a second over the jobs")
    args = ap.parse_args()
    ctx = target(args.dsn)
    with client_cores(ctx.info.postmaster_pid if not args.dsn else None, args.client_cores):
        measure_all(ctx, args)


def measure_all(ctx, args: argparse.Namespace) -> None:
    with connect(ctx.dsn) as c:
        items = c.execute("select count(*) from capmark.item").fetchone()[0]
    script = os.path.join(tempfile.mkdtemp(), "lookup.sql")
    with open(script, "w") as fh:
        fh.write(SCRIPT.format(items=items))
    print(f"cores={cores()} rounds={args.rounds} seconds={args.seconds}"
          + (f" rate={args.rate:,.0f}/s" if args.rate else ""))
    forced = [*(["together"] if args.together else []), *(["apart"] if args.apart else [])]
    compiled = ["compiled", *forced] if compiled_lookups() else []
    kinds = [*compiled, *([] if args.no_python else ["python"]), *(["threads"] if args.threads else [])]
    print(f"capmark: {', '.join(kinds)}" + ("" if "compiled" in kinds else " (the compiled loop was not built)"))
    for jobs in (int(j) for j in args.jobs.split(",")):
        got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in ["pgbench", *kinds]}
        switches: dict[str, list[float]] = {k: [] for k in ["pgbench", *kinds]}
        for r in range(args.rounds):
            order = ["pgbench", *kinds] if r % 2 == 0 else [*kinds, "pgbench"]
            for kind in order:
                before = context_switches()
                if kind == "pgbench":
                    got[kind].append(pgbench(ctx.dsn, jobs, args.seconds, script, args.rate))
                    queries = got[kind][-1][0] * args.seconds
                else:
                    got[kind].append(capmark(ctx, jobs, args.seconds, 0 if kind == "threads" else None,
                                             "python" if kind == "threads" else kind, args.rate))
                    queries = got[kind][-1][0] * args.seconds  # the window's; the warm-up's switches count too
                switches[kind].append((context_switches() - before) / queries)
        pg_x = median([x for x, _, _ in got["pgbench"]])
        pg_cpu = median([c for _, c, _ in got["pgbench"]])
        pg_lat = median([t for _, _, t in got["pgbench"]])
        line = (f"{jobs} jobs: pgbench {pg_x:,.0f}/s, {pg_cpu * 1e6:.1f} us CPU/query, mean {pg_lat * 1e3:.3f} ms, "
                f"{median(switches['pgbench']):.2f} context switches/query")
        for kind in kinds:
            ratios = [x / p for (x, _, _), (p, _, _) in zip(got[kind], got["pgbench"], strict=True)]
            x = median([x for x, _, _ in got[kind]])
            cpu = median([c for _, c, _ in got[kind]])
            lat = median([t for _, _, t in got[kind]])
            line += (f"; capmark ({kind}) {x:,.0f}/s = {median(ratios):.2f}x pgbench "
                     f"(rounds {', '.join(f'{v:.2f}' for v in ratios)}), {cpu * 1e6:.1f} us CPU/query = "
                     f"{cpu / pg_cpu:.2f}x pgbench's, mean {lat * 1e3:.3f} ms, "
                     f"{median(switches[kind]):.2f} context switches/query")
        print(line, flush=True)


if __name__ == "__main__":
    main()
