"""A workload declares its unit of work, its KPM columns, its parameters and both ways to run it."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capmark.driver.histogram import BUCKETS_PER_E, N_BUCKETS
from capmark.errors import CapmarkError

# KPM columns every workload reports; a workload may add its own keys (later families do).
COMMON_KPMS = (
    "jobs", "cpu_busy_pct", "cpu_user_pct", "cpu_sys_pct", "cpu_idle_pct", "cpu_iowait_pct",
    "throughput", "throughput_per_job", "rt_mean_ms", "rt_p50_ms", "rt_p95_ms", "rt_p99_ms", "rt_max_ms",
    "logical_reads_per_s", "physical_reads_per_s", "buffer_hit_pct", "wal_mb_per_s", "commits_per_s",
    "elapsed_s",
)


@dataclass(frozen=True)
class ParamSpec:
    name: str
    default: int
    minimum: int
    maximum: int
    help: str

    def parse(self, workload: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise CapmarkError(f"Parameter {self.name} of {workload} must be an integer; got '{text}'.") from None
        if not self.minimum <= value <= self.maximum:
            raise CapmarkError(f"Parameter {self.name} of {workload} must be between {self.minimum} and "
                               f"{self.maximum}; got {value}.")
        return value


@dataclass(frozen=True)
class DataSize:
    """Sizes of the shared data model at a scale, passed to both execution modes."""

    items: int
    accounts: int


ClientUnit = Callable[[Any, random.Random, dict[str, int], DataSize], int]


@dataclass(frozen=True)
class Workload:
    name: str
    family: str
    description: str
    unit: str  # singular noun of the unit of work: query, transaction, row, ...
    throughput_label: str  # qps, tps, ...
    txn_types: tuple[str, ...]
    procedure: str  # server-side procedure in schema capmark
    procedure_sql: str  # CREATE OR REPLACE PROCEDURE ... (uses the timing snippets below)
    client_statements: dict[str, str]
    client_unit: ClientUnit  # runs one unit from Python, returns the txn type index
    params: tuple[ParamSpec, ...] = ()
    kpms: tuple[str, ...] = COMMON_KPMS
    writes: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def resolve_params(self, given: dict[str, str]) -> dict[str, int]:
        """Defaults overlaid with the user's values that this workload knows."""
        values = {p.name: p.default for p in self.params}
        for p in self.params:
            if p.name in given:
                values[p.name] = p.parse(self.name, given[p.name])
        return values


# --- server-side timing, shared by every procedure --------------------------------------------------
# Units run back to back, so one clock reading ends a unit and starts the next: the latencies add up
# to the slice's busy time exactly, and the mean is exact. The bucket index matches histogram.bucket_of:
# floor(ln(us) * K) = floor(ln(seconds) * K + K * ln(1e6)), with the constant folded in for speed.
# The loop body is unrolled twice (t0 and t1 swap roles, no copy) and the deadline is checked once
# per batch, because at a few microseconds per unit every PL/pgSQL statement shows in the throughput.

CLOCK = "date_part('epoch', clock_timestamp())"
_LN_US = BUCKETS_PER_E * math.log(1e6)


def record(t_new: str, t_old: str, type_index: int = 0) -> str:
    """PL/pgSQL that reads the clock into t_new and counts the unit that began at t_old."""
    offset = f"{type_index * N_BUCKETS} + " if type_index else ""
    return (f"{t_new} := {CLOCK};\n"
            f"      b := {offset}least({N_BUCKETS}, floor(ln(greatest({t_new} - {t_old}, 1e-6::float8)) * "
            f"{BUCKETS_PER_E}::float8 + {_LN_US!r}::float8)::int + 1);\n"
            f"      h[b] := h[b] + 1;")


SLICE_SIGNATURE = ("p_secs float8, p_params jsonb, OUT o_hist int[], OUT o_errors bigint[], "
                   "OUT o_busy_s float8")


def procedure_sql(name: str, declare: str, unit: str, ntypes: int = 1, batch: int = 1) -> str:
    """The slice procedure around one unit of work: run for p_secs, return histogram, errors, busy time.

    `unit` is PL/pgSQL for one unit in which {rec0}, {rec1}, ... stand for the timing of a unit of
    transaction type 0, 1, ...; `batch` pairs of units run between two deadline checks. The deadline
    is relative so that a server whose clock differs from the driver's still slices right.
    """
    def timed(t_new: str, t_old: str) -> str:
        return unit.format(**{f"rec{i}": record(t_new, t_old, i) for i in range(ntypes)})

    return f"""
create or replace procedure capmark.{name}({SLICE_SIGNATURE})
language plpgsql as $proc$
declare
  h int[] := array_fill(0, array[{ntypes * N_BUCKETS}]); b int; t0 float8; t1 float8; t_first float8;
  p_until float8;
  {declare}
begin
  o_errors := array_fill(0::bigint, array[{ntypes}]);
  t0 := {CLOCK};
  t_first := t0;
  p_until := t0 + p_secs;
  loop
    for i in 1..{batch} loop
      {timed("t1", "t0")}
      {timed("t0", "t1")}
    end loop;
    exit when t0 >= p_until;
  end loop;
  o_hist := h;
  o_busy_s := t0 - t_first;
end
$proc$;
"""
