"""Environment fingerprint stored with each run: enough to tell two platforms apart later."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict
from typing import TypedDict

import psutil

from capmark import __version__
from capmark.collect.hosts import HostSource
from capmark.engines import registry as engines
from capmark.engines.base import TargetInfo


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class LoadHost(TypedDict):
    """The machine capmark ran on."""

    cpu_model: str
    logical_cores: int | None
    physical_cores: int | None
    memory_bytes: int
    kernel: str
    os: str


class DatabaseFacts(TypedDict):
    """The server measured, as it described itself."""

    engine: str
    version: str
    version_num: int
    embedded: bool
    local: bool
    settings: dict[str, str]


class CapmarkVersion(TypedDict, total=False):
    version: str
    python: str
    lookups: str  # how client-side one-key lookups ran (Engine.lookup_path); absent in runs stored before it


class Fingerprint(TypedDict):
    """The platform as a run stores it (RunResult.environment; a run on a cluster adds `cluster`)."""

    database_host: dict[str, object]  # procfs.HostFacts' fields, driver_on_host and the source's reason
    load_host: LoadHost
    database: DatabaseFacts
    capmark: CapmarkVersion


def fingerprint(info: TargetInfo, host: HostSource) -> Fingerprint:
    """The load host (this machine, where capmark runs) and the database host (as its source sees it): the
    model, what-if and sizing use the database host's, never the analysing machine's."""
    return Fingerprint(
        database_host={**asdict(host.facts), "driver_on_host": host.driver_on_host,
                       "reason": getattr(host, "reason", "")},
        load_host=LoadHost(
            cpu_model=_cpu_model(),
            logical_cores=os.cpu_count(),
            physical_cores=psutil.cpu_count(logical=False),
            memory_bytes=psutil.virtual_memory().total,
            kernel=platform.release(),
            os=platform.platform(),
        ),
        database=DatabaseFacts(
            engine=info.engine,
            version=info.version,
            version_num=info.version_num,
            embedded=info.embedded,
            local=info.local,
            settings=info.settings,
        ),
        capmark=CapmarkVersion(version=__version__, python=sys.version.split()[0],
                               lookups=engines.named(info.engine).lookup_path()),
    )
