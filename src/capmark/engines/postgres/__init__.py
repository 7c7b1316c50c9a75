"""PostgreSQL 14-18 as a target: connections with readable errors, version and capability detection."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import psutil
import psycopg

from capmark.config import redact_dsn
from capmark.engines.base import Capability, TargetInfo
from capmark.errors import CapmarkError

MIN_VERSION_NUM = 140000
KEY_SETTINGS = (
    "shared_buffers", "max_connections", "work_mem", "wal_level", "synchronous_commit", "fsync",
    "wal_sync_method", "full_page_writes", "checkpoint_timeout", "max_wal_size", "wal_buffers",
    "commit_delay", "track_io_timing", "track_wal_io_timing", "shared_preload_libraries",
    "io_method", "io_workers", "effective_io_concurrency", "max_parallel_workers_per_gather",
    "huge_pages", "debug_io_direct", "pg_stat_statements.track",
)

# How PostgreSQL says that every connection slot is taken (max_connections, reserved slots, a role's limit).
SLOTS_TAKEN = ("too many clients already", "remaining connection slots are reserved", "too many connections for role",
               "too many connections for database")


def explain_connect_error(err: Exception, dsn: str) -> CapmarkError:
    """Turn a libpq failure into one sentence with the fix; never echoes a password."""
    safe = redact_dsn(dsn)
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    low = str(err).lower()
    if "password authentication failed" in low or "no password supplied" in low:
        return CapmarkError(f"The server at {safe} rejected the login ({text}); correct the user or password "
                            "in --dsn / CAPMARK_DSN.")
    if "does not exist" in low and "database" in low:
        return CapmarkError(f"{text} at {safe}; create it or name an existing database in the DSN.")
    if "role" in low and "does not exist" in low:
        return CapmarkError(f"{text} at {safe}; name an existing user in the DSN.")
    if "invalid dsn" in low or "invalid connection option" in low or "missing \"=\"" in low:
        return CapmarkError(f"The DSN '{safe}' is not valid ({text}); write it as postgresql://user@host:port/db "
                            "or 'host=... dbname=...'.")
    if any(sign in low for sign in SLOTS_TAKEN):
        return CapmarkError(f"The server at {safe} has no connection slot free for capmark ({text}); other clients "
                            "hold them: close some, lower --jobs, or raise max_connections (or the role's "
                            "CONNECTION LIMIT).")
    if "shutting down" in low or "starting up" in low or "in recovery mode" in low:
        return CapmarkError(f"The server at {safe} is not accepting connections ({text}); wait until it is up "
                            "and try again.")
    return CapmarkError(f"Cannot connect to PostgreSQL at {safe} ({text}); check the host, port and that the "
                        "server is running.")


def connect(dsn: str, *, autocommit: bool = True, application_name: str = "capmark") -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=10, application_name=application_name)
    except (psycopg.Error, ValueError) as err:
        raise explain_connect_error(err, dsn) from None


def _scalar(conn: psycopg.Connection, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def local_postmaster(conn: psycopg.Connection) -> tuple[int | None, str]:
    """The postmaster's PID when the server runs on this host, in this PID namespace (the parent of the connection's
    backend), else None and the reason."""
    host = conn.info.host or ""
    if not (host.startswith("/") or host in ("localhost", "127.0.0.1", "::1")):
        return None, f"the database host '{host}' is remote, so OS counters of the database host are not visible"
    backend_pid = conn.info.backend_pid
    try:
        proc = psutil.Process(backend_pid)
        parent = proc.parent()
        if parent is None or "postgres" not in " ".join(proc.cmdline() or [proc.name()]).lower():
            raise psutil.NoSuchProcess(backend_pid)
        return parent.pid, ""
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None, ("the server's processes are not visible from this host (another container or PID "
                      "namespace), so OS counters of the database host are not attributed")


def detect_capabilities(conn: psycopg.Connection, version_num: int, settings: dict[str, str],
                        local: bool, local_reason: str) -> dict[str, Capability]:
    caps: dict[str, Capability] = {}
    v = version_num
    caps["pg_stat_io"] = Capability(v >= 160000, "" if v >= 160000 else "pg_stat_io exists from PostgreSQL 16")
    # WAL write/fsync counts are in one view or the other, never missing: only the one that has them is recorded
    caps["wal_io_in_pg_stat_io" if v >= 180000 else "wal_io_in_pg_stat_wal"] = Capability(True)
    caps["pg_stat_checkpointer"] = Capability(v >= 170000, "" if v >= 170000 else
                                              "pg_stat_checkpointer exists from PostgreSQL 17")
    caps["per_backend_stats"] = Capability(v >= 180000, "" if v >= 180000 else
                                           "per-backend I/O and WAL statistics exist from PostgreSQL 18")
    caps["io_timing"] = Capability(settings.get("track_io_timing") == "on",
                                   "" if settings.get("track_io_timing") == "on" else
                                   "track_io_timing is off, so read/write times are not measured")
    caps["wal_io_timing"] = Capability(settings.get("track_wal_io_timing") == "on",
                                       "" if settings.get("track_wal_io_timing") == "on" else
                                       "track_wal_io_timing is off, so WAL write/fsync times are not measured")
    pss = _scalar(conn, "select count(*) from pg_extension where extname = 'pg_stat_statements'")
    loaded = "pg_stat_statements" in settings.get("shared_preload_libraries", "")
    if pss and loaded:
        caps["pg_stat_statements"] = Capability(True)
    else:
        why = ("pg_stat_statements is not in shared_preload_libraries" if not loaded
               else "the pg_stat_statements extension is not created in this database")
        caps["pg_stat_statements"] = Capability(False, why)
    caps["os"] = Capability(local and os.path.exists("/proc/stat"), local_reason or
                            ("" if os.path.exists("/proc/stat") else "this host has no /proc (not Linux)"))
    caps["force_flush"] = Capability(v >= 150000, "" if v >= 150000 else
                                     "PostgreSQL 14 flushes statistics through the collector with a delay")
    return caps


def describe(conn: psycopg.Connection, dsn: str, *, embedded: bool) -> TargetInfo:
    """Version check, key settings and capabilities of the server behind conn."""
    version_num = int(_scalar(conn, "select current_setting('server_version_num')"))
    version = _scalar(conn, "select version()")
    if version_num < MIN_VERSION_NUM:
        raise CapmarkError(f"The server runs PostgreSQL {version_num // 10000}; capmark needs PostgreSQL 14 or newer.")
    rows = conn.execute("select name, setting, unit from pg_settings where name = any(%s)", (list(KEY_SETTINGS),))
    settings = {}
    for name, setting, unit in rows.fetchall():
        settings[name] = _with_unit(setting, unit)
    data_dir = None
    with contextlib.suppress(psycopg.Error):  # needs pg_read_all_settings
        data_dir = _scalar(conn, "select current_setting('data_directory')")
    pid, why = local_postmaster(conn)
    caps = detect_capabilities(conn, version_num, settings, pid is not None, why)
    statements_view = _scalar(conn, _STATEMENTS_VIEW_SQL) or "pg_stat_statements"
    return TargetInfo(engine="postgresql", version=version, version_num=version_num, dsn_redacted=redact_dsn(dsn),
                      embedded=embedded, local=pid is not None, local_reason=why, data_directory=data_dir,
                      postmaster_pid=pid, settings=settings, capabilities=caps, statements_view=statements_view)


# pg_stat_statements lives in whichever schema its extension was created in (capmark's own, on the embedded server)
_STATEMENTS_VIEW_SQL = ("select quote_ident(n.nspname) || '.pg_stat_statements' from pg_extension e "
                        "join pg_namespace n on n.oid = e.extnamespace where e.extname = 'pg_stat_statements'")


def _with_unit(setting: str, unit: str | None) -> str:
    """'16384' with unit '8kB' -> '128MB', so stored settings read like SHOW output."""
    if not unit or not setting.lstrip("-").isdigit():
        return setting
    factor = {"8kB": 8192, "kB": 1024, "MB": 1 << 20, "B": 1}.get(unit)
    if factor is None:
        return f"{setting}{unit}"
    size = int(setting) * factor
    for suffix, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{suffix}"
    return f"{size}B"


def is_superuser(conn: psycopg.Connection) -> bool:
    return bool(_scalar(conn, "select rolsuper from pg_roles where rolname = current_user"))


def check_privileges(conn: psycopg.Connection) -> None:
    """capmark needs to create (or own) its schema; say so before touching anything."""
    exists = _scalar(conn, "select count(*) from pg_namespace where nspname = 'capmark'")
    if exists:
        ok = _scalar(conn, "select has_schema_privilege('capmark', 'CREATE') "
                           "and has_schema_privilege('capmark', 'USAGE')")
        if not ok:
            user = _scalar(conn, "select current_user")
            raise CapmarkError(f"The role '{user}' may not create objects in schema capmark; grant it CREATE and "
                               "USAGE on that schema or connect as its owner.")
        return
    if not _scalar(conn, "select has_database_privilege(current_database(), 'CREATE')"):
        user = _scalar(conn, "select current_user")
        db = _scalar(conn, "select current_database()")
        raise CapmarkError(f"The role '{user}' may not create schema capmark in database '{db}'; run "
                           f"GRANT CREATE ON DATABASE {db} TO {user}, or connect as a role that may.")
