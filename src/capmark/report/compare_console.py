"""The comparison on the console: one table per matched test that fits 80 columns, the long parts below it."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from capmark.analysis.compare import (
    COMPLETE,
    CandidateComparison,
    Comparison,
    KpmChange,
    StepComparison,
    TestComparison,
    ended,
)
from capmark.analysis.significance import Verdict
from capmark.report.console import fmt, fmt_scaled

# the verdicts as the table's narrow column shows them; the legend below the table spells them out
SHORT_VERDICT = {Verdict.FASTER: "faster", Verdict.SLOWER: "slower", Verdict.NO_CHANGE: "same",
                 Verdict.HIGHER: "higher", Verdict.LOWER: "lower", Verdict.UNTESTED: "-"}
LEGEND = ("verdict: faster/slower = a significant change for the better/worse (Holm-adjusted p < {alpha:g}); "
          "higher/lower = significant, neither better nor worse; same = no significant change; - = not tested "
          "(see below). 95 % CI = the change's interval in %, per figure (not adjusted)")
STYLE = {Verdict.FASTER: "green", Verdict.SLOWER: "bold red"}


# beyond this a change in % is shown without decimals (+1302, not +1302.1), which keeps the columns narrow
WHOLE_PCT = 100.0


def _pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.0f}" if abs(value) >= WHOLE_PCT else f"{value:+.1f}"


def ci_text(change: KpmChange) -> str:
    if change.p_value is None:
        return ""
    return f"{_pct(change.ci_low_pct)}..{_pct(change.ci_high_pct)}"


def kpm_table(test: TestComparison) -> Table:
    table = Table(title=escape(f"{test.workload}: baseline vs candidate"), title_justify="left", box=None,
                  header_style="bold", padding=(0, 1), collapse_padding=True, pad_edge=False)
    table.add_column("jobs", justify="right", width=4)
    table.add_column("metric", max_width=22, overflow="ellipsis", no_wrap=True)
    for col in ("baseline", "candidate"):
        table.add_column(col, justify="right", max_width=10, no_wrap=True)
    table.add_column("chg %", justify="right", max_width=7, no_wrap=True)
    table.add_column("95 % CI", justify="right", max_width=14, no_wrap=True)
    table.add_column("verdict", max_width=7, no_wrap=True)
    for step in test.steps:
        for i, k in enumerate(step.kpms):
            v = Verdict(k.verdict)
            unit = f" {k.unit}" if k.unit else ""
            table.add_row(str(step.jobs) if i == 0 else "", escape(f"{k.label}{unit}"),
                          fmt(k.baseline, k.digits), fmt(k.candidate, k.digits), _pct(k.change_pct),
                          ci_text(k), SHORT_VERDICT[v], style=STYLE.get(v))
        if step is not test.steps[-1]:
            table.add_section()
    return table


def _below(test: TestComparison) -> list[str]:
    """What does not fit the table: matching, untested figures, demands, model and diagnosis."""
    lines = [f"{test.workload} in the {name} {ended(status, reason)}" for name, status, reason in
             (("baseline", test.baseline_status, test.baseline_reason),
              ("candidate", test.candidate_status, test.candidate_reason)) if status != "ok"]
    for n in test.not_compared:
        which = f", repetition {n.repeat}," if n.rest_compared else ""
        lines.append(f"{n.jobs} jobs{which} not compared: {n.reason}")
    if test.baseline_only_jobs or test.candidate_only_jobs:
        lines.append(f"steps without a partner (not compared): baseline {test.baseline_only_jobs or 'none'}, "
                     f"candidate {test.candidate_only_jobs or 'none'} jobs")
    for step in test.steps:
        lines += [f"{step.jobs} jobs, not valid in the {why}" for why in step.invalid]
    reasons: dict[str, list[str]] = {}
    for step in test.steps:
        for k in step.kpms:
            if k.p_value is None:
                reasons.setdefault(k.reason, [])
                if k.label not in reasons[k.reason]:
                    reasons[k.reason].append(k.label)
    lines += [f"not tested ({why}): {', '.join(labels)}" for why, labels in reasons.items()]
    lines += [s.sentence for s in test.session_settings]
    lines += _demand_lines(test.steps)
    m = test.model
    if m.answered and m.baseline and m.candidate:
        knee = f"knee {m.baseline.knee_jobs or 'none'} -> {m.candidate.knee_jobs or 'none'} jobs"
        lines.append(f"calibrated model up to {m.solved_up_to} jobs: max throughput "
                     f"{fmt(m.baseline.max_throughput, 0)} -> {fmt(m.candidate.max_throughput, 0)} "
                     f"{test.throughput_label} ({_pct(m.max_throughput_change_pct)} %), {knee}; bottleneck "
                     f"{m.baseline.bottleneck} -> {m.candidate.bottleneck}")
    else:
        lines.append(f"calibrated model not compared: {m.reason}")
    d = test.diagnosis
    if d.new or d.vanished:
        lines.append(f"diagnosis: new {', '.join(d.new) or 'none'}; vanished {', '.join(d.vanished) or 'none'}")
    else:
        lines.append(f"diagnosis unchanged: {d.candidate_summary}")
    return lines


def _demand_lines(steps: list[StepComparison]) -> list[str]:
    lines = []
    for step in steps:
        moved = [f"{d.label} {fmt_scaled(d.baseline, d.scale)} -> {fmt_scaled(d.candidate, d.scale)} {d.unit}"
                 f" ({_pct(d.change_pct)} %)" for d in step.moved]
        if moved:
            lines.append(f"service demand per unit at {step.jobs} jobs moved: {'; '.join(moved)}")
    if not lines:
        lines.append("service demands: no component moved by 20 % or more")
    return lines


def run_lines(doc: Comparison, cand: CandidateComparison) -> list[str]:
    """How the runs ended, for each that is not complete: its figures are those of the steps it finished."""
    return [f"{name} {run} {ended(status, reason)}; compared on the steps it finished"
            for name, run, status, reason in (("baseline", doc.baseline, doc.baseline_status, doc.baseline_reason),
                                              ("candidate", cand.run, cand.status, cand.reason))
            if status != COMPLETE]


def print_candidate(doc: Comparison, cand: CandidateComparison, console: Console) -> None:
    if doc.baseline_status == cand.status == COMPLETE:
        head = f"Baseline {doc.baseline} vs candidate {cand.run}, both complete"
    else:
        head = f"Baseline {doc.baseline} ({doc.baseline_status}) vs candidate {cand.run} ({cand.status})"
    console.print(head, style="bold", highlight=False, markup=False)
    for line in run_lines(doc, cand):
        console.print(line, style="bold red", highlight=False, markup=False)
    for test in cand.tests:
        console.print(kpm_table(test))
        for line in _below(test):
            console.print(f"  {line}", highlight=False, markup=False)
    if cand.baseline_only_tests or cand.candidate_only_tests:
        console.print(f"tests without a partner (not compared): baseline {', '.join(cand.baseline_only_tests) or 'none'}"
                      f"; candidate {', '.join(cand.candidate_only_tests) or 'none'}", highlight=False, markup=False)
    if cand.environment:
        console.print("environment differences:", highlight=False, markup=False)
        for diff in cand.environment:
            console.print(f"  {diff.sentence()}", highlight=False, markup=False)
    else:
        console.print("environment: no difference in what the runs recorded", highlight=False, markup=False)


def print_comparison(doc: Comparison, console: Console) -> None:
    for cand in doc.candidates:
        print_candidate(doc, cand, console)
    console.print(LEGEND.format(alpha=doc.alpha), highlight=False, markup=False)
    console.print(f"method: {doc.method}", highlight=False, markup=False)
