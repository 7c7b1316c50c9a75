"""Server-side srv-query1 (with per-unit latency timing) vs minimal hand-written PL/pgSQL loops.

Two ways to compare, both at jobs = cores on the same server in the same run:
- side by side: capmark's jobs and the baseline's jobs run at the same time (half the cores each),
  so both see the same machine; the ratio is per-job throughput. This is the robust figure on a
  machine whose speed drifts by +-15 % from one second to the next, as shared VMs do.
- one after the other: each at jobs = cores, alternating rounds.
Each figure is the median of the per-round ratios. Two baselines do the same primary-key lookup:
- "bare": a FOR loop over a precomputed iteration count, nothing else (no clock, no count);
- "sliced": the least a loop needs to honour capmark's contract (run for about 1 s, return the
  count): a counter and a clock check per lookup.

    python benchmarks/server_loop_overhead.py [--dsn DSN] [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import threading
import time

from _common import measure, median, rounds_parser, target

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
create or replace procedure capmark.bench_sliced_query1(p_secs float8, n int, inout cnt bigint default 0)
language plpgsql as $$
declare k int; r record; t_end timestamptz := clock_timestamp() + make_interval(secs => p_secs);
begin
  loop
    k := 1 + floor(random() * n)::int;
    select id, grp, qty, price, name into r from capmark.item where id = k;
    cnt := cnt + 1;
    exit when clock_timestamp() >= t_end;
  end loop;
end $$;
"""


def minimal_throughput(dsn: str, jobs: int, seconds: float, settings: dict[str, str], items: int,
                       sliced: bool) -> float:
    conns = [connect(dsn, application_name="capmark bench minimal") for _ in range(jobs)]
    for c in conns:
        for k, v in settings.items():
            c.execute("select set_config(%s, %s, false)", (k, v))
    # calibrate the iteration count to the requested duration on one connection
    t = time.perf_counter()
    conns[0].execute("call capmark.bench_minimal_query1(20000, %s)", (items,))
    iters = int(20000 * seconds / (time.perf_counter() - t))
    barrier = threading.Barrier(jobs + 1)
    done = [0] * jobs

    def work(i, c):
        barrier.wait()
        if sliced:
            done[i] = c.execute("call capmark.bench_sliced_query1(%s, %s)", (seconds, items)).fetchone()[0]
        else:
            c.execute("call capmark.bench_minimal_query1(%s, %s)", (iters, items))
            done[i] = iters

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(conns)]
    for th in threads:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    return sum(done) / elapsed


def side_by_side(ctx, jobs: int, seconds: float, items: int, sliced: bool) -> float:
    """capmark at jobs/2 next to the baseline at jobs/2; returns capmark's per-job rate / baseline's."""
    half = max(1, jobs // 2)
    result: dict[str, float] = {}

    def baseline() -> None:
        # covers capmark's warm-up (1 s), pauses and measured window
        result["base"] = minimal_throughput(ctx.dsn, half, seconds + 1.5, {}, items, sliced) / half

    th = threading.Thread(target=baseline)
    th.start()
    result["capmark"] = measure(ctx, "srv-query1", half, seconds) / half
    th.join()
    return result["capmark"] / result["base"]


def main() -> None:
    args = rounds_parser(__doc__).parse_args()
    ctx = target(args.dsn)
    ctx.control.execute(MINIMAL)
    items = int(ctx.control.execute("select items from capmark.meta").fetchone()[0])
    track = ctx.control.execute("select current_setting('pg_stat_statements.track', true)").fetchone()[0]
    print(f"jobs={args.jobs} rounds={args.rounds} seconds={args.seconds}")
    for base in ("bare", "sliced"):
        ratios = [side_by_side(ctx, args.jobs, args.seconds, items, base == "sliced") for _ in range(args.rounds)]
        print(f"side by side, capmark / {base} loop per job: median {median(ratios):.3f} "
              f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
    variants = [(f"one after the other, server default (pg_stat_statements.track={track})", {})]
    if track and track != "top":
        variants.append(("pg_stat_statements.track=top", {"pg_stat_statements.track": "top"}))
    for label, settings in variants:
        got: dict[str, list[float]] = {"bare": [], "sliced": [], "capmark": []}
        for _ in range(args.rounds):
            got["bare"].append(minimal_throughput(ctx.dsn, args.jobs, args.seconds, settings, items, False))
            got["capmark"].append(measure(ctx, "srv-query1", args.jobs, args.seconds, settings=settings))
            got["sliced"].append(minimal_throughput(ctx.dsn, args.jobs, args.seconds, settings, items, True))
        print(f"{label}: bare loop {median(got['bare']):,.0f} qps; sliced loop {median(got['sliced']):,.0f} qps; "
              f"capmark srv-query1 {median(got['capmark']):,.0f} qps")
        for base in ("bare", "sliced"):
            ratios = [c / b for c, b in zip(got["capmark"], got[base], strict=True)]
            print(f"  capmark / {base}: median {median(ratios):.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
