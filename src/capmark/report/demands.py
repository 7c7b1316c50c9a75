"""Console tables of the service demands and of whether the instruments agree."""

from __future__ import annotations

from rich.console import Console

from capmark.analysis.demands import ComponentRow, TestDemands
from capmark.report.console import fmt, fmt_scaled
from capmark.report.fit import Col, FittedTable, sayer


def sampler_line(cost: dict[str, float | None]) -> str:
    """capmark's sampling cost in one line (its CPU and transactions are kept out of the workload's)."""
    cpu = f"{fmt(cost['cpu_ms_per_s'], 2)} ms CPU per second" if cost["cpu_ms_per_s"] is not None else "CPU unknown"
    return (f"capmark sampler: {cpu} and {cost['transactions'] or 0} transactions in the window, kept out of the "
            "client backends' CPU and the commits")


def component_label(row: ComponentRow) -> str:
    """A component's name, with the reason beside it when it could not be measured."""
    return f"{row['label']} ({row['reason']})" if row.get("reason") else row["label"]


def _job_columns(jobs: list[int]) -> list[Col]:
    """One column per step: the lowest and highest load always shown, the loads between by how far they are from
    both (the middle first); a job count measured more than once is labelled with its repetition."""
    lo, hi = jobs.index(min(jobs)), jobs.index(max(jobs))
    seen: dict[int, int] = {}
    cols = []
    for i, j in enumerate(jobs):
        seen[j] = seen.get(j, 0) + 1
        rep = f"\nrep {seen[j]}" if jobs.count(j) > 1 else ""
        rank = 0 if i in (lo, hi) else 3 + abs(2 * i - (len(jobs) - 1))
        cols.append(Col(f"{j} jobs{rep}", rank=rank, name=f"{j} jobs{rep.replace(chr(10), ' ')}"))
    return cols


def print_demands(doc: TestDemands, console: Console) -> None:
    jobs = doc.jobs
    cols = [Col("component", justify="left", wrap=True), Col("unit", justify="left"),
            *_job_columns(jobs),
            Col("mean", rank=1), Col("std", rank=2), Col("share %", rank=1)]
    table = FittedTable(f"{doc.workload}: service demand per {doc.unit}", cols, title_style="bold")
    for r in doc.components:
        table.add_row(component_label(r), r["unit"], *(fmt_scaled(v, r["scale"]) for v in r["values"]),
                      fmt_scaled(r["mean"], r["scale"]), fmt_scaled(r["std"], r["scale"]),
                      fmt(r.get("share_pct"), 1) if r.get("share_pct") is not None else "")
    console.print(table)
    say = sayer(console)
    for note in doc.varies:
        say(f"  varies with concurrency: {note}")
    for j, cost in zip(jobs, doc.sampler, strict=False):
        if cost["transactions"]:
            say(f"  {j} jobs: {sampler_line(cost)}")
    lat = FittedTable("latency realism (ms)", [Col("jobs"), Col("mean"), Col("p50"), Col("p90", rank=3), Col("p99"),
                                              Col("max", rank=2), Col("mean/\nmedian", rank=1),
                                              Col("", justify="left", rank=1, name="skew")])
    for j, real in zip(jobs, doc.latency, strict=True):
        lat.add_row(str(j), *(fmt(v, 3) for v in (real["mean_ms"], real["p50_ms"], real["p90_ms"], real["p99_ms"],
                                                  real["max_ms"])),
                    fmt(real["mean_over_median"], 2), "skewed" if real["skewed"] else "")
    if any(r["skewed"] for r in doc.latency):
        lat.notes.append("skewed: the mean is well above the median and misleads; read the median and percentiles")
    console.print(lat)
    log = doc.log_label  # PostgreSQL's WAL, InnoDB's redo log
    pc = FittedTable("per commit", [Col("jobs"), Col("commits\n/unit", rank=1), Col(f"{log}\nkB"),
                                    Col(f"{log}\nwrites", rank=2), Col(f"{log}\nfsyncs"), Col(f"{log} flush\nms"),
                                    Col("commit\nlatency ms"), Col(f"{log} written\n/generated", rank=3)])
    for j, c in zip(jobs, doc.per_commit, strict=True):
        pc.add_row(str(j), fmt(c.get("commits_per_unit"), 3),
                   fmt(c["wal_bytes_per_commit"] / 1024 if c["wal_bytes_per_commit"] is not None else None, 2),
                   fmt(c["wal_writes_per_commit"], 3), fmt(c["wal_fsyncs_per_commit"], 3),
                   fmt(c["wal_flush_ms_per_commit"], 3), fmt(c["commit_latency_ms"], 3),
                   fmt(c["wal_written_over_generated"], 2))
    console.print(pc)
    for j, rq, devs in zip(jobs, doc.run_queue, doc.devices, strict=True):
        dev = "; ".join(f"{d}: {fmt(v['utilization_pct'], 1)} % busy, {fmt(v['service_ms'], 3)} ms/op, queue "
                        f"{fmt(v['queue_length'], 2)}" for d, v in devs.items()) or "no device counters"
        say(f"  {j} jobs: runnable {fmt(rq['runnable'], 2)} (busy CPUs {fmt(rq['busy_cpus'], 2)}, waiting "
            f"{fmt(rq['waiting'], 2)}); {dev}")
    rec = FittedTable("Do the instruments agree?", [Col("jobs"), Col("pair", justify="left", wrap=True),
                                                    Col("database/\nprocess"), Col("OS"), Col("ratio"),
                                                    Col("verdict", justify="left")])
    for step in doc.reconciliation:
        for p in step["pairs"]:
            if p["agree"] is False:
                rec.notes.append(f"[{len(rec.notes) + 1}] {p['sentence']}")
                verdict = f"differ [{len(rec.notes)}]"
            else:
                verdict = "agree" if p["agree"] else "n/a"
            rec.add_row(str(step["jobs"]), p["name"], fmt_scaled(p["database"], 1), fmt_scaled(p["os"], 1),
                        fmt(p["ratio"], 2),
                        verdict)
    console.print(rec)
    stmts = doc.statements[-1] if doc.statements else []
    if stmts:
        st = FittedTable(f"top statements at {jobs[-1]} jobs (pg_stat_statements, per call)",
                         [Col("calls"), Col("mean ms"), Col("rows", rank=3), Col("hit", rank=1), Col("read", rank=2),
                          Col("dirtied", rank=5), Col("written", rank=4), Col(f"{log} B", rank=3),
                          Col("statement", justify="left", wrap=True)])
        for sc in stmts:
            st.add_row(f"{sc['calls']:,}", fmt(sc["mean_ms"], 3), fmt(sc["rows_per_call"], 1),
                       *(fmt(v, 2) for v in (sc["shared_blks_hit_per_call"], sc["shared_blks_read_per_call"],
                                             sc["shared_blks_dirtied_per_call"], sc["shared_blks_written_per_call"])),
                       fmt(sc["wal_bytes_per_call"], 0), " ".join(sc["query"][:60].split()))
        console.print(st)

