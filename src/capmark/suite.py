"""What a run will measure: one TestPlan per test, from the command line or from a TOML suite file.

A suite file names its tests and, optionally, defaults for all of them:

    [defaults]
    jobs = [1, 2, 4]
    warmup = "5s"
    duration = "15s"
    mode = "server"

    [[test]]
    workload = "tp-light"
    params = { update_pct = 50 }
    mode = "client"
    rate = 500            # open loop: Poisson arrivals per second (or think = "10ms": closed loop)

    [[test]]
    workload = "srv-query1"
    jobs = [1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capmark.config import MODES, check_pacing, parse_duration, parse_jobs, parse_rate, read_toml
from capmark.errors import CapmarkError
from capmark.workloads import registry
from capmark.workloads.base import ParamValue, Workload

STEP_OVERHEAD_S = 1.5  # connect, snapshots and pauses per step, measured on a 2-core machine


@dataclass
class TestPlan:
    __test__ = False  # not a pytest class

    workload: Workload
    params: dict[str, ParamValue]
    mode: str
    jobs: list[int]
    warmup_s: float
    duration_s: float
    think_s: float = 0.0
    rate: float = 0.0

    @property
    def expected_s(self) -> float:
        return len(self.jobs) * (self.warmup_s + self.duration_s + STEP_OVERHEAD_S)


def from_command_line(names: list[str], params: dict[str, str], mode: str, jobs: list[int], warmup_s: float,
                      duration_s: float, think_s: float = 0.0, rate: float = 0.0) -> list[TestPlan]:
    workloads = registry.select(names)
    values = registry.check_params(workloads, params)
    registry.check_mode(workloads, mode)
    return [TestPlan(w, values[w.name], mode, jobs, warmup_s, duration_s, think_s, rate) for w in workloads]


def from_file(path: Path, default_jobs: list[int], warmup_s: float, duration_s: float, mode: str,
              think_s: float = 0.0, rate: float = 0.0) -> list[TestPlan]:
    data = read_toml(path, "suite file")
    defaults = data.get("defaults", {})
    tests = data.get("test", [])
    if not isinstance(tests, list) or not tests:
        raise CapmarkError(f"The suite file {path} names no tests; add [[test]] tables with a workload each.")
    base = {"jobs": default_jobs, "warmup": warmup_s, "duration": duration_s, "mode": mode, "think": think_s,
            "rate": rate}
    base.update(_settings(defaults, path, "[defaults]"))
    plans = []
    for i, entry in enumerate(tests, start=1):
        if "workload" not in entry:
            raise CapmarkError(f"Test {i} of {path} has no workload; add workload = \"name\".")
        merged = {**base, **_settings(entry, path, f"test {i}")}
        for name in registry.select([str(entry["workload"])]):
            given = {k: str(v) for k, v in entry.get("params", {}).items()}
            values = registry.check_params([name], given)[name.name]
            registry.check_mode([name], merged["mode"])
            check_pacing(merged["mode"], merged["think"], merged["rate"])
            plans.append(TestPlan(name, values, merged["mode"], merged["jobs"], merged["warmup"], merged["duration"],
                                  merged["think"], merged["rate"]))
    return plans


def _settings(table: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    known = {"workload", "params", "jobs", "warmup", "duration", "mode", "think", "rate"}
    unknown = set(table) - known
    if unknown:
        raise CapmarkError(f"{where} of {path} has unknown key(s) {', '.join(sorted(unknown))}; "
                           f"use {', '.join(sorted(known))}.")
    out: dict[str, Any] = {}
    if "jobs" in table:
        jobs = table["jobs"]
        out["jobs"] = parse_jobs(",".join(str(j) for j in jobs) if isinstance(jobs, list) else str(jobs))
    if "warmup" in table:
        out["warmup"] = parse_duration(table["warmup"], "warm-up")
    if "duration" in table:
        out["duration"] = parse_duration(table["duration"], "duration")
    if "think" in table:
        out["think"] = parse_duration(table["think"], "think time")
    if "rate" in table:
        out["rate"] = parse_rate(str(table["rate"]))
    if "mode" in table:
        if table["mode"] not in MODES:
            raise CapmarkError(f"{where} of {path} has mode '{table['mode']}'; use server or client.")
        out["mode"] = table["mode"]
    return out
