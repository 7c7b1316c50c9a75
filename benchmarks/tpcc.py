"""tpcc on this machine: load time per warehouse, NOPM at 1, 2, 4, 8 jobs in both modes, and client-side against
server-side per transaction type (what the client and the network tier add).

Loads are timed at each warehouse count given (from scratch: the warehouse count in place is dropped first). The
runs alternate server-side and client-side, round after round, each round measuring every job count in one test;
figures are medians over the rounds. Run it on an idle machine; nothing else may measure at the same time.

    python benchmarks/tpcc.py                          # loads of 1, 2, 4 warehouses; 3 rounds at 4 warehouses
    python benchmarks/tpcc.py --loads 1 --rounds 1 --seconds 4    # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from capmark import api
from capmark.config import RunSpec
from capmark.engines.postgres import connect, embedded
from capmark.measure import kpm
from capmark.workloads.tpcc import load, spec

MODES = ("server", "client")
JOBS = [1, 2, 4, 8]


def _loads(dsn: str, counts: list[int]) -> list[dict[str, Any]]:
    out = []
    with connect(dsn) as conn:
        for warehouses in counts:
            conn.execute("drop table if exists capmark.tpcc_meta")
            report = load.load(conn, dsn, warehouses, say=lambda m: print(m, file=sys.stderr))
            assert report is not None
            out.append({"warehouses": warehouses, "seconds": report.seconds, "copy_s": report.copy_s,
                        "s_per_warehouse": report.seconds / warehouses, "workers": report.workers})
            print(f"load {warehouses} warehouse(s): {report.seconds:.1f} s ({report.seconds / warehouses:.1f} s per "
                  f"warehouse, COPY {report.copy_s:.1f} s by {report.workers} workers)", file=sys.stderr)
    return out


def _run(dsn: str, mode: str, warehouses: int, seconds: float, folder: Path) -> dict[int, dict[str, Any]]:
    """Every job count in one test; per job count its KPMs and, per type, throughput and latency."""
    run = api.run(RunSpec(workloads=["tpcc"], jobs=JOBS, warmup_s=2.0, duration_s=seconds, mode=mode,
                          params={"warehouses": str(warehouses)}, dsn=dsn, results_dir=folder))
    test = run.tests[0]
    out: dict[int, dict[str, Any]] = {}
    for step in test.steps:
        values, _ = kpm.compute(step, test.per_unit)
        types = {}
        for name, hist in step.histograms.items():
            lat = hist.summary()
            types[name] = {"rate": hist.total / step.elapsed_s, "mean_ms": (lat["mean_s"] or 0) * 1e3,
                           "p50_ms": (lat["p50_s"] or 0) * 1e3, "p95_ms": (lat["p95_s"] or 0) * 1e3}
        out[step.jobs] = {"nopm": values["nopm"], "tpm": values["tpm"], "nopm_per_core": values["nopm_per_core"],
                          "cpu_busy_pct": values["cpu_busy_pct"], "p95_ms": values["rt_p95_ms"],
                          "round_trips_per_txn": step.round_trips / step.units if step.units else None,
                          "valid": step.status == "ok", "types": types}
        print(f"{mode} {step.jobs} jobs: NOPM {values['nopm']:,.0f}", file=sys.stderr)
    return out


def _median(rounds: list[dict[int, dict[str, Any]]], jobs: int, *path: str) -> float | None:
    values = []
    for r in rounds:
        node: Any = r.get(jobs)
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            values.append(float(node))
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="measure this PostgreSQL instead of the embedded one")
    ap.add_argument("--loads", default="1,2,4", help="warehouse counts whose load is timed (comma-separated)")
    ap.add_argument("--warehouses", type=int, default=4, help="warehouses for the runs (default 4: 8 jobs is 2 each)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of both modes; figures are medians")
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per step")
    ap.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = ap.parse_args()
    dsn = args.dsn or embedded.start(None)
    loads = _loads(dsn, [int(x) for x in args.loads.split(",") if x.strip()])
    rounds: dict[str, list[dict[int, dict[str, Any]]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                rounds[mode].append(_run(dsn, mode, args.warehouses, args.seconds, Path(tmp) / f"{mode}-{r}"))
    print("\n## Load time\n\n| warehouses | seconds | per warehouse | COPY phase | workers |\n|---|---|---|---|---|")
    for row in loads:
        print(f"| {row['warehouses']} | {row['seconds']:.1f} | {row['s_per_warehouse']:.1f} | {row['copy_s']:.1f} | "
              f"{row['workers']} |")
    print(f"\n## NOPM at {args.warehouses} warehouses (medians of {args.rounds} rounds)\n")
    print("| jobs | server NOPM | client NOPM | client / server | server p95 ms | client p95 ms | server CPU % | "
          "client CPU % | round trips per txn (client) |\n|---|---|---|---|---|---|---|---|---|")
    for jobs in JOBS:
        s, c = _median(rounds["server"], jobs, "nopm"), _median(rounds["client"], jobs, "nopm")
        print(f"| {jobs} | {s or 0:,.0f} | {c or 0:,.0f} | {(c or 0) / s if s else float('nan'):.2f} | "
              f"{_median(rounds['server'], jobs, 'p95_ms') or 0:.2f} | "
              f"{_median(rounds['client'], jobs, 'p95_ms') or 0:.2f} | "
              f"{_median(rounds['server'], jobs, 'cpu_busy_pct') or 0:.0f} | "
              f"{_median(rounds['client'], jobs, 'cpu_busy_pct') or 0:.0f} | "
              f"{_median(rounds['client'], jobs, 'round_trips_per_txn') or 0:.1f} |")
    for jobs in (1, max(JOBS)):
        print(f"\n## Per transaction type at {jobs} job{'s' if jobs > 1 else ''}: client-side against server-side\n")
        print("| type | server mean ms | client mean ms | client - server ms | server p95 ms | client p95 ms |\n"
              "|---|---|---|---|---|---|")
        for name in spec.TYPES:
            s = _median(rounds["server"], jobs, "types", name, "mean_ms")
            c = _median(rounds["client"], jobs, "types", name, "mean_ms")
            s95 = _median(rounds["server"], jobs, "types", name, "p95_ms")
            c95 = _median(rounds["client"], jobs, "types", name, "p95_ms")
            print(f"| {name} | {s or 0:.3f} | {c or 0:.3f} | {(c or 0) - (s or 0):+.3f} | {s95 or 0:.3f} | "
                  f"{c95 or 0:.3f} |")
    if args.out:
        args.out.write_text(json.dumps({"loads": loads, "rounds": rounds, "warehouses": args.warehouses,
                                        "seconds": args.seconds}, indent=1))


if __name__ == "__main__":
    main()
