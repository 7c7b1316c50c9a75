"""Where the database host's OS counters come from: this machine's /proc, the database host's /proc read
through the database connection (by the engine that can: PostgreSQL's pg_read_binary_file), a Prometheus
node_exporter, or nowhere.

Every source answers the same questions in the same dataclasses, so the step, the sampler and the analysis do
not care which one was used; the run records which it was and what that source cannot see.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from capmark.collect import procfs
from capmark.collect.hostsource import BOOT_ID, HostSource, NoHost, local_boot_id
from capmark.collect.node_exporter import node_exporter_source
from capmark.collect.os import KERNEL_THREADS_PARENT, HostProcesses, ProcessSample, role_of
from capmark.config import check_host_metrics
from capmark.engines import registry
from capmark.engines.base import Engine, TargetInfo
from capmark.errors import CapmarkError

# This machine's /proc files are read whole up to this size: /proc/stat on a 512-CPU host or /proc/diskstats with
# thousands of partitions fits in 1 MiB.
HOST_FILE_BYTES = 1 << 20


class ProcReader(Protocol):
    """Text of /proc files on the database host, read here or through a session on the database."""

    statements: int  # transactions its readings made on the database (they count among the commits); 0 when none
    list_reason: str  # why list_pids answers None, in words

    def read(self, paths: list[str]) -> dict[str, str | None]: ...

    def list_pids(self) -> list[int] | None: ...

    def server_pids(self) -> list[int]:
        """The server's own list of its processes, for a reader that may not list the host's; [] when none."""
        ...

    def publish(self, info: TargetInfo) -> None:
        """Make a reader's session publish its statistics now (nothing for a reader that is no session)."""
        ...

    def close(self) -> None: ...


class SqlProcReader(ProcReader, Protocol):
    """A reader that is a session of the database: its backend is capmark's, not the workload's."""

    session_pid: int


@runtime_checkable
class ReadsHostFiles(Protocol):
    """What an engine offers when it can read its host's /proc through SQL (PostgreSQL's file functions). Not every
    engine can, so it is no member of Engine: choose() asks the engine that serves the DSN."""

    label: str

    def host_file_reader(self, dsn: str, connect: Callable[..., Any]) -> SqlProcReader:
        """A reader on a session of its own; CapmarkError saying what to grant when the role may not read."""
        ...


