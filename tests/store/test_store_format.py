"""The results file's format: runs stored today keep opening, newer files are refused in one sentence."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from commandline import completed

from capmark import api
from capmark.errors import CapmarkError
from capmark.measure import validity
from capmark.results import MEASURES_VERSION, WaitClass
from capmark.store import DB_NAME, FORMAT_VERSION, RunStore, format_of

# A real run stored in format 1 (how it was recorded: tests/fixtures/README.md). Its figures below were read from
# it when it was recorded; a reader that stops understanding format 1 changes them or fails to open it.
FIXTURE = Path(__file__).parents[1] / "fixtures" / "run-format-1.sqlite.gz"
RECORDED_UNITS = {("srv-query1", 1): 441_142, ("srv-query1", 2): 678_071, ("tp-light", 1): 95_328,
                  ("tp-light", 2): 105_414}
RECORDED_THROUGHPUT = {("srv-query1", 1): 440_501.67, ("tp-light", 2): 105_202.41}


def _unpack(where: Path, version: int | None = None) -> Path:
    folder = where / "20261122-000000-f1x7"
    folder.mkdir(parents=True)
    (folder / DB_NAME).write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    if version is not None:
        db = sqlite3.connect(folder / DB_NAME)
        db.execute(f"pragma user_version = {version}")
        db.commit()
        db.close()
    return folder


def _cli(*args: str) -> subprocess.CompletedProcess:
    return completed(*args)


def test_a_run_of_format_1_still_opens_with_its_figures(tmp_path):
    folder = _unpack(tmp_path)
    run = api.open_run(str(folder))
    assert run.status == "complete" and [t.workload for t in run.tests] == ["srv-query1", "tp-light"]
    units = {(t.workload, s.jobs): s.units for t in run.tests for s in t.steps}
    assert units == RECORDED_UNITS
    stored = {(t.workload, s.jobs): s.measured.kpm["throughput"] for t in run.tests for s in t.steps}
    for key, value in RECORDED_THROUGHPUT.items():
        assert stored[key] == pytest.approx(value, rel=1e-6)
    tp = run.test("tp-light").steps[0]
    assert sorted(tp.histograms) == ["read", "update"] and tp.histograms["update"].total > 0


def test_a_run_of_format_1_is_analysed_and_rendered_without_a_database(tmp_path):
    folder = _unpack(tmp_path)
    doc = api.calibrate(str(folder))
    light = next(t.answer for t in doc.tests if t.workload == "tp-light")
    assert light is not None and {c.name for c in light.calibration.types} == {"read", "update"}
    out = _cli("report", str(folder), "--format", "json")
    assert out.returncode == 0, out.stderr


def test_a_newer_format_is_refused_in_one_sentence(tmp_path):
    folder = _unpack(tmp_path, version=FORMAT_VERSION + 1)
    out = _cli("report", str(folder))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"results format {FORMAT_VERSION + 1}" in out.stderr and "upgrade capmark" in out.stderr
    # writing a derived document (what-if, sizing) must not touch it either
    with pytest.raises(CapmarkError, match="newer capmark"):
        RunStore(folder).save_derived("20261122-181324-90a4", 1, "whatif", {})


def test_new_files_carry_the_format_and_old_files_keep_theirs(tmp_path):
    assert format_of(RunStore(tmp_path / "new").db) == FORMAT_VERSION
    old = _unpack(tmp_path / "old", version=0)  # as every run written before the format had a number
    store = RunStore(old)
    store.save_derived("20261122-181324-90a4", 1, "whatif", {"note": "a later analysis"})
    assert format_of(store.db) == 0
    store.close()
    assert api.open_run(str(old)).tests[0].steps[0].units == RECORDED_UNITS[("srv-query1", 1)]


# --- format 2: every step carries its Measures record -------------------------------------------------------------

FIXTURE_2 = Path(__file__).parents[1] / "fixtures" / "run-format-2.sqlite.gz"
# read from it when it was recorded: units, the record's throughput and how many self-check problems each step has
RECORDED_2 = {("srv-query1", 1): (133_120, 132_297.44, 1), ("srv-query1", 2): (164_740, 163_276.11, 1),
              ("tp-light", 1): (5_094, 5_035.63, 1), ("tp-light", 2): (10_796, 10_728.92, 1)}


def _unpack_2(where: Path) -> Path:
    folder = where / "20261125-183835-1d38"
    folder.mkdir(parents=True)
    (folder / DB_NAME).write_bytes(gzip.decompress(FIXTURE_2.read_bytes()))
    return folder


def _kpm_column(folder: Path) -> dict[tuple[int, int], dict]:
    """The step table's kpm column as stored, by (test ordinal, step ordinal)."""
    db = sqlite3.connect(folder / DB_NAME)
    rows = db.execute("select test_ordinal, ordinal, kpm from step").fetchall()
    db.close()
    return {(t, s): json.loads(kpm) for t, s, kpm in rows}


