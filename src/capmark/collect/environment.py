"""Environment fingerprint stored with each run: enough to tell two platforms apart later."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict
from typing import Any

import psutil

from capmark import __version__
from capmark.collect.hosts import HostSource
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


def fingerprint(info: TargetInfo, host: HostSource) -> dict[str, Any]:
    """The load host (this machine, where capmark runs) and the database host (as its source sees it): the
    model, what-if and sizing use the database host's, never the analysing machine's."""
    return {
        "database_host": {**asdict(host.facts), "driver_on_host": host.driver_on_host,
                          "reason": getattr(host, "reason", "")},
        "load_host": {
            "cpu_model": _cpu_model(),
            "logical_cores": os.cpu_count(),
            "physical_cores": psutil.cpu_count(logical=False),
            "memory_bytes": psutil.virtual_memory().total,
            "kernel": platform.release(),
            "os": platform.platform(),
        },
        "database": {
            "engine": info.engine,
            "version": info.version,
            "version_num": info.version_num,
            "embedded": info.embedded,
            "local": info.local,
            "settings": info.settings,
        },
        "capmark": {"version": __version__, "python": sys.version.split()[0]},
    }
