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

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from capmark.config import (
    AUTO_JOBS,
    DEFAULT_DURATION_S,
    DEFAULT_MAX_TRIES,
    DEFAULT_QUERY_MODE,
    DEFAULT_WARMUP_S,
    MAX_JOBS,
    MODES,
    RunSpec,
    TomlTable,
    check_pacing,
    check_repeat,
    check_script_options,
    check_times,
    default_jobs,
    parse_duration,
    parse_jobs,
    parse_rate,
    read_toml,
)
from capmark.errors import CapmarkError
from capmark.measure.stepping import AUTO_CORES_FACTOR, chain, interleave, worst_case_steps
from capmark.workloads import registry, scripts
from capmark.workloads.base import ParamValue, Workload
from capmark.workloads.pgscript import parse_define
from capmark.workloads.pgscript.errors import ShellNotAllowed

STEP_OVERHEAD_S = 1.5  # connect, snapshots and pauses per step, measured on a 2-core machine


@dataclass(frozen=True)
class Stepping:
    """The job counts a test steps through, as given: a list, "auto" (until the knee), or nothing, when the plan
    follows the database host's cores (known once the run has reached it)."""

    jobs: tuple[int, ...] = ()  # (): 1, 2, 4, ... up to twice the cores (a soak: one step of as many jobs as cores)
    auto: bool = False  # step until the knee, bounded by max_jobs
    max_jobs: int | None = None  # the bound of auto stepping (None: AUTO_CORES_FACTOR x the cores)
    one_step: bool = False  # a soak: one long step

    @property
    def follows_cores(self) -> bool:
        """The job counts depend on the database host's cores."""
        return not self.jobs and not (self.auto and self.max_jobs)

    def bound(self, cores: int) -> int | None:
        """The bound of auto stepping on a host of this many cores (None: the steps are listed)."""
        if not self.auto:
            return None
        return self.max_jobs or min(MAX_JOBS, AUTO_CORES_FACTOR * cores)

    def job_counts(self, cores: int) -> list[int]:
        """The steps on a host of this many cores (auto stepping: its doubling chain)."""
        bound = self.bound(cores)
        if bound is not None:
            return chain(bound)
        if self.jobs:
            return list(self.jobs)
        return [cores] if self.one_step else default_jobs(cores)


@dataclass(frozen=True)
class ScriptSettings:
    """How a test's pgbench scripts run (pgbench's -D, --random-seed, --protocol, --max-tries), and whether their
    shell commands may run."""

    defines: tuple[str, ...] = ()  # NAME=VALUE, as -D gives them
    seed: int = 0
    query_mode: str = DEFAULT_QUERY_MODE
    max_tries: int = DEFAULT_MAX_TRIES
    allow_shell: bool = False

    @classmethod
    def given(cls, defines: tuple[str, ...], seed: int | None, query_mode: str | None, max_tries: int | None,
              allow_shell: bool) -> ScriptSettings:
        """The settings as the command line or a suite file's test gives them; None: not given, the default."""
        default = cls()
        return cls(defines, default.seed if seed is None else seed,
                   default.query_mode if query_mode is None else query_mode,
                   default.max_tries if max_tries is None else max_tries, allow_shell)


@dataclass(frozen=True)
class TestSettings:
    """One test's settings, checked: what the command line and the API give every test (settings_of), and what a
    suite file's [defaults] and each [[test]] change (from_file)."""

    __test__ = False  # not a pytest class

    stepping: Stepping = Stepping()
    warmup_s: float = DEFAULT_WARMUP_S
    duration_s: float = DEFAULT_DURATION_S
    mode: str = "server"
    think_s: float = 0.0
    rate: float = 0.0
    repeat: int = 1  # runs of the step plan, every other one reversed
    params: Mapping[str, str] = field(default_factory=dict)  # as --param gives them: name -> text
    script: ScriptSettings = ScriptSettings()


