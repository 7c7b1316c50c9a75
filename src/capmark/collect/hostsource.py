"""What every source of the database host's counters answers (HostSource), and the part two of them share: a
source that sees only host-wide counters (a node_exporter, or no source at all).

Its own module so that the sources (hosts.py, node_exporter.py) import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from capmark.collect import procfs
from capmark.collect.os import HostProcesses, ProcessSample
from capmark.engines.base import TargetInfo

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def local_boot_id() -> str | None:
    """This machine's running kernel: a host source that reads the same one is this machine."""
    try:
        with open(BOOT_ID) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


class HostSource(Protocol):
    """One way to read the database host's counters. Methods return None where the source cannot see."""

    name: str
    facts: procfs.HostFacts
    driver_on_host: bool  # capmark's own process runs on the database host (its CPU is then host CPU)

    def stat(self) -> procfs.ProcStat | None: ...

    def diskstats(self, devices: list[str]) -> dict[str, dict[str, int]]: ...

    def meminfo(self) -> dict[str, int]: ...

    def counters(self, devices: list[str]) -> tuple[procfs.ProcStat | None, dict[str, dict[str, int]],
                                                  dict[str, int], dict[str, procfs.Pressure]]: ...

    def pressure(self) -> dict[str, procfs.Pressure]: ...

    def instance(self) -> ProcessSample | None: ...

    def process_cpu_s(self, pid: int) -> float | None: ...

    def host_processes(self) -> HostProcesses | None: ...

    def data_device(self, data_directory: str | None) -> tuple[str | None, str]: ...

    def own_pids(self) -> list[int]: ...

    def transactions(self) -> int: ...

    def publish_statistics(self, info: TargetInfo) -> None: ...

    def close(self) -> None: ...


class HostWideOnly:
    """What a source that sees only host-wide counters answers about processes: nothing, and no session of its
    own on the database (a node_exporter, or no source at all)."""

    def instance(self) -> ProcessSample | None:
        return None

    def process_cpu_s(self, pid: int) -> float | None:
        return None

    def host_processes(self) -> HostProcesses | None:
        return None

    def own_pids(self) -> list[int]:
        return []

    def transactions(self) -> int:
        return 0

    def publish_statistics(self, info: TargetInfo) -> None:
        """Nothing to publish: the source is not a session of the database."""


@dataclass
class NoHost(HostWideOnly):
    """No source: every host figure is n/a, with the reason."""

    reason: str
    name: str = "none"
    driver_on_host: bool = False
    facts: procfs.HostFacts = field(default_factory=lambda: procfs.HostFacts("none"))

    def stat(self) -> procfs.ProcStat | None:
        return None

    def diskstats(self, devices: list[str]) -> dict[str, dict[str, int]]:
        return {}

    def meminfo(self) -> dict[str, int]:
        return {}

    def pressure(self) -> dict[str, procfs.Pressure]:
        return {}

    def counters(self, devices: list[str]) -> tuple[None, dict, dict, dict]:
        return None, {}, {}, {}

    def data_device(self, data_directory: str | None) -> tuple[str | None, str]:
        return None, self.reason

    def close(self) -> None:
        pass
