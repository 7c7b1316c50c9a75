"""The database host's /proc read through PostgreSQL's file functions (pg_read_binary_file, pg_ls_dir), on a session
of its own: for a server on another host whose /proc capmark cannot read itself.

collect/hosts.py parses what this reads, as it parses this machine's /proc; only the reading is PostgreSQL's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from capmark.engines.base import TargetInfo
from capmark.engines.postgres.stats import flush_own_stats
from capmark.errors import CapmarkError

HOST_METRICS_APPLICATION = "capmark host metrics"  # the SQL source's own session: capmark's cost, not the workload
# The server allocates the whole length asked for before it reads, and a /proc/sys file refuses a read much
# larger than itself (ENOMEM), so each kind of file is asked for what it can hold: a host-wide file such as
# /proc/stat on a 512-CPU host or /proc/diskstats with thousands of partitions fits in 1 MiB; a process's stat,
# status or command line in 16 KiB (a longer command line is cut, which only shortens the process title);
# a kernel setting in 4 KiB.
HOST_FILE_BYTES = 1 << 20
PROCESS_FILE_BYTES = 16 << 10
SETTING_FILE_BYTES = 4 << 10
READ_FUNCTION = "pg_read_binary_file(text, bigint, bigint, boolean)"
NO_LISTING = ("the role may not list the database host's processes (pg_ls_dir), so the CPU of its other programs is "
              "not measured")


def read_limit(path: str) -> int:
    """How many bytes to ask for when reading a /proc file (see the constants above)."""
    if path.startswith("/proc/sys/"):
        return SETTING_FILE_BYTES
    if path[len("/proc/"):].split("/", 1)[0].isdigit():
        return PROCESS_FILE_BYTES
    return HOST_FILE_BYTES


def grant_sentence(role: str) -> str:
    """What a database administrator runs so that capmark can read the host's /proc through SQL."""
    return (f"GRANT pg_read_server_files, pg_monitor TO {role}; GRANT EXECUTE ON FUNCTION {READ_FUNCTION} TO "
            f"{role}; (and optionally GRANT EXECUTE ON FUNCTION pg_ls_dir(text) TO {role}, to see the host's other "
            "programs)")


class SqlReader:
    """Reads the database host's /proc through PostgreSQL's file functions, on a session of its own.

    One statement per reading, whatever the number of files; a lock lets the sampler thread and the step share
    it. Each statement is a transaction on the server, counted so that the workload's commits stay exact.
    """

    READ_SQL = "select p, pg_read_binary_file(p, 0, n, true) from unnest(%s::text[], %s::bigint[]) as f(p, n)"
    LIST_SQL = "select d from pg_ls_dir('/proc') d where d ~ '^[0-9]+$'"
    SERVER_PIDS_SQL = "select pid from pg_stat_activity"

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        # psycopg prepares a statement by itself on its sixth run, in a transaction of its own that nobody would
        # count: only READ_SQL is prepared, on its first use (open_reader), before anything is counted
        conn.prepare_threshold = None
        self.lock = threading.Lock()
        self.statements = 0
        self.can_list: bool | None = None
        self.list_reason = ""
        self.session_pid: int = conn.info.backend_pid

    def read(self, paths: list[str]) -> dict[str, str | None]:
        with self.lock:
            rows = self.conn.execute(self.READ_SQL, (paths, [read_limit(p) for p in paths]), prepare=True).fetchall()
            self.statements += 1
        return {p: bytes(b).decode("utf-8", "replace") if b is not None else None for p, b in rows}

    def list_pids(self) -> list[int] | None:
        if self.can_list is False:
            return None
        with self.lock:
            try:
                rows = self.conn.execute(self.LIST_SQL).fetchall()
                self.can_list = True
            except psycopg.errors.InsufficientPrivilege:
                self.can_list = False
                self.list_reason = NO_LISTING
                return None
            finally:
                self.statements += 1
        return [int(r[0]) for r in rows]

    def server_pids(self) -> list[int]:
        """The server's own list of its processes (backends and background workers), for a role that may not list
        the host's."""
        with self.lock:
            rows = self.conn.execute(self.SERVER_PIDS_SQL).fetchall()
            self.statements += 1
        return [int(r[0]) for r in rows]

    def publish(self, info: TargetInfo) -> None:
        """The session publishes its statistics at most once a second: make it publish now, so that its
        transactions land in the window they were made in (capmark takes them out of the workload's)."""
        if info.has("force_flush"):
            with self.lock:
                self.statements += flush_own_stats(self.conn, info)

    def close(self) -> None:
        self.conn.close()


def open_reader(dsn: str, connect: Callable[..., Any]) -> SqlReader:
    """A reader on a session of its own, checked to be allowed to read /proc; CapmarkError with the GRANT when not."""
    conn = connect(dsn, application_name=HOST_METRICS_APPLICATION)
    reader = SqlReader(conn)
    try:
        reader.read(["/proc/stat"])
    except psycopg.errors.InsufficientPrivilege:
        role = conn.execute("select current_user").fetchone()[0]
        conn.close()
        raise CapmarkError(f"The role '{role}' may not read the database host's /proc through SQL (it needs "
                           f"superuser, or: {grant_sentence(role)}); or use --host-metrics node-exporter or "
                           "none.") from None
    except psycopg.Error as err:
        conn.close()
        raise CapmarkError(f"The database host's /proc could not be read through SQL "
                           f"({str(err).strip().splitlines()[0]}); use --host-metrics node-exporter or none.") from None
    return reader