class LocalReader:
    statements = 0
    list_reason = ""

    def read(self, paths: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    out[path] = fh.read(HOST_FILE_BYTES).decode("utf-8", "replace")
            except OSError:
                out[path] = None
        return out

    def list_pids(self) -> list[int] | None:
        return [int(d) for d in os.listdir("/proc") if d.isdigit()]

    def server_pids(self) -> list[int]:
        return []

    def publish(self, info: TargetInfo) -> None:
        """Nothing to publish: this machine's /proc is read without the database."""

    def close(self) -> None:
        pass


@dataclass
class ProcHost:
    """A host whose /proc capmark can read, here or through SQL: the same parsers for both."""

    name: str
    reader: ProcReader
    postmaster_pid: int | None
    facts: procfs.HostFacts
    driver_on_host: bool
    session_pids: list[int] = field(default_factory=list)  # the SQL source's own backend
    listing_note: str = ""
    # a server that is one process serving sessions with threads (MySQL): all of its CPU under this role
    threaded_role: str | None = None

    def stat(self) -> procfs.ProcStat | None:
        text = self.reader.read(["/proc/stat"])["/proc/stat"]
        return procfs.parse_stat(text) if text else None

    def diskstats(self, devices: list[str]) -> dict[str, dict[str, int]]:
        text = self.reader.read(["/proc/diskstats"])["/proc/diskstats"]
        return procfs.parse_diskstats(text, devices) if text else {}

    def meminfo(self) -> dict[str, int]:
        text = self.reader.read(["/proc/meminfo"])["/proc/meminfo"]
        return procfs.parse_meminfo(text) if text else {}

    def counters(self, devices: list[str]) -> tuple[procfs.ProcStat | None, dict[str, dict[str, int]],
                                                  dict[str, int], dict[str, procfs.Pressure]]:
        """/proc/stat, the devices, memory and pressure in one reading (one statement through SQL)."""
        kinds = ("cpu", "io", "memory")
        paths = ["/proc/stat", "/proc/diskstats", "/proc/meminfo", *(f"/proc/pressure/{k}" for k in kinds)]
        texts = self.reader.read(paths)
        stat = procfs.parse_stat(texts["/proc/stat"]) if texts["/proc/stat"] else None
        disks = procfs.parse_diskstats(texts["/proc/diskstats"], devices) if texts["/proc/diskstats"] else {}
        mem = procfs.parse_meminfo(texts["/proc/meminfo"]) if texts["/proc/meminfo"] else {}
        pressure = {}
        for kind in kinds:
            text = texts[f"/proc/pressure/{kind}"]
            parsed = procfs.parse_pressure(text) if text else None
            if parsed is not None:
                pressure[kind] = parsed
        return stat, disks, mem, pressure

    def pressure(self) -> dict[str, procfs.Pressure]:
        return self.counters([])[3]

    def _pid_files(self, pids: Iterable[int], names: tuple[str, ...]) -> dict[str, str | None]:
        return self.reader.read([f"/proc/{pid}/{name}" for pid in pids for name in names])

    def instance(self) -> ProcessSample | None:
        """CPU and memory of the postmaster and every child of it, and the CPU of its reaped children."""
        sample = ProcessSample()
        if self.postmaster_pid is None:
            return None
        pids = self._instance_pids()
        texts = self._pid_files(pids, ("stat", "status", "cmdline"))
        for pid in pids:
            st = procfs.parse_pid_stat(texts.get(f"/proc/{pid}/stat") or "")
            if st is None:
                continue
            if pid == self.postmaster_pid:
                sample.reaped_user_s, sample.reaped_sys_s = st.children_user_s, st.children_sys_s
            elif st.ppid != self.postmaster_pid:
                continue  # the pid was reused by a process outside the instance
            mem = procfs.parse_pid_status(texts.get(f"/proc/{pid}/status") or "")
            cmdline = (texts.get(f"/proc/{pid}/cmdline") or st.comm).replace("\0", " ").split()
            role = self.threaded_role or role_of(cmdline, pid == self.postmaster_pid)
            sample.procs[pid] = (role, st.user_s, st.sys_s, mem.rss, mem.shared)
        return sample

    def _instance_pids(self) -> list[int]:
        """The postmaster's children: from the whole process list where the source may list it, else from the
        server's own list of its processes (PostgreSQL's: backends and background workers)."""
        assert self.postmaster_pid is not None
        listed = self.reader.list_pids()
        if listed is not None:
            texts = self._pid_files(listed, ("stat",))
            children = [pid for pid in listed
                        if (st := procfs.parse_pid_stat(texts.get(f"/proc/{pid}/stat") or "")) is not None
                        and st.ppid == self.postmaster_pid]
            return [self.postmaster_pid, *children]
        return [self.postmaster_pid, *self.reader.server_pids()]

    def process_cpu_s(self, pid: int) -> float | None:
        st = procfs.parse_pid_stat(self.reader.read([f"/proc/{pid}/stat"])[f"/proc/{pid}/stat"] or "")
        return st.user_s + st.sys_s if st else None

    def host_processes(self) -> HostProcesses | None:
        """Every process's CPU so far, by name (never its command line: arguments can hold passwords)."""
        listed = self.reader.list_pids()
        if listed is None:
            return None
        boot = self._boot_time()
        out = HostProcesses(taken_at=time.time())
        texts = self._pid_files(listed, ("stat",))
        for pid in listed:
            st = procfs.parse_pid_stat(texts.get(f"/proc/{pid}/stat") or "")
            if st is None:
                continue
            cpu = st.user_s + st.sys_s
            if st.ppid == KERNEL_THREADS_PARENT or pid == KERNEL_THREADS_PARENT:
                out.kernel_threads_s += cpu
                continue
            out.procs[pid] = (st.comm, cpu, boot + st.start_ticks / procfs.USER_HZ)
        return out

    def _boot_time(self) -> float:
        text = self.reader.read(["/proc/stat"])["/proc/stat"] or ""
        for line in text.splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
        return 0.0

    def data_device(self, data_directory: str | None) -> tuple[str | None, str]:
        """The block device of the data directory, from the mount table of the postmaster (its view of the
        file systems) and the device numbers in /proc/diskstats."""
        if not data_directory:
            return None, "the role may not read data_directory, so the data device is unknown"
        who = self.postmaster_pid or "self"
        texts = self.reader.read([f"/proc/{who}/mountinfo", "/proc/diskstats"])
        mountinfo, diskstats = texts[f"/proc/{who}/mountinfo"], texts["/proc/diskstats"]
        if not mountinfo or not diskstats:
            return None, "the database host's mount table or /proc/diskstats could not be read"
        mount = procfs.mount_of(mountinfo, data_directory)
        if mount is None:
            return None, f"no mount in the database host's mount table holds {data_directory}"
        major, minor, point = mount
        dev = procfs.device_by_number(diskstats, major, minor)
        if dev is None:
            return None, (f"the file system of {data_directory} (mounted at {point}, {major}:{minor}) is not on a "
                          "block device listed in /proc/diskstats")
        return dev, ""

    def own_pids(self) -> list[int]:
        return list(self.session_pids)

    def transactions(self) -> int:
        return self.reader.statements

    def publish_statistics(self, info: TargetInfo) -> None:
        """The SQL source's session may publish its statistics late: make it publish now, so that its transactions
        land in the window they were made in (capmark takes them out of the workload's)."""
        self.reader.publish(info)

    def close(self) -> None:
        self.reader.close()


def _facts(source: str, reader: ProcReader, kernel: str | None) -> procfs.HostFacts:
    texts = reader.read(["/proc/stat", "/proc/cpuinfo", "/proc/meminfo", BOOT_ID, "/proc/sys/kernel/osrelease"])
    stat = procfs.parse_stat(texts["/proc/stat"] or "")
    mem = procfs.parse_meminfo(texts["/proc/meminfo"] or "")
    return procfs.HostFacts(
        source=source, cores=len(stat.per_cpu) or None, cpu_model=procfs.parse_cpu_model(texts["/proc/cpuinfo"] or ""),
        memory_bytes=mem.get("MemTotal"), kernel=(texts["/proc/sys/kernel/osrelease"] or "").strip() or kernel,
        boot_id=(texts[BOOT_ID] or "").strip() or None)


def local_source(postmaster_pid: int, threaded_role: str | None = None) -> ProcHost:
    return ProcHost("local", LocalReader(), postmaster_pid, _facts("local", LocalReader(), platform.release()),
                    driver_on_host=True, threaded_role=threaded_role)


def sql_source(dsn: str, connect: Callable[..., Any] | None = None) -> ProcHost:
    """The database host's /proc through a session of its own, read by the engine that serves the DSN; CapmarkError
    with what to grant when not allowed, or when the engine cannot read files through SQL. connect opens the
    session (the engine's own by default)."""
    engine = registry.for_dsn(dsn)
    if not isinstance(engine, ReadsHostFiles):
        raise CapmarkError(_no_sql_files(engine.label))
    reader = engine.host_file_reader(dsn, connect or engine.connect)
    backend = reader.session_pid
    texts = reader.read(["/proc/stat", f"/proc/{backend}/stat"])
    if not texts["/proc/stat"]:
        reader.close()
        raise CapmarkError("The database host has no /proc/stat (it is not Linux), so capmark cannot read its "
                           "counters through SQL; use --host-metrics node-exporter or none.")
    own = procfs.parse_pid_stat(texts[f"/proc/{backend}/stat"] or "")
    facts = _facts("sql", reader, None)
    host = ProcHost("sql", reader, own.ppid if own else None, facts,
                    driver_on_host=facts.boot_id is not None and facts.boot_id == local_boot_id(),
                    session_pids=[backend])
    if reader.list_pids() is None:
        facts.cannot_see.append(reader.list_reason)
    return host


def _no_sql_files(label: str) -> str:
    return (f"--host-metrics sql reads the database host's /proc through SQL file functions, which {label} does not "
            "have; use --host-metrics local on the database host, or --node-exporter URL.")


def choose(mode: str, dsn: str, control: Any, data_directory: str | None, connect: Callable[..., Any] | None,
           node_exporter: str | None = None, threaded: ThreadedServer | None = None,
           node_exporter_token: str | None = None) -> HostSource:
    """The source for --host-metrics: the one asked for (or one clear sentence why it cannot serve), or with
    auto the best available: this machine's /proc when the server runs here, a node_exporter when one is named,
    the database host's /proc through SQL when the role may read it, else none with the reason. A threaded
    server (MySQL) is found by the engine; its /proc is not readable through SQL."""
    check_host_metrics(mode, node_exporter)
    if mode == "none":
        return NoHost("host metrics are off (--host-metrics none)")
    if mode == "sql" and not isinstance(engine := registry.for_dsn(dsn), ReadsHostFiles):
        raise CapmarkError(_no_sql_files(engine.label))
    postmaster, not_here = ((threaded.pid, threaded.why_not_local) if threaded is not None
                            else registry.for_dsn(dsn).server_process(control, dsn))
    if mode == "local" or (mode == "auto" and postmaster is not None and not node_exporter):
        if postmaster is None:  # a threaded server's /proc is not readable through SQL (choose's docstring)
            instead = "--node-exporter URL" if threaded is not None else "--host-metrics sql or --node-exporter URL"
            raise CapmarkError(f"--host-metrics local cannot see the server: {not_here}; use {instead}.")
        return local_source(postmaster, threaded_role=threaded.role if threaded is not None else None)
    if node_exporter:
        return node_exporter_source(node_exporter, data_directory, node_exporter_token)
    if threaded is not None:
        return NoHost(f"the database host's counters are not visible: {threaded.why_not_local}; run capmark on the "
                      "database host or name its node_exporter with --node-exporter URL")
    if mode == "sql":
        return sql_source(dsn, connect)
    try:
        return sql_source(dsn, connect)
    except CapmarkError as err:
        return NoHost(f"the database host's counters are not visible: {err}")


@dataclass(frozen=True)
class ThreadedServer:
    """A server that is one process, its sessions threads of it (MySQL, MariaDB), as its engine found it."""

    pid: int | None  # the server process where it runs on this host, in this PID namespace
    why_not_local: str  # else why not
    role: str  # the role its CPU is reported under

    @staticmethod
    def of(engine: Engine, info: TargetInfo) -> ThreadedServer | None:
        """The described server as host metrics need it; None for an engine whose connections are processes."""
        return None if engine.backend_is_process else ThreadedServer(info.postmaster_pid, info.local_reason,
                                                                     engine.server_role)
