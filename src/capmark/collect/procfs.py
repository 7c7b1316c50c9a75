"""Parsers of Linux /proc text. They take the text, not a path: the same parser serves a file read on this
machine and one read on the database host through the database connection (see hosts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
DISK_FIELDS = ("reads", "reads_merged", "sectors_read", "read_ms", "writes", "writes_merged", "sectors_written",
               "write_ms", "in_flight", "io_ms", "weighted_io_ms", "discards", "discards_merged",
               "sectors_discarded", "discard_ms", "flushes", "flush_ms")
# The unit of the CPU times in /proc/stat and /proc/<pid>/stat: USER_HZ, which the kernel fixes at 100 on every
# Linux architecture whatever its internal tick rate; a constant, so a remote host's counters need no sysconf.
USER_HZ = 100
SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own sector size
MEMINFO_LINES = ("MemTotal", "MemFree", "MemAvailable", "Cached", "Dirty", "Writeback", "Shmem")


@dataclass
class ProcStat:
    """System-wide counters from /proc/stat: jiffies per CPU state, context switches, run queue."""

    cpu: dict[str, int]
    per_cpu: list[dict[str, int]]
    ctxt: int
    procs_running: int
    procs_blocked: int


def parse_stat(text: str) -> ProcStat:
    cpu: dict[str, int] = {}
    per_cpu: list[dict[str, int]] = []
    ctxt = running = blocked = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            cpu = dict(zip(CPU_FIELDS, map(int, parts[1:9]), strict=False))
        elif parts[0].startswith("cpu"):
            per_cpu.append(dict(zip(CPU_FIELDS, map(int, parts[1:9]), strict=False)))
        elif parts[0] == "ctxt":
            ctxt = int(parts[1])
        elif parts[0] == "procs_running":
            running = int(parts[1])
        elif parts[0] == "procs_blocked":
            blocked = int(parts[1])
    return ProcStat(cpu, per_cpu, ctxt, running, blocked)


def parse_diskstats(text: str, devices: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] in devices:
            out[parts[2]] = dict(zip(DISK_FIELDS, map(int, parts[3:]), strict=False))
    return out


def device_by_number(diskstats: str, major: int, minor: int) -> str | None:
    """The name /proc/diskstats gives the block device major:minor, or None."""
    for line in diskstats.splitlines():
        parts = line.split()
        if len(parts) > 3 and int(parts[0]) == major and int(parts[1]) == minor:
            return parts[2]
    return None


def mount_of(mountinfo: str, path: str) -> tuple[int, int, str] | None:
    """major, minor and mount point of the file system holding path (the longest mount point that prefixes it),
    from /proc/<pid>/mountinfo. Later mounts over the same point hide earlier ones, so the last one wins."""
    best: tuple[int, int, str] | None = None
    target = path.rstrip("/") + "/"
    for line in mountinfo.splitlines():
        parts = line.split()
        if len(parts) < 5 or ":" not in parts[2]:
            continue
        point = _unescape(parts[4])
        prefix = point.rstrip("/") + "/"
        if target.startswith(prefix) and (best is None or len(point) >= len(best[2])):
            major, minor = parts[2].split(":")
            best = (int(major), int(minor), point)
    return best


def _unescape(field_text: str) -> str:
    """mountinfo writes spaces, tabs, newlines and backslashes in paths as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field_text = field_text.replace(code, char)
    return field_text


def parse_meminfo(text: str) -> dict[str, int]:
    """Bytes for the memory lines capmark reports."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in MEMINFO_LINES and rest.split():
            out[key] = int(rest.split()[0]) * 1024
    return out


def parse_cpu_model(cpuinfo: str) -> str | None:
    for line in cpuinfo.splitlines():
        if line.startswith(("model name", "Model", "cpu model")):
            return line.split(":", 1)[1].strip()
    return None


@dataclass
class PidStat:
    """What capmark needs of /proc/<pid>/stat: CPU so far (own and reaped children's), parent and start time."""

    pid: int
    comm: str
    ppid: int
    user_s: float
    sys_s: float
    children_user_s: float
    children_sys_s: float
    start_ticks: int


def parse_pid_stat(text: str) -> PidStat | None:
    """None for an empty text (the process exited between listing and reading)."""
    text = text.strip()
    if not text or ")" not in text:
        return None
    head, _, rest = text.rpartition(")")  # the command name may itself hold spaces and parentheses
    pid_text, _, comm = head.partition(" (")
    f = rest.split()  # f[0] is field 3 (state) of proc(5)
    try:
        return PidStat(int(pid_text), comm, int(f[1]), int(f[11]) / USER_HZ, int(f[12]) / USER_HZ,
                       int(f[13]) / USER_HZ, int(f[14]) / USER_HZ, int(f[19]))
    except (IndexError, ValueError):
        return None


@dataclass
class PidMemory:
    rss: int = 0  # bytes resident
    shared: int = 0  # of the resident bytes, file-backed and shared memory (shared buffers touched count here)


def parse_pid_status(text: str) -> PidMemory:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssFile", "RssShmem") and rest.split():
            values[key] = int(rest.split()[0]) * 1024
    return PidMemory(values.get("VmRSS", 0), values.get("RssFile", 0) + values.get("RssShmem", 0))


@dataclass
class Pressure:
    """Share of time some task stalled on a resource, averaged over 10 s, and the total stall so far."""

    some_avg10: float
    total_us: int
    full_avg10: float | None = None


def parse_pressure(text: str) -> Pressure | None:
    lines: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        lines[kind] = dict(p.split("=", 1) for p in pairs if "=" in p)
    some = lines.get("some")
    if not some:
        return None
    full = lines.get("full")
    return Pressure(float(some.get("avg10", 0.0)), int(some.get("total", 0)),
                    float(full["avg10"]) if full and "avg10" in full else None)


@dataclass
class HostFacts:
    """The database host as the model needs it: stored with the run, never taken from the analysing machine."""

    source: str  # local | sql | node-exporter | none
    cores: int | None = None
    cpu_model: str | None = None
    memory_bytes: int | None = None
    kernel: str | None = None
    boot_id: str | None = None  # tells whether two readings come from the same running kernel
    cannot_see: list[str] = field(default_factory=list)  # what this source does not measure, in words
