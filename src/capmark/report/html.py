"""The self-contained HTML report: a list of sections, each laid out from the run's analysis documents.

To add a section, compute its content in capmark.analysis.report, then write a function
(documents) -> Section | None and append it to SECTIONS (or to TEST_SECTIONS for a per-test block).
The functions here only lay out; none of them calibrates, diagnoses or reads the store.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

from capmark.analysis.report import ReportDocuments, TestReport
from capmark.measure import kpm
from capmark.report import clock, plots, workers
from capmark.report.console import (
    REPEATABILITY_NOTE,
    command_rows,
    fmt,
    fmt_scaled,
    knee_line,
    repeatability_rows,
    type_rows,
)


@dataclass
class Section:
    title: str
    html: Markup
    anchor: str


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("capmark.report", "templates"),
                              autoescape=jinja2.select_autoescape(["j2", "html"]))


def _render(template: str, **kw: object) -> Markup:
    return Markup(_env().get_template(template).render(**kw))


def headline_section(docs: ReportDocuments) -> Section | None:
    if not docs.headlines:
        return None
    return Section("At a glance", _render("headline.html.j2", rows=docs.headlines, fmt=fmt), "glance")


def diagnosis_section(docs: ReportDocuments) -> Section | None:
    doc = docs.diagnosis
    if not doc.tests:
        return None
    charts = {(i, j): Markup(plots.finding_chart(f.name, f.chart)) for i, t in enumerate(doc.tests)
              for j, f in enumerate(t.findings) if f.chart is not None}
    return Section("Diagnosis", _render("diagnosis.html.j2", doc=doc, charts=charts), "diagnosis")


def summary_section(docs: ReportDocuments) -> Section:
    return Section("Run summary", _render("summary.html.j2", run=docs.run), "summary")


def environment_section(docs: ReportDocuments) -> Section:
    return Section("Environment", _render("environment.html.j2", run=docs.run), "environment")


def test_section(part: TestReport) -> Section:
    test = part.test
    cols = [kpm.column_of(k, test) for k in test.kpms if k in kpm.COLUMNS]
    rows, reasons = [], {}
    for step in test.steps:
        values, why = step.measured.kpm, step.measured.unavailable
        reasons.update(why)
        rows.append([clock.cell(fmt(values.get(c.key), c.digits), test, c.key, values.get(c.key)) for c in cols])
    headers = [(c.label, kpm.unit_of(c, test.throughput_label)) for c in cols]
    charts = []
    if test.steps:
        charts = [Markup(plots.throughput_vs_jobs(test)), Markup(plots.response_vs_jobs(test))]
        cpu = plots.cpu_vs_throughput(test)
        if cpu:
            charts.append(Markup(cpu))
        charts += [Markup(plots.memory_over_time(s)) for s in test.steps if len(s.memory_series) >= 6]
    step_charts = [(s, Markup(plots.latency_histogram(s)), Markup(plots.throughput_series(s, test.throughput_label)))
                   for s in test.steps]
    types = [(s, type_rows(s)) for s in test.steps] if test.steps and len(test.steps[0].txn_types) > 1 else []
    # (a name of its own: an assignment inside a comprehension binds in this function and would replace `rows`)
    commands = [(s, by_command) for s in test.steps if (by_command := command_rows(s))]
    repeatability = repeatability_rows(test) if test.steps else None
    html = _render("test.html.j2", test=test, headers=headers, rows=rows, reasons=reasons, charts=charts,
                   invalid=part.invalid, cautions=part.cautions, overrides=part.session_overrides,
                   step_charts=step_charts, types=types, commands=commands, repeatability=repeatability,
                   repeatability_note=REPEATABILITY_NOTE, knee=knee_line(test), fmt=fmt,
                   lat=lambda row, key: clock.cell(fmt(row[key], 3), test, key, row[key]), clock_note=clock.note(test),
                   clock_type_note=clock.note(test, by_type=True))
    return Section(f"Test {test.ordinal}: {test.workload}", html, f"test-{test.ordinal}")


def demands_section(part: TestReport) -> Section | None:
    doc, test = part.demands, part.test
    if doc is None:
        return None
    html = _render("demands.html.j2", doc=doc, latency_rows=list(zip(doc.jobs, doc.latency, strict=True)),
                   commit_rows=list(zip(doc.jobs, doc.per_commit, strict=True)),
                   device_rows=list(zip(doc.jobs, doc.run_queue, doc.devices, strict=True)),
                   top_statements=doc.statements[-1] if doc.statements else [], fmt=fmt, val=fmt_scaled,
                   lat=lambda row, key: clock.cell(fmt(row[key], 3), test, key, row[key]), clock_note=clock.note(test))
    return Section(f"Service demands: {test.workload}", html, f"demands-{test.ordinal}")


def model_section(part: TestReport) -> Section | None:
    from capmark.report.planning import capacity_sentence, range_phrase

    test, doc = part.test, part.calibration
    if not test.steps:
        return None
    if doc is None:
        return Section(f"Model: {test.workload}", Markup("<p>{}</p>").format(part.calibration_problem),
                       f"model-{test.ordinal}")
    charts = [plots.measured_vs_model(doc, test.throughput_label), plots.model_response_vs_jobs(doc),
              plots.utilization_vs_throughput(doc)]
    if part.anticipation is not None:
        charts.append(plots.anticipation(part.anticipation))
    html = _render("model.html.j2", doc=doc, fmt=fmt, unit=test.unit, quick=part.anticipation,
                   quick_note=part.anticipation_problem, capacity=capacity_sentence(doc.calibration),
                   throughput_range=range_phrase(doc.prediction),
                   whatif=part.saved_whatif, size=part.saved_size, charts=[Markup(c) for c in charts])
    return Section(f"Model: {test.workload}", html, f"model-{test.ordinal}")


SECTIONS: list[Callable[[ReportDocuments], Section | None]] = [
    headline_section, diagnosis_section, summary_section, environment_section]
TEST_SECTIONS: list[Callable[[TestReport], Section | None]] = [test_section, demands_section, model_section]


def _test_sections(part: TestReport) -> list[Section]:
    return [s for s in (f(part) for f in TEST_SECTIONS) if s]


def render(docs: ReportDocuments) -> str:
    sections = [s for s in (f(docs) for f in SECTIONS) if s]
    sections += [s for drawn in workers.forked_map(_test_sections, docs.tests) for s in drawn]
    return _env().get_template("report.html.j2").render(run=docs.run, sections=sections)


def write_report(docs: ReportDocuments) -> Path:
    """The page, whole or not at all: written beside it and renamed, so that a signal or a full disk while writing
    leaves the previous page (or none), never half of one."""
    path = Path(docs.run.folder) / "report.html"
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(render(docs), encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
