"""An IO throttle as the device the model serves.

Where a run throttled the server's reads and writes (`--server-iops`, `--server-mbps`), each request waits in the
kernel's throttle until the limit lets it through, and the disk's own counters (its busy time) see only the fast
device behind it: at 300 reads a second a random read cost the server 3.3 ms and the disk 0.03 ms. The throttle is
then the device: a request takes one over the limit, in each direction the tighter of the request and the byte limit.
Reads and writes are throttled in separate queues, so a throttled disk is two stations: its reads (the disk's own
station) and its writes (writes_station), where the WAL flushes are served. A direction without a limit keeps its
share of the disk's own busy time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capmark.collect.procfs import SECTOR_BYTES
from capmark.driver.platform import BYTES_PER_MB

WRITES_SUFFIX = " writes"


def writes_station(device: str) -> str:
    """The name the model gives a throttled disk's write queue, beside the disk's own (its reads)."""
    return device + WRITES_SUFFIX


def is_writes_station(name: str) -> bool:
    return name.endswith(WRITES_SUFFIX)


def _rate(value: Any) -> float | None:
    """A positive limit as the run stored it, else None (no limit in that direction)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _on_disk(device: str, disk: str) -> bool:
    """Whether a measured device is the throttled disk or one of its partitions (sda1 of sda, nvme0n1p2 of nvme0n1):
    the throttle holds a whole disk, while the steps count the device the data folder is mounted from."""
    rest = device[len(disk):] if device.startswith(disk) else None
    if rest is None:
        return False
    if disk[-1:].isdigit():  # nvme0n1: its partitions are nvme0n1p1 ...; nvme0n10 is another disk
        return rest == "" or (rest[:1] == "p" and rest[1:].isdigit())
    return rest == "" or rest.isdigit()


@dataclass(frozen=True)
class IoThrottle:
    """The limits a run's server was throttled to, and the disks they held."""

    devices: tuple[str, ...]  # by name; empty where the run did not record them: every measured disk was throttled
    read_iops: float | None = None
    write_iops: float | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None

    def applies_to(self, device: str) -> bool:
        return not self.devices or any(_on_disk(device, disk) for disk in self.devices)

    def read_s(self, reads: float, read_bytes: float) -> float:
        """The throttle's time for these reads: the tighter of the request and the byte limit (0 without either)."""
        return max(reads / self.read_iops if self.read_iops else 0.0,
                   read_bytes / (self.read_mbps * BYTES_PER_MB) if self.read_mbps else 0.0)

    def write_s(self, writes: float, write_bytes: float) -> float:
        return max(writes / self.write_iops if self.write_iops else 0.0,
                   write_bytes / (self.write_mbps * BYTES_PER_MB) if self.write_mbps else 0.0)

    def held_s(self, disk: Mapping[str, Any]) -> tuple[float, float]:
        """The throttle's time for one disk's reads and for its writes over a window (a /proc/diskstats delta, as
        steps store it)."""
        return (self.read_s(disk.get("reads", 0), disk.get("sectors_read", 0) * SECTOR_BYTES),
                self.write_s(disk.get("writes", 0), disk.get("sectors_written", 0) * SECTOR_BYTES))

    def stations_s(self, disk: Mapping[str, Any]) -> tuple[float, float]:
        """A disk's reads' and writes' station time over a window: the throttle's where the direction was limited,
        else that direction's share of the disk's own busy time (by its requests' time, read_ms against write_ms)."""
        read_s, write_s = self.held_s(disk)
        busy = disk.get("io_ms", 0) / 1000
        read_ms, write_ms = disk.get("read_ms", 0), disk.get("write_ms", 0)
        read_share = read_ms / (read_ms + write_ms) if read_ms + write_ms else 0.5
        limited_reads, limited_writes = bool(self.read_iops or self.read_mbps), bool(self.write_iops or self.write_mbps)
        return (read_s if limited_reads else busy * read_share,
                write_s if limited_writes else busy * (1 - read_share))

    def words(self) -> str:
        parts = [f"{what} {v:g} {unit}" for what, v, unit in (
            ("reads", self.read_iops, "a second"), ("writes", self.write_iops, "a second"),
            ("reads", self.read_mbps, "MB/s"), ("writes", self.write_mbps, "MB/s")) if v]
        return ", ".join(parts)


def io_throttle(platform: Mapping[str, Any] | None) -> IoThrottle | None:
    """The IO throttle of a run's recorded platform (its environment's "platform"), None where it had none."""
    if not isinstance(platform, Mapping):
        return None
    limits = {k: _rate(platform.get(k)) for k in ("read_iops", "write_iops", "read_mbps", "write_mbps")}
    if not any(limits.values()):
        return None
    names = platform.get("device_names")
    devices = tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()
    return IoThrottle(devices, **limits)


def throttled_stations(disks: Mapping[str, Mapping[str, Any]], throttle: IoThrottle, units: float,
                       busy: Mapping[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """The device stations per unit with each throttled disk as the throttle served it: its reads at the disk's own
    station and its writes at a station of their own; and the write stations by disk (where a WAL flush goes)."""
    stations, writes = dict(busy), {}
    for dev, disk in disks.items():
        if dev not in busy or not throttle.applies_to(dev) or not units:
            continue
        read_s, write_s = throttle.stations_s(disk)
        stations[dev] = read_s / units
        writes[dev] = writes_station(dev)
        stations[writes[dev]] = write_s / units
    return stations, writes


def reads_utilization_pct(disk: Mapping[str, Any], throttle: IoThrottle, elapsed_s: float) -> float:
    """A throttled disk's reads' station busy over a window, as a share of it (at most all of it: the reads
    counted at the window's edges can add up to a little more)."""
    read_s, _ = throttle.stations_s(disk)
    return min(100.0, 100 * read_s / elapsed_s) if elapsed_s else 0.0
