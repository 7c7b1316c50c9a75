"""A smaller platform on purpose: the embedded server confined to fewer cores, a CPU quota or an IO rate.

capmark starts the embedded server itself, so on a host with cgroup v1 controllers (cpuset, cpu, blkio) it can put
the postmaster and every process it starts into a group of its own, measure, and take the limits away again. The
same workload measured confined and unconfined, side by side, is what a what-if about cores or disks predicts, so
the prediction can be checked against the real change.

Every group capmark makes is CGROUP_PARENT/<pid>-<run id> under each controller: the pid of the capmark process
that made it, so that a group whose maker is gone (a killed run) is recognised and removed by the next run or by
`capmark db start`. Removing a group moves its processes back to the controller's root group first.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

import psutil

from capmark.config import PlatformLimits
from capmark.errors import CapmarkError

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "capmark"
CFS_PERIOD_US = 100_000  # the kernel's default CFS period: a quota of F cores is F x this many us per period
BYTES_PER_MB = 1_000_000  # --server-mbps counts decimal megabytes per second, as disk data sheets do
# A process forked by the postmaster while it was being moved may land in the old group; moving the server's
# processes is repeated until a pass finds none left outside, at most this many times.
MOVE_PASSES = 5
# A process that has just exited (a backend whose session closed) keeps its group busy until the kernel has
# finished with it, a few milliseconds; the group's removal is tried again for this long.
REMOVE_WAIT_S = 3.0
REMOVE_RETRY_S = 0.05


def missing_controllers(limits: PlatformLimits, root: Path = CGROUP_ROOT) -> str:
    """Why the limits cannot be applied on this host, in words; empty when they can."""
    for controller in limits.controllers():
        folder = root / controller
        if not (folder / "cgroup.procs").exists():
            unified = (root / "cgroup.controllers").exists() or (root / "unified").exists()
            return (f"the cgroup v1 '{controller}' controller is not mounted at {folder}"
                    + (" (this host has cgroup v2 only, which capmark does not drive)" if unified
                       and not (root / "cpuset").exists() else ""))
        if not os.access(folder, os.W_OK):
            return f"{folder} is not writable by this user (confining the server needs root)"
    return ""


def refuse_unless_possible(limits: PlatformLimits, root: Path = CGROUP_ROOT) -> None:
    """One sentence when this host cannot apply the limits (controllers missing or not writable)."""
    why = missing_controllers(limits, root) if limits.limited else ""
    if why:
        raise CapmarkError(f"The embedded server cannot be confined: {why}; run as root on a host with cgroup v1 "
                           "controllers, or drop the --server-* options.")


def _group_name(run_id: str) -> str:
    return f"{os.getpid()}-{run_id}"


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as err:
        raise CapmarkError(f"Could not set {path} to {value.strip()!r} ({err.strerror}); the kernel refused the "
                           "limit, so the run was not started confined.") from None


def _server_pids(postmaster_pid: int) -> list[int]:
    try:
        root = psutil.Process(postmaster_pid)
        return [root.pid] + [c.pid for c in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _procs(group: Path) -> list[int]:
    try:
        return [int(line) for line in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _move_all(pids: list[int], group: Path) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):  # a process may end between listing and moving
            (group / "cgroup.procs").write_text(str(pid))


def _remove_group(group: Path) -> None:
    """Move whatever is left back to the controller's root group, then remove the group (what cannot be removed
    now is cleared by the next run or `capmark db start`)."""
    root = group.parent.parent
    deadline = time.monotonic() + REMOVE_WAIT_S
    while True:
        for _ in range(MOVE_PASSES):
            left = _procs(group)
            if not left:
                break
            _move_all(left, root)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: a process still exiting, or one forked into it since
            if time.monotonic() > deadline:
                return
            time.sleep(REMOVE_RETRY_S)


def _block_device(folder: Path) -> str | None:
    """MAJOR:MINOR of the whole disk that holds `folder` (the throttle applies to disks, not partitions)."""
    try:
        dev = os.stat(folder).st_dev
    except OSError:
        return None
    node = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not node.exists():
        return None
    if (node / "partition").exists():
        node = node.resolve().parent
    try:
        return (node / "dev").read_text().strip()
    except OSError:
        return None


def _device_name(major_minor: str) -> str | None:
    """The kernel's name of a disk (vda, nvme0n1), which the step's disk counters are keyed by."""
    node = Path(f"/sys/dev/block/{major_minor}")
    return node.resolve().name if node.exists() else None


def clear_stale(root: Path = CGROUP_ROOT) -> list[str]:
    """Remove the groups of capmark processes that are gone (a killed run left its server confined)."""
    cleared = []
    for controller in ("cpuset", "cpu", "blkio"):
        parent = root / controller / CGROUP_PARENT
        if not parent.is_dir():
            continue
        for group in parent.iterdir():
            if not group.is_dir():
                continue
            maker = group.name.split("-", 1)[0]
            if maker.isdigit() and psutil.pid_exists(int(maker)) and int(maker) != os.getpid():
                continue
            _remove_group(group)
            cleared.append(f"{controller}/{group.name}")
    return cleared


@dataclass(frozen=True)
class Applied:
    """What a confinement really set, for the run's environment."""

    limits: PlatformLimits
    cpuset: str | None  # the cores the server was given, as the kernel lists them ("0" or "0-1")
    devices: list[str]  # MAJOR:MINOR of the throttled disks
    device_names: list[str] = field(default_factory=list)  # the same disks by name, as /proc/diskstats names them


