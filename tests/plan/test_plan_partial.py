"""Planning answers every test that can be answered and says why the others cannot, on stored real runs
(copies of the stored run tests/fixtures/plan-cpu-commit.sqlite.gz whose steps are edited, as a failed or interrupted
test leaves them); and dbwr-thr measured live, whose checkpoints must fall inside its units."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from commandline import completed

from capmark import api
from capmark.errors import CapmarkError
from capmark.measure.validity import LITTLE_TOLERANCE, little_gap, problems
from capmark.store import load_run


@pytest.fixture(scope="module")
def measured(cpu_and_commit_run, tmp_path_factory):
    """The shared run of srv-query1 and wal-lat1 (tests/plan/conftest.py), in a folder of this module's."""
    folder = tmp_path_factory.mktemp("partial") / Path(cpu_and_commit_run.folder).name
    shutil.copytree(cpu_and_commit_run.folder, folder)
    return load_run(folder)


def _copy(run, tmp_path: Path) -> Path:
    folder = tmp_path / "results" / Path(run.folder).name
    shutil.copytree(run.folder, folder)
    return folder


def _edit_steps(folder: Path, test_ordinal: int | None, status: str | None) -> None:
    """Mark every stored step of a test (or of all tests) as not completed, or delete them (status None)."""
    db = sqlite3.connect(folder / "results.sqlite")
    try:
        where, args = ("where test_ordinal = ?", (test_ordinal,)) if test_ordinal else ("", ())
        if status is None:
            db.execute(f"delete from step {where}", args)
        else:
            for rowid, raw in db.execute(f"select rowid, raw from step {where}", args).fetchall():
                # the step's record is derived from it: an edited step goes without, to be rebuilt on loading
                edited = {k: v for k, v in json.loads(raw).items() if k != "measures"}
                db.execute("update step set raw = ? where rowid = ?", (json.dumps({**edited, "status": status}), rowid))
        db.commit()
    finally:
        db.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return completed(*args)


@pytest.fixture
def one_bad_test(measured, tmp_path):
    folder = _copy(measured, tmp_path)
    _edit_steps(folder, 1, "failed")  # srv-query1's steps did not complete; wal-lat1's are as measured
    return folder


def _by_name(doc: dict) -> dict[str, dict]:
    return {t["workload"]: t for t in doc["tests"]}  # the JSON a script reads


def test_every_answerable_test_is_answered_and_the_other_says_why(one_bad_test, measured):
    good = next(t for t in measured.tests if t.workload == "wal-lat1")
    assert any(not problems(s) for s in good.steps), "the measured wal-lat1 run needs a valid step for this test"
    answers = {
        "calibrate": api.calibrate(str(one_bad_test)).to_json(),
        "whatif": api.whatif(str(one_bad_test), changes={"cpus": 4}).to_json(),
        "size": api.size(str(one_bad_test), sla_text="p95<50ms").to_json(),
    }
    for command, doc in answers.items():
        tests = _by_name(doc)
        assert tests["srv-query1"]["answered"] is False, command
        assert "did not complete (failed)" in tests["srv-query1"]["reason"], command
        assert tests["wal-lat1"]["answered"] is True, command
    assert answers["calibrate"]["tests"][1]["prediction"]["max_throughput"] > 0
    assert answers["whatif"]["tests"][1]["scenarios"][1]["name"] == "cpus 4"
    assert answers["size"]["tests"][1]["max_jobs"] >= 1


def test_the_console_shows_the_answer_and_the_reason(one_bad_test):
    out = _cli("calibrate", str(one_bad_test), "--results-dir", str(one_bad_test.parent))
    assert out.returncode == 0, out.stderr
    assert "srv-query1: no answer: Test srv-query1 has no valid step" in " ".join(out.stdout.split())
    assert "wal-lat1: measured vs model" in out.stdout


def test_no_answerable_test_is_an_error_in_one_sentence(measured, tmp_path):
    folder = _copy(measured, tmp_path)
    _edit_steps(folder, None, "interrupted")
    for command in (["calibrate"], ["whatif", "--cpus", "4"], ["size"], ["anticipate"]):
        out = _cli(*command, str(folder))
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert out.stderr.startswith("capmark: No test of run") and "Traceback" not in out.stderr, command
        assert out.stdout == ""


def test_a_run_without_steps_is_an_error_not_silence(measured, tmp_path):
    folder = _copy(measured, tmp_path)
    _edit_steps(folder, None, None)
    for command in (["calibrate"], ["whatif", "--cpus", "4"], ["size"], ["anticipate"]):
        out = _cli(*command, str(folder))
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert "has no measured step" in out.stderr and out.stderr.count(". ") == 0, command


def test_from_steps_naming_every_valid_step(measured):
    test = next(t for t in measured.tests if t.workload == "srv-query1")
    valid = [s.jobs for s in test.steps if not problems(s)]
    assert valid, "the measured srv-query1 run needs a valid step for this test"
    t = api.calibrate(f"{measured.folder}:srv-query1", from_jobs=valid).tests[0].answer
    assert t is not None and t.calibrated_from_jobs == valid and t.verdict["steps_scored"] == []


def test_an_interrupt_during_the_analysis_is_not_swallowed(measured):
    calls = []

    def interrupt(message: str) -> None:
        calls.append(message)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.calibrate(measured.folder, up_to=1000, progress=interrupt)
    assert len(calls) == 3 and any("predicting" in m for m in calls)


def test_bounds_are_checked_before_any_work(measured):
    with pytest.raises(CapmarkError, match="--up-to must be between 1 and 100,000"):
        api.calibrate(measured.folder, up_to=10**6)
    with pytest.raises(CapmarkError, match="--up-to must be between 1 and 100,000"):
        api.calibrate(measured.folder, up_to=0)
    with pytest.raises(CapmarkError, match="at most 100,000"):
        api.whatif(measured.folder, changes={"jobs": 10**6})
    with pytest.raises(CapmarkError, match="effective servers must be a positive"):
        api.anticipate(measured.folder, servers=-1)


@pytest.mark.db
def test_dbwr_checkpoints_inside_measured_units(dbwr_run):
    """Its checkpoint was requested before each slice's clock started, so jobs spent time outside units and
    Little's law failed by a third at one job: no step could calibrate a model."""
    step = dbwr_run.tests[0].steps[0]
    gap = little_gap(step)
    assert gap is not None and abs(gap) < LITTLE_TOLERANCE
    assert (step.latency.summary()["max_s"] or 0) > 10 * (step.latency.summary()["p50_s"] or 1)  # the checkpoint
