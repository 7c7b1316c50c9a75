"""Console tables generated from each workload's KPM declarations."""

from __future__ import annotations

from typing import Any, TypedDict

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from capmark.analysis.headline import Headline
from capmark.analysis.report import ReportDocuments
from capmark.measure import kpm, noise
from capmark.report import clock
from capmark.report.fit import Col, FittedTable, sayer
from capmark.results import StepResult, TestResult


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


# Which KPM columns an 80-column terminal keeps (rank 0 always; then rising rank while they fit): the load and
# its throughput, the p95, the workload family's own metrics, mean and CPU busy; the rest a wider terminal shows.
# Every column every workload reports is ranked here; any other is a family's own.
_KPM_RANKS = {"jobs": 0, "throughput": 0, "rt_p95_ms": 1, "rt_mean_ms": 4, "cpu_busy_pct": 5, "rt_p99_ms": 6,
              "rt_p50_ms": 7, "throughput_per_job": 20, "buffer_hit_pct": 21, "physical_reads_per_s": 22,
              "logical_reads_per_s": 23, "commits_per_s": 24, "wal_mb_per_s": 25, "rt_max_ms": 26,
              "cpu_user_pct": 27, "cpu_sys_pct": 27, "cpu_iowait_pct": 28, "cpu_idle_pct": 29, "elapsed_s": 30}
_FAMILY_FIRST_RANK = 2  # a family's first two own metrics rank just after the p95, the others after the p50
_KPM_GROUPS = {"cpu_user_pct": "CPU user/sys", "cpu_sys_pct": "CPU user/sys"}


def _kpm_rank(key: str, family_keys: list[str]) -> int:
    if key in family_keys:
        i = family_keys.index(key)
        return _FAMILY_FIRST_RANK + i if i < 2 else 8 + i
    return _KPM_RANKS.get(key, 19)


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
    if not any((best := r.best(k)) is not None and best.half_width is not None for r in rows for k in noise.SHOWN):
        return None
    cols = [kpm.column_of(k, test) for k in noise.SHOWN if k in test.kpms]
    headers = ["Jobs", "Repetitions\nused", *(f"{c.label}\n[{kpm.unit_of(c, test.throughput_label)}]" for c in cols),
               f"Within step: throughput\n[{test.throughput_label}]"]
    out = []
    for r in rows:
        within = "; ".join(plus_minus(i, 0) for i in r.within.values() if i is not None) or "n/a (step too short)"
        used = f"{len(r.used)} of {len(r.repeats)}" + ("" if r.used else " (none valid)")
        out.append([str(r.jobs), used, *(plus_minus(r.best(c.key), c.digits) for c in cols), within])
    return headers, out


def repeatability_table(test: TestResult) -> FittedTable | None:
    """The repeatability of a test whose steps were repeated (--repeat); what ± means is printed once per run
    (REPEATABILITY_NOTE). A single repetition's within-step interval is in the HTML report and the JSON export."""
    if noise.repeats_of(test.steps) < 2:
        return None
    got = repeatability_rows(test)
    if got is None:
        return None
    headers, rows = got
    last = len(headers) - 1
    cols = [Col(h, justify="left" if i == last else "right", rank=0 if i < 3 else (9 if i == last else i),
                wrap=i == last, name=h.split("\n")[0]) for i, h in enumerate(headers)]
    return FittedTable(f"{test.workload}: repeatability (95 % confidence intervals)", cols, rows)


def knee_line(test: TestResult) -> str | None:
    """Where automatic stepping found the knee (or that it reached its bound first)."""
    knee = (test.stepping or {}).get("knee")
    return f"{test.workload}: {knee['text']}." if knee else None


