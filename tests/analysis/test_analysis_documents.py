"""Analysis documents from a stored run, without a database: generated schemas, figures computed once, and a
report laid out from documents alone."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from capmark import api
from capmark.analysis import planning, schemas
from capmark.analysis.compare import compare_runs
from capmark.analysis.report import report_documents, stored_report_documents
from capmark.measure import record
from capmark.report.html import render
from capmark.store import DB_NAME

FIXTURE = Path(__file__).parents[1] / "fixtures" / "run-format-1.sqlite.gz"
DOCS = Path(__file__).parents[2] / "docs" / "json-schemas.md"
# read from the fixture when it was recorded (tests/fixtures/README.md): units / elapsed of each step
RECORDED_THROUGHPUT = {("srv-query1", 1): 440_501.67, ("tp-light", 2): 105_202.41}
RECORDED_CORES = 2


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "20261122-000000-f1x7"
    out.mkdir()
    (out / DB_NAME).write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return out


def test_the_documented_outlines_are_the_types():
    assert DOCS.read_text() == schemas.markdown(), (
        "docs/json-schemas.md is stale: run `python -m capmark.analysis.schemas > docs/json-schemas.md`")


def test_every_document_is_strict_json(folder):
    """A document holding something JSON cannot carry (a dataclass, a tuple key, NaN) fails here."""
    ref = str(folder)
    docs = [api.export(ref), api.demands(ref), api.calibrate(ref), api.whatif(ref, changes={"cpus": 4}),
            api.size(ref, sla_text="p95<5ms"), api.anticipate(ref), api.diagnose(ref)]
    run = api.open_run(ref)
    docs.append(compare_runs(run, [replace(run, run_id="candidate")]))  # the run against itself
    assert [d.SCHEMA for d in docs] == [cls.SCHEMA for cls in schemas.DOCUMENTS]
    for doc in docs:
        text = json.dumps(doc.to_json(), allow_nan=False)
        assert json.loads(text)["schema"] == doc.SCHEMA


def test_the_headline_takes_the_highest_valid_step(folder):
    run = api.open_run(str(folder))
    lines = {h.workload: h for h in report_documents(run).headlines}
    light = lines["tp-light"]
    assert light.peak_jobs == 2 and light.peak_throughput == pytest.approx(RECORDED_THROUGHPUT[("tp-light", 2)])
    assert light.cores == RECORDED_CORES
    assert light.per_core == pytest.approx(RECORDED_THROUGHPUT[("tp-light", 2)] / RECORDED_CORES)
    # srv-query1 peaks at 2 jobs; with that step invalid the peak is the 1-job step's
    query = next(t for t in run.tests if t.workload == "srv-query1")
    query.steps[1].status = "failed"
    query.steps[1].measures = record.build(query.steps[1])  # a step's validity is decided when its record is built
    again = {h.workload: h for h in report_documents(run).headlines}["srv-query1"]
    assert again.peak_jobs == 1 and again.peak_throughput == pytest.approx(RECORDED_THROUGHPUT[("srv-query1", 1)])
    # and the reader learns that the figures rest on one step, below the plan's highest
    assert (again.valid_steps, again.steps, again.peak_at_highest_step) == (1, 2, False)
    assert light.peak_at_highest_step and light.valid_steps == light.steps == 2


def test_the_report_calibrates_each_test_once_and_renders_without_the_store(folder, monkeypatch):
    calls: list[str] = []
    validate = planning.validate

    def counted(test, *args, **kw):
        calls.append(test.workload)
        return validate(test, *args, **kw)

    monkeypatch.setattr(planning, "validate", counted)
    docs = stored_report_documents(folder)
    assert calls == ["srv-query1", "tp-light"]
    (folder / DB_NAME).unlink()  # the renderer must lay out the documents, not read the run again
    html = render(docs)
    assert calls == ["srv-query1", "tp-light"]
    glance = html[html.index('id="glance"'):html.index('id="diagnosis"')]
    assert "srv-query1" in glance and "tp-light" in glance and "no bottleneck signature fired" in glance
