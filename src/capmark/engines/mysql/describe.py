"""What capmark records about a MySQL or MariaDB server: version, key settings, capabilities and privileges."""

from __future__ import annotations

import os
import re
from typing import Any

import psutil

from capmark.engines.base import Capability, TargetInfo
from capmark.engines.mysql import grants
from capmark.engines.mysql import queries as q
from capmark.engines.mysql.connection import parse
from capmark.errors import CapmarkError

# Oldest releases capmark measures: the status variables, INNODB_METRICS and performance_schema tables it reads exist
# in these (MariaDB 10.6 is the oldest maintained long-term release; MySQL 5.7 is past its end of life).
MIN_MARIADB = (10, 6)
MIN_MYSQL = (8, 0)
SUPPORTED = "MariaDB 10.6 or newer, or MySQL 8.0 or newer"
KEY_SETTINGS = (
    "innodb_buffer_pool_size", "innodb_flush_log_at_trx_commit", "sync_binlog", "log_bin", "binlog_format",
    "innodb_log_file_size", "innodb_log_buffer_size", "innodb_flush_method", "innodb_doublewrite",
    "innodb_io_capacity", "innodb_page_size", "max_connections", "performance_schema", "transaction_isolation",
    "tx_isolation", "innodb_adaptive_hash_index", "thread_handling", "innodb_flush_neighbors",
)
SERVER_PROGRAMS = ("mariadbd", "mysqld")






def version_of(text: str) -> tuple[int, int, int]:
    numbers = [int(n) for n in re.findall(r"\d+", text.split("-")[0])[:3]]
    return (numbers + [0, 0, 0])[0], (numbers + [0, 0, 0])[1], (numbers + [0, 0, 0])[2]


def is_mariadb(version: str) -> bool:
    return "mariadb" in version.lower()


def check_version(version: str) -> None:
    v = version_of(version)
    mariadb = is_mariadb(version)
    if v[:2] < (MIN_MARIADB if mariadb else MIN_MYSQL):
        name = "MariaDB" if mariadb else "MySQL"
        raise CapmarkError(f"The server runs {name} {v[0]}.{v[1]}; capmark supports {SUPPORTED}.")


def local_server_pid(conn: Any, host_is_local: bool) -> tuple[int | None, str]:
    """The server process when it runs on this host (from its pid file, else by program name), else the reason."""
    if not host_is_local:
        return None, "the database host is remote, so OS counters of the database host are not visible"
    pid_file = q.scalar(conn, "SELECT @@pid_file")
    try:
        with open(str(pid_file)) as handle:
            pid = int(handle.read().split()[0])
        if psutil.pid_exists(pid):
            return pid, ""
    except (OSError, ValueError, IndexError):
        pass
    port = q.scalar(conn, "SELECT @@port")
    candidates = [p for p in psutil.process_iter(["name", "cmdline"]) if p.info["name"] in SERVER_PROGRAMS]
    if len(candidates) == 1:
        return candidates[0].pid, ""
    for proc in candidates:
        if f"--port={port}" in " ".join(proc.info["cmdline"] or []):
            return proc.pid, ""
    return None, ("the server's process is not visible from this host (another container or PID namespace), so OS "
                  "counters of the database host are not attributed")


def detect_capabilities(conn: Any, settings: dict[str, str], granted: list[str], local: bool,
                        local_reason: str) -> dict[str, Capability]:
    """What this server lets capmark see; a privilege capmark cannot measure without is one sentence and exit."""
    user = q.scalar(conn, "SELECT CURRENT_USER()")
    if not grants.has_global(granted, "PROCESS"):
        raise CapmarkError(f"The user {user} lacks the PROCESS privilege, which capmark needs to read InnoDB's "
                           f"metrics and the server's sessions; run GRANT PROCESS ON *.* TO {grants.account(user)}.")
    caps: dict[str, Capability] = {"innodb_metrics": Capability(True), "other_sessions": Capability(True)}
    if settings.get("performance_schema", "").upper() not in ("ON", "1"):
        caps["performance_schema"] = Capability(False, "performance_schema is off, so statement digests, wait events "
                                                       "and IO times are not measured (it is switched on only at "
                                                       "server start: performance_schema=ON in the server's "
                                                       "configuration)")
    else:
        try:
            q.scalar(conn, "SELECT COUNT(*) FROM performance_schema.threads")
        except Exception:  # noqa: BLE001 - any refusal means the same: not readable by this user
            raise CapmarkError(f"The user {user} may not read performance_schema, where capmark reads statement "
                               f"digests, waits and IO times; run GRANT SELECT ON performance_schema.* TO "
                               f"{grants.account(user)}.") from None
        caps["performance_schema"] = Capability(True)
    caps["os"] = Capability(local and os.path.exists("/proc/stat"), local_reason or
                            ("" if os.path.exists("/proc/stat") else "this host has no /proc (not Linux)"))
    return caps


def describe(conn: Any, dsn: str, *, embedded: bool) -> TargetInfo:
    """Version check, key settings and capabilities of the server behind conn."""
    target = parse(dsn)
    version = str(q.scalar(conn, "SELECT VERSION()"))
    check_version(version)
    v = version_of(version)
    settings: dict[str, str] = {}
    for name, value in q.rows(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ("
                                   + ", ".join(f"'{n}'" for n in KEY_SETTINGS) + ")"):
        settings[str(name)] = str(value)
    granted = grants.lines(conn)
    pid, why = local_server_pid(conn, target.local)
    caps = detect_capabilities(conn, settings, granted, pid is not None, why)
    flavour = "MariaDB" if is_mariadb(version) else "MySQL"
    return TargetInfo(engine="mysql", version=f"{flavour} {version}", version_num=v[0] * 10000 + v[1] * 100 + v[2],
                      dsn_redacted=target.redacted(), embedded=embedded, local=pid is not None, local_reason=why,
                      data_directory=str(q.scalar(conn, "SELECT @@datadir") or "") or None, postmaster_pid=pid,
                      settings=settings, capabilities=caps, statements_view="")
