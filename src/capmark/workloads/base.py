"""A workload declares its unit of work, its KPM columns, its parameters and both ways to run it."""

from __future__ import annotations

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
# to the slice's busy time exactly, and the mean is exact. The bucket index matches histogram.bucket_of.

HIST_DECLARE = (f"h int[] := array_fill(0, array[{{ntypes}} * {N_BUCKETS}]); b int; t0 float8; t1 float8; "
                "t_first float8; p_until float8;")
CLOCK = "date_part('epoch', clock_timestamp())"


def bucket_expr(t_new: str, t_old: str, type_offset: str = "0") -> str:
    return (f"{type_offset} + 1 + least({N_BUCKETS - 1}, floor(ln(greatest(({t_new} - {t_old}) * 1e6::float8, "
            f"1::float8)) * {BUCKETS_PER_E}::float8)::int)")


def record(t_new: str, t_old: str, type_offset: str = "0") -> str:
    """PL/pgSQL that reads the clock into t_new and counts the unit that began at t_old."""
    return (f"{t_new} := {CLOCK};\n    b := {bucket_expr(t_new, t_old, type_offset)};\n"
            f"    h[b] := h[b] + 1;")


SLICE_SIGNATURE = ("p_secs float8, p_params jsonb, OUT o_hist int[], OUT o_errors bigint[], "
                   "OUT o_busy_s float8")
SLICE_RESULT = """
  o_hist := h;
  o_busy_s := t0 - t_first;"""


def procedure_sql(name: str, declare: str, body: str, ntypes: int = 1) -> str:
    """Wrap a workload body in the common slice procedure: run for p_secs, return histogram and errors.

    The deadline is relative so that a server whose clock differs from the driver's still slices right.
    """
    return f"""
create or replace procedure capmark.{name}({SLICE_SIGNATURE})
language plpgsql as $proc$
declare
  {HIST_DECLARE.format(ntypes=ntypes)}
  {declare}
begin
  o_errors := array_fill(0::bigint, array[{ntypes}]);
  t0 := {CLOCK};
  t_first := t0;
  p_until := t0 + p_secs;
{body}
{SLICE_RESULT}
end
$proc$;
"""
