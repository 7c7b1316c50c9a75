"""PLS family: procedural compute in PL/pgSQL, no data access."""

from __future__ import annotations

from capmark.workloads.base import ParamSpec, Unit, Workload, kpms, mix, procedure_sql

PLS_KPMS = kpms("mops", "rt_mean_s", drop=("logical_reads_per_s", "physical_reads_per_s", "buffer_hit_pct",
                                          "wal_mb_per_s", "commits_per_s"))
OPS = 1000  # operations per unit of pls-add / pls-builtin
ADD_TYPES = ("integer", "bigint", "numeric", "double", "date")
BUILTIN_TYPES = (*ADD_TYPES, "text")
DECLARE = ("ai int; ab bigint; an numeric; ad float8; adt date; vi int; vb bigint; vn numeric; vd float8; "
           "vt text; base text := 'The quick brown fox jumps over the lazy dog'; d0 date := date '2026-01-01';")

_ADD = {
    "integer": ("ai := 0;", "ai := ai + 1;"),
    "bigint": ("ab := 0;", "ab := ab + 1;"),
    "numeric": ("an := 0;", "an := an + 1.5;"),
    "double": ("ad := 0;", "ad := ad + 1.5;"),
    "date": ("adt := d0;", "adt := adt + 1;"),
}
# five built-in calls per statement, 200 statements per unit
_BUILTIN = {
    "integer": "vi := abs(j2 - 100) + mod(j2, 7) + greatest(j2, 50) + least(j2, 50) + gcd(j2, 12);",
    "bigint": "vb := abs(j2::bigint - 100) + mod(j2::bigint, 7) + greatest(j2::bigint, 50) + least(j2::bigint, 50) "
              "+ gcd(j2::bigint, 12);",
    "numeric": "vn := round(j2 * 1.2345, 2) + trunc(j2 / 3.0, 1) + abs(-j2 * 1.5) + ceil(j2 / 7.0) + floor(j2 / 9.0);",
    "double": "vd := sqrt(j2::float8) + ln(j2 + 1.0::float8) + exp(j2 / 1000.0::float8) + sin(j2::float8) "
              "+ power(j2::float8, 0.5::float8);",
    "date": "vi := date_part('doy', d0 + j2)::int + date_part('dow', d0 + j2)::int "
            "+ (date_trunc('month', d0 + j2)::date - d0) + (make_date(2026, 1 + j2 % 12, 1) - d0) + isfinite(d0)::int;",
    "text": "vt := upper(substr(base, 1 + j2 % 20, 10)) || lower(left(base, 9)) || replace(base, 'o', '0') "
            "|| md5(base); vi := length(vt);",
}


def add_body(dtype: str) -> str:
    init, step = _ADD[dtype]
    return f"{init}\n      for j2 in 1..{OPS} loop {step} end loop;"


def builtin_body(dtype: str) -> str:
    return f"for j2 in 1..{OPS // 5} loop {_BUILTIN[dtype]} end loop;"


def _by_type(bodies: dict[str, str]) -> str:
    """One branch per data type, chosen by p_params.dtype (once per unit of 1000 operations)."""
    lines = []
    for i, (dtype, body) in enumerate(bodies.items()):
        lines.append(f"{'if' if i == 0 else 'elsif'} dt = '{dtype}' then\n      {body}")
    return "\n      ".join(lines) + "\n      end if;\n      {rec}"


def _ops_workload(name: str, description: str, types: tuple[str, ...], body_of) -> Workload:
    proc = "slice_" + name.replace("-", "_")
    return Workload(
        name=name, family="PLS", description=description, unit="block of 1000 operations", throughput_label="blocks/s",
        txn_types=("compute",), procedure=proc,
        procedure_sql=procedure_sql(proc, DECLARE + " dt text := p_params->>'dtype';",
                                    _by_type({t: body_of(t) for t in types})),
        params=(ParamSpec("dtype", "integer", "data type the operations work on", choices=types),),
        kpms=PLS_KPMS, per_unit=lambda p, s: {"ops": OPS})


PLS_ADD = _ops_workload("pls-add", "Additions in PL/pgSQL on one data type: Mops.", ADD_TYPES, add_body)
PLS_BUILTIN = _ops_workload("pls-builtin", "Typical built-in functions of one data type, text included: Mops.",
                            BUILTIN_TYPES, builtin_body)

_MIX_DECL, _MIX_BODY = mix([(1, Unit(DECLARE, add_body("integer") + "\n      {rec}")),
                            (1, Unit("", add_body("numeric") + "\n      {rec}")),
                            (1, Unit("", builtin_body("text") + "\n      {rec}")),
                            (1, Unit("", builtin_body("double") + "\n      {rec}"))])
PLS_MIXED = Workload(
    name="pls-mixed", family="PLS", description="Equal mix of integer and numeric additions, text and double "
    "built-ins: Mops.", unit="block of 1000 operations", throughput_label="blocks/s",
    txn_types=("add-integer", "add-numeric", "builtin-text", "builtin-double"), procedure="slice_pls_mixed",
    procedure_sql=procedure_sql("slice_pls_mixed", _MIX_DECL, _MIX_BODY, ntypes=4), kpms=PLS_KPMS,
    per_unit=lambda p, s: {"ops": OPS})

FIBO_SQL = """
create or replace function capmark.fibo(n int) returns bigint language plpgsql as $$
begin
  if n < 2 then return n; end if;
  return capmark.fibo(n - 1) + capmark.fibo(n - 2);
end $$;"""

PRIME_SQL = """
create or replace function capmark.nth_prime(n int) returns int language plpgsql as $$
declare found int := 0; candidate int := 1; d int; is_prime boolean;
begin
  while found < n loop
    candidate := candidate + 1;
    is_prime := true;
    d := 2;
    while d * d <= candidate loop
      if candidate % d = 0 then is_prime := false; exit; end if;
      d := d + 1;
    end loop;
    if is_prime then found := found + 1; end if;
  end loop;
  return candidate;
end $$;"""

def _computation(name: str, description: str, helper: str, call: str, param: ParamSpec) -> Workload:
    """One call of a helper function per unit; the unit's time is the KPM (seconds per computation)."""
    proc = "slice_" + name.replace("-", "_")
    return Workload(
        name=name, family="PLS", description=description, unit="computation", throughput_label="per s",
        txn_types=(name.removeprefix("pls-"),), procedure=proc,
        procedure_sql=procedure_sql(proc, f"v bigint; n int := (p_params->>'{param.name}')::int;",
                                    f"v := {call};\n      {{rec}}"),
        params=(param,), kpms=PLS_KPMS, helpers_sql=(helper,))


PLS_FIBO = _computation("pls-fibo", "Recursive Fibonacci of n in PL/pgSQL: seconds per computation.", FIBO_SQL,
                        "capmark.fibo(n)", ParamSpec("n", 20, "which Fibonacci number", minimum=1, maximum=30))
PLS_PRIME = _computation("pls-prime", "The first n primes by trial division in PL/pgSQL: seconds.", PRIME_SQL,
                         "capmark.nth_prime(n)", ParamSpec("n", 1000, "how many primes", minimum=1, maximum=100000))

WORKLOADS = (PLS_ADD, PLS_BUILTIN, PLS_MIXED, PLS_FIBO, PLS_PRIME)
