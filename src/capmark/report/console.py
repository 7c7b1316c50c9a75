"""Console tables generated from each workload's KPM declarations."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from capmark.measure import kpm
from capmark.results import RunResult, TestResult


def fmt(value: object, digits: int) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def kpm_table(test: TestResult) -> Table:
    title = (f"{test.workload} ({test.mode}-side; unit: {test.unit}"
             + (f"; {', '.join(f'{k}={v}' for k, v in test.params.items())}" if test.params else "") + ")")
    table = Table(title=title, title_justify="left", header_style="bold")
    cols = [kpm.COLUMNS[k] for k in test.kpms if k in kpm.COLUMNS]
    for c in cols:
        unit = kpm.unit_of(c, test.throughput_label)
        table.add_column(f"{c.label}\n[{unit}]" if unit else c.label, justify="right")
    reasons: dict[str, str] = {}
    for step in test.steps:
        values, why = kpm.compute(step)
        reasons.update(why)
        table.add_row(*(fmt(values.get(c.key), c.digits) for c in cols))
    if reasons:
        table.caption = "n/a: " + "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
        table.caption_justify = "left"
    return table


def print_run(run: RunResult, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[bold]capmark run {run.run_id}[/] ({run.status}) — {run.target.get('version', '')}")
    for test in run.tests:
        console.print(kpm_table(test))
        for step in test.steps:
            for note in step.notes:
                console.print(f"  step {step.ordinal} ({step.jobs} jobs): {note}")
    console.print(f"Stored in {run.folder}")
