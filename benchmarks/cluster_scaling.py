"""Client-side jobs on a two-node Ray cluster against the single-host multi-process driver, same jobs.

Both nodes run on this machine (ray.cluster_utils.Cluster, each node offering as many CPUs as the machine has
cores), so the comparison measures what Ray's placement, its actor processes and capmark's cross-host phases
cost, not a second machine's extra cores. Same server, same run, alternating rounds; the cluster's daemons are
up during the single-host rounds too. Figures are medians over the rounds.

    python benchmarks/cluster_scaling.py [--rounds 5] [--seconds 5] [--jobs 4] [--workload srv-query1]
"""

from __future__ import annotations

from _common import cores, median, rounds_parser, run, target
from ray.cluster_utils import Cluster

from capmark.driver import cluster


def main() -> None:
    ap = rounds_parser(__doc__)
    ap.add_argument("--workload", default="srv-query1")
    ap.set_defaults(jobs=4)
    args = ap.parse_args()
    ctx = target(args.dsn)
    ray_cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cores(), "include_dashboard": False})
    ray_cluster.add_node(num_cpus=cores())
    ray_cluster.wait_for_nodes()
    try:
        cluster.join(ray_cluster.address)
        single: list[float] = []
        spread: list[float] = []
        cpu_single: list[float] = []
        cpu_spread: list[float] = []
        for r in range(args.rounds):
            for on_cluster, into, cpu_into in ((False, single, cpu_single), (True, spread, cpu_spread)):
                step = run(ctx, args.workload, args.jobs, args.seconds, mode="client", cluster=on_cluster)
                assert step.status == "ok", step.notes
                into.append(step.units / step.elapsed_s)
                cpu_into.append((step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]) / step.units)
            print(f"round {r + 1}: single host {single[-1]:,.0f}/s, two-node cluster {spread[-1]:,.0f}/s "
                  f"({spread[-1] / single[-1]:.2f}x)", flush=True)
        ratios = sorted(b / a for a, b in zip(single, spread, strict=True))
        print(f"\n{args.workload} client side, {args.jobs} jobs, {args.rounds} rounds of {args.seconds:g} s")
        print(f"  single host (worker processes): {median(single):,.0f}/s, driver CPU {median(cpu_single) * 1e6:.1f} "
              "us per unit")
        print(f"  two-node Ray cluster:           {median(spread):,.0f}/s, driver CPU {median(cpu_spread) * 1e6:.1f} "
              "us per unit")
        print(f"  ratio (median of per-round ratios): {median(ratios):.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}); "
              "goal >= 0.85x")
    finally:
        cluster.leave()
        ray_cluster.shutdown()


if __name__ == "__main__":
    main()
