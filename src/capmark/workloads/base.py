"""A workload declares its unit of work, its KPM columns, its parameters and both ways to run it."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capmark.engines.base import DataSize
from capmark.errors import CapmarkError
from capmark.histogram import BUCKETS_PER_E, N_BUCKETS

# KPM columns every workload reports; a workload may add its own keys (later families do).
COMMON_KPMS = (
    "jobs", "cpu_busy_pct", "cpu_user_pct", "cpu_sys_pct", "cpu_idle_pct", "cpu_iowait_pct",
    "throughput", "throughput_per_job", "rt_mean_ms", "rt_p50_ms", "rt_p95_ms", "rt_p99_ms", "rt_max_ms",
    "logical_reads_per_s", "physical_reads_per_s", "buffer_hit_pct", "wal_mb_per_s", "commits_per_s",
    "elapsed_s",
)


ParamValue = int | str
# the parameter that tells a job how many jobs its step has (each job also gets its own number as "job"): a pgbench
# script's clients draw their seeds, and :default_seed after them, as pgbench does for that many clients
STEP_JOBS = "step_jobs"


@dataclass(frozen=True)
class ParamSpec:
    """A workload parameter: an integer range (optionally stepped) or a set of choices."""

    name: str
    default: ParamValue
    help: str
    minimum: int | None = None
    maximum: int | None = None
    step: int | None = None
    choices: tuple[ParamValue, ...] = ()

    @property
    def _step_origin(self) -> int:
        """Where a stepped parameter's allowed values start counting: its minimum, or 0 without one."""
        return self.minimum if self.minimum is not None else 0

    def allowed(self) -> str:
        if self.choices:
            return "{" + ", ".join(str(c) for c in self.choices) + "}"
        if self.step:
            return f"{{{self._step_origin},{self._step_origin + self.step},...,{self.maximum}}}"
        return f"{self.minimum}-{self.maximum}"

    def parse(self, workload: str, text: str) -> ParamValue:
        if self.choices and all(isinstance(c, str) for c in self.choices):
            if text not in self.choices:
                raise CapmarkError(f"Parameter {self.name} of {workload} must be one of {self.allowed()}; "
                                   f"got '{text}'.")
            return text
        try:
            value = int(text)
        except ValueError:
            raise CapmarkError(f"Parameter {self.name} of {workload} must be an integer; got '{text}'.") from None
        if self.choices and value not in self.choices:
            raise CapmarkError(f"Parameter {self.name} of {workload} must be one of {self.allowed()}; got {value}.")
        if self.minimum is not None and self.maximum is not None and not self.minimum <= value <= self.maximum:
            raise CapmarkError(f"Parameter {self.name} of {workload} must be between {self.minimum} and "
                               f"{self.maximum}; got {value}.")
        if self.step and (value - self._step_origin) % self.step:
            raise CapmarkError(f"Parameter {self.name} of {workload} must be one of {self.allowed()}; got {value}.")
        return value


def percent(name: str, default: int, help: str) -> ParamSpec:
    """A percentage in steps of 10, as the catalogue's update_pct and write_pct are."""
    return ParamSpec(name, default, help, minimum=0, maximum=100, step=10)


ClientUnit = Callable[[Any, random.Random, dict[str, ParamValue], DataSize], int]


PerUnit = Callable[[dict[str, ParamValue], DataSize], dict[str, float]]
SessionSettings = Callable[[dict[str, ParamValue]], dict[str, str]]
# builds a workload's own tables before its test (control connection, DSN for parallel loaders, parameters, say);
# returns notes for the test
OwnData = Callable[[Any, str, dict[str, ParamValue], Callable[[str], None]], list[str]]
# checks the database after a test (control connection, parameters); returns what failed, a sentence each (None:
# the parameters asked for no check)
Verify = Callable[[Any, dict[str, ParamValue]], list[str] | None]


@dataclass(frozen=True)
class UserModel:
    """A closed-loop user at a terminal: the transaction type is chosen first, its keying time passes, the
    transaction runs (only this is its response time), then a think time; throughput is bounded by the users."""

    choose: Callable[[random.Random], int]
    keying_s: tuple[float, ...]  # per transaction type
    think: Callable[[random.Random, int], float]  # a think time drawn for the type
    run: Callable[[Any, random.Random, dict[str, ParamValue], int], int]  # one transaction of a type; the type it counts as
    mean_pause_s: float  # keying plus mean think time, weighted by the mix: the model's think time


