"""capmark results: what the results folder holds, through the real command line, on stored runs and the stored
observation (tests/fixtures). Each id it lists is one the other commands take; the order is by when each began, not
by folder name; a run whose process is gone reads as killed, as its report says; a damaged file is listed with its
sentence and does not end the listing; the counts are the stored ones."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from commandline import invoke
from storedruns import FIXTURES, unpack

OBS = "obs-20261126-011917-b520"
RENAMED = "99990101-000000-late"  # a folder name that sorts first, holding the oldest run
GONE_PID = 2**22 + 12345  # above the kernel's pid_max: never a live process


def _count(folder: Path, table: str) -> int:
    db = sqlite3.connect(folder / "results.sqlite")
    try:
        return db.execute(f"select count(*) from {table}").fetchone()[0]  # noqa: S608 - the test's own table names
    finally:
        db.close()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("results")
    shutil.copytree(FIXTURES / "observation-production", folder / OBS, ignore=shutil.ignore_patterns("*.py", "*.md"))
    quick, plan = unpack(folder, "run-quick", "plan-cpu-commit")
    # the oldest run under a name that sorts first
    oldest = unpack(folder / ".staging", "run-format-2")[0]
    (folder / ".staging" / oldest).rename(folder / RENAMED)
    shutil.rmtree(folder / ".staging")
    db = sqlite3.connect(folder / RENAMED / "results.sqlite")
    with db:
        db.execute("update run set created_at = '2001-01-01T00:00:00+00:00'")
    db.close()
    # a run that says it is running, written by a process on this host that is gone
    db = sqlite3.connect(folder / plan / "results.sqlite")
    with db:
        db.execute("update run set status = 'running', pid = ?, host = ?", (GONE_PID, os.uname().nodename))
    db.close()
    (folder / "damaged").mkdir()
    (folder / "damaged" / "results.sqlite").write_bytes(b"not a database at all" * 100)
    (folder / "empty-folder").mkdir()  # no results file: not a run, not listed
    return folder


def _listing(results: Path, capsys, monkeypatch) -> dict:
    code, out, err = invoke(["results", "--results-dir", str(results), "--format", "json"], capsys, monkeypatch)
    assert code == 0, (code, out, err)
    return json.loads(out)


def test_every_stored_thing_is_listed_once_by_the_id_other_commands_take(results, capsys, monkeypatch):
    doc = _listing(results, capsys, monkeypatch)
    assert doc["schema"] == "capmark.results/1"
    ids = [e["id"] for e in doc["entries"]]
    stored = sorted(p.parent.name for p in results.glob("*/results.sqlite") if p.parent.name != "damaged")
    assert sorted(ids) == stored
    for entry in doc["entries"]:
        command = ["baseline", entry["id"], "--peak-by", "commits", "--peak-length", "30s"] if \
            entry["kind"] == "observation" else ["report", entry["id"]]
        code, out, err = invoke([*command, "--results-dir", str(results), "--format", "json"], capsys, monkeypatch)
        assert code == 0, (entry["id"], code, err)


def test_newest_first_by_when_each_began_not_by_folder_name(results, capsys, monkeypatch):
    entries = _listing(results, capsys, monkeypatch)["entries"]
    began = [e["created_at"] for e in entries]
    assert began == sorted(began, reverse=True)
    assert entries[-1]["id"] == RENAMED


def test_a_run_whose_process_is_gone_reads_as_killed(results, capsys, monkeypatch):
    entries = {e["id"]: e for e in _listing(results, capsys, monkeypatch)["entries"]}
    gone = next(e for e in entries.values() if e["kind"] == "run" and e["status"] not in ("complete",))
    assert gone["status"] == "killed" and str(GONE_PID) in gone["reason"], gone


def test_the_counts_are_the_stored_ones(results, capsys, monkeypatch):
    entries = {e["id"]: e for e in _listing(results, capsys, monkeypatch)["entries"]}
    obs = entries[OBS]
    assert obs["kind"] == "observation"
    assert obs["contents"].startswith(f"{_count(results / OBS, 'interval')} intervals of 2 s"), obs
    for run_id, e in entries.items():
        if e["kind"] == "run":
            assert f"; {_count(results / run_id, 'step')} steps" in e["contents"], e


def test_a_damaged_file_is_named_with_its_sentence_and_the_rest_is_listed(results, capsys, monkeypatch):
    doc = _listing(results, capsys, monkeypatch)
    assert [u["folder"] for u in doc["unreadable"]] == [str(results / "damaged")]
    assert "damaged" in doc["unreadable"][0]["problem"]
    code, out, err = invoke(["results", "--results-dir", str(results)], capsys, monkeypatch)
    assert code == 0 and "Traceback" not in out + err
    lines = out.splitlines()
    for entry in doc["entries"]:
        assert any(line.strip().startswith(entry["id"]) for line in lines), (entry["id"], out)


def test_a_results_folder_not_made_yet_lists_nothing_and_says_where_results_go(tmp_path, capsys, monkeypatch):
    code, out, err = invoke(["results", "--results-dir", str(tmp_path / "none-yet")], capsys, monkeypatch)
    assert code == 0 and err == ""
    assert "Nothing is stored under" in out and "capmark run" in out