@dataclass(frozen=True)
class TestPlan:
    """A workload with its parameter values and its settings; its job counts follow the database host's cores
    when none were given (on_host; this machine's until the database host's are known)."""

    __test__ = False  # not a pytest class

    workload: Workload
    params: dict[str, ParamValue]
    settings: TestSettings
    cores: int | None = None  # the database host's cores (None: not known yet)

    def on_host(self, cores: int) -> TestPlan:
        """The plan on a database host of this many cores."""
        return replace(self, cores=cores)

    @property
    def follows_cores(self) -> bool:
        return self.settings.stepping.follows_cores

    @property
    def jobs(self) -> list[int]:
        """The job counts of the steps (auto stepping: the doubling chain)."""
        return self.settings.stepping.job_counts(self._cores)

    @property
    def auto_max(self) -> int | None:
        """Stepping until the knee, bounded by this many jobs (None: the listed steps)."""
        return self.settings.stepping.bound(self._cores)

    @property
    def _cores(self) -> int:
        return self.cores or os.cpu_count() or 1

    @property
    def mode(self) -> str:
        return self.settings.mode

    @property
    def warmup_s(self) -> float:
        return self.settings.warmup_s

    @property
    def duration_s(self) -> float:
        return self.settings.duration_s

    @property
    def think_s(self) -> float:
        return self.settings.think_s

    @property
    def rate(self) -> float:
        return self.settings.rate

    @property
    def repeat(self) -> int:
        return self.settings.repeat

    @property
    def steps(self) -> int:
        """Steps the test measures; with auto stepping, at most this many."""
        auto_max = self.auto_max
        return self.repeat * (worst_case_steps(auto_max) if auto_max else len(self.jobs))

    @property
    def expected_s(self) -> float:
        return self.steps * (self.warmup_s + self.duration_s + STEP_OVERHEAD_S)

    def order(self) -> list[tuple[int, int]]:
        """(repeat, jobs) of every step in running order (auto stepping: the first pass's doubling chain)."""
        return interleave(self.jobs, self.repeat)


def settings_of(spec: RunSpec) -> TestSettings:
    """The settings the command line (or the API) gives its tests, and a suite file's [defaults] start from. A
    --script run's seed is chosen by then (plan)."""
    return TestSettings(
        stepping=Stepping(tuple(spec.jobs or ()), spec.jobs_auto, spec.max_jobs, one_step=spec.soak_s is not None),
        warmup_s=spec.warmup_s, duration_s=spec.duration_s if spec.soak_s is None else spec.soak_s, mode=spec.mode,
        think_s=spec.think_s, rate=spec.rate, repeat=spec.repeat, params=dict(spec.params),
        script=ScriptSettings.given(tuple(spec.defines), spec.seed, spec.query_mode, spec.max_tries, spec.allow_shell))


def plan(spec: RunSpec) -> list[TestPlan]:
    """Every test of the run, checked before anything touches a database: the suite file's, or the named workloads'
    and the --script test's. Job counts not given follow the database host's cores (TestPlan.on_host)."""
    spec.validate()
    if spec.scripts and spec.seed is None and spec.soak_s is None:  # kept with the run, so that it can be repeated
        spec.seed = int.from_bytes(os.urandom(8)) >> 1
    settings = settings_of(spec)
    if spec.soak_s is not None:
        plans = from_command_line(spec.workloads, settings)
        if len(plans) != 1:
            raise CapmarkError(f"A soak runs one workload; '{spec.workloads[0]}' is a suite of {len(plans)}. Name one "
                               "workload, e.g. tp-light.")
        return plans
    if spec.suite_file:
        return from_file(spec.suite_file, settings)
    plans = from_command_line(spec.workloads, settings) if spec.workloads or not spec.scripts else []
    if spec.scripts:
        plans.append(script_plan(spec.scripts, settings))
    if spec.client_engine == "pgbench":
        check_pgbench_engine(plans)
    return plans


