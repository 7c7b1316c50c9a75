"""Console view of a diagnosis (from the diagnosis document)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from capmark.analysis.diagnosis import TestDiagnosis
from capmark.report.fit import sayer


def print_diagnosis(t: TestDiagnosis, console: Console) -> None:
    say = console.print
    note = sayer(console)  # the indented lines keep their indentation when they wrap
    say(f"[bold]{escape(t.workload)}[/bold] (steps {', '.join(str(j) for j in t.steps)} jobs): "
        f"{escape(t.summary)}", highlight=False)
    for f in t.findings:
        say(f"  [bold]{escape(f.name)}[/bold] - {f.level} confidence ({f.confidence:.2f}); steps "
            f"{', '.join(str(j) for j in f.steps)} jobs", highlight=False)
        for e in f.evidence:
            note(f"    evidence: {e}", highlight=False, markup=False)
        for r in f.time_ranges:
            note(f"    when: {r.jobs} jobs, seconds {r.from_s:g}-{r.to_s:g} of the window", highlight=False)
        note(f"    meaning: {f.meaning}", highlight=False, markup=False)
        note(f"    try: {'; '.join(f.to_try)}", highlight=False, markup=False)
    for s in t.invalid_steps:
        note(f"  self-check: step with {s.jobs} jobs is invalid: {'; '.join(s.problems)}", highlight=False,
             markup=False)
    for c in t.cautions:
        note(f"  caution: step with {c.jobs} jobs: {'; '.join(c.cautions)}", highlight=False, markup=False)