@dataclass(frozen=True)
class Workload:
    name: str
    family: str
    description: str
    unit: str  # singular noun of the unit of work: query, transaction, row, ...
    throughput_label: str  # qps, tps, ...
    txn_types: tuple[str, ...]
    procedure: str  # server-side procedure in schema capmark
    procedure_sql: str  # CREATE OR REPLACE PROCEDURE ... (built with procedure_sql() below)
    client_statements: dict[str, str] = field(default_factory=dict)
    client_unit: ClientUnit | None = None  # runs one unit from Python, returns the txn type index
    params: tuple[ParamSpec, ...] = ()
    kpms: tuple[str, ...] = COMMON_KPMS
    writes: bool = False
    per_unit: PerUnit | None = None  # what one unit stands for (rows, ops), for rows/s and Mops
    session: SessionSettings | None = None  # settings for every job connection
    prepare_sql: tuple[str, ...] = ()  # run once before the test (e.g. empty a load table)
    warm: tuple[str, ...] = ()  # tables to load into the buffer cache before the test
    helpers_sql: tuple[str, ...] = ()  # functions the procedure calls
    check: Callable[[dict[str, ParamValue]], None] | None = None  # cross-parameter validation
    # client side: cumulative statistics a job's units keep beyond their latency (per-command times, retries,
    # failures by SQLSTATE class), as an object with minus(), plus() and to_dict(); the job keeps the window's
    client_stats: Callable[[Any], Any] | None = None
    # how another process rebuilds a workload that is not in the catalogue (a user's scripts): picklable, build()
    recipe: Any = None
    # the same units as pgbench scripts (a ScriptRecipe, one script per transaction type in order, the data model's
    # sizes as :items, :accounts, ...), for pgbench as the client-side engine; a workload whose recipe is already
    # pgbench scripts needs none
    pgbench_recipe: Any = None
    own_data: OwnData | None = None  # tables of its own, built before its test (the shared model serves the rest)
    verify: Verify | None = None  # checks of the database after its test
    users: Callable[[dict[str, ParamValue]], UserModel | None] | None = None  # keying and think times, when asked for

    def resolve_params(self, given: dict[str, str]) -> dict[str, ParamValue]:
        """Defaults overlaid with the user's values that this workload knows."""
        values = {p.name: p.default for p in self.params}
        for p in self.params:
            if p.name in given:
                values[p.name] = p.parse(self.name, given[p.name])
        if self.check:
            self.check(values)
        return values

    def user_model(self, params: dict[str, ParamValue], mode: str) -> UserModel | None:
        """The users' keying and think times when the parameters ask for them (a client-side driver only)."""
        return self.users(params) if self.users is not None and mode == "client" else None

    @property
    def client_side(self) -> bool:
        return self.client_unit is not None


