"""Stored runs stay readable: read-only storage, damaged results files, and folders left by runs that never began."""

from __future__ import annotations

import ctypes
import datetime as dt
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from commandline import assert_one_sentence, completed, invoke

from capmark import store
from capmark.store import DB_NAME, SCHEMA

pytestmark = pytest.mark.db
SRC = str(Path(__file__).resolve().parents[2] / "src")
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE = 24, 1  # linux/prctl.h, linux/capability.h


def _without_write_override() -> None:
    """As root, give up CAP_DAC_OVERRIDE for the child, so that file permissions bind it as they bind a user."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


NO_DATABASE = {"CAPMARK_DSN": "postgresql://nobody@127.0.0.1:1/none",  # reading a run must need no database
               "COLUMNS": "1000"}  # one message, one line


def capmark(*args: str, read_only: bool = False, timeout: float = 180) -> subprocess.CompletedProcess:
    """A reading command; in a process of its own where file permissions must bind it as a user (read_only, as
    root), else in this one (commandline.completed)."""
    if not (read_only and os.geteuid() == 0):
        return completed(*args, env=NO_DATABASE)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **NO_DATABASE}
    return subprocess.run([sys.executable, "-m", "capmark.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, preexec_fn=_without_write_override)


@pytest.fixture(scope="module")
def stored_run(embedded_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real, short, complete run."""
    results = tmp_path_factory.mktemp("results")
    out = subprocess.run([sys.executable, "-m", "capmark.cli", "run", "srv-query1", "--jobs", "1", "--warmup", "0",
                          "--duration", "1", "--dsn", embedded_dsn, "--results-dir", str(results)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (folder,) = [p for p in results.iterdir() if p.is_dir()]
    return folder


def _copy(stored_run: Path, into: Path) -> Path:
    folder = into / stored_run.name
    shutil.copytree(stored_run, folder)  # keeps modification times: report.html stays newer than the results
    return folder


def _one_sentence_naming(out: subprocess.CompletedProcess, path: Path) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert str(path) in lines[0] and "Traceback" not in out.stderr and "unexpected" not in out.stderr


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(64 * 1024))


def _foreign_sqlite(path: Path) -> None:
    path.unlink()
    db = sqlite3.connect(path)
    db.execute("create table notes (body text)")
    db.execute("insert into notes values ('not a capmark run')")
    db.commit()
    db.close()


@pytest.mark.parametrize("damage", [_truncate, _empty, _random_bytes, _foreign_sqlite], ids=lambda f: f.__name__)
def test_a_damaged_results_file_is_named_with_what_to_do(damage, stored_run, tmp_path):
    folder = _copy(stored_run, tmp_path)
    damage(folder / DB_NAME)
    _one_sentence_naming(capmark("report", str(folder), "--format", "json"), folder / DB_NAME)
    _one_sentence_naming(capmark("diagnose", str(folder)), folder / DB_NAME)


def test_latest_run_skips_a_folder_whose_run_never_began(stored_run, tmp_path):
    good = _copy(stored_run, tmp_path)
    never_began = tmp_path / "99991231-235959-dead"  # sorts after every real run id
    never_began.mkdir()
    db = sqlite3.connect(never_began / DB_NAME)
    db.executescript(SCHEMA)
    db.close()
    out = capmark("report", "--results-dir", str(tmp_path), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert f'"id": "{good.name}"' in out.stdout


@pytest.fixture
def read_only_copy(stored_run: Path):
    """A copy of the run that the reading process may not write to."""
    base = Path(tempfile.mkdtemp(prefix="capmark-ro-"))
    folder = _copy(stored_run, base)
    yield folder
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755)
    shutil.rmtree(base, ignore_errors=True)


def _make_read_only(folder: Path) -> None:
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)


def test_report_json_works_on_read_only_storage(read_only_copy):
    _make_read_only(read_only_copy)
    before = (read_only_copy / "report.html").stat().st_mtime
    out = capmark("report", str(read_only_copy), "--format", "json", read_only=True)
    assert out.returncode == 0, out.stderr
    assert '"status": "complete"' in out.stdout and out.stderr == ""
    assert (read_only_copy / "report.html").stat().st_mtime == before  # up to date: not rewritten


