"""The database host's side of an observation, through the host source a run would use (collect/hosts.choose):
host-wide counters at each interval's edges, and each server process's /proc CPU and IO at each activity sample.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from capmark.collect import procfs
from capmark.collect.hosts import ProcHost
from capmark.collect.hostsource import HostSource
from capmark.observations import DeviceDelta, HostDelta
from capmark.observe.sessions import ProcReading

# Whole disks only: a partition's counters are also in its disk's, and loop, RAM and zram devices are not storage
_NOT_A_DISK = re.compile(r"^(loop|ram|zram|sr|fd)\d*|^(sd|vd|xvd|hd)[a-z]+\d+$|^(nvme\d+n\d+|mmcblk\d+)p\d+$")


@dataclass
class HostReading:
    taken_at: float
    stat: procfs.ProcStat | None
    disks: dict[str, dict[str, int]]
    memory: dict[str, int]
    pressure: dict[str, procfs.Pressure]


def read_host(host: HostSource, devices: list[str]) -> HostReading:
    stat, disks, memory, pressure = host.counters(devices)
    return HostReading(time.time(), stat, disks, memory, pressure)


def devices_of(host: HostSource, data_device: str | None) -> list[str]:
    """The data directory's device and every other whole disk the host shows (a /proc source), busy or not."""
    names = [data_device] if data_device else []
    if isinstance(host, ProcHost):
        text = host.reader.read(["/proc/diskstats"])["/proc/diskstats"] or ""
        for line in text.splitlines():
            parts = line.split()
            if len(parts) > 3 and not _NOT_A_DISK.match(parts[2]) and parts[2] not in names:
                names.append(parts[2])
    return names


def host_delta(before: HostReading, after: HostReading, run_queue: list[int]) -> HostDelta | None:
    if before.stat is None or after.stat is None:
        return None
    cpu = {k: max(0, after.stat.cpu.get(k, 0) - v) / procfs.USER_HZ for k, v in before.stat.cpu.items()}
    devices = []
    for name, end in after.disks.items():
        start = before.disks.get(name)
        if start is None:
            continue
        d = {k: max(0, end.get(k, 0) - start.get(k, 0)) for k in end}
        devices.append(DeviceDelta(name=name, reads=d.get("reads", 0), writes=d.get("writes", 0),
                                   read_bytes=d.get("sectors_read", 0) * procfs.SECTOR_BYTES,
                                   write_bytes=d.get("sectors_written", 0) * procfs.SECTOR_BYTES,
                                   busy_s=d.get("io_ms", 0) / 1e3, read_time_s=d.get("read_ms", 0) / 1e3,
                                   write_time_s=d.get("write_ms", 0) / 1e3))
    return HostDelta(cpu_s=cpu, devices=devices, memory=dict(after.memory),
                     run_queue=sum(run_queue) / len(run_queue) if run_queue else None,
                     pressure={k: p.some_avg10 for k, p in after.pressure.items()})


