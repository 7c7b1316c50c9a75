"""Console tables generated from each workload's KPM declarations."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from capmark.measure import kpm, noise
from capmark.results import RunResult, TestResult


def fmt(value: object, digits: int) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def fmt_scaled(value: float | None, scale: float) -> str:
    """A per-unit demand in its display unit: three decimals for small values, none for large ones."""
    if value is None:
        return "n/a"
    x = value * scale
    return f"{x:,.3f}" if abs(x) < 100 else f"{x:,.0f}"


def _col_width(key: str, test: TestResult) -> int:
    c = kpm.COLUMNS[key]
    return max(len(c.label), len(kpm.unit_of(c, test.throughput_label)) + 2, 10) + 3


def kpm_tables(test: TestResult, width: int) -> list[Table]:
    """The KPM table, cut into parts that fit the console (each part repeats the jobs column)."""
    keys = [k for k in test.kpms if k in kpm.COLUMNS and k != "jobs"]
    parts: list[list[str]] = [[]]
    used = _col_width("jobs", test)
    for key in keys:
        w = _col_width(key, test)
        if parts[-1] and used + w > width:
            parts.append([])
            used = _col_width("jobs", test)
        parts[-1].append(key)
        used += w
    return [kpm_table(test, ["jobs", *part], continued=i > 0) for i, part in enumerate(parts)]


def plus_minus(interval: noise.Interval | None, digits: int) -> str:
    """'12,345 ± 210' (95 % half-width), or the mean alone where there is no spread to estimate."""
    if interval is None:
        return "n/a"
    if interval.half_width is None:
        return fmt(interval.mean, digits)
    d = noise.shown_digits(interval.half_width, digits)
    return f"{interval.mean:,.{d}f} ± {interval.half_width:,.{d}f}"


REPEATABILITY_NOTE = ("± is the 95 % confidence half-width: across repetitions, Student t over the repetition "
                      "values of the job count (valid repetitions only); with one repetition, throughput by batch "
                      "means (Student t over up to 5 batch means of the step's 1 s throughput, batches of at least "
                      "2 s); 'within step' is that batch-means interval of each repetition")


def repeatability_rows(test: TestResult) -> tuple[list[str], list[list[str]]] | None:
    """Per job count: the mean and confidence interval of throughput and response time over the repetitions,
    and each repetition's own throughput interval, as column headers and text rows; None when no interval
    could be estimated. The console and the HTML report show the same rows."""
    rows = noise.analyse(test.steps, list(test.kpms), test.per_unit)
    if not any(r.best(k) is not None and r.best(k).half_width is not None for r in rows for k in noise.SHOWN):
        return None
    cols = [kpm.COLUMNS[k] for k in noise.SHOWN if k in test.kpms]
    headers = ["Jobs", "Repetitions\nused", *(f"{c.label}\n[{kpm.unit_of(c, test.throughput_label)}]" for c in cols),
               f"Within step: throughput\n[{test.throughput_label}]"]
    out = []
    for r in rows:
        within = "; ".join(plus_minus(i, 0) for i in r.within.values() if i is not None) or "n/a (step too short)"
        used = f"{len(r.used)} of {len(r.repeats)}" + ("" if r.used else " (none valid)")
        out.append([str(r.jobs), used, *(plus_minus(r.best(c.key), c.digits) for c in cols), within])
    return headers, out


def repeatability_table(test: TestResult) -> Table | None:
    got = repeatability_rows(test)
    if got is None:
        return None
    headers, rows = got
    table = Table(title=escape(f"{test.workload}: repeatability (95 % confidence intervals)"), title_justify="left",
                  header_style="bold", padding=(0, 1), box=None)
    for i, header in enumerate(headers):
        table.add_column(escape(header), justify="left" if i == len(headers) - 1 else "right")
    for row in rows:
        table.add_row(*(escape(v) for v in row))
    table.caption = escape(REPEATABILITY_NOTE)
    table.caption_justify = "left"
    return table


def knee_line(test: TestResult) -> str | None:
    """Where automatic stepping found the knee (or that it reached its bound first)."""
    knee = (test.stepping or {}).get("knee")
    return f"{test.workload}: {knee['text']}." if knee else None


def kpm_table(test: TestResult, keys: list[str] | None = None, continued: bool = False) -> Table:
    title = ("(continued) " if continued else "") + (f"{test.workload} ({test.mode}-side; unit: {test.unit}"
             + (f"; {', '.join(f'{k}={v}' for k, v in test.params.items())}" if test.params else "") + ")")
    table = Table(title=escape(title), title_justify="left", header_style="bold")
    cols = [kpm.COLUMNS[k] for k in (keys or test.kpms) if k in kpm.COLUMNS]
    repeated = noise.repeats_of(test.steps) > 1
    if repeated:
        table.add_column("Rep", justify="right")
    for c in cols:
        unit = kpm.unit_of(c, test.throughput_label)
        table.add_column(escape(f"{c.label}\n[{unit}]") if unit else c.label, justify="right")
    reasons: dict[str, str] = {}
    for step in test.steps:
        values, why = kpm.of(step, test.per_unit)
        reasons.update({k: v for k, v in why.items() if k in {c.key for c in cols}})
        table.add_row(*([str(noise.repeat_of(step))] if repeated else []),
                      *(fmt(values.get(c.key), c.digits) for c in cols))
    if reasons:
        table.caption = escape("n/a: " + "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items())))
        table.caption_justify = "left"
    return table


def type_table(test: TestResult) -> Table | None:
    """Throughput and latency per transaction type, for tests that mix several."""
    if len(test.steps[0].txn_types if test.steps else []) < 2:
        return None
    table = Table(title=escape(f"{test.workload}: per transaction type"), title_justify="left", header_style="bold",
                  padding=(0, 1), box=None)
    for col in ("Jobs", "Type", "Share\n%", f"Rate\n{test.throughput_label}", "Mean\nms", "p50\nms",
                "p95\nms", "p99\nms", "Max\nms", "Err"):
        if col == "Type":
            table.add_column(col, no_wrap=True, min_width=max(len(t) for t in test.steps[0].txn_types))
        else:
            table.add_column(escape(col), justify="right")
    for step in test.steps:
        for row in type_rows(step):
            table.add_row(str(step.jobs), escape(row["type"]), fmt(row["share_pct"], 1), fmt(row["throughput"], 0),
                          *(fmt(row[k], 3) for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")),
                          str(row["errors"]))
    return table


def command_rows(step) -> list[dict]:
    """Per script command: runs and mean latency in the window (pgbench -r), with its retries and failures."""
    scripts = ((step.instruments or {}).get("unit_stats") or {}).get("scripts") or {}
    return [{"script": name, **c} for name, s in scripts.items() for c in s["commands"]]


def command_table(test: TestResult) -> Table | None:
    """Latency per command of the user's scripts, for every step."""
    if not any(command_rows(step) for step in test.steps):
        return None
    table = Table(title=escape(f"{test.workload}: per command (mean latency, as pgbench -r)"), title_justify="left",
                  header_style="bold", padding=(0, 1), box=None)
    for col in ("Jobs", "Script", "Line", "Command", "Runs", "Mean\nms", "Retries", "Failures"):
        table.add_column(escape(col), justify="left" if col in ("Script", "Command") else "right",
                         overflow="ellipsis", no_wrap=col == "Command", max_width=60 if col == "Command" else None)
    for step in test.steps:
        for row in command_rows(step):
            table.add_row(str(step.jobs), escape(row["script"]), str(row["line"]), escape(row["command"]),
                          fmt(row["runs"], 0), fmt(row["mean_ms"], 3), str(row["retries"]), str(row["failures"]))
    return table


