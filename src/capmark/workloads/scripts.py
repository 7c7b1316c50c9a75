"""Your own transactions as pgbench scripts: one or more script files, with weights, run as one workload.

One execution of a script is one unit of work; each script is a transaction type. The scripts are parsed once
(every error has the file, line and column) and run by the pgbench script interpreter on each job's connection,
statements prepared by default as pgbench's -M prepared does. A job is one pgbench client: its variables
(`:client_id` = job number - 1, `:scale`, the -D definitions and whatever the scripts set) are shared by its
scripts, and its random numbers follow pgbench's generator, seeded from --seed so that a run can be repeated.
Serialization failures and deadlocks are retried up to --max-tries times (pgbench's rule); what is left fails
the unit, counted by SQLSTATE class.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import psycopg

from capmark.config import MAX_SEED, MAX_TRIES, QUERY_MODES, read_input_file
from capmark.errors import CapmarkError
from capmark.workloads.base import COMMON_KPMS, STEP_JOBS, DataSize, ParamSpec, Workload
from capmark.workloads.pgscript import Script, ScriptRunner, parse_script, pgbench_seeds
from capmark.workloads.pgscript.interpret import CommandStats, pgbench_variables

MAX_WEIGHT = 1 << 20  # pgbench's own limit on a script weight is INT_MAX; a mix finer than this means nothing
SCRIPT_PREFIX = "script:"


@dataclass(frozen=True)
class ScriptSource:
    """One script of a mix: the name of its transaction type, its file, text and weight."""

    name: str
    path: str
    text: str
    weight: int = 1


@dataclass(frozen=True)
class ScriptOptions:
    """How the scripts run; the same for every script of the mix."""

    defines: tuple[tuple[str, str], ...] = ()
    seed: int = 0
    query_mode: str = "prepared"
    max_tries: int = 1
    allow_shell: bool = False
    # a seed of 0 draws a new one for every job (pgbench's default, a seed from the time), as the catalogue's
    # pgbench workloads do; a user's script keeps 0 as a seed, as pgbench --random-seed 0 does
    zero_seed_is_fresh: bool = False


def _located(path: str, base: Path | None) -> Path:
    p = Path(path).expanduser()
    return base / p if base is not None and not p.is_absolute() else p


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a folder on the way that cannot be searched: reading the file will say so
        return False


def parse_source(given: str, base: Path | None = None) -> tuple[Path, int]:
    """FILE or FILE@WEIGHT as pgbench takes them. A file name may itself hold '@': the whole text is the file when
    it exists, unless it is an existing file followed by a valid weight. A wrong weight after an existing file is
    called a wrong weight, not a missing file."""
    path, at, weight = given.rpartition("@")
    numeric = bool(at) and weight.isascii() and weight.isdigit()
    whole, before = _located(given, base), _located(path, base)
    if not at or (_exists(whole) and not (numeric and _exists(before))):
        return whole, 1
    if not numeric and not _exists(before):
        return whole, 1  # neither exists: reading it says that the file given does not exist
    if not numeric or len(weight) > len(str(MAX_WEIGHT)) or int(weight) > MAX_WEIGHT:
        raise CapmarkError(f"The weight of script {path} must be a whole number from 0 to {MAX_WEIGHT:,}; got "
                           f"'{weight}', e.g. --script {path}@5.")
    return before, int(weight)


def read_source(path: Path) -> str:
    """A script's text: a regular UTF-8 file within the size limit, else one sentence saying why not."""
    try:
        return read_input_file(path, "pgbench script").decode("utf-8")
    except FileNotFoundError:
        raise CapmarkError(f"The pgbench script {path} does not exist; check the path given to --script.") from None
    except OSError as err:
        raise CapmarkError(f"The pgbench script {path} cannot be read ({err.strerror or err}).") from None
    except UnicodeDecodeError:
        raise CapmarkError(f"The pgbench script {path} is not UTF-8 text.") from None


def load_sources(given: list[str], base: Path | None = None) -> tuple[ScriptSource, ...]:
    """Read and parse every script now (before anything is created); each becomes a transaction type."""
    sources: list[ScriptSource] = []
    names: set[str] = set()
    for item in given:
        path, weight = parse_source(item, base)
        text = read_source(path)
        parse_script(text, str(path))  # a ScriptError (one sentence with line and column) stops the run here
        name = path.stem or "script"
        unique, n = name, 2
        while unique in names:
            unique, n = f"{name}-{n}", n + 1
        names.add(unique)
        sources.append(ScriptSource(unique, str(path), text, weight))
    if sources and not sum(s.weight for s in sources):
        raise CapmarkError("Every script has weight 0, so none would run; give at least one a weight above 0.")
    return tuple(sources)