def check_pgbench_engine(plans: list[TestPlan]) -> None:
    """pgbench as the client-side engine runs what has pgbench scripts, client-side: the user's scripts, the
    catalogue's pgbench workloads (pgbench's own built-in scripts) and its lookups (the SRV family)."""
    for p in plans:
        if scripts.pgbench_recipe(p.workload) is None:
            runs_scripts = ", ".join(w.name for w in registry.WORKLOADS.values() if scripts.pgbench_recipe(w))
            raise CapmarkError(f"--client-engine pgbench runs pgbench scripts (--script files, {runs_scripts}) and "
                               f"{p.workload.name} has none; run it without --client-engine pgbench.")
        if p.settings.mode != "client":
            raise CapmarkError(f"--client-engine pgbench drives client-side tests and {p.workload.name} runs "
                               "server-side here; add --mode client.")


def from_command_line(names: list[str], settings: TestSettings) -> list[TestPlan]:
    """The named workloads (the default suite without names), each with the settings' parameters."""
    workloads = registry.select(names)
    values = registry.check_params(workloads, dict(settings.params))
    registry.check_mode(workloads, settings.mode)
    for w in workloads:
        registry.check_users(w, values[w.name], settings.mode, settings.think_s, settings.rate)
    return [TestPlan(w, values[w.name], settings) for w in workloads]


def script_plan(given: list[str], settings: TestSettings, base: Path | None = None) -> TestPlan:
    """The test that runs the user's pgbench scripts (client side: a script is a client's transaction)."""
    pairs = [parse_define(d) for d in settings.script.defines]
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            raise CapmarkError(f"The variable {name} is defined twice; give each -D NAME=VALUE once.")
        seen.add(name)
    options = settings.script
    workload = scripts.script_workload(scripts.load_sources(given, base),
                                       scripts.ScriptOptions(tuple(pairs), options.seed, options.query_mode,
                                                             options.max_tries, options.allow_shell))
    check_pacing("client", settings.think_s, settings.rate)
    return TestPlan(workload, workload.resolve_params({}), replace(settings, mode="client"))


def from_file(path: Path, settings: TestSettings) -> list[TestPlan]:
    """The suite file's tests, each from the given settings changed by [defaults], then by its [[test]] table.
    settings.script.allow_shell is the command line's --allow-shell, the only permission for a script test's shell
    commands (a test's allow_shell key can restate it or withhold it, never give it)."""
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
    base = _settings(defaults, settings, path, "[defaults]")
    plans = []
    for i, entry in enumerate(tests, start=1):
        plans += _test_plans(entry, base, path, i)
    allow_shell = settings.script.allow_shell
    if allow_shell and not any(p.workload.family == scripts.SCRIPT_FAMILY for p in plans):
        raise CapmarkError(f"--allow-shell lets pgbench scripts run shell commands, and the suite file {path} has no "
                           "script test; drop --allow-shell.")
    return plans


def _test_plans(entry: Any, base: TestSettings, path: Path, i: int) -> list[TestPlan]:
    """The plans of one [[test]] table (a suite name there gives one plan per member)."""
    if not isinstance(entry, dict):
        raise CapmarkError(f"Test {i} of {path} is not a table; write each test as a [[test]] section.")
    workload = entry.get("workload")
    if workload is None and ("script" in entry or "scripts" in entry):
        return [_script_test(entry, base, path, i)]
    if workload is None:
        raise CapmarkError(f"Test {i} of {path} has no workload; add workload = \"name\" or script = \"file.sql\".")
    if not isinstance(workload, str):
        raise CapmarkError(f"Test {i} of {path} names its workload with {workload!r}; write it as a string, e.g. "
                           "workload = \"tp-light\".")
    given = _params(entry.get("params", {}), path, i)
    settings = replace(_settings(entry, base, path, f"test {i}"), params=given)
    where = f"test {i} of {path}"
    check_times(settings.warmup_s, settings.duration_s, settings.think_s, where)
    check_pacing(settings.mode, settings.think_s, settings.rate, where)
    plans = []
    for w in registry.select([workload]):
        values = registry.check_params([w], given)[w.name]
        registry.check_mode([w], settings.mode)
        registry.check_users(w, values, settings.mode, settings.think_s, settings.rate)
        plans.append(TestPlan(w, values, settings))
    return plans


