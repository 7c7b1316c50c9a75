"""Server-side srv-query1 (with per-unit latency timing) vs a minimal hand-written PL/pgSQL loop.

Both run at jobs = cores on the same server in the same run, alternating rounds; the figure is the
median of the per-round ratios. The minimal loop does the same primary-key lookup and nothing else.

    python benchmarks/server_loop_overhead.py [--dsn DSN] [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import threading
import time

from _common import cores, measure, median, target

from capmark.engines.postgres import connect

MINIMAL = """
create or replace procedure capmark.bench_minimal_query1(iters int, n int)
language plpgsql as $$
declare k int; r record;
begin
  for i in 1..iters loop
    k := 1 + floor(random() * n)::int;
    select id, grp, qty, price, name into r from capmark.item where id = k;
  end loop;
end $$;
"""


def minimal_throughput(dsn: str, jobs: int, seconds: float, settings: dict[str, str], items: int) -> float:
    conns = [connect(dsn, application_name="capmark bench minimal") for _ in range(jobs)]
    for c in conns:
        for k, v in settings.items():
            c.execute("select set_config(%s, %s, false)", (k, v))
    # calibrate the iteration count to the requested duration on one connection
    t = time.perf_counter()
    conns[0].execute("call capmark.bench_minimal_query1(20000, %s)", (items,))
    iters = int(20000 * seconds / (time.perf_counter() - t))
    barrier = threading.Barrier(jobs + 1)

    def work(c):
        barrier.wait()
        c.execute("call capmark.bench_minimal_query1(%s, %s)", (iters, items))

    threads = [threading.Thread(target=work, args=(c,)) for c in conns]
    for th in threads:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    return jobs * iters / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dsn")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--jobs", type=int, default=cores())
    args = ap.parse_args()
    ctx = target(args.dsn)
    ctx.control.execute(MINIMAL)
    items = int(ctx.control.execute("select items from capmark.meta").fetchone()[0])
    track = ctx.control.execute("select current_setting('pg_stat_statements.track', true)").fetchone()[0]
    variants = [("server default (pg_stat_statements.track=%s)" % track, {})]
    if track and track != "top":
        variants.append(("pg_stat_statements.track=top", {"pg_stat_statements.track": "top"}))
    print(f"jobs={args.jobs} rounds={args.rounds} seconds={args.seconds}")
    for label, settings in variants:
        ratios, ours, mins = [], [], []
        for _ in range(args.rounds):
            m = minimal_throughput(ctx.dsn, args.jobs, args.seconds, settings, items)
            q = measure(ctx, "srv-query1", args.jobs, args.seconds, settings=settings)
            ours.append(q)
            mins.append(m)
            ratios.append(q / m)
        print(f"{label}: minimal loop {median(mins):,.0f} qps; capmark srv-query1 {median(ours):,.0f} qps; "
              f"ratio median {median(ratios):.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
