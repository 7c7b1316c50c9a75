"""Throughput with every collector on (10 Hz wait sampling, 1 Hz OS sampling) vs all off.

Alternating rounds at jobs = cores on srv-query1 and tp-light, server-side; the figure is the
median of the per-round ratios (on / off). Snapshots are taken in the pause between warm-up and
the measured window, so they cost nothing inside it.

    python benchmarks/collector_overhead.py [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

from _common import cores, median, rounds_parser, run, target

from capmark.measure import kpm


def main() -> None:
    args = rounds_parser(__doc__).parse_args()
    ctx = target(args.dsn)
    print(f"jobs={args.jobs} rounds={args.rounds} seconds={args.seconds}")
    for workload in ("srv-query1", "tp-light"):
        on, off, ratios, cost = [], [], [], []
        for i in range(args.rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            steps = {c: run(ctx, workload, args.jobs, args.seconds, collectors=c) for c in order}
            got = {c: kpm.compute(s)[0]["throughput"] for c, s in steps.items()}
            on.append(got[True])
            off.append(got[False])
            ratios.append(got[True] / got[False])
            s = steps[True]
            if s.driver_cpu.get("sampler_backend_s") is not None:
                cost.append(s.driver_cpu["sampler_backend_s"] / (s.elapsed_s * cores()))
        print(f"{workload}: collectors on {median(on):,.0f}/s, off {median(off):,.0f}/s; ratio median "
              f"{median(ratios):.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
        if cost:
            print(f"  the sampler's server process used {median(cost) * 100:.3f} % of the host's CPU capacity")


if __name__ == "__main__":
    main()