def kpm_table(test: TestResult) -> FittedTable:
    title = f"{test.workload} ({test.mode}-side; unit: {test.unit}" + (
        f"; {', '.join(f'{k}={v}' for k, v in test.params.items())}" if test.params else "") + ")"
    keys = [k for k in test.kpms if k in kpm.COLUMNS]
    family = [k for k in keys if k not in _KPM_RANKS]  # the family's own metrics: not among the common ones
    repeated = noise.repeats_of(test.steps) > 1
    cols = [Col("Rep")] if repeated else []
    for k in keys:
        c = kpm.column_of(k, test)
        unit = kpm.unit_of(c, test.throughput_label)
        cols.append(Col(f"{c.label}\n[{unit}]" if unit else c.label, rank=_kpm_rank(k, family),
                        group=_KPM_GROUPS.get(k), name=c.label))
    table = FittedTable(title, cols, title_style="bold")
    reasons: dict[str, str] = {}
    for step in test.steps:
        values, why = step.measured.kpm, step.measured.unavailable
        reasons.update({k: v for k, v in why.items() if k in keys})
        table.add_row(*([str(noise.repeat_of(step))] if repeated else []),
                      *(clock.cell(fmt(values.get(k), kpm.COLUMNS[k].digits), test, k, values.get(k)) for k in keys))
    if reasons:
        table.notes.append("n/a: " + "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items())))
    if clock_note := clock.note(test):
        table.notes.append(clock_note)
    return table


# The per-type table keeps the type, its rate and p95 at any width; then mean, p99, share, errors, max, p50.
_TYPE_COLUMNS = (("Jobs", 0), ("Type", 0), ("Share\n%", 4), ("Rate\n{tput}", 0), ("Mean\nms", 1), ("p50\nms", 7),
                 ("p90\nms", 8), ("p95\nms", 0), ("p99\nms", 2), ("Max\nms", 6), ("Err", 5))


def type_table(test: TestResult) -> FittedTable | None:
    """Throughput and latency per transaction type, for tests that mix several."""
    if len(test.steps[0].txn_types if test.steps else []) < 2:
        return None
    cols = [Col(h.replace("{tput}", test.throughput_label), justify="left" if h == "Type" else "right", rank=r,
                name=h.split("\n")[0]) for h, r in _TYPE_COLUMNS]
    table = FittedTable(f"{test.workload}: per transaction type", cols)
    for step in test.steps:
        for row in type_rows(step):
            table.add_row(str(step.jobs), row["type"], fmt(row["share_pct"], 1), fmt(row["throughput"], 0),
                          *(clock.cell(fmt(row[k], 3), test, k, row[k])
                            for k in ("mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")),
                          str(row["errors"]))
    if clock_note := clock.note(test, by_type=True):
        table.notes.append(clock_note)
    return table


# open-ended: each command's statistics as the script interpreter stored them (passed through to the tables)
def command_rows(step: StepResult) -> list[dict[str, Any]]:
    """Per script command: runs and mean latency in the window (pgbench -r), with its retries and failures."""
    scripts = ((step.instruments or {}).get("unit_stats") or {}).get("scripts") or {}
    return [{"script": name, **c} for name, s in scripts.items() for c in s["commands"]]


def command_table(test: TestResult) -> FittedTable | None:
    """Latency per command of the user's scripts, for every step."""
    if not any(command_rows(step) for step in test.steps):
        return None
    cols = [Col("Jobs"), Col("Script", justify="left", rank=3), Col("Line"), Col("Command", justify="left", wrap=True),
            Col("Runs", rank=2), Col("Mean\nms"), Col("Retries", rank=1), Col("Failures", rank=1)]
    table = FittedTable(f"{test.workload}: per command (mean latency, as pgbench -r)", cols)
    for step in test.steps:
        for row in command_rows(step):
            table.add_row(str(step.jobs), row["script"], str(row["line"]), row["command"], fmt(row["runs"], 0),
                          fmt(row["mean_ms"], 3), str(row["retries"]), str(row["failures"]))
    return table


class TypeRow(TypedDict):
    """One transaction type of a step: its share, rate and latency distribution (milliseconds)."""

    type: str
    units: int
    share_pct: float | None
    throughput: float
    errors: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None


def type_rows(step: StepResult) -> list[TypeRow]:
    rows = []
    for name, hist in step.histograms.items():
        lat = hist.summary()

        def ms(key: str, lat: dict[str, float | None] = lat) -> float | None:
            value = lat[key]
            return value * 1000 if value is not None else None

        rows.append(TypeRow(type=name, units=hist.total,
                            share_pct=100.0 * hist.total / step.units if step.units else None,
                            throughput=hist.total / step.elapsed_s, errors=step.errors.get(name, 0),
                            mean_ms=ms("mean_s"), p50_ms=ms("p50_s"), p90_ms=ms("p90_s"), p95_ms=ms("p95_s"),
                            p99_ms=ms("p99_s"), max_ms=ms("max_s")))
    return rows


def short_version(version: str) -> str:
    """'PostgreSQL 18.6' of 'PostgreSQL 18.6 on x86_64-pc-linux-gnu, compiled by gcc ...' (the environment section
    of the report keeps the whole string)."""
    return version.split(" on ")[0].split(",")[0]


def print_test(test: TestResult, console: Console, *, verbose: bool = True, explain: bool = True) -> bool:
    """One test's tables, as a run prints them when the test ends: its key figures, the repeatability of repeated
    steps (followed by what ± means where `explain`), and with `verbose` the tables per transaction type and per
    command; then where automatic stepping found the knee. Whether it printed a repeatability table."""
    console.print(kpm_table(test))
    repeatability = repeatability_table(test)
    if repeatability:
        console.print(repeatability)
        if explain:
            console.print(Text(REPEATABILITY_NOTE + ".", style="dim"))
    if verbose:
        for extra in (type_table(test), command_table(test)):
            if extra:
                console.print(extra)
    if knee_line(test):
        console.print(knee_line(test), markup=False, highlight=False)
    return repeatability is not None


def print_run(docs: ReportDocuments, console: Console | None = None) -> None:
    """Every table of a stored run (capmark report), what ± means once, each test's and step's notes, and the server
    settings a test's sessions overrode."""
    console = console or Console(emoji=False)
    run = docs.run
    console.print(f"[bold]capmark run {escape(run.run_id)}[/] ({escape(run.status)}) — "
                  f"{escape(short_version(str(run.target.get('version', ''))))}")
    if run.reason:
        console.print(f"{run.status}: {run.reason}", highlight=False, markup=False)
    for line in platform_lines(run.environment):
        console.print(line, highlight=False, markup=False)
    explained = False
    for part in docs.tests:
        test = part.test
        explained |= print_test(test, console, explain=not explained)
        for note in test.notes:
            console.print(f"{test.workload}: {note}.", markup=False, highlight=False)
        for sentence in part.session_overrides:
            console.print(sentence, markup=False, highlight=False)
        for step in test.steps:
            for note in step.notes:
                sayer(console)(f"  step {step.ordinal} ({step.jobs} jobs): {note}")
    console.print(f"Stored in {run.folder}", markup=False, highlight=False)


# open-ended: the stored environment as whichever capmark version wrote it
def platform_lines(environment: dict[str, Any]) -> list[str]:
    """The platform the run measured where it is not simply the host: the limits it was confined to, and what the
    host's cores deliver (capmark's probe)."""
    lines = []
    confined, probe = environment.get("platform"), environment.get("platform_scaling")
    if isinstance(confined, dict) and confined.get("words"):
        lines.append(f"The server was confined to {confined['words']}; the model calibrates on that platform.")
    if isinstance(probe, dict) and isinstance(probe.get("words"), str):
        lines.append(f"This host's CPU: {probe['words']}.")
    return lines


GLANCE_TITLE = "At a glance"


def _ms(seconds: float | None) -> str:
    return fmt(seconds * 1000 if seconds is not None else None, 3)


def glance_table(headlines: list[Headline]) -> FittedTable:
    """The run's answer, one row per workload, as report.html opens with it: the peak and per core, the knee, the
    bottleneck, the headroom and the diagnosis. At 80 columns the figures at the knee and the capacity give way; a
    figure that no workload has (no valid step, no model) gives its room to the diagnosis."""
    cols = [Col("Workload", justify="left"), Col("Peak"), Col("At\njobs", rank=3, name="Peak jobs"),
            Col("Per\ncore"), Col("Knee\njobs"), Col("Knee p50\n[ms]", rank=2, name="Knee p50"),
            Col("Knee p95\n[ms]", rank=1, name="Knee p95"), Col("Bottleneck", justify="left"),
            Col("Capacity", rank=4), Col("Head-\nroom"), Col("Diagnosis", justify="left", wrap=True)]
    rows = []
    for h in headlines:
        modelled = h.capacity is not None
        peak = f"{fmt(h.peak_throughput, 0)} {h.throughput_label}" if h.peak_throughput is not None else "n/a"
        headroom = ("n/a" if h.headroom_pct is None else "0 %" if abs(h.headroom_pct) < 0.5
                    else f"{h.headroom_pct:+.0f} %")
        knee = str(h.knee_jobs) if h.knee_jobs is not None else "none" if modelled else "n/a"
        diagnosis = h.diagnosis + (f"; {h.valid_steps} of {h.steps} steps valid" if h.valid_steps < h.steps else "")
        rows.append([h.workload, peak + ("*" if h.peak_at_highest_step else ""), fmt(h.peak_jobs, 0),
                     fmt(h.per_core, 0), knee, _ms(h.knee_typical_s), _ms(h.knee_p95_s), h.bottleneck or "n/a",
                     fmt(h.capacity, 0), headroom, diagnosis])
    last = len(cols) - 1
    keep = [i for i in range(len(cols)) if i in (0, last) or any(row[i] != "n/a" for row in rows)]
    table = FittedTable(GLANCE_TITLE, [cols[i] for i in keep], [[row[i] for i in keep] for row in rows],
                        title_style="bold")
    shown = {cols[i].label for i in keep}
    legend = ["peak: the best valid step" + (" (*: at the plan's highest load; more jobs may go faster)"
                                             if any(h.peak_at_highest_step for h in headlines) else "")
              if "Peak" in shown else "",
              "knee: the jobs where the model's response time doubles" if "Knee jobs" in shown else "",
              "headroom: the model's capacity beyond the peak" if "Head- room" in shown else "",
              "valid: passed its self-checks (capmark diagnose says why not)"
              if any(h.valid_steps < h.steps for h in headlines) else "",
              "n/a: capmark calibrate says why" if any("n/a" in row[i] for row in rows for i in keep) else ""]
    said = [part for part in legend if part]
    table.notes.append("; ".join(said)[:1].upper() + "; ".join(said)[1:] + ".")
    return table


def print_glance(headlines: list[Headline], console: Console) -> None:
    """The at-a-glance table: the last thing a run prints, so that the screen left behind answers."""
    if headlines:
        console.print(glance_table(headlines))