@contextlib.contextmanager
def confined(limits: PlatformLimits, postmaster_pid: int, data_dirs: list[Path], run_id: str,
             root: Path = CGROUP_ROOT) -> Iterator[Applied | None]:
    """Confine the server while the block runs; however it ends, the limits are gone afterwards."""
    if not limits.limited:
        yield None
        return
    clear_stale(root)
    groups: list[Path] = []
    try:
        applied = _apply(limits, postmaster_pid, data_dirs, run_id, root, groups)
        yield applied
    finally:
        for group in groups:
            _remove_group(group)


def _apply(limits: PlatformLimits, postmaster_pid: int, data_dirs: list[Path], run_id: str, root: Path,
           groups: list[Path]) -> Applied:
    name = _group_name(run_id)

    def make(controller: str) -> Path:
        group = root / controller / CGROUP_PARENT / name
        group.mkdir(parents=True, exist_ok=True)
        groups.append(group)
        return group

    cpus = None
    if limits.cpus is not None:
        group = make("cpuset")
        parent = group.parent
        available = _cpu_list((root / "cpuset" / "cpuset.effective_cpus").read_text())
        cpus = _cpu_text(available[: limits.cpus])
        for level in (parent, group):  # a cpuset group holds no task until it has cores and memory nodes
            mems = (root / "cpuset" / "cpuset.effective_mems").read_text().strip()
            if not (level / "cpuset.cpus").read_text().strip():
                _write(level / "cpuset.cpus", _cpu_text(available))
            if not (level / "cpuset.mems").read_text().strip():
                _write(level / "cpuset.mems", mems)
        _write(group / "cpuset.cpus", cpus)
    if limits.cpu_quota is not None:
        group = make("cpu")
        _write(group / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(group / "cpu.cfs_quota_us", str(round(limits.cpu_quota * CFS_PERIOD_US)))
    devices: list[str] = []
    if "blkio" in limits.controllers():
        group = make("blkio")
        devices = sorted({d for d in (_block_device(p) for p in data_dirs) if d})
        if not devices:
            raise CapmarkError("The disk that holds the embedded server's data could not be found under "
                               "/sys/dev/block, so its IO cannot be throttled; drop --server-iops and --server-mbps.")
        for device in devices:
            for file, value in (("read_iops_device", limits.read_iops), ("write_iops_device", limits.write_iops),
                                ("read_bps_device", _bytes(limits.read_mbps)),
                                ("write_bps_device", _bytes(limits.write_mbps))):
                if value is not None:
                    _write(group / f"blkio.throttle.{file}", f"{device} {round(value)}")
    for _ in range(MOVE_PASSES):
        outside = [p for p in _server_pids(postmaster_pid) if any(p not in _procs(g) for g in groups)]
        if not outside:
            break
        for group in groups:
            _move_all(outside, group)
    return Applied(limits, cpus, devices, [n for n in map(_device_name, devices) if n])


class PlatformRecord(TypedDict):
    """The limits as the run's environment stores them ("platform"): what the model, the report and compare read."""

    cpus: int | None
    cpu_quota: float | None
    read_iops: float | None
    write_iops: float | None
    read_mbps: float | None
    write_mbps: float | None
    cpuset: str | None  # the cores the server had, as the kernel lists them
    devices: list[str]  # MAJOR:MINOR of the throttled disks
    device_names: list[str]  # the same disks by name (runs stored before had none: every measured disk was throttled)
    host_cores: int  # the cores of the host it was confined on
    words: str


def record_of(applied: Applied) -> PlatformRecord:
    limits = asdict(applied.limits)
    return PlatformRecord(cpus=limits["cpus"], cpu_quota=limits["cpu_quota"], read_iops=limits["read_iops"],
                          write_iops=limits["write_iops"], read_mbps=limits["read_mbps"],
                          write_mbps=limits["write_mbps"], cpuset=applied.cpuset, devices=applied.devices,
                          device_names=applied.device_names,
                          host_cores=os.cpu_count() or 1,
                          words=applied.limits.words())


def _cpu_set(text: str | None) -> set[int]:
    return set(_cpu_list(text)) if text else set()


@contextlib.contextmanager
def driver_elsewhere(applied: Applied | None) -> Iterator[None]:
    """capmark's own process (and the job processes it starts) on the cores the server was not given, where the
    host has any: the load then comes from "another machine" and does not take the smaller platform's CPU."""
    server = _cpu_set(applied.cpuset if applied else None)
    mine = os.sched_getaffinity(0)
    others = mine - server
    if not server or not others:
        yield
        return
    os.sched_setaffinity(0, others)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def _bytes(mbps: float | None) -> float | None:
    return None if mbps is None else mbps * BYTES_PER_MB


def _cpu_list(text: str) -> list[int]:
    cores: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cores.extend(range(int(low), int(high or low) + 1))
    return cores


def _cpu_text(cores: list[int]) -> str:
    return ",".join(str(c) for c in cores)
