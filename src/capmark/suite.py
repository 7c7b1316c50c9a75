"""What a run will measure: one TestPlan per test, from the command line or from a TOML suite file.

A suite file names its tests and, optionally, defaults for all of them:

    [defaults]
    jobs = [1, 2, 4]      # or "auto": step 1, 2, 4, ... until the knee (bounded by --max-jobs)
    repeat = 2            # run the step plan twice, interleaved: 1, 2, 4, 4, 2, 1
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

from capmark.config import (
    AUTO_JOBS,
    DEFAULT_MAX_TRIES,
    DEFAULT_QUERY_MODE,
    MODES,
    check_pacing,
    check_repeat,
    check_script_options,
    check_times,
    parse_duration,
    parse_jobs,
    parse_rate,
    read_toml,
)
from capmark.errors import CapmarkError
from capmark.measure.stepping import chain, interleave, worst_case_steps
from capmark.workloads import registry, scripts
from capmark.workloads.base import ParamValue, Workload
from capmark.workloads.pgscript import parse_define
from capmark.workloads.pgscript.errors import ShellNotAllowed

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
    repeat: int = 1  # runs of the step plan, every other one reversed
    auto_max: int | None = None  # stepping until the knee, bounded by this many jobs (jobs: the doubling chain)

    @property
    def steps(self) -> int:
        """Steps the test measures; with auto stepping, at most this many."""
        return self.repeat * (worst_case_steps(self.auto_max) if self.auto_max else len(self.jobs))

    @property
    def expected_s(self) -> float:
        return self.steps * (self.warmup_s + self.duration_s + STEP_OVERHEAD_S)

    def order(self) -> list[tuple[int, int]]:
        """(repeat, jobs) of every step in running order (auto stepping: the first pass's doubling chain)."""
        return interleave(self.jobs, self.repeat)


def _stepping(jobs: list[int] | str, auto_max: int) -> tuple[list[int], int | None]:
    """A job list as given, or the doubling chain and its bound for "auto"."""
    if isinstance(jobs, str):  # "auto", or the command line's "1,2,4"
        return (chain(auto_max), auto_max) if jobs == AUTO_JOBS else (parse_jobs(jobs), None)
    return list(jobs), None


def from_command_line(names: list[str], params: dict[str, str], mode: str, jobs: list[int] | str, warmup_s: float,
                      duration_s: float, think_s: float = 0.0, rate: float = 0.0, repeat: int = 1,
                      auto_max: int = 1) -> list[TestPlan]:
    """jobs is a job list or "auto" (stepping until the knee, bounded by auto_max)."""
    workloads = registry.select(names)
    values = registry.check_params(workloads, params)
    registry.check_mode(workloads, mode)
    for w in workloads:
        registry.check_users(w, values[w.name], mode, think_s, rate)
    steps, bound = _stepping(jobs, auto_max)
    return [TestPlan(w, values[w.name], mode, steps, warmup_s, duration_s, think_s, rate, repeat, bound)
            for w in workloads]


def script_plan(given: list[str], defines: list[str] | dict[str, Any], options: dict[str, Any],
                jobs: list[int] | str, warmup_s: float, duration_s: float, think_s: float = 0.0, rate: float = 0.0,
                base: Path | None = None, repeat: int = 1, auto_max: int = 1) -> TestPlan:
    """The test that runs the user's pgbench scripts (client side: a script is a client's transaction)."""
    pairs = [parse_define(d) for d in defines] if isinstance(defines, list) else [
        parse_define(f"{k}={v}") for k, v in defines.items()]
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            raise CapmarkError(f"The variable {name} is defined twice; give each -D NAME=VALUE once.")
        seen.add(name)
    workload = scripts.script_workload(scripts.load_sources(given, base),
                                       scripts.ScriptOptions(tuple(pairs), **options))
    check_pacing("client", think_s, rate)
    steps, bound = _stepping(jobs, auto_max)
    return TestPlan(workload, workload.resolve_params({}), "client", steps, warmup_s, duration_s, think_s, rate,
                    repeat, bound)


def from_file(path: Path, default_jobs: list[int] | str, warmup_s: float, duration_s: float, mode: str,
              think_s: float = 0.0, rate: float = 0.0, repeat: int = 1, auto_max: int = 1,
              allow_shell: bool = False) -> list[TestPlan]:
    """The suite file's tests; allow_shell is the command line's --allow-shell, the only permission for a script
    test's shell commands (a test's allow_shell key can restate it or withhold it, never give it)."""
    data = read_toml(path, "suite file")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise CapmarkError(f"[defaults] of {path} is not a table; write it as a [defaults] section with keys such as "
                           "jobs = [1, 2, 4].")
    tests = data.get("test", [])
    if not isinstance(tests, list) or not tests:
        raise CapmarkError(f"The suite file {path} names no tests; add [[test]] tables with a workload each.")
    unknown = set(data) - {"defaults", "test"}
    if unknown:
        raise CapmarkError(f"The suite file {path} has unknown top-level key(s) {', '.join(sorted(unknown))}; use "
                           "[defaults] and [[test]] tables.")
    if "workload" in defaults or "params" in defaults:
        raise CapmarkError(f"[defaults] of {path} may not set workload or params; set them in each [[test]].")
    base = {"jobs": default_jobs, "warmup": warmup_s, "duration": duration_s, "mode": mode, "think": think_s,
            "rate": rate, "repeat": repeat, "auto_max": auto_max}
    base.update(_settings(defaults, path, "[defaults]"))
    plans = []
    for i, entry in enumerate(tests, start=1):
        plans += _test_plans(entry, base, path, i, allow_shell)
    if allow_shell and not any(isinstance(p.workload.recipe, scripts.ScriptRecipe) for p in plans):
        raise CapmarkError(f"--allow-shell lets pgbench scripts run shell commands, and the suite file {path} has no "
                           "script test; drop --allow-shell.")
    return plans


def _test_plans(entry: Any, base: dict[str, Any], path: Path, i: int, allow_shell: bool) -> list[TestPlan]:
    """The plans of one [[test]] table (a suite name there gives one plan per member)."""
    if not isinstance(entry, dict):
        raise CapmarkError(f"Test {i} of {path} is not a table; write each test as a [[test]] section.")
    workload = entry.get("workload")
    if workload is None and ("script" in entry or "scripts" in entry):
        return [_script_test(entry, base, path, i, allow_shell)]
    if workload is None:
        raise CapmarkError(f"Test {i} of {path} has no workload; add workload = \"name\" or script = \"file.sql\".")
    if not isinstance(workload, str):
        raise CapmarkError(f"Test {i} of {path} names its workload with {workload!r}; write it as a string, e.g. "
                           "workload = \"tp-light\".")
    given = _params(entry.get("params", {}), path, i)
    merged = {**base, **_settings(entry, path, f"test {i}")}
    where = f"test {i} of {path}"
    check_times(merged["warmup"], merged["duration"], merged["think"], where)
    check_pacing(merged["mode"], merged["think"], merged["rate"], where)
    plans = []
    for w in registry.select([workload]):
        values = registry.check_params([w], given)[w.name]
        registry.check_mode([w], merged["mode"])
        registry.check_users(w, values, merged["mode"], merged["think"], merged["rate"])
        steps, bound = _stepping(merged["jobs"], merged["auto_max"])
        plans.append(TestPlan(w, values, merged["mode"], steps, merged["warmup"], merged["duration"],
                              merged["think"], merged["rate"], merged["repeat"], bound))
    return plans


SCRIPT_KEYS = {"script", "scripts", "defines", "seed", "query_mode", "max_tries", "allow_shell"}


def _shell_allowed(entry: dict[str, Any], where: str, command_line: bool) -> bool:
    """Shell commands run only with the command line's --allow-shell; a test's allow_shell = false withholds it,
    allow_shell = true only restates it."""
    in_file = entry.get("allow_shell")
    if in_file is not None and not isinstance(in_file, bool):
        raise CapmarkError(f"allow_shell of {where} is {in_file!r}; write true or false.")
    return command_line and in_file is not False


def _script_test(entry: dict[str, Any], base: dict[str, Any], path: Path, i: int, allow_shell: bool) -> TestPlan:
    """A [[test]] with script = "file.sql@5" or scripts = [...]; paths are relative to the suite file."""
    where = f"test {i} of {path}"
    given = entry.get("scripts", entry.get("script"))
    if "script" in entry and "scripts" in entry:
        raise CapmarkError(f"{where} has both script and scripts; give one of them.")
    items: list[Any] = given if isinstance(given, list) else [given]  # checked to be non-empty strings below
    if not items or not all(isinstance(x, str) and x for x in items):
        raise CapmarkError(f"The scripts of {where} are {given!r}; write script = \"file.sql\" or scripts = "
                           "[\"a.sql@9\", \"b.sql@1\"].")
    defines = entry.get("defines", {})
    if not isinstance(defines, dict) or not all(isinstance(v, str | int | float) and not isinstance(v, bool)
                                                for v in defines.values()):
        raise CapmarkError(f"The defines of {where} are {defines!r}; write defines = {{ name = \"value\" }}.")
    options = {"seed": entry.get("seed", 0), "query_mode": entry.get("query_mode", DEFAULT_QUERY_MODE),
               "max_tries": entry.get("max_tries", DEFAULT_MAX_TRIES),
               "allow_shell": _shell_allowed(entry, where, allow_shell)}
    check_script_options(options["seed"], options["max_tries"], options["query_mode"])
    merged = {**base, **_settings({k: v for k, v in entry.items() if k not in SCRIPT_KEYS}, path, f"test {i}")}
    if merged.get("mode", "client") == "server" and "mode" in entry:
        raise CapmarkError(f"{where} runs pgbench scripts, which run client-side; drop mode = \"server\".")
    check_times(merged["warmup"], merged["duration"], merged["think"], where)
    try:
        return script_plan(items, {k: str(v) for k, v in defines.items()}, options, merged["jobs"],
                           merged["warmup"], merged["duration"], merged["think"], merged["rate"], base=path.parent,
                           repeat=merged["repeat"], auto_max=merged["auto_max"])
    except ShellNotAllowed as refused:
        if not allow_shell:
            raise
        raise CapmarkError(f"{where} sets allow_shell = false, but {refused.source} line {refused.line} runs a shell "
                           "command; drop allow_shell = false, or the shell command.") from None


def _params(table: Any, path: Path, i: int) -> dict[str, str]:
    """A test's params table as the strings --param would give; values must be numbers or strings."""
    if not isinstance(table, dict):
        raise CapmarkError(f"The params of test {i} of {path} are not a table; write e.g. params = {{ update_pct = 20 }}.")
    for name, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise CapmarkError(f"Parameter {name} of test {i} of {path} is {value!r}; give a number or a string.")
    return {k: str(v) for k, v in table.items()}


def _settings(table: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    known = {"workload", "params", "jobs", "warmup", "duration", "mode", "think", "rate", "repeat"}
    unknown = set(table) - known
    if unknown:
        raise CapmarkError(f"{where} of {path} has unknown key(s) {', '.join(sorted(unknown))}; "
                           f"use {', '.join(sorted(known))}.")
    out: dict[str, Any] = {}
    of = f"of {where} of {path}"
    if "jobs" in table:
        out["jobs"] = _jobs(table["jobs"], path, where)
    if "repeat" in table:
        out["repeat"] = check_repeat(table["repeat"], f"{where} of {path}")
    if "warmup" in table:
        out["warmup"] = parse_duration(table["warmup"], f"warm-up {of}")
    if "duration" in table:
        out["duration"] = parse_duration(table["duration"], f"duration {of}")
    if "think" in table:
        out["think"] = parse_duration(table["think"], f"think time {of}")
    if "rate" in table:
        out["rate"] = parse_rate(table["rate"], f"rate {of}")
    if "mode" in table:
        if table["mode"] not in MODES:
            raise CapmarkError(f"{where} of {path} has mode {table['mode']!r}; use \"server\" or \"client\".")
        out["mode"] = table["mode"]
    return out


def _jobs(value: Any, path: Path, where: str) -> list[int] | str:
    """jobs = [1, 2, 4] (or the command line's "1,2,4", or "auto"); whole numbers only, not true or 2.0."""
    if value == AUTO_JOBS:
        return AUTO_JOBS
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(j, int | str) and not isinstance(j, bool) for j in items):
        raise CapmarkError(f"The jobs of {where} of {path} are {value!r}; write a list of whole numbers, e.g. "
                           "jobs = [1, 2, 4].")
    return parse_jobs(",".join(str(j) for j in items))
