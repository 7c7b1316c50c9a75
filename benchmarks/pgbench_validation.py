"""capmark's pgbench scripts against pgbench itself: same server, same data, same script, alternating rounds.

Two scripts on pgbench's tables in schema capmark (scale 1): pgbench's built-in tpcb-like, and a custom script
with random_zipfian, \\gset and \\if. For each job count, pgbench (-M prepared -c N -j min(N, cores), its
per-transaction log for the latency) and capmark (client side, its worker processes) take turns. Figures are
medians over the rounds:
  - throughput, capmark / pgbench (goals: >= 0.95 at 1 job, >= 0.85 at 2, 4, 8);
  - client CPU per transaction, capmark's driver processes / pgbench's process (goal <= 1.5);
  - p50 and p95 latency, capmark / pgbench (goal within 10 %);
  - updates per transaction of accounts, tellers and branches, and history rows per transaction (the mix and the
    random draws): each tool's figure with its sampling error.

    python benchmarks/pgbench_validation.py [--rounds 3] [--seconds 5] [--jobs-list 1,2,4,8]
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from _common import cores, median, pgbench_path, rounds_parser, target

from capmark.driver.step import StepPlan, run_step
from capmark.workloads import datamodel, pgbench
from capmark.workloads.scripts import ScriptOptions, ScriptSource, script_workload

CUSTOM = """\\set aid random_zipfian(1, 100000 * :scale, 1.1)
\\set delta random(-5000, 5000)
SELECT aid % 4 AS quarter, bid FROM capmark.pgbench_accounts WHERE aid = :aid \\gset acct_
\\if :acct_quarter = 0
  UPDATE capmark.pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :aid % 10 + 1;
\\else
  UPDATE capmark.pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :acct_bid;
\\endif
"""
TABLES = ("pgbench_accounts", "pgbench_tellers", "pgbench_branches", "pgbench_history")


def table_counts(dsn: str) -> dict[str, tuple[int, int]]:
    """Updated and inserted rows per pgbench table so far (the server's statistics, published)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select relname, n_tup_upd, n_tup_ins from pg_stat_user_tables "
                            "where schemaname = 'capmark' and relname like 'pgbench_%'").fetchall()
    return {name: (upd, ins) for name, upd, ins in rows}


def per_txn(before: dict, after: dict, txns: int) -> dict[str, float]:
    out = {f"{t.removeprefix('pgbench_')}_upd": (after[t][0] - before[t][0]) / txns for t in TABLES[:3]}
    out["history_ins"] = (after[TABLES[3]][1] - before[TABLES[3]][1]) / txns
    return out


def run_pgbench(dsn: str, script: Path, jobs: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as logs:
        before = table_counts(dsn)
        usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(pgbench_path()), dsn, "-n", "-M", "prepared", "-s", "1", "-c", str(jobs), "-j",
                        str(min(jobs, cores())), "-T", str(int(seconds)), "-f", str(script), "-l",
                        f"--log-prefix={logs}/tx"], capture_output=True, text=True, check=True)
        usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        latencies: list[float] = []
        first, last = float("inf"), 0.0
        for log in Path(logs).iterdir():
            for line in log.read_text().splitlines():
                fields = line.split()
                latencies.append(int(fields[2]) / 1e6)
                end = int(fields[4]) + int(fields[5]) / 1e6
                first, last = min(first, end), max(last, end)
    time.sleep(0.6)  # the backends publish their statistics as they exit
    txns = len(latencies)
    latencies.sort()
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    return {"tps": txns / seconds, "cpu_per_txn": cpu / txns, "p50": latencies[txns // 2],
            "p95": latencies[int(txns * 0.95)], "txns": txns, "mix": per_txn(before, table_counts(dsn), txns)}


def run_capmark(ctx, workload, jobs: int, seconds: float) -> dict:
    step = run_step(ctx, workload, workload.resolve_params({}), datamodel.size_for(1),
                    StepPlan(1, jobs, 1.0, seconds, "client", True))
    assert step.status == "ok", step.notes
    lat = step.latency.summary()
    rows = {r["relname"]: r for r in step.db_delta["tables"]}
    mix = {f"{t.removeprefix('pgbench_')}_upd": rows.get(t, {}).get("n_tup_upd", 0) / step.units for t in TABLES[:3]}
    mix["history_ins"] = rows.get(TABLES[3], {}).get("n_tup_ins", 0) / step.units
    cpu = step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
    return {"tps": step.units / step.elapsed_s, "cpu_per_txn": cpu / step.units, "p50": lat["p50_s"],
            "p95": lat["p95_s"], "txns": step.units, "mix": mix}


def main() -> None:
    ap = rounds_parser(__doc__)
    ap.add_argument("--jobs-list", default="1,2,4,8")
    ap.set_defaults(rounds=3)
    args = ap.parse_args()
    ctx = target(args.dsn)
    datamodel.warm_cache(ctx.control, list(pgbench.PGBENCH_WARM), say=lambda m: None)
    folder = Path(tempfile.mkdtemp())
    scripts = {"tpcb-like": pgbench.TPCB_LIKE_SCRIPT, "custom (zipfian, gset, if)": CUSTOM}
    for title, text in scripts.items():
        path = folder / "script.sql"
        path.write_text(text)
        workload = script_workload((ScriptSource("transaction", str(path), text),), ScriptOptions(seed=0))
        print(f"\n{title}")
        print(f"{'jobs':>4} {'tps ratio':>9} {'CPU/txn ratio':>13} {'p50 ratio':>9} {'p95 ratio':>9}  "
              "capmark tps / pgbench tps;  per transaction: accounts, tellers, branches updated, history rows")
        for jobs in map(int, args.jobs_list.split(",")):
            ours: list[dict] = []
            theirs: list[dict] = []
            for r in range(args.rounds):
                order = ((ours, lambda j=jobs, w=workload: run_capmark(ctx, w, j, args.seconds)),
                         (theirs, lambda j=jobs, p=path: run_pgbench(ctx.dsn, p, j, args.seconds)))
                for into, fn in (order if r % 2 == 0 else order[::-1]):
                    into.append(fn())

            def ratio(key: str, a: list[dict] = ours, b: list[dict] = theirs) -> float:
                return median([x[key] / y[key] for x, y in zip(a, b, strict=True)])

            def mix(runs: list[dict]) -> str:
                keys = runs[0]["mix"]
                return ", ".join(f"{statistics.fmean(r['mix'][k] for r in runs):.4f}" for k in keys)

            print(f"{jobs:>4} {ratio('tps'):>9.2f} {ratio('cpu_per_txn'):>13.2f} {ratio('p50'):>9.2f} "
                  f"{ratio('p95'):>9.2f}  {median([o['tps'] for o in ours]):,.0f} / "
                  f"{median([t['tps'] for t in theirs]):,.0f};  capmark {mix(ours)}; pgbench {mix(theirs)}",
                  flush=True)


if __name__ == "__main__":
    main()
