"""Repetitions and auto stepping on the embedded server: what runs, in which order, and what is stored and shown."""

from __future__ import annotations

import html
import json
import sqlite3
import statistics
from pathlib import Path

import pytest
from rich.console import Console
from scipy import stats as scipy_stats

from capmark import api
from capmark.analysis.export import run_export
from capmark.analysis.report import report_documents
from capmark.config import RunSpec
from capmark.measure import noise
from capmark.measure.stepping import stop
from capmark.measure.validity import problems
from capmark.plan.calibrate import validate
from capmark.report.console import print_run, repeatability_rows
from capmark.store import DB_NAME, load_run

pytestmark = pytest.mark.db
SHORT = {"warmup_s": 0.5, "duration_s": 1.0}  # the checks recompute figures of the same steps: any window serves


def t_interval(values: list[float]) -> tuple[float, float]:
    """The 95 % Student-t interval of a mean, from scipy's own interval function (the reference, not capmark's)."""
    low, high = scipy_stats.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values),
                                       scale=scipy_stats.sem(values))
    return float(low), float(high)


def printed(run) -> str:
    console = Console(record=True, width=200, emoji=False)
    print_run(report_documents(run), console)
    return console.export_text()


@pytest.fixture(scope="module")
def repeated(embedded_dsn, tmp_path_factory):
    return api.run(RunSpec(workloads=["srv-query1"], jobs=[1, 2], repeat=2, dsn=embedded_dsn,
                           results_dir=tmp_path_factory.mktemp("repeat"), **SHORT))


def test_repetitions_run_interleaved_and_are_stored_with_their_index(repeated):
    assert repeated.status == "complete", repeated.reason
    test = repeated.tests[0]
    assert [(s.ordinal, s.jobs, s.repeat) for s in test.steps] == [(1, 1, 1), (2, 2, 1), (3, 2, 2), (4, 1, 2)]
    assert [s.started_at for s in test.steps] == sorted(s.started_at for s in test.steps)
    db = sqlite3.connect(Path(repeated.folder) / DB_NAME)
    raws = [json.loads(r) for (r,) in db.execute("select raw from step order by ordinal")]
    db.close()
    assert [r["repeat"] for r in raws] == [1, 1, 2, 2]
    assert test.stepping["repeat"] == 2 and not test.stepping["auto"]


def test_every_job_count_has_an_interval_that_contains_its_mean(repeated):
    test = repeated.tests[0]
    full = 0
    for row in noise.analyse(test.steps, list(test.kpms), test.per_unit):
        # the valid repetitions, or all of them when none is valid (the documented fallback)
        mine = [s for s in test.steps if s.jobs == row.jobs and (s.repeat in row.used or not row.used)]
        x = row.kpms["throughput"]
        assert row.repeats == [1, 2] and row.used == [s.repeat for s in test.steps
                                                       if s.jobs == row.jobs and not problems(s)]
        if len(mine) < 2:  # an invalid repetition (another program busy on this machine) is left out of the mean
            assert x.half_width is None and (not mine or x.mean == pytest.approx(mine[0].units / mine[0].elapsed_s))
            continue
        full += 1
        assert x.n == 2 and x.method == noise.REPETITIONS and x.half_width > 0
        assert x.mean == pytest.approx(statistics.fmean(s.units / s.elapsed_s for s in mine))
        low, high = t_interval([s.units / s.elapsed_s for s in mine])
        assert (x.mean - x.half_width, x.mean + x.half_width) == pytest.approx((low, high), rel=1e-9)
        assert row.kpms["rt_mean_ms"].half_width is not None
    if not full:
        pytest.skip("a repetition of every job count was invalid on this busy machine")
    doc = run_export(load_run(Path(repeated.folder))).to_json()["tests"][0]
    assert [s["repeat"] for s in doc["steps"]] == [1, 1, 2, 2]
    rows = doc["repeatability"]["jobs"]
    assert [r["jobs"] for r in rows] == [1, 2] and rows[0]["kpms"]["throughput"]["half_width"] > 0
    text = printed(repeated)
    assert "repeatability (95 % confidence intervals)" in text and " ± " in text and "Rep" in text


def test_validation_compares_the_model_with_the_mean_over_repetitions(repeated):
    test = repeated.tests[0]
    doc = validate(test)
    assert [r["jobs"] for r in doc["steps"]] == [1, 2]  # one row per job count, not per repetition
    assert doc["calibrated_from_jobs"] == [1]
    two = doc["steps"][1]
    used = [s for s in test.steps if s.jobs == 2 and not problems(s)]
    if len(used) == 2:
        assert two["measured"]["throughput"] == pytest.approx(statistics.fmean(s.units / s.elapsed_s for s in used))
        assert two["measured_interval"]["throughput"]["half_width"] > 0
    # each scored step's verdict agrees with the 95 % t interval of its own repetitions, computed by scipy here
    for row in doc["steps"]:
        if row["jobs"] not in doc["verdict"]["steps_scored"]:
            continue
        steps = [s for s in test.steps if s.jobs == row["jobs"]]
        values = [s.units / s.elapsed_s for s in ([s for s in steps if not problems(s)] or steps)]
        kind = row["error_kind"]["throughput"]
        if len(values) < 2:
            assert kind == "no interval"
            continue
        low, high = t_interval(values)
        inside = low <= row["model"]["throughput"] <= high
        assert kind == ("measurement noise" if inside else "model error"), (row, low, high)


def test_auto_stepping_stops_at_the_bound_or_the_knee_and_says_so(embedded_dsn, tmp_path):
    said: list[str] = []
    observer = api.RunObserver()
    observer.say = said.append
    run = api.run(RunSpec(workloads=["srv-query1"], jobs_auto=True, max_jobs=4, dsn=embedded_dsn,
                          results_dir=tmp_path, **SHORT), observer)
    assert run.status == "complete", run.reason
    # announced before the run: 1, 2, 4 and at most one halfway point
    assert any(m.startswith("Stepping until the knee, up to 4 jobs: at most 4 step(s)") for m in said), said
    test = run.tests[0]
    jobs = [s.jobs for s in test.steps]
    assert jobs[:2] == [1, 2] and max(jobs) <= 4 and len(set(jobs)) == len(jobs)
    knee = test.stepping["knee"]
    measured = [(s.jobs, s.units / s.elapsed_s, s.latency.mean_s) for s in test.steps]
    again = stop(measured, 4)
    assert again is not None and knee["rule"] == again.rule and knee["jobs"] == again.jobs  # stopped for a reason
    if knee["rule"] == "bound":
        assert max(jobs) == 4 and "bound of 4 jobs" in knee["text"]
    else:
        assert knee["jobs"] in jobs
    assert knee["text"] in printed(run)
    assert run_export(run).to_json()["tests"][0]["stepping"]["knee"] == knee
    assert html.escape(knee["text"]) in (Path(run.folder) / "report.html").read_text()


def test_the_html_report_shows_the_repeatability_table(repeated):
    """The rows the console shows, in the HTML report (none where no repetition pair was valid on a busy host)."""
    page = (Path(repeated.folder) / "report.html").read_text()
    rows = repeatability_rows(repeated.tests[0])
    if rows is None:
        assert "<h3>Repeatability" not in page
        return
    table = page[page.index("<h3>Repeatability (95 % confidence intervals)</h3>"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr><td>") == len(rows[1]) == 2
    for row in rows[1]:
        assert "<td>" + "</td><td>".join(html.escape(v) for v in row) + "</td>" in table
