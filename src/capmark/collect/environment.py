"""Environment fingerprint stored with each run: enough to tell two platforms apart later."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import psutil

from capmark import __version__
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


def fingerprint(info: TargetInfo) -> dict[str, Any]:
    return {
        "host": {
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