SCRIPT_KEYS = {"script", "scripts", "defines", "seed", "query_mode", "max_tries", "allow_shell"}


def _shell_allowed(entry: TomlTable, where: str, command_line: bool) -> bool:
    """Shell commands run only with the command line's --allow-shell; a test's allow_shell = false withholds it,
    allow_shell = true only restates it."""
    in_file = entry.get("allow_shell")
    if in_file is not None and not isinstance(in_file, bool):
        raise CapmarkError(f"allow_shell of {where} is {in_file!r}; write true or false.")
    return command_line and in_file is not False


def _script_test(entry: TomlTable, base: TestSettings, path: Path, i: int) -> TestPlan:
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
    allow_shell = base.script.allow_shell
    options = ScriptSettings.given(tuple(f"{k}={v}" for k, v in defines.items()), entry.get("seed"),
                                   entry.get("query_mode"), entry.get("max_tries"),
                                   _shell_allowed(entry, where, allow_shell))
    check_script_options(options.seed, options.max_tries, options.query_mode)
    settings = _settings({k: v for k, v in entry.items() if k not in SCRIPT_KEYS}, base, path, f"test {i}")
    if settings.mode == "server" and "mode" in entry:
        raise CapmarkError(f"{where} runs pgbench scripts, which run client-side; drop mode = \"server\".")
    check_times(settings.warmup_s, settings.duration_s, settings.think_s, where)
    try:
        return script_plan(items, replace(settings, script=options), base=path.parent)
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


def _settings(table: TomlTable, base: TestSettings, path: Path, where: str) -> TestSettings:
    """The base settings as a [defaults] or [[test]] table changes them, each value checked in turn."""
    known = {"workload", "params", "jobs", "warmup", "duration", "mode", "think", "rate", "repeat"}
    unknown = set(table) - known
    if unknown:
        raise CapmarkError(f"{where} of {path} has unknown key(s) {', '.join(sorted(unknown))}; "
                           f"use {', '.join(sorted(known))}.")
    of = f"of {where} of {path}"
    stepping = _jobs(table["jobs"], base.stepping, path, where) if "jobs" in table else base.stepping
    repeat = check_repeat(table["repeat"], f"{where} of {path}") if "repeat" in table else base.repeat
    warmup_s = parse_duration(table["warmup"], f"warm-up {of}") if "warmup" in table else base.warmup_s
    duration_s = parse_duration(table["duration"], f"duration {of}") if "duration" in table else base.duration_s
    think_s = parse_duration(table["think"], f"think time {of}") if "think" in table else base.think_s
    rate = parse_rate(table["rate"], f"rate {of}") if "rate" in table else base.rate
    mode = table.get("mode", base.mode)
    if mode not in MODES:
        raise CapmarkError(f"{where} of {path} has mode {mode!r}; use \"server\" or \"client\".")
    return replace(base, stepping=stepping, repeat=repeat, warmup_s=warmup_s, duration_s=duration_s, think_s=think_s,
                   rate=rate, mode=mode)


def _jobs(value: Any, base: Stepping, path: Path, where: str) -> Stepping:
    """jobs = [1, 2, 4] (or the command line's "1,2,4", or "auto"); whole numbers only, not true or 2.0. Auto
    stepping keeps the command line's --max-jobs."""
    if value == AUTO_JOBS:
        return replace(base, jobs=(), auto=True)
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(j, int | str) and not isinstance(j, bool) for j in items):
        raise CapmarkError(f"The jobs of {where} of {path} are {value!r}; write a list of whole numbers, e.g. "
                           "jobs = [1, 2, 4].")
    return replace(base, jobs=tuple(parse_jobs(",".join(str(j) for j in items))), auto=False)