def parse_pid_io(text: str) -> tuple[float, float]:
    """read_bytes and write_bytes of /proc/<pid>/io (0 where the file could not be read)."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("read_bytes", "write_bytes") and rest.strip().isdigit():
            values[key] = float(rest.strip())
    return values.get("read_bytes", 0.0), values.get("write_bytes", 0.0)


@dataclass
class ProcessSampler:
    """Each server process's CPU and IO, and the host's run queue and CPU busy, in one reading per sample (one file
    read per process locally; one statement through SQL). A source that cannot read /proc reads nothing."""

    host: HostSource
    run_queue: list[int] = field(default_factory=list)
    _last_cpu: dict[str, int] | None = None
    busy_pct: float | None = None  # host CPU busy between the last two samples

    @property
    def sees_processes(self) -> bool:
        return isinstance(self.host, ProcHost)

    def read(self, pids: list[int]) -> tuple[dict[int, ProcReading], tuple[int, ProcReading] | None]:
        """The processes' readings, and the postmaster's own (not its children's)."""
        if not isinstance(self.host, ProcHost):
            return {}, None
        postmaster = self.host.postmaster_pid
        every = [*pids, *([postmaster] if postmaster else [])]
        paths = ["/proc/stat", *(f"/proc/{pid}/{name}" for pid in every for name in ("stat", "io"))]
        texts = self.host.reader.read(paths)
        self._host_busy(texts["/proc/stat"])
        out: dict[int, ProcReading] = {}
        for pid in every:
            st = procfs.parse_pid_stat(texts.get(f"/proc/{pid}/stat") or "")
            if st is None:
                continue
            read_bytes, write_bytes = parse_pid_io(texts.get(f"/proc/{pid}/io") or "")
            out[pid] = ProcReading(st.start_ticks, st.user_s, st.sys_s, read_bytes, write_bytes, st.children_user_s,
                                   st.children_sys_s)
        pm = out.pop(postmaster, None) if postmaster else None
        return out, (postmaster, pm) if postmaster and pm else None

    def _host_busy(self, text: str | None) -> None:
        """The run queue, and the host's CPU busy since the last sample, from /proc/stat's text."""
        stat = procfs.parse_stat(text) if text else None
        if stat is None:
            return
        self.run_queue.append(stat.procs_running)
        if self._last_cpu is not None:
            d = {k: v - self._last_cpu.get(k, 0) for k, v in stat.cpu.items()}
            total = sum(d.values())
            self.busy_pct = 100.0 * (total - d.get("idle", 0) - d.get("iowait", 0)) / total if total else None
        self._last_cpu = stat.cpu

    def take_run_queue(self) -> list[int]:
        taken, self.run_queue = self.run_queue, []
        return taken


@dataclass
class ThreadSampler(ProcessSampler):
    """A threaded server's (MySQL's, MariaDB's) threads, each read as a process is: /proc/<pid>/task/<tid>/stat and
    io for every thread the server has now, on this host only (a task list is not readable through SQL). The main
    thread stands in the postmaster's place: its own CPU, and as 'reaped' what the server's threads that ended used
    (the process's CPU less its live threads'), which the tracker charges as it does ended backends."""

    tids: list[int] = field(default_factory=list)  # the server's threads at the last reading
    # CPU of the server's threads that ended, as the last reading put it: moved only when a thread has gone. The
    # process's total less its live threads' is not a steady figure: each thread's time is cut to whole ticks on
    # its own and the total once, so it wanders by up to a tick a thread from one reading to the next, and the
    # tracker would charge every upward step as an ended thread's CPU.
    ended: tuple[float, float] = (0.0, 0.0)

    def read(self, pids: list[int]) -> tuple[dict[int, ProcReading], tuple[int, ProcReading] | None]:
        server = self.host.postmaster_pid if isinstance(self.host, ProcHost) else None
        if server is None or not isinstance(self.host, ProcHost):
            return {}, None
        before = set(self.tids)
        try:
            self.tids = sorted(int(t) for t in os.listdir(f"/proc/{server}/task"))
        except OSError:
            self.tids = []
        task = f"/proc/{server}/task"
        # the process's total read after its threads, so that it holds at least what they used
        paths = ["/proc/stat", *(f"{task}/{tid}/{name}" for tid in self.tids for name in ("stat", "io")),
                 f"/proc/{server}/stat"]
        texts = self.host.reader.read(paths)
        self._host_busy(texts["/proc/stat"])
        whole = procfs.parse_pid_stat(texts.get(f"/proc/{server}/stat") or "")
        out: dict[int, ProcReading] = {}
        for tid in self.tids:
            st = procfs.parse_pid_stat(texts.get(f"{task}/{tid}/stat") or "")
            if st is None:
                continue
            read_bytes, write_bytes = parse_pid_io(texts.get(f"{task}/{tid}/io") or "")
            out[tid] = ProcReading(st.start_ticks, st.user_s, st.sys_s, read_bytes, write_bytes)
        main = out.pop(server, None)
        if whole is None or main is None:
            return out, None
        now = (whole.user_s - main.user_s - sum(r.user_s for r in out.values()),
               whole.sys_s - main.sys_s - sum(r.sys_s for r in out.values()))
        if not before:  # the first reading: what ended before it is nobody's in this observation
            self.ended = now
        elif before - set(self.tids):  # a thread ended since the last reading
            self.ended = (max(self.ended[0], now[0]), max(self.ended[1], now[1]))
        return out, (server, ProcReading(whole.start_ticks, main.user_s, main.sys_s, main.read_bytes, main.write_bytes,
                                         *self.ended))

    def read_host_only(self) -> None:
        """The run queue and the host's busy, where the server's threads cannot be told apart."""
        if isinstance(self.host, ProcHost):
            self._host_busy(self.host.reader.read(["/proc/stat"])["/proc/stat"])