def _edit_record(folder: Path, change: dict) -> None:
    """Change the stored record of srv-query1's first step, as a later capmark or a bug might have written it."""
    db = sqlite3.connect(folder / DB_NAME)
    (raw,) = db.execute("select raw from step where test_ordinal = 1 and ordinal = 1").fetchone()
    doc = json.loads(raw)
    doc["measures"].update(change)
    db.execute("update step set raw = ? where test_ordinal = 1 and ordinal = 1", (json.dumps(doc),))
    db.commit()
    db.close()


def test_a_run_of_format_1_gets_each_steps_record_from_the_figures_it_stored(tmp_path):
    """Migration on read: the figures a run reported when it was measured are the ones its record holds (a reader
    that recomputed them with today's code could report other figures for the same run)."""
    folder = _unpack(tmp_path)
    run = api.open_run(str(folder))
    stored = _kpm_column(folder)
    for test in run.tests:
        for step in test.steps:
            measured = step.measured
            column = stored[(test.ordinal, step.ordinal)]
            assert measured.kpm == {k: v for k, v in column.items() if k != "na_reasons"}
            assert measured.unavailable == column.get("na_reasons", {})
            assert measured.units == RECORDED_UNITS[(test.workload, step.jobs)]
            assert measured.latency.p95_s == step.latency.percentile(95) and measured.latency.count == step.units
            assert measured.problems == tuple(validity.problems(step))
            assert set(measured.latency_by_type) == set(step.histograms)


def test_a_run_of_format_2_reads_the_records_it_stored(tmp_path):
    folder = _unpack_2(tmp_path)
    assert format_of(sqlite3.connect(folder / DB_NAME)) == 2
    run = api.open_run(str(folder))
    got = {(t.workload, s.jobs): (s.measured.units, round(s.measured.throughput, 2), len(s.measured.problems))
           for t in run.tests for s in t.steps}
    assert got == RECORDED_2
    # waits by engine-neutral class, as the engine mapped its events: tp-light commits, srv-query1 only reads cache
    light = run.test("tp-light").steps[0].measured
    assert light.waits[WaitClass.LOG_FLUSH] == pytest.approx(10 / 11) and light.wait_samples == 11
    assert run.test("srv-query1").steps[0].measured.waits == {WaitClass.CPU: 1.0}
    # the record is read, not rebuilt: a problem only the stored record names shows
    _edit_record(folder, {"problems": ["the stored record says so"]})
    step = api.open_run(str(folder)).tests[0].steps[0]
    assert step.measured.problems == ("the stored record says so",) and not step.measured.valid


def test_a_stored_record_of_another_layout_is_rebuilt_from_the_raw_step(tmp_path):
    folder = _unpack_2(tmp_path)
    _edit_record(folder, {"version": 0, "problems": ["an old layout's verdict"]})
    step = api.open_run(str(folder)).tests[0].steps[0]
    assert step.measured.version == MEASURES_VERSION
    assert step.measured.problems == tuple(validity.problems(step)) != ("an old layout's verdict",)


def test_a_stored_record_of_the_wrong_shape_is_named(tmp_path):
    folder = _unpack_2(tmp_path)
    _edit_record(folder, {"latency": "fast"})
    out = _cli("report", str(folder))
    assert out.returncode == 2 and "Traceback" not in out.stderr and "unexpected" not in out.stderr
    assert "step 1 of test 1" in out.stderr, out.stderr


def test_the_kpm_column_is_written_from_the_record_and_read_back_into_it(tmp_path):
    """The key figures live in the record only; the store writes them to the step's kpm column too, and a reader
    that must rebuild the record (a layout it does not know) takes them from that column, not from today's code."""
    run = api.open_run(str(_unpack_2(tmp_path / "recorded")))
    test = run.tests[0]
    step = test.steps[0]
    step.measures = replace(step.measured, kpm={**step.measured.kpm, "throughput": 1234.5},
                            unavailable={**step.measured.unavailable, "nopm": "a reason only the record holds"})
    store = RunStore(tmp_path / "again" / run.run_id)
    store.save_run(run)
    store.save_test(run.run_id, test)
    store.save_step(run.run_id, test, step)
    store.close()
    folder = tmp_path / "again" / run.run_id
    column = _kpm_column(folder)[(test.ordinal, step.ordinal)]
    assert column["throughput"] == 1234.5 and column["na_reasons"]["nopm"] == "a reason only the record holds"
    _edit_record(folder, {"version": 0})  # a layout this capmark does not know: rebuilt, its figures from the column
    rebuilt = api.open_run(str(folder)).tests[0].steps[0].measured
    assert rebuilt.version == MEASURES_VERSION and rebuilt.throughput == 1234.5
    assert rebuilt.unavailable["nopm"] == "a reason only the record holds"
