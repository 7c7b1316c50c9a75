"""The embedded server's life across runs, on a real embedded PostgreSQL of this module's own: a configured
server is reused (same postmaster, warm cache, clients stay connected), a restart happens only for a setting
that really differs and survives Ctrl-C, and only one capmark run measures on it at a time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from capmark import api
from capmark.config import RunSpec
from capmark.engines.postgres import embedded
from capmark.errors import CapmarkError

pytestmark = pytest.mark.db
SRC = str(Path(__file__).resolve().parents[2] / "src")
CHILD_ENV = {**os.environ, "PYTHONPATH": SRC}
RESTART_WINDOW_TIMEOUT_S = 60  # the child's stop must begin well within this on a loaded 2-core machine


@pytest.fixture(scope="module")
def data_dir() -> Path:
    """Its own server: these tests restart it, which would disconnect the session server's other users. Its folder
    is outside pytest's temporary tree, which the server's own system user (tests run as root) may not enter."""
    base = Path(tempfile.mkdtemp(prefix="capmark-lifecycle-"))
    base.chmod(0o755)
    folder = base / "pg"
    embedded.start(folder)
    yield folder
    if embedded.status(folder).running:
        embedded._pg_ctl(["-w", "-m", "fast", "stop"], folder)
    shutil.rmtree(base, ignore_errors=True)


def _postmaster_pid(folder: Path) -> int:
    st = embedded.status(folder)
    assert st.running, f"the embedded server in {folder} is not running"
    return st.pid


def _run_with_max_connections(folder: Path, value: int) -> None:
    """Leave the server running with a max_connections other than capmark's, so that start() must restart."""
    with psycopg.connect(embedded.status(folder).url, autocommit=True) as conn:
        conn.execute(f"alter system set max_connections = {value}")
    embedded._restart(folder)


def test_second_start_reuses_the_running_server(data_dir: Path):
    """The server keeps its postmaster, its shared buffers and its clients when a second run starts it."""
    url = embedded.start(data_dir)
    pid = _postmaster_pid(data_dir)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create table if not exists warm (id int, pad text)")
        conn.execute("truncate warm")
        conn.execute("insert into warm select g, repeat('w', 200) from generate_series(1, 20000) g")
        conn.execute("select count(*) from warm")
        backend = conn.execute("select pg_backend_pid()").fetchone()[0]
        cached_sql = ("select count(*) from capmark.pg_buffercache b join pg_class c "
                      "on b.relfilenode = pg_relation_filenode(c.oid) where c.relname = 'warm'")
        cached_before = conn.execute(cached_sql).fetchone()[0]
        said: list[str] = []
        assert embedded.start(data_dir, say=said.append) == url
        assert _postmaster_pid(data_dir) == pid
        assert said == []
        assert conn.execute("select pg_backend_pid()").fetchone()[0] == backend  # the same session survived
        assert cached_before > 0
        assert conn.execute(cached_sql).fetchone()[0] == cached_before


def test_settings_compare_in_the_servers_units(data_dir: Path):
    """'1024MB' and '1GB' are one shared_buffers; spellings of a boolean are one value; a real change is not."""
    with psycopg.connect(embedded.status(data_dir).url, autocommit=True) as conn:
        setting, unit, vartype = conn.execute(
            "select setting, unit, vartype from pg_settings where name = 'shared_buffers'").fetchone()
        blocks = int(setting)
        track = conn.execute("select setting, unit, vartype from pg_settings where name = 'track_io_timing'"
                             ).fetchone()
    assert unit == "8kB"
    assert embedded.same_value(f"{blocks * 8}kB", setting, unit, vartype)
    assert embedded.same_value(f"{blocks * 8 // 1024}MB", setting, unit, vartype)
    assert embedded.same_value(str(blocks), setting, unit, vartype)
    assert not embedded.same_value(f"{blocks * 8 // 1024 // 2}MB", setting, unit, vartype)
    if blocks * 8 % (1 << 20) == 0:
        assert embedded.same_value(f"{blocks * 8 // (1 << 20)}GB", setting, unit, vartype)
    assert track[0] == "on"
    assert embedded.same_value("true", *track) and embedded.same_value("ON", *track)
    assert not embedded.same_value("off", *track)


