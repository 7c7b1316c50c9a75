"""An observation's report.html: one self-contained page (inline SVG plots, no external files) laid out from the
ObservationReport document: the collection's timeline with the peak shaded, the baseline's tables, the validation,
and the what-if charts with the 80 % threshold drawn. Renders the documents only.
"""

from __future__ import annotations

import math
import os
from datetime import datetime
from pathlib import Path

import jinja2
import matplotlib.pyplot as plt
from markupsafe import Markup

from capmark.analysis.observation import BaselineDocument, ObservationReport, Scenario
from capmark.report import observation as text
from capmark.report import plots

PEAK_GID = "peak-window"  # the shaded peak's SVG group id (tests and readers find it by this)
THRESHOLD_GID = "utilisation-threshold"
PEAK_COLOUR = "#f4c542"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("capmark.report", "templates"),
                             autoescape=jinja2.select_autoescape(["j2", "html"]))
    env.filters.update(ms=text.ms, pct=text.pct, rate=text.rate, number=text.number, resource=text.resource_label,
                       change=text.change_pct)
    env.globals.update(window=text.window, duration=text.duration, estimate=text.estimate)
    return env


def _times(points: list[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t) for t in points]


def timeline_chart(doc: BaselineDocument) -> str:
    """CPU cores by workload stacked over time, each busy device's utilisation, commits per second; the peak
    shaded in each panel."""
    points = doc.timeline
    mids = _times([(p.start + p.end) / 2 for p in points])
    devices = sorted({d for p in points for d in p.devices})
    fig, axes = plt.subplots(3, 1, figsize=(8.0, 6.4), sharex=True)
    cpu_ax, disk_ax, commit_ax = axes
    names = [w.name for w in doc.workloads]
    stacks = [[p.cores_by_workload.get(n, math.nan) if not p.broken else math.nan for p in points] for n in names]
    if points:
        cpu_ax.stackplot(mids, *[[0.0 if math.isnan(v) else v for v in s] for s in stacks], labels=names, alpha=0.8)
        cpu_ax.plot(mids, [p.cpu_busy * doc.host_cores if p.cpu_busy is not None else math.nan for p in points],
                    color="black", linewidth=1.2, label="host busy")
    cpu_ax.set_ylabel("CPU cores busy")
    cpu_ax.set_title(f"Collection timeline ({doc.host_cores} cores); peak shaded")
    plots._legend(cpu_ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for d in devices:
        disk_ax.plot(mids, [p.devices.get(d, math.nan) * 100 for p in points], label=d)
    disk_ax.set_ylabel("device busy [%]")
    plots._legend(disk_ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    commit_ax.plot(mids, [p.commits_per_s if p.commits_per_s is not None else math.nan for p in points],
                   color="tab:green")
    commit_ax.set_ylabel("commits /s")
    commit_ax.set_xlabel("local time")
    start, end = datetime.fromtimestamp(doc.peak.start), datetime.fromtimestamp(doc.peak.end)
    for k, ax in enumerate(axes):
        ax.axvspan(start, end, color=PEAK_COLOUR, alpha=0.3, gid=f"{PEAK_GID}-{k}",
                   label="peak" if k == 0 else None)
    fig.autofmt_xdate()
    return plots._svg(fig)


def utilisation_chart(scenarios: list[Scenario], threshold: float, title: str) -> str:
    """Utilisation per resource, grouped by scenario, the threshold drawn."""
    resources = list(scenarios[0].utilisation) if scenarios else []
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.8 / max(1, len(resources))
    for k, r in enumerate(resources):
        values = [min(s.utilisation[r], 1.5) * 100 for s in scenarios]
        ax.bar([i + k * width for i in range(len(scenarios))], values, width, label=text.resource_label(r))
    ax.axhline(threshold * 100, color="red", linestyle="--", linewidth=1, gid=THRESHOLD_GID,
               label=f"{threshold:.0%} threshold")
    ax.set_xticks([i + width * (len(resources) - 1) / 2 for i in range(len(scenarios))],
                  [s.name for s in scenarios], rotation=15, fontsize=8)
    ax.set_ylabel("utilisation [%] (capped at 150)")
    ax.set_title(title)
    plots._legend(ax, fontsize=7)
    return plots._svg(fig)


def response_chart(scenarios: list[Scenario], title: str) -> str:
    """Mean response time per workload by scenario (log scale); a saturated one is marked, not drawn."""
    names = [w.name for w in scenarios[0].workloads] if scenarios else []
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.8 / max(1, len(names))
    for k, n in enumerate(names):
        xs, ys = [], []
        for i, s in enumerate(scenarios):
            w = next((w for w in s.workloads if w.name == n), None)
            if w is None:
                continue
            if math.isfinite(w.response_s):
                xs.append(i + k * width)
                ys.append(w.response_s * 1000)
            else:
                ax.annotate("sat.", (i + k * width, 1), xycoords=("data", "axes fraction"), ha="center", va="top",
                            fontsize=7, color="red")
        ax.bar(xs, ys, width, label=n)
    plots.log_scale(ax, "y")
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(scenarios))], [s.name for s in scenarios],
                  rotation=15, fontsize=8)
    ax.set_ylabel("mean response time [ms]")
    ax.set_title(title)
    plots._legend(ax, fontsize=7)
    return plots._svg(fig)


def render(doc: ObservationReport) -> str:
    w = doc.whatif
    charts = {
        "timeline": Markup(timeline_chart(doc.baseline)),
        "utilisation": Markup(utilisation_chart(w.scenarios, w.threshold, "Utilisation per resource by scenario")),
        "response": Markup(response_chart(w.scenarios, "Mean response time per workload by scenario")),
    }
    unattributed = text.unattributed_modelled(doc.baseline.model, doc.baseline.unattributed_cpu_cores)
    return _env().get_template("observation.html.j2").render(
        doc=doc, base=doc.baseline, charts=charts, breaking=text.breaking_growth(doc.sizing), p95_note=text.P95_NOTE,
        response_note=text.RESPONSE_NOTE, unattributed_note=unattributed,
        headlines=text.headline_lines(doc), top_rows=text.top_workloads(doc))


def write_observation_report(doc: ObservationReport, path: Path) -> Path:
    """The page, whole or not at all (written beside it and renamed)."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(render(doc), encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
