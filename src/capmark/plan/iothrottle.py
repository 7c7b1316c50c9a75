"""An IO throttle as the device the model serves.

Where a run throttled the server's reads and writes (`--server-iops`, `--server-mbps`), each request waits in the
kernel's throttle until the limit lets it through, and the disk's own counters (its busy time) see only the fast
device behind it: at 300 IOPS a random read cost the server 3.3 ms and the disk 0.02 ms. The throttle is then the
device: a request takes one over the limit, in each direction the tighter of the request and the byte limit.
Reads and writes are throttled in separate queues, so a throttled disk is two stations: its reads (the disk's own
station) and its writes (WRITES_STATION), where the WAL flushes are served when the writes are limited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BYTES_PER_MB = 1_000_000  # --server-mbps counts decimal megabytes per second (driver/platform.py)


def writes_station(device: str) -> str:
    """The name the model gives a throttled disk's write queue, beside the disk's own (its reads)."""
    return f"{device} writes"


def _rate(value: Any) -> float | None:
    """A positive limit as the run stored it, else None (no limit in that direction)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class IoThrottle:
    """The limits a run's server was throttled to, and the disks they held."""

    devices: tuple[str, ...]  # by name; empty where the run did not record them: every measured disk was throttled
    read_iops: float | None = None
    write_iops: float | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None

    def applies_to(self, device: str) -> bool:
        return not self.devices or device in self.devices

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
        sector = 512  # /proc/diskstats counts 512-byte sectors whatever the disk's own sector size
        return (self.read_s(disk.get("reads", 0), disk.get("sectors_read", 0) * sector),
                self.write_s(disk.get("writes", 0), disk.get("sectors_written", 0) * sector))

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