@dataclass
class ScriptStats:
    """A job's statistics of its scripts beyond their latency: per command time and count (pgbench -r), retries
    and failures per command, and failed units by SQLSTATE class, per script."""

    commands: list[CommandStats]
    failures_by_class: list[dict[str, int]]
    labels: list[list[tuple[int, str]]] = field(default_factory=list)  # per script: (line, first line of command)
    names: list[str] = field(default_factory=list)

    def copy(self) -> ScriptStats:
        return ScriptStats([CommandStats(list(c.seconds), list(c.counts), list(c.retries), list(c.failures))
                            for c in self.commands], [dict(f) for f in self.failures_by_class], self.labels,
                           self.names)

    def minus(self, before: ScriptStats) -> ScriptStats:
        out = self.copy()
        for mine, theirs in zip(out.commands, before.commands, strict=True):
            mine.merge(theirs, sign=-1)
        for mine_f, theirs_f in zip(out.failures_by_class, before.failures_by_class, strict=True):
            for k, v in theirs_f.items():
                mine_f[k] = mine_f.get(k, 0) - v
        return out

    def plus(self, other: ScriptStats) -> ScriptStats:
        out = self.copy()
        for mine, theirs in zip(out.commands, other.commands, strict=True):
            mine.merge(theirs)
        for mine_f, theirs_f in zip(out.failures_by_class, other.failures_by_class, strict=True):
            for k, v in theirs_f.items():
                mine_f[k] = mine_f.get(k, 0) + v
        return out

    def to_dict(self) -> ScriptsRecord:
        """Per script: each command's runs and mean latency (ms), its retries and failures; failures by class."""
        scripts = {}
        for name, stats, labels, failures in zip(self.names, self.commands, self.labels, self.failures_by_class,
                                                  strict=True):
            scripts[name] = ScriptRecord(
                commands=[CommandRecord(line=line, command=text, runs=stats.counts[i],
                                        mean_ms=stats.seconds[i] / stats.counts[i] * 1000 if stats.counts[i] else None,
                                        retries=stats.retries[i], failures=stats.failures[i])
                          for i, (line, text) in enumerate(labels)],
                retries=sum(stats.retries),
                failures_by_class={k: v for k, v in sorted(failures.items()) if v},
            )
        return ScriptsRecord(scripts=scripts)


class CommandRecord(TypedDict):
    """One command of a script over the window."""

    line: int
    command: str  # its first line
    runs: int
    mean_ms: float | None  # None: it never ran
    retries: int
    failures: int


class ScriptRecord(TypedDict):
    commands: list[CommandRecord]
    retries: int
    failures_by_class: dict[str, int]  # failure class (serialization, deadlock, other) -> failures


class ScriptsRecord(TypedDict):
    """The scripts' own statistics as the step stores them (instruments.unit_stats)."""

    scripts: dict[str, ScriptRecord]  # by script name


class ScriptFailed(psycopg.Error):
    """A unit whose script failed for good (after its tries): counted as an error of its transaction type."""

    def __init__(self, message: str, unit_kind: int) -> None:
        super().__init__(message)
        self.unit_kind = unit_kind


class _Client:
    """One job as a pgbench client: a runner per script, sharing variables and random numbers."""

    def __init__(self, session: Any, scripts: list[Script], sources: tuple[ScriptSource, ...],
                 options: ScriptOptions, job: int, jobs: int, scale: int, labels: list[list[tuple[int, str]]]) -> None:
        seeds = pgbench_seeds(options.seed, max(job, jobs))  # :default_seed is drawn after all the step's clients'
        variables = pgbench_variables(client_id=job - 1, scale=scale, random_seed=options.seed,
                                      default_seed=seeds.default_seed, defines=dict(options.defines))
        rng = seeds.client_rng(job - 1)
        first = ScriptRunner(scripts[0], session.conn, query_mode=options.query_mode, variables=variables, rng=rng,
                             allow_shell=options.allow_shell)
        self.runners = [first] + [ScriptRunner(s, session.conn, query_mode=options.query_mode, rng=rng,
                                               allow_shell=options.allow_shell, shared=first)
                                  for s in scripts[1:]]
        self.weights = [s.weight for s in sources]
        self.total = sum(self.weights)
        self.chooser = random.Random(options.seed * 1_000_003 + job)  # which script: repeatable with the seed
        self.max_tries = options.max_tries
        self.failures: list[dict[str, int]] = [{} for _ in scripts]
        self.labels = labels
        self.names = [s.name for s in sources]

    def choose(self) -> int:
        if len(self.runners) == 1:
            return 0
        x = self.chooser.random() * self.total
        for i, w in enumerate(self.weights):
            if x < w:
                return i
            x -= w
        return len(self.weights) - 1

    def stats(self) -> ScriptStats:
        return ScriptStats([r.stats for r in self.runners], self.failures, self.labels, self.names).copy()


