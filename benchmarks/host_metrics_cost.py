"""What reading the database host's /proc through SQL costs that host.

The SQL source reads /proc/stat once a second for the 1 s CPU series, and at the start and end of every step
takes a full reading: CPU, the data device, memory, pressure, every process of the instance, every other
process on the host (where the role may list them) and the sampler backend's CPU. This script does exactly
that on a quiet server, at one step per --step seconds, for --seconds, and reports the CPU its server process
used (read from this machine's /proc, so run it where the server runs) as a share of one core. The goal: at
most 1 % of one core.

    python benchmarks/host_metrics_cost.py [--dsn DSN] [--seconds 60] [--step 15]
"""

from __future__ import annotations

import argparse
import time

from capmark.collect import hosts
from capmark.engines.postgres import connect, describe, embedded

GOAL_SHARE_OF_ONE_CORE = 0.01


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rpartition(")")[2].split()
    return (int(f[11]) + int(f[12])) / 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="measure this PostgreSQL (on this machine) instead of the embedded one")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to sample")
    ap.add_argument("--step", type=float, default=15.0, help="seconds per step (a full reading at each end)")
    args = ap.parse_args()
    dsn = args.dsn or embedded.start(None)
    control = connect(dsn, application_name="capmark benchmark")
    info = describe(control, dsn, embedded=args.dsn is None)
    source = hosts.choose("sql", dsn, control, info.data_directory, connect)
    backend = source.own_pids()[0]
    device, _ = source.data_device(info.data_directory)
    devices = [device] if device else []
    listed = source.reader.list_pids()
    print(f"server {info.version.split(',')[0]}; the role {'may' if listed is not None else 'may not'} list the "
          f"host's processes ({len(listed or [])} now); data device {devices or 'n/a'}")

    def full_reading() -> None:
        source.counters(devices)
        source.instance()
        source.host_processes()
        source.process_cpu_s(backend)

    timings: dict[str, list[float]] = {"1 s CPU reading": [], "full reading": []}
    cpu0, wall0, statements0 = _cpu_s(backend), time.monotonic(), source.transactions()
    next_step = wall0
    while time.monotonic() - wall0 < args.seconds:
        tick = time.monotonic()
        if tick >= next_step:
            t = time.perf_counter()
            full_reading()
            timings["full reading"].append(time.perf_counter() - t)
            next_step += args.step
        t = time.perf_counter()
        source.stat()
        timings["1 s CPU reading"].append(time.perf_counter() - t)
        time.sleep(max(0.0, tick + 1.0 - time.monotonic()))
    wall = time.monotonic() - wall0
    used = _cpu_s(backend) - cpu0
    share = used / wall
    print(f"{wall:.0f} s, {source.transactions() - statements0} statements: the server process used {used:.2f} s "
          f"of CPU = {share * 100:.2f} % of one core (goal: at most {GOAL_SHARE_OF_ONE_CORE * 100:.0f} %: "
          f"{'met' if share <= GOAL_SHARE_OF_ONE_CORE else 'MISSED'})")
    for what, xs in timings.items():
        xs.sort()
        print(f"  {what}: {len(xs)} x, median {xs[len(xs) // 2] * 1e3:.2f} ms round trip, max {xs[-1] * 1e3:.2f} ms")
    source.close()
    control.close()


if __name__ == "__main__":
    main()
