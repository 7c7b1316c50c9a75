"""Console tables of the service demands and of whether the instruments agree."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from capmark.analysis.demands import TestDemands
from capmark.report.console import fmt, fmt_scaled


def sampler_line(cost: dict[str, Any]) -> str:
    """capmark's sampling cost in one line (its CPU and transactions are kept out of the workload's)."""
    cpu = f"{fmt(cost['cpu_ms_per_s'], 2)} ms CPU per second" if cost["cpu_ms_per_s"] is not None else "CPU unknown"
    return (f"capmark sampler: {cpu} and {cost['transactions'] or 0} transactions in the window, kept out of the "
            "client backends' CPU and the commits")


def component_label(row: dict[str, Any]) -> str:
    """A component's name, with the reason beside it when it could not be measured."""
    return f"{row['label']} ({row['reason']})" if row.get("reason") else row["label"]


def print_demands(doc: TestDemands, console: Console) -> None:
    jobs = doc.jobs
    table = Table(title=escape(f"{doc.workload}: service demand per {doc.unit}"), title_justify="left",
                  header_style="bold", box=None, padding=(0, 1))
    table.add_column("component", no_wrap=True)
    table.add_column("unit")
    for j in jobs:
        table.add_column(f"{j} jobs", justify="right")
    for col in ("mean", "std", "share %"):
        table.add_column(col, justify="right")
    for r in doc.components:
        table.add_row(escape(component_label(r)), r["unit"], *(fmt_scaled(v, r["scale"]) for v in r["values"]),
                      fmt_scaled(r["mean"], r["scale"]), fmt_scaled(r["std"], r["scale"]),
                      fmt(r.get("share_pct"), 1) if r.get("share_pct") is not None else "")
    console.print(table)
    for note in doc.varies:
        console.print(f"  varies with concurrency: {note}")
    for j, cost in zip(jobs, doc.sampler, strict=False):
        if cost["transactions"]:
            console.print(f"  {j} jobs: {sampler_line(cost)}", highlight=False)
    lat = Table(title="latency realism (ms)", title_justify="left", box=None, padding=(0, 1))
    for col in ("jobs", "mean", "p50", "p90", "p99", "max", "mean/median", ""):
        lat.add_column(col, justify="right")
    for j, r in zip(jobs, doc.latency, strict=True):
        lat.add_row(str(j), *(fmt(r[k], 3) for k in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")),
                    fmt(r["mean_over_median"], 2), "skewed: the mean misleads" if r["skewed"] else "")
    console.print(lat)
    pc = Table(title="per commit", title_justify="left", box=None, padding=(0, 1))
    for col in ("jobs", "commits/unit", "WAL kB", "WAL writes", "WAL fsyncs", "WAL flush ms", "commit latency ms",
                "WAL written/generated"):
        pc.add_column(col, justify="right")
    for j, r in zip(jobs, doc.per_commit, strict=True):
        pc.add_row(str(j), fmt(r.get("commits_per_unit"), 3),
                   fmt(r["wal_bytes_per_commit"] / 1024 if r["wal_bytes_per_commit"] is not None else None, 2),
                   fmt(r["wal_writes_per_commit"], 3), fmt(r["wal_fsyncs_per_commit"], 3),
                   fmt(r["wal_flush_ms_per_commit"], 3), fmt(r["commit_latency_ms"], 3),
                   fmt(r["wal_written_over_generated"], 2))
    console.print(pc)
    for j, rq, devs in zip(jobs, doc.run_queue, doc.devices, strict=True):
        dev = "; ".join(f"{d}: {fmt(v['utilization_pct'], 1)} % busy, {fmt(v['service_ms'], 3)} ms/op, queue "
                        f"{fmt(v['queue_length'], 2)}" for d, v in devs.items()) or "no device counters"
        console.print(f"  {j} jobs: runnable {fmt(rq['runnable'], 2)} (busy CPUs {fmt(rq['busy_cpus'], 2)}, waiting "
                      f"{fmt(rq['waiting'], 2)}); {dev}", highlight=False)
    rec = Table(title="Do the instruments agree?", title_justify="left", box=None, padding=(0, 1))
    for col in ("jobs", "pair", "database/process", "OS", "ratio", "verdict"):
        rec.add_column(col)
    for step in doc.reconciliation:
        for p in step["pairs"]:
            verdict = "agree" if p["agree"] else ("n/a" if p["agree"] is None else escape(p["sentence"]))
            rec.add_row(str(step["jobs"]), p["name"], fmt(p["database"], 3), fmt(p["os"], 3), fmt(p["ratio"], 2),
                        verdict)
    console.print(rec)
    stmts = doc.statements[-1] if doc.statements else []
    if stmts:
        st = Table(title=f"top statements at {jobs[-1]} jobs (pg_stat_statements, per call)", title_justify="left",
                   box=None, padding=(0, 1))
        for col in ("calls", "mean ms", "rows", "hit", "read", "dirtied", "written", "WAL B", "statement"):
            st.add_column(col, justify="left" if col == "statement" else "right")
        for r in stmts:
            st.add_row(f"{r['calls']:,}", fmt(r["mean_ms"], 3), fmt(r["rows_per_call"], 1),
                       *(fmt(r[f"shared_blks_{k}_per_call"], 2) for k in ("hit", "read", "dirtied", "written")),
                       fmt(r["wal_bytes_per_call"], 0), escape(r["query"][:60]))
        console.print(st)