def type_rows(step) -> list[dict]:
    rows = []
    for name, hist in step.histograms.items():
        lat = hist.summary()
        ms = {k.replace("_s", "_ms"): (v * 1000 if v is not None else None) for k, v in lat.items()}
        rows.append({"type": name, "units": hist.total, "share_pct": 100.0 * hist.total / step.units if step.units
                     else None, "throughput": hist.total / step.elapsed_s, "errors": step.errors.get(name, 0), **ms})
    return rows


def print_run(run: RunResult, console: Console | None = None) -> None:
    console = console or Console(emoji=False)
    console.print(f"[bold]capmark run {escape(run.run_id)}[/] ({escape(run.status)}) — "
                  f"{escape(str(run.target.get('version', '')))}")
    if run.reason:
        console.print(f"{run.status}: {run.reason}", highlight=False, markup=False)
    for test in run.tests:
        for table in kpm_tables(test, console.width):
            console.print(table)
        for extra in (repeatability_table(test), type_table(test), command_table(test)):
            if extra:
                console.print(extra)
        if knee_line(test):
            console.print(knee_line(test), markup=False, highlight=False)
        for step in test.steps:
            for note in step.notes:
                console.print(f"  step {step.ordinal} ({step.jobs} jobs): {note}", markup=False, highlight=False)
    console.print(f"Stored in {run.folder}", markup=False, highlight=False)