def test_a_missing_report_on_read_only_storage_is_one_line_not_a_failure(read_only_copy):
    (read_only_copy / "report.html").unlink()
    _make_read_only(read_only_copy)
    out = capmark("report", str(read_only_copy), "--format", "json", read_only=True)
    assert out.returncode == 0, out.stderr
    assert '"status": "complete"' in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not write" in lines[0] and "report.html" in lines[0]


def test_a_missing_or_stale_report_is_rewritten(stored_run, tmp_path):
    folder = _copy(stored_run, tmp_path)
    report = folder / "report.html"
    report.unlink()
    assert capmark("report", str(folder), "--format", "json").returncode == 0
    assert report.exists()
    older = (folder / DB_NAME).stat().st_mtime - 60
    os.utime(report, (older, older))
    assert capmark("report", str(folder), "--format", "json").returncode == 0
    assert report.stat().st_mtime > older


def _edit_run(folder: Path, sql: str, *params: object) -> None:
    db = sqlite3.connect(folder / DB_NAME)
    db.execute(sql, params)
    db.commit()
    db.close()


def _report_run(folder: Path) -> dict:
    out = capmark("report", str(folder), "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["run"]


def test_a_run_stored_before_the_lifecycle_columns_still_loads(stored_run, tmp_path):
    folder = _copy(stored_run, tmp_path)
    db = sqlite3.connect(folder / DB_NAME)
    db.executescript("""
        create table old_run as select run_id, created_at, status, spec, environment, target, setup_notes, setup_s
          from run;
        drop table run;
        alter table old_run rename to run;""")
    db.close()
    run = _report_run(folder)
    assert run["status"] == "complete" and run["reason"] == "" and run["pid"] is None


def test_a_running_run_whose_pid_now_belongs_to_another_process_is_killed(stored_run, tmp_path):
    folder = _copy(stored_run, tmp_path)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # alive, but not the run
    try:
        _edit_run(folder, "update run set status = 'running', pid = ?, pid_started = pid_started - 3600",
                  other.pid)
        run = _report_run(folder)
    finally:
        other.kill()
        other.wait()
    assert run["status"] == "killed" and f"pid {other.pid}" in run["reason"]


def test_a_running_run_on_this_host_with_its_process_alive_stays_running(stored_run, tmp_path):
    folder = _copy(stored_run, tmp_path)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(alive.pid).create_time()
        _edit_run(folder, "update run set status = 'running', pid = ?, pid_started = ?", alive.pid, started)
        assert _report_run(folder)["status"] == "running"
    finally:
        alive.kill()
        alive.wait()


def test_a_silent_run_on_another_host_is_abandoned_only_after_a_whole_step(stored_run, tmp_path):
    folder = _copy(stored_run, tmp_path)
    recent = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    _edit_run(folder, "update run set status = 'running', host = 'another-host', heartbeat_at = ?",
              recent.isoformat())
    assert _report_run(folder)["status"] == "running"
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    _edit_run(folder, "update run set heartbeat_at = ?", long_ago.isoformat())
    run = _report_run(folder)
    assert run["status"] == "abandoned" and "another-host" in run["reason"]


# --- every command that reads a stored run, on the stored fixture (no database), in-process ------------------------

FIXTURE = Path(__file__).parents[1] / "fixtures" / "run-format-1.sqlite.gz"
FIXTURE_ID = "20261122-000000-f1x7"
OTHER_ID = "20261122-000001-f1x8"
# every command that reads a stored run (`report --format json` is the run's export); `list` and `solve` read none
READERS = [["report"], ["report", "--format", "json"], ["demands"], ["diagnose"], ["calibrate"],
           ["whatif", "--cpus", "4"], ["size", "--sla", "p95<5ms"], ["anticipate"], ["compare", OTHER_ID]]


def _unpack(results: Path, run_id: str) -> Path:
    folder = results / run_id
    folder.mkdir(parents=True)
    (folder / DB_NAME).write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    if run_id != FIXTURE_ID:
        db = sqlite3.connect(folder / DB_NAME)
        for table in ("run", "test", "step", "derived"):
            db.execute(f"update {table} set run_id = ?", (run_id,))
        db.commit()
        db.close()
    return folder


def _a_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "something").write_text("not a database")