def kpms(*extra: str, drop: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The common KPM columns plus a family's own, in table order (before elapsed)."""
    base = [k for k in COMMON_KPMS if k not in drop and k != "elapsed_s"]
    return (*base, *extra, "elapsed_s")


# --- server-side timing, shared by every procedure --------------------------------------------------
# Units run back to back, so one clock reading ends a unit and starts the next: the latencies add up
# to the slice's busy time exactly, and the mean is exact. The bucket index matches histogram.bucket_of:
# floor(ln(us) * K) = floor(ln(seconds) * K + K * ln(1e6)), with the constant folded in for speed.
# The loop body is unrolled twice (t0 and t1 swap roles, no copy) and the deadline is checked once
# per batch, because at a few microseconds per unit every PL/pgSQL statement shows in the throughput.
# Where even that costs too much (timing is ~3,000 instructions, a cached lookup ~28,000), the driver asks
# for a systematic sample instead: every k-th unit is timed, every unit counted, and the busy time still
# runs from the first unit's start to the last one's end, so counts and mean stay exact (driver/sampling.py).

# A reading is the time since the slice began, taken as the interval between two timestamps: both hold whole
# microseconds, and so does their difference, which a float8 of a few seconds keeps to 1e-16 s. The epoch itself
# (1.8e9 s) would round every reading to a multiple of 2^-22 s (0.238 us), so that a unit of 2 us could read only
# 1.907 or 2.146 us. A reading still costs one expression, as much as the epoch's did.
CLOCK = "date_part('epoch', clock_timestamp() - t_origin)"
_LN_US = BUCKETS_PER_E * math.log(1e6)
CLOCK_RESOLUTION_S = 1e-6  # PostgreSQL's timestamps count whole microseconds


def record(t_new: str, t_old: str, type_index: int = 0) -> str:
    """PL/pgSQL that reads the clock into t_new and counts the unit that began at t_old."""
    return _record(t_new, t_old, f"{type_index * N_BUCKETS} + " if type_index else "")


def _record(t_new: str, t_old: str, offset: str, hist: str = "h") -> str:
    """record() with the type's offset into the histogram as PL/pgSQL ('' for the first type)."""
    return (f"{t_new} := {CLOCK};\n"
            f"      b := {offset}least({N_BUCKETS}, floor(ln(greatest({t_new} - {t_old}, 1e-6::float8)) * "
            f"{BUCKETS_PER_E}::float8 + {_LN_US!r}::float8)::int + 1);\n"
            f"      {hist}[b] := {hist}[b] + 1;")


SLICE_SIGNATURE = ("p_secs float8, p_params jsonb, OUT o_hist int[], OUT o_errors bigint[], "
                   "OUT o_busy_s float8, OUT o_units bigint[], OUT o_timing_s float8")
SLICE_INPUTS = "float8, jsonb"  # the identity DROP PROCEDURE needs: output parameters cannot be replaced in place


def _drop_older_slice(name: str) -> str:
    """Drop a slice procedure made by an older capmark (without the exact unit counts), whose output parameters
    CREATE OR REPLACE cannot change; a current one is replaced in place, so it keeps its owner and grants."""
    return f"""do $drop$ begin
  if exists (select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
             where n.nspname = 'capmark' and p.proname = '{name}'
               and not ('o_units' = any(coalesce(p.proargnames, '{{}}'::text[])))) then
    drop procedure capmark.{name}({SLICE_INPUTS});
  end if;
end $drop$;"""

# A slice measures what timing one unit costs (a sampled round around an empty unit, on a scratch histogram) so
# that the driver can choose how many units to time: 32 rounds of ~1.2 us span ~40 clock ticks of 1 us, and cost a
# 1 s slice less than 0.01 %.
CALIBRATION_ROUNDS = 32


def slice_call(procedure: str) -> str:
    """CALL of a slice procedure with parameters (seconds, params JSON, every k-th unit timed)."""
    return (f"call capmark.{procedure}(%s, %s::jsonb || jsonb_build_object('every', %s::int), "
            "null, null, null, null, null)")


def rec_marker(i: int) -> str:
    return "{rec" + str(i) + "}"


@dataclass(frozen=True)
class Unit:
    """PL/pgSQL for one unit of work: declarations, and a body in which {rec} marks the end of the unit."""

    declare: str
    body: str


def mix(branches: list[tuple[float, Unit]]) -> tuple[str, str]:
    """Declarations and a body that picks one branch per unit by weight; branch i records as type i."""
    total = sum(w for w, _ in branches)
    decl: list[str] = ["x float8;"]
    for _, unit in branches:
        for part in unit.declare.split(";"):
            if part.strip() and f"{part.strip()};" not in decl:
                decl.append(f"{part.strip()};")
    lines = [f"x := random() * {float(total)!r};"]
    edge = 0.0
    for i, (weight, unit) in enumerate(branches):
        edge += weight
        keyword = "if" if i == 0 else "elsif"
        cond = f"x < {edge!r}" if i < len(branches) - 1 else "true"
        lines.append(f"{keyword} {cond} then")
        lines.append(unit.body.replace("{rec}", rec_marker(i)).replace("{err}", str(i + 1)))
    lines.append("end if;")
    return " ".join(decl), "\n      ".join(lines)


def weighted_mix(branches: list[tuple[str, Unit]]) -> tuple[str, str]:
    """Like mix(), with each branch's weight read from a parameter, so one procedure serves every mix."""
    decl, body = mix([(1, unit) for _, unit in branches])
    names = [name for name, _ in branches]
    decl += " " + " ".join(f"w_{i} int := coalesce((p_params->>'{n}')::int, 0);" for i, n in enumerate(names))
    body = body.replace(f"x := random() * {float(len(branches))!r};",
                        "x := random() * (" + " + ".join(f"w_{i}" for i in range(len(names))) + ");")
    for i in range(len(names) - 1):
        body = body.replace(f"x < {float(i + 1)!r} then", "x < " + " + ".join(f"w_{j}" for j in range(i + 1)) + " then")
    return decl, body


def _sampled_round(unit: str, ntypes: int, hist: str, count: str, refill: str) -> str:
    """PL/pgSQL for one round of a sampled slice: slice_n units untimed, then one timed, both times through the
    very same statements. A copy of the unit kept for the timed one would be a biased sample: its plans, caches
    and branch history are its own, and it would run once per round, cold. The timed unit's type is the one whose
    counter moved (slice_w weighs the counters before it); `count` then counts, `refill` sets the next round."""
    weights = " + ".join(f"{t} * nu_{t}" for t in range(1, ntypes))
    before = f"slice_w := {weights};\n          " if ntypes > 1 else ""
    offset = f"({weights} - slice_w) * {N_BUCKETS} + " if ntypes > 1 else ""
    return f"""for slice_pass in 1..2 loop
        for i in 1..slice_n loop
          {unit}
        end loop;
        if slice_pass = 1 then
          slice_n := 1;
          {before}t0 := {CLOCK};
        else
          {_record("t1", "t0", offset, hist)}
          {count}
          slice_n := {refill};
        end if;
      end loop;"""


def procedure_sql(name: str, declare: str, unit: str, ntypes: int = 1, batch: int = 1, prologue: str = "") -> str:
    """The slice procedure around one unit of work: run for p_secs, return histogram, errors, busy time,
    units per type and the cost of timing a unit.

    `unit` is PL/pgSQL for one unit in which {rec0}, {rec1}, ... stand for the timing of a unit of
    transaction type 0, 1, ... ({rec} for a single type) and {err} for the 1-based error slot;
    `batch` pairs of units run between two deadline checks; `prologue` runs before the clock starts.
    The deadline is relative so that a server whose clock differs from the driver's still slices right.
    With p_params.every = k > 1 only every k-th unit is timed (a systematic sample) and every unit is
    counted, so that timing costs little where units are short; the driver scales the sample to the counts.
    """
    unit = unit.replace("{rec}", rec_marker(0)).replace("{err}", "1")

    def timed(t_new: str, t_old: str) -> str:
        out = unit
        for i in range(ntypes):
            out = out.replace(rec_marker(i), record(t_new, t_old, i))
        return out

    untimed = unit
    for i in range(ntypes):
        untimed = untimed.replace(rec_marker(i), f"nu_{i} := nu_{i} + 1;" if ntypes > 1 else "")
    # a single type counts its whole round at once, at the timed unit; several count each unit as it ends
    round_count = "nu_0 := nu_0 + p_every;" if ntypes == 1 else ""

    counters = " ".join(f"nu_{t} bigint := 0;" for t in range(ntypes))
    units = ", ".join(f"nu_{t}" for t in range(ntypes))
    # column names no unit declares as a variable (PL/pgSQL would find the reference ambiguous)
    per_type = (f"array(select (select coalesce(sum(slice_h.slice_count), 0) "
                f"from unnest(h[slice_g.slice_type * {N_BUCKETS} + 1:(slice_g.slice_type + 1) * {N_BUCKETS}]) "
                f"slice_h(slice_count)) from generate_series(0, {ntypes - 1}) slice_g(slice_type) "
                "order by slice_g.slice_type)")
    # the calibration's round: an empty unit, the assignment that notes where round 1 began in place of the count
    calibrate = _sampled_round("", ntypes, "hc", "t_first := case when slice_round = 0 then t1 else t_first end;", "1")
    return f"""
{_drop_older_slice(name)}
create or replace procedure capmark.{name}({SLICE_SIGNATURE})
language plpgsql as $proc$
declare
  t_origin timestamptz := clock_timestamp();
  h int[] := array_fill(0, array[{ntypes * N_BUCKETS}]); b int; t0 float8; t1 float8; t_first float8;
  slice_n int := 1; slice_w bigint;
  p_until float8; p_every int := greatest(coalesce((p_params->>'every')::int, 1), 1);
  hc int[] := array_fill(0, array[{N_BUCKETS}]); {counters}
  {declare}
begin
  o_errors := array_fill(0::bigint, array[{ntypes}]);
  {prologue}
  -- what timing a unit adds in a sampled slice: a round around an empty unit, with its deadline check. Round 0
  -- is not counted: a session's first call plans every expression in it, which takes up to a millisecond.
  for slice_round in 0..{CALIBRATION_ROUNDS} loop
    {calibrate}
    exit when t1 < -1e9::float8;
  end loop;
  t0 := {CLOCK};
  o_timing_s := (t0 - t_first) / {CALIBRATION_ROUNDS};
  t_first := t0;
  p_until := t0 + p_secs;
  if p_every = 1 then
    loop
      for i in 1..{batch} loop
        {timed("t1", "t0")}
        {timed("t0", "t1")}
      end loop;
      exit when t0 >= p_until;
    end loop;
    o_units := {per_type};
  else
    slice_n := p_every - 1;
    loop
      {_sampled_round(untimed, ntypes, "h", round_count, "p_every - 1")}
      exit when t1 >= p_until;
    end loop;
    t0 := t1;
    o_units := array[{units}];
  end if;
  o_hist := h;
  o_busy_s := t0 - t_first;
end
$proc$;
"""