SCRIPT_FAMILY = "SCRIPT"  # the family of a test of the user's scripts


@dataclass(frozen=True)
class ScriptRecipe:
    """Everything that makes the scripts' workload, picklable, so that worker processes and cluster nodes
    rebuild it exactly (the workload itself holds functions)."""

    sources: tuple[ScriptSource, ...]
    options: ScriptOptions

    def build(self) -> Workload:
        return script_workload(self.sources, self.options)


def pgbench_recipe(workload: Workload) -> ScriptRecipe | None:
    """The pgbench scripts that run the workload's units (its own for a script test), None where it has none."""
    for recipe in (workload.pgbench_recipe, workload.recipe):
        if isinstance(recipe, ScriptRecipe):
            return recipe
    return None


def workload_name(sources: tuple[ScriptSource, ...]) -> str:
    return SCRIPT_PREFIX + "+".join(s.name for s in sources)


def script_functions(sources: tuple[ScriptSource, ...], options: ScriptOptions) -> tuple[Any, Any]:
    """The client unit that runs one transaction of the scripts on a job's session, and the function that reads
    the job's statistics of them. The seed is the test's `seed` parameter where it has one, else the options'."""
    zero_seed_is_fresh = options.zero_seed_is_fresh
    if options.query_mode not in QUERY_MODES:
        raise CapmarkError(f"The query mode '{options.query_mode}' is unknown; use one of {', '.join(QUERY_MODES)}.")
    scripts = [parse_script(s.text, s.path) for s in sources]
    for script in scripts:  # a script the options cannot run stops the run before anything is created
        ScriptRunner.check(script, options.query_mode, options.allow_shell)
    labels = [[(c.line, c.text.splitlines()[0].strip() if c.text else "") for c in s.commands] for s in scripts]

    def unit(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        client = getattr(session, "script_client", None)
        if client is None:
            seed = params.get("seed")
            if zero_seed_is_fresh and not seed:
                seed = int.from_bytes(os.urandom(8)) >> 1
            chosen = replace(options, seed=int(seed)) if seed is not None else options
            job = int(params["job"])
            client = session.script_client = _Client(session, scripts, sources, chosen, job,
                                                     int(params.get(STEP_JOBS, job)), size.pgbench_scale, labels)
        kind = client.choose()
        runner = client.runners[kind]
        trips = runner.round_trips
        try:
            result = runner.run(client.max_tries)
        except psycopg.Error as err:
            err.unit_kind = kind  # type: ignore[attr-defined]
            raise
        finally:
            session.round_trips += runner.round_trips - trips  # the job counts round trips on its session
        if not result.ok:
            sqlclass = (result.sqlstate or "??")[:2]
            client.failures[kind][sqlclass] = client.failures[kind].get(sqlclass, 0) + 1
            raise ScriptFailed(f"{sources[kind].name}: {result.failure} after {result.tries} tries", kind)
        return kind

    def stats(session: Any) -> ScriptStats:
        client = getattr(session, "script_client", None)
        if client is None:  # no unit has run on this job yet: nothing counted so far
            return ScriptStats([CommandStats.zeros(len(s.commands)) for s in scripts], [{} for _ in scripts],
                               labels, [s.name for s in sources])
        return client.stats()

    return unit, stats


def script_workload(sources: tuple[ScriptSource, ...], options: ScriptOptions) -> Workload:
    """The workload that runs the scripts client-side, each a transaction type, chosen by weight."""
    unit, stats = script_functions(sources, options)
    mix = ", ".join(f"{s.name} ({s.path}, weight {s.weight})" for s in sources)
    return Workload(
        name=workload_name(sources), family=SCRIPT_FAMILY,
        description=f"Your pgbench script{'s' if len(sources) > 1 else ''}: {mix}; query mode {options.query_mode}.",
        unit="transaction", throughput_label="tps", txn_types=tuple(s.name for s in sources), procedure="",
        procedure_sql="", client_unit=unit, client_stats=stats, kpms=COMMON_KPMS,
        writes=True, recipe=ScriptRecipe(sources, options),
        params=(ParamSpec("seed", options.seed, "random seed of the scripts (pgbench --random-seed)",
                          minimum=0, maximum=MAX_SEED),
                ParamSpec("max_tries", options.max_tries, "tries of a transaction that hits a serialization "
                          "failure or deadlock", minimum=1, maximum=MAX_TRIES),
                ParamSpec("query_mode", options.query_mode, "how statements are sent", choices=QUERY_MODES)),
    )
