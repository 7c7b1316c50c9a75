"""Console views of planning from an observation: the first screen (peak, CPU, busiest device, top workloads, the
growth that breaks the threshold first), then the baseline's tables, the what-if, the sizing and the comparison.
Renders the capacity documents only; every figure here is one the documents hold.

Response times: the observation holds means per statement, not distributions, so every response time is labelled
a mean, and a p95 is the documents' own, from the mean by the exponential assumption (p95 = mean x ln 20).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from rich.console import Console
from rich.table import Table

from capmark.analysis.observation import (
    BaselineDocument,
    BaselineModel,
    Change,
    ComparisonDocument,
    Estimate,
    ObservationReport,
    Scenario,
    SizingDocument,
    WhatIfDocument,
)

TOP_WORKLOADS = 3  # the first screen names the busiest few; the baseline's tables list them all
P95_NOTE = "p95 from the mean by the exponential assumption (p95 = mean x ln 20); the observation holds only means"
# how the model carries the CPU no database process explains, as --unattributed chose
UNATTRIBUTED_MODELLED = {
    "background": "the model keeps them as constant background, never spread over the workloads (--unattributed load "
                  "makes them grow with the load)",
    "load": "the model adds them to the workloads' CPU demands in proportion to their CPU, so that they grow with the "
            "load (--unattributed load)",
}


def unattributed_modelled(model: BaselineModel, unattributed_cores: float) -> str:
    """How the model carries the `unattributed_cores` of CPU no database process explains, in words, with the part
    kept fixed under load."""
    if model.unattributed == "load" and unattributed_cores > 0 and model.unattributed_fixed_cores >= unattributed_cores:
        return ("the model keeps all of them as constant background, as the observation's intervals show they do not "
                "rise with the load (--unattributed load)")
    if model.unattributed == "load" and model.unattributed_fixed_cores > 0:
        return (f"the model keeps {model.unattributed_fixed_cores:.2f} cores of them as constant background (the part "
                "the observation's intervals show fixed) and adds the rest to the workloads' CPU demands in "
                "proportion to their CPU, so that it grows with the load (--unattributed load)")
    return UNATTRIBUTED_MODELLED[model.unattributed]


RESPONSE_NOTE = ("response time: the server's execution and planning time per unit (pg_stat_statements; "
                 "performance_schema's digests time execution only) and, where the collector timed its round trips "
                 "to the server, the clients' round trips; without the clients' own time")


# ---------------------------------------------------------------------------------------------------- formatting
def clock(epoch: float, date: bool = True) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def window(start: float, end: float) -> str:
    same_day = datetime.fromtimestamp(start).date() == datetime.fromtimestamp(end).date()
    return f"{clock(start)} to {clock(end, date=not same_day)} ({duration(end - start)})"


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def pct(value: float | None, digits: int = 0) -> str:
    if value is None or not math.isfinite(value):
        return "n/a" if value is None or math.isnan(value) else "saturated"
    return f"{value * 100:.{digits}f} %"


def ms(seconds: float | None) -> str:
    """A time in ms with three significant digits; an infinite one (a saturated station) as 'saturated'."""
    if seconds is None or math.isnan(seconds):
        return "n/a"
    if math.isinf(seconds):
        return "saturated"
    x = seconds * 1000
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x >= 0.01 else f"{x:.2g}"


def rate(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "saturated"
    return f"{value:.3g}"


def change_pct(c: Change) -> str:
    return "n/a" if c.change_pct is None else f"{c.change_pct:+.0f} %"


def resource_label(name: str) -> str:
    return {"cpu": "CPU", "wal_flush": "WAL flush"}.get(name, f"disk {name}")


def _table(title: str, *columns: str, left: int = 1) -> Table:
    t = Table(title=title, title_justify="left", pad_edge=False)
    for k, c in enumerate(columns):
        t.add_column(c, justify="left" if k < left else "right", overflow="fold")
    return t


def _say(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False)


def _notes(console: Console, notes: Iterable[str]) -> None:
    for n in notes:
        _say(console, f"Note: {n}.")


# ---------------------------------------------------------------------------------------------------- first screen
def breaking_growth(sizing: SizingDocument) -> str:
    """The sentence on when growth breaks the threshold (or an SLA) first."""
    growth = ", ".join(sizing.growth)
    s = sizing.runs_out_scenario
    if s is None:
        return f"Growth {growth} never breaks the {sizing.threshold * 100:.0f} % threshold or an SLA within 100 periods."
    why = ", ".join(f"{resource_label(r)} at {pct(s.utilisation[r])}" for r in s.over_threshold)
    slas = [t for w in s.workloads for t in w.slas_broken]
    why = "; ".join(x for x in (why, ", ".join(f"SLA {t} missed" for t in slas)) if x)
    if sizing.runs_out_in_period == 0:
        return f"Already at the peak the host breaks the {sizing.threshold * 100:.0f} % threshold or an SLA: {why}."
    return (f"Growth {growth} breaks first in period {sizing.runs_out_in_period} ({s.name} on the peak's rates): "
            f"{why}.")


def headline_lines(report: ObservationReport) -> list[str]:
    """The first screen's sentences: the observation, the peak window, the host's CPU and busiest disk there."""
    base = report.baseline
    peak = base.peak
    cpu = next((c for c in base.validation.resources if c.resource == "cpu"), None)
    devices = [r for r in base.demands.resources if r.kind == "device"]
    busiest = max(devices, key=lambda r: r.measured_utilisation, default=None)
    broken = f", {report.broken_intervals} broken" if report.broken_intervals else ""
    by = "given" if peak.by == "given" else f"busiest by {peak.by}"
    device = f"busiest disk {busiest.resource} {pct(busiest.measured_utilisation)} busy" if busiest else \
        "no disk busier than 5 %"
    return [f"Observation {report.observation_id}: {report.intervals} intervals of {duration(report.interval_s)}"
            f"{broken}; {report.status}.",
            f"Peak window ({by}): {window(peak.start, peak.end)}.",
            f"At the peak: host CPU {pct(cpu.measured if cpu else None)} busy of {base.host_cores} cores; {device}."]


def top_workloads(report: ObservationReport) -> list[tuple[str, str, str, str, str]]:
    """The busiest workloads at the peak by CPU share: name, rate, mean and p95 (exponential assumption) in ms,
    CPU share."""
    base = report.baseline
    shares = {w.name: w.peak_cpu_share for w in base.workloads}
    p95 = {w.name: w.p95_s for w in report.whatif.scenarios[0].workloads} if report.whatif.scenarios else {}
    top = sorted(base.at_peak, key=lambda r: -(shares.get(r.name) or 0.0))[:TOP_WORKLOADS]
    return [(r.name, rate(r.rate), ms(r.response_measured_s), ms(p95.get(r.name)), pct(shares.get(r.name)))
            for r in top]


def print_first_screen(report: ObservationReport, console: Console) -> None:
    for line in headline_lines(report):
        _say(console, line)
    t = _table("Top workloads at the peak", "workload", "rate /s", "mean ms", "p95 ms (exp.)", "CPU share")
    for row in top_workloads(report):
        t.add_row(*row)
    console.print(t)
    _say(console, breaking_growth(report.sizing))
    _say(console, f"(mean: measured mean response time; {P95_NOTE}.)")


# ---------------------------------------------------------------------------------------------------- baseline
def print_baseline(doc: BaselineDocument, console: Console) -> None:
    peak = doc.peak
    _say(console, f"Baseline of {doc.observation_id}: peak {window(peak.start, peak.end)}, "
                  f"{len(peak.ordinals)} intervals, by {peak.by}; {doc.host_cores} cores; demands by the "
                  f"{doc.model.estimator} estimator.")
    t = _table("Workloads: definition and shares (whole observation / peak)", "workload", "rule", "txn", "CPU",
               "IO", left=2)
    for w in doc.workloads:
        name = w.name if w.modelled else f"{w.name} (not modelled)"
        t.add_row(name, w.rule, f"{pct(w.transactions_share)} / {pct(w.peak_transactions_share)}",
                  f"{pct(w.cpu_share)} / {pct(w.peak_cpu_share)}", f"{pct(w.io_share)} / {pct(w.peak_io_share)}")
    console.print(t)
    rec = doc.peak_reconciliation
    if rec.database_transactions is not None:
        _say(console, f"At the peak the workloads counted {rec.workloads_transactions:,.0f} transactions, "
                      f"pg_stat_database {rec.database_transactions:,.0f} ({pct(rec.gap_share, 1)} apart).")

    t = _table("Per workload at the peak (response: mean, ms)", "workload", "rate /s", "measured", "modelled",
               "residual", "round trips", "stretch")
    for r in doc.at_peak:
        t.add_row(r.name, rate(r.rate), ms(r.response_measured_s), ms(r.response_modelled_s), ms(r.residual_s),
                  f"{r.round_trips:.2f} ({ms(r.round_trips_s)})", number(r.stretch))
    console.print(t)
    stations = [st.name for st in doc.model.stations]
    t = _table("Demand per unit (ms) and share of each resource's utilisation", "workload",
               *(resource_label(s) for s in stations))
    for r in doc.at_peak:
        t.add_row(r.name, *(f"{ms(r.demands_s.get(s))} ({pct(r.utilisation_share.get(s))})" for s in stations))
    console.print(t)

    t = _table("Per resource: utilisation at the peak", "resource", "measured", "modelled", "background")
    bg = {s.name: s.background_busy / s.servers for s in doc.model.stations}
    for c in doc.validation.resources:
        t.add_row(resource_label(c.resource), pct(c.measured, 1), pct(c.modelled, 1), pct(bg.get(c.resource), 1))
    console.print(t)
    cpu = doc.demands.resource("cpu")
    if cpu is not None:
        _say(console, f"Unattributed: {doc.unattributed_cpu_cores:.2f} of the {cpu.measured_busy:.2f} busy cores "
                      "at the peak were used by no database process (other programs on the host, or kernel work "
                      f"charged to none); {unattributed_modelled(doc.model, doc.unattributed_cpu_cores)}.")
    print_estimators(doc, console)
    print_validation(doc, console)
    print_steadiness(doc, console)
    _say(console, f"({RESPONSE_NOTE}; stretch factor: residence time over service demand, summed over the "
                  "resources.)")
    _notes(console, [*doc.attribution_notes, *doc.notes, *(n for r in doc.demands.resources for n in r.notes)])


def estimate(e: Estimate | None) -> str:
    if e is None:
        return "n/a"
    if math.isfinite(e.low) and math.isfinite(e.high):
        return f"{ms(e.value)} [{ms(e.low)}-{ms(e.high)}]"
    return ms(e.value)


def print_estimators(doc: BaselineDocument, console: Console) -> None:
    _say(console, "Demand per unit by three estimators side by side (their agreement is the check; regression "
                  "with its 90 % interval):")
    for r in doc.demands.resources:
        t = _table(f"{resource_label(r.resource)}: demand per unit, ms", "workload", "measured", "statements",
                   "regression")
        for w in r.workloads:
            t.add_row(w.name, estimate(w.measured), estimate(w.statements), estimate(w.regression))
        if r.regression_background is not None:
            t.add_row("(background, busy)", pct(sum(r.background.values()) / r.servers, 1), "",
                      pct(r.regression_background.value / r.servers, 1))
        console.print(t)


def print_validation(doc: BaselineDocument, console: Console) -> None:
    for v in (doc.validation, doc.held_out):
        if v is None:
            continue
        what = "calibration, on the peak" if v.window == "peak" else "prediction, on a held-out busy window"
        t = _table(f"Validation ({what}): {window(v.start, v.end)}", "resource or workload", "rate /s", "measured",
                   "modelled")
        for c in v.resources:
            t.add_row(f"{resource_label(c.resource)} utilisation", "", pct(c.measured, 1), pct(c.modelled, 1))
        for r in v.responses:
            t.add_row(f"{r.workload} mean response, ms", rate(r.rate), ms(r.measured_s), ms(r.modelled_s))
        console.print(t)
    if doc.held_out is None:
        _say(console, f"No held-out validation: {doc.held_out_reason}.")


def print_steadiness(doc: BaselineDocument, console: Console) -> None:
    t = _table("Steadiness inside the peak", "workload", "rate CV", "mix CV", "rate x R", "sampled", "steady")
    for s in doc.peak.steadiness:
        t.add_row(s.name, number(s.rate_cv), number(s.mix_cv), number(s.little_sessions), number(s.sampled_sessions),
                  "yes" if s.steady else "no")
    console.print(t)
    _say(console, "(CV: standard deviation over mean across the window's intervals; Little's law: rate x mean "
                  "response time R against the mean active sessions sampled.)")


# ---------------------------------------------------------------------------------------------------- what-if
def _scenario_utilisation(doc: WhatIfDocument | SizingDocument, scenarios: list[Scenario], title: str,
                          console: Console) -> None:
    resources = list(scenarios[0].utilisation) if scenarios else []
    t = _table(title, "scenario", *(resource_label(r) for r in resources), "breaks")
    for s in scenarios:
        t.add_row(s.name, *(pct(s.utilisation[r]) + (" !" if r in s.over_threshold else "") for r in resources),
                  "yes" if s.breaks else "no")
    console.print(t)


def _scenario_responses(scenarios: list[Scenario], console: Console, title: str) -> None:
    t = _table(title, "scenario", "workload", "rate /s", "mean ms", "p95 ms (exp.)", "stretch")
    for s in scenarios:
        for k, w in enumerate(s.workloads):
            missed = " SLA missed" if w.slas_broken else ""
            t.add_row(s.name if k == 0 else "", w.name, rate(w.rate), ms(w.response_s), ms(w.p95_s) + missed,
                      number(w.stretch))
    console.print(t)


def print_whatif(doc: WhatIfDocument, console: Console) -> None:
    changes = "; ".join(doc.changes) or "none"
    _say(console, f"What-if on {doc.observation_id}: {changes}.")
    _scenario_utilisation(doc, doc.scenarios, f"Utilisation per resource by scenario (! at or over the "
                          f"{doc.threshold * 100:.0f} % threshold)", console)
    _scenario_responses(doc.scenarios, console, "Per workload by scenario (response: mean, and p95 by the "
                        "exponential assumption)")
    if doc.first_breaking is None:
        _say(console, f"No scenario breaks the {doc.threshold * 100:.0f} % threshold or an SLA.")
    else:
        period = f"; of the growth periods, period {doc.runs_out_in_period} breaks first" \
            if doc.runs_out_in_period else ""
        _say(console, f"First to break the {doc.threshold * 100:.0f} % threshold or an SLA: {doc.first_breaking}{period}.")
    _say(console, f"(A stretch factor of {doc.stretch_limit:g} or more means as long queued as served; "
                  f"{doc.p95_assumption}.)")
    _notes(console, doc.notes)


def print_sizing(doc: SizingDocument, console: Console) -> None:
    slas = f" and SLAs {', '.join(doc.slas)}" if doc.slas else ""
    _say(console, f"Sizing {doc.observation_id} for growth {', '.join(doc.growth)} within the "
                  f"{doc.threshold * 100:.0f} % threshold{slas}.")
    _say(console, breaking_growth(doc))
    scenarios = [s for s in (doc.runs_out_scenario, doc.target) if s is not None]
    _scenario_utilisation(doc, scenarios, "When it runs out, and the target period, on the measured host", console)
    if doc.fits:
        _say(console, f"The measured host carries the target period ({doc.target.name}).")
    elif doc.changes:
        t = _table(f"Single changes that carry the target period ({doc.target.name})", "change", "value",
                   "highest utilisation")
        for c in doc.changes:
            label = {"cpus": "cores", "cpu_speed": "CPU speed", "disk_speed": "disk speed"}.get(c.what, c.what)
            value = f"{c.value:g}" if c.what == "cpus" else f"x{c.value:.2f}"
            t.add_row(label, value, pct(max(c.scenario.utilisation.values(), default=None)))
        console.print(t)
    _scenario_responses([doc.target, *(c.scenario for c in doc.changes)], console,
                        "Per workload in the target period (response: mean, and p95 by the exponential assumption)")
    _notes(console, doc.notes)


# ---------------------------------------------------------------------------------------------------- report, compare
def print_observation_report(report: ObservationReport, console: Console) -> None:
    print_first_screen(report, console)
    console.print()
    print_baseline(report.baseline, console)
    console.print()
    print_whatif(report.whatif, console)
    console.print()
    print_sizing(report.sizing, console)


def print_observation_comparison(doc: ComparisonDocument, console: Console) -> None:
    _say(console, f"Before: {doc.before_id}, peak {window(*doc.before_peak)}.")
    _say(console, f"After:  {doc.after_id}, peak {window(*doc.after_peak)}.")
    t = _table("Per workload at the peak: before -> after", "workload", "rate /s", "mean response ms", "change")
    for w in doc.workloads:
        name = w.name + ("" if w.in_before and w.in_after else " (new)" if w.in_after else " (gone)")
        t.add_row(name, f"{rate(w.rate.before)} -> {rate(w.rate.after)} ({change_pct(w.rate)})",
                  f"{ms(w.response_s.before)} -> {ms(w.response_s.after)}", change_pct(w.response_s))
    console.print(t)
    resources = [r.resource for r in doc.resources]
    t = _table("Demand per unit, ms: before -> after", "workload", *(resource_label(r) for r in resources))
    for w in doc.workloads:
        t.add_row(w.name, *(f"{ms(w.demands_s[r].before)} -> {ms(w.demands_s[r].after)}" for r in resources))
    console.print(t)
    t = _table("Utilisation at the peak (measured)", "resource", "before", "after", "change")
    for r in doc.resources:
        t.add_row(resource_label(r.resource), pct(r.utilisation.before, 1), pct(r.utilisation.after, 1),
                  change_pct(r.utilisation))
    console.print(t)
    _notes(console, doc.notes)
