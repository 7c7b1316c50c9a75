"""The self-contained HTML report: a list of sections, each a function of the stored run.

To add a section, write a function (run) -> Section | None and append it to SECTIONS (or to
TEST_SECTIONS for a per-test block).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

from capmark.measure import kpm
from capmark.measure.validity import cautions, problems
from capmark.report import plots
from capmark.report.console import (
    REPEATABILITY_NOTE,
    command_rows,
    fmt,
    fmt_scaled,
    knee_line,
    repeatability_rows,
    type_rows,
)
from capmark.results import RunResult, TestResult


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


def diagnosis_section(run: RunResult) -> Section | None:
    from capmark.diagnose.diagnosis import diagnose_run

    doc = diagnose_run(run)
    if not doc["tests"]:
        return None
    for t in doc["tests"]:
        for f in t["findings"]:
            f["svg"] = Markup(plots.finding_chart(f)) if f["chart"] else ""
    return Section("Diagnosis", _render("diagnosis.html.j2", doc=doc), "diagnosis")


def summary_section(run: RunResult) -> Section:
    return Section("Run summary", _render("summary.html.j2", run=run), "summary")


def environment_section(run: RunResult) -> Section:
    return Section("Environment", _render("environment.html.j2", run=run), "environment")


def test_section(run: RunResult, test: TestResult) -> Section:
    cols = [kpm.COLUMNS[k] for k in test.kpms if k in kpm.COLUMNS]
    rows, reasons = [], {}
    for step in test.steps:
        values, why = kpm.compute(step, test.per_unit)
        reasons.update(why)
        rows.append([fmt(values.get(c.key), c.digits) for c in cols])
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
    # (a name of its own: an assignment expression in a comprehension binds in this function, and `rows` is the
    # KPM table's)
    commands = [(s, per_command) for s in test.steps if (per_command := command_rows(s))]
    repeatability = repeatability_rows(test) if test.steps else None
    invalid = [(s.jobs, found) for s in test.steps if (found := problems(s))]
    flagged = [(s.jobs, noted) for s in test.steps if (noted := cautions(s))]
    html = _render("test.html.j2", test=test, headers=headers, rows=rows, reasons=reasons, charts=charts, invalid=invalid,
                   cautions=flagged,
                   step_charts=step_charts, types=types, commands=commands, repeatability=repeatability,
                   repeatability_note=REPEATABILITY_NOTE, knee=knee_line(test), fmt=fmt)
    return Section(f"Test {test.ordinal}: {test.workload}", html, f"test-{test.ordinal}")


def demands_section(run: RunResult, test: TestResult) -> Section | None:
    if not test.steps:
        return None
    from capmark.report.demands import test_document

    doc = test_document(test)
    doc["latency_rows"] = list(zip(doc["jobs"], doc["latency"], strict=True))
    doc["commit_rows"] = list(zip(doc["jobs"], doc["per_commit"], strict=True))
    doc["device_rows"] = list(zip(doc["jobs"], doc["run_queue"], doc["devices"], strict=True))
    doc["top_statements"] = doc["statements"][-1] if doc["statements"] else []
    html = _render("demands.html.j2", doc=doc, fmt=fmt, val=fmt_scaled)
    return Section(f"Service demands: {test.workload}", html, f"demands-{test.ordinal}")


def model_section(run: RunResult, test: TestResult) -> Section | None:
    from capmark.errors import CapmarkError
    from capmark.plan.anticipate import anticipate
    from capmark.plan.calibrate import validate
    from capmark.plan.dbhost import database_host
    from capmark.report.planning import capacity_sentence
    from capmark.store import load_derived

    try:
        doc = validate(test, host=database_host(run))
    except CapmarkError as err:
        return Section(f"Model: {test.workload}", Markup("<p>{}</p>").format(str(err)), f"model-{test.ordinal}")
    charts = [plots.measured_vs_model(doc, test.throughput_label), plots.model_response_vs_jobs(doc),
              plots.utilization_vs_throughput(doc)]
    try:
        quick = anticipate(test)
        charts.append(plots.anticipation(quick))
    except CapmarkError as err:
        quick = {"note": str(err)}
    folder = Path(run.folder)
    html = _render("model.html.j2", doc=doc, fmt=fmt, unit=test.unit, quick=quick,
                   capacity=capacity_sentence(doc["calibration"]),
                   whatif=load_derived(folder, "whatif").get(test.ordinal),
                   size=load_derived(folder, "size").get(test.ordinal), charts=[Markup(c) for c in charts])
    return Section(f"Model: {test.workload}", html, f"model-{test.ordinal}")


SECTIONS: list[Callable[[RunResult], Section | None]] = [diagnosis_section, summary_section, environment_section]
TEST_SECTIONS: list[Callable[[RunResult, TestResult], Section | None]] = [test_section, demands_section, model_section]


def render(run: RunResult) -> str:
    sections = [s for s in (f(run) for f in SECTIONS) if s]
    for test in run.tests:
        sections.extend(s for s in (f(run, test) for f in TEST_SECTIONS) if s)
    return _env().get_template("report.html.j2").render(run=run, sections=sections)


def write_report(run: RunResult) -> Path:
    path = Path(run.folder) / "report.html"
    path.write_text(render(run), encoding="utf-8")
    return path
