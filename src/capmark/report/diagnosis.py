"""Console view of a diagnosis (from the diagnosis document)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from capmark.analysis.diagnosis import TestDiagnosis


def print_diagnosis(t: TestDiagnosis, console: Console) -> None:
    say = console.print
    say(f"[bold]{escape(t.workload)}[/bold] (steps {', '.join(str(j) for j in t.steps)} jobs): "
        f"{escape(t.summary)}", highlight=False)
    for f in t.findings:
        say(f"  [bold]{escape(f['name'])}[/bold] - {f['level']} confidence ({f['confidence']:.2f}); steps "
            f"{', '.join(str(j) for j in f['steps'])} jobs", highlight=False)
        for e in f["evidence"]:
            say(f"    evidence: {e}", highlight=False, markup=False)
        for r in f["time_ranges"]:
            say(f"    when: {r['jobs']} jobs, seconds {r['from_s']:g}-{r['to_s']:g} of the window", highlight=False)
        say(f"    meaning: {f['meaning']}", highlight=False, markup=False)
        say(f"    try: {'; '.join(f['to_try'])}", highlight=False, markup=False)
    for s in t.invalid_steps:
        say(f"  self-check: step with {s['jobs']} jobs is invalid: {'; '.join(s['problems'])}", highlight=False,
            markup=False)
    for s in t.cautions:
        say(f"  caution: step with {s['jobs']} jobs: {'; '.join(s['cautions'])}", highlight=False, markup=False)