def test_a_different_value_waiting_in_the_files_is_put_right_without_a_restart(data_dir: Path):
    """Running as desired, but ALTER SYSTEM left another value for the next restart: capmark writes its own
    value back (so that a later restart keeps it) and does not restart now."""
    url = embedded.start(data_dir)
    pid = _postmaster_pid(data_dir)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("alter system set max_connections = 100")
    said: list[str] = []
    embedded.start(data_dir, say=said.append)
    assert _postmaster_pid(data_dir) == pid and said == []
    assert "max_connections = '300'" in (data_dir / "postgresql.auto.conf").read_text()
    embedded._restart(data_dir)
    with psycopg.connect(embedded.status(data_dir).url) as conn:
        assert conn.execute("show max_connections").fetchone()[0] == "300"


def test_a_setting_that_really_differs_restarts_and_says_so(data_dir: Path):
    _run_with_max_connections(data_dir, 200)
    pid = _postmaster_pid(data_dir)
    said: list[str] = []
    url = embedded.start(data_dir, say=said.append)
    assert _postmaster_pid(data_dir) != pid
    assert len(said) == 1 and "max_connections = 300 (now 200)" in said[0], said
    with psycopg.connect(url) as conn:
        assert conn.execute("show max_connections").fetchone()[0] == "300"


def test_ctrl_c_during_the_restart_leaves_the_server_running(data_dir: Path):
    """A Ctrl-C at the terminal reaches capmark and pg_ctl alike; the restart completes all the same."""
    _run_with_max_connections(data_dir, 200)
    old_pid = _postmaster_pid(data_dir)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from capmark.engines.postgres import embedded; "
                               f"embedded.start(Path({str(data_dir)!r})); print('returned', flush=True)"],
        env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + RESTART_WINDOW_TIMEOUT_S
    while embedded.status(data_dir).pid == old_pid and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(child.pid, signal.SIGINT)  # as the terminal does: the whole foreground group
    out, err = child.communicate(timeout=120)
    assert "returned" not in out, "the signal came after the restart; the test did not exercise it"
    assert "KeyboardInterrupt" in err  # the interrupt is delivered once the restart is done
    st = embedded.status(data_dir)
    assert st.running and st.pid != old_pid
    with psycopg.connect(st.url) as conn:
        assert conn.execute("show max_connections").fetchone()[0] == "300"


def _hold_run_lock(folder: Path, run_id: str) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from capmark.engines.postgres import embedded\n"
                               f"with embedded.exclusive_run(Path({str(folder)!r}), {run_id!r}):\n"
                               "    print('held', flush=True); time.sleep(600)"],
        env=CHILD_ENV, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_second_run_and_db_stop_are_refused_while_a_run_holds_the_server(data_dir: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    embedded.start(data_dir)
    holder = _hold_run_lock(data_dir, "run-a")
    try:
        with pytest.raises(CapmarkError, match=f"pid {holder.pid}, run run-a"), \
                embedded.exclusive_run(data_dir, "run-b"):
            pass
        with pytest.raises(CapmarkError, match=f"pid {holder.pid}"):
            embedded.stop(data_dir)
        assert embedded.status(data_dir).running
        monkeypatch.delenv("CAPMARK_DSN", raising=False)
        results = tmp_path / "results"
        spec = RunSpec(workloads=["tp-light"], jobs=[1], warmup_s=1, duration_s=1, data_dir=data_dir,
                       results_dir=results)
        with pytest.raises(CapmarkError, match=f"pid {holder.pid}"):
            api.run(spec)
        assert not any(results.iterdir())  # no run folder left behind
    finally:
        holder.kill()
        holder.wait()
    # the killed holder's file is still there, with its pid, but blocks nobody
    assert str(holder.pid) in embedded.run_lock_path(data_dir).read_text()
    with embedded.exclusive_run(data_dir, "run-c"):
        assert f'"pid": {os.getpid()}' in embedded.run_lock_path(data_dir).read_text()


def test_status_reads_initdbs_bootstrap_pid_file_as_not_running(tmp_path):
    """initdb's bootstrap backend writes a postmaster.pid of seven lines with a negative pid; status (and stop, which
    asks it) must say "not running" instead of failing on it, as it did when Ctrl-C hit capmark during initdb."""
    data_dir = tmp_path / "pg"
    data_dir.mkdir()
    (data_dir / "PG_VERSION").write_text("18\n")
    (data_dir / "postmaster.pid").write_text(f"-1867\n{data_dir}\n1795394384\n5432\n\n\n  2711922     32818\n")
    got = embedded.status(data_dir)
    assert got.initialized and not got.running
