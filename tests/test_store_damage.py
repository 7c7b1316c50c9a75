"""Stored runs stay readable: read-only storage, damaged results files, and folders left by runs that never began."""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from capmark.store import DB_NAME, SCHEMA

pytestmark = pytest.mark.db
SRC = str(Path(__file__).resolve().parents[1] / "src")
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE = 24, 1  # linux/prctl.h, linux/capability.h


def _without_write_override() -> None:
    """As root, give up CAP_DAC_OVERRIDE for the child, so that file permissions bind it as they bind a user."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def capmark(*args: str, read_only: bool = False, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "CAPMARK_DSN": "postgresql://nobody@127.0.0.1:1/none",  # reading a run must need no database
           "COLUMNS": "1000"}  # one message, one line
    return subprocess.run([sys.executable, "-m", "capmark.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, preexec_fn=_without_write_override if read_only and os.geteuid() == 0
                          else None)


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