def _column(table: str, column: str, value: str) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        db = sqlite3.connect(path)
        db.execute(f"update {table} set {column} = ?", (value,))
        db.commit()
        db.close()
    return edit


# damage -> the words its sentence must hold (besides the file's path)
DAMAGE = [pytest.param(_a_folder, ("is a folder", "not a capmark results file"), id="folder"),
          pytest.param(_column("run", "spec", "5"), ("spec", "a number", "table of settings", "other than capmark"),
                       id="spec-number"),
          pytest.param(_column("run", "spec", "[1, 2]"), ("spec", "a list", "table of settings"), id="spec-list"),
          pytest.param(_column("run", "environment", '"linux"'), ("environment", "a string"), id="environment-string"),
          pytest.param(_column("test", "header", "[]"), ("test", "a list"), id="test-list"),
          pytest.param(_column("step", "kpm", '"fast"'), ("kpm", "a string", "other than capmark"), id="kpm-string"),
          pytest.param(_column("step", "raw", "7"), ("step", "a number"), id="step-number"),
          pytest.param(_column("step", "raw", '{"jobs": 1}'), ("step", "lacks"), id="step-incomplete")]
READER_IDS = ["report", "export", "demands", "diagnose", "calibrate", "whatif", "size", "anticipate", "compare"]


@pytest.mark.parametrize("args", READERS, ids=READER_IDS)
@pytest.mark.parametrize(("damage", "words"), DAMAGE)
def test_every_reader_names_the_damage_in_one_sentence(damage, words, args, tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    folder = _unpack(results, FIXTURE_ID)
    _unpack(results, OTHER_ID)
    damage(folder / DB_NAME)
    code, out, err = invoke([*args, FIXTURE_ID, "--results-dir", str(results)], capsys, monkeypatch)
    line = assert_one_sentence(code, out, err, *words)
    assert str(folder / DB_NAME) in line and "damaged" not in line


@pytest.fixture
def writer(tmp_path: Path):
    """A results file that another process is writing: it holds SQLite's exclusive lock until it is ended."""
    results = tmp_path / "results"
    folder = _unpack(results, FIXTURE_ID)
    _unpack(results, OTHER_ID)
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\n"
                               "db = sqlite3.connect(sys.argv[1]); db.execute('begin exclusive')\n"
                               "db.execute('update run set heartbeat_at = heartbeat_at')\n"
                               "print('locked', flush=True); time.sleep(120)", str(folder / DB_NAME)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield results, folder, holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("args", READERS, ids=READER_IDS)
def test_a_file_another_process_is_writing_is_busy_not_damaged(args, writer, capsys, monkeypatch):
    results, folder, pid = writer
    monkeypatch.setattr(store, "BUSY_TIMEOUT_S", 0.2)  # SQLite's wait for the lock; the writer holds it for minutes
    code, out, err = invoke([*args, FIXTURE_ID, "--results-dir", str(results)], capsys, monkeypatch)
    line = assert_one_sentence(code, out, err, "another process", f"pid {pid}", "try again")
    assert str(folder / DB_NAME) in line and "damaged" not in line


def test_the_latest_run_being_written_is_busy_not_damaged(writer, capsys, monkeypatch):
    results, folder, pid = writer
    (results / OTHER_ID / DB_NAME).unlink()  # only the busy run left
    (results / OTHER_ID).rmdir()
    monkeypatch.setattr(store, "BUSY_TIMEOUT_S", 0.2)
    code, out, err = invoke(["report", "--results-dir", str(results)], capsys, monkeypatch)
    assert_one_sentence(code, out, err, str(folder / DB_NAME), "another process", f"pid {pid}")
