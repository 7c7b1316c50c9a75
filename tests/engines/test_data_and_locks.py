"""capmark's own data that went missing, and tables another session keeps locked, on a real PostgreSQL.

A table of capmark's model dropped or emptied after it was built is rebuilt before the next run (and said so);
a lock held by another session bounds the run instead of stretching it, names the session holding it, and a step
that completed nothing is never taken for a valid one. Each test works in a database of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from capmark import runner
from capmark.config import RunSpec
from capmark.workloads import datamodel
from capmark.workloads.base import DataSize
from capmark.workloads.tpcc import load as tpcc_load
from capmark.workloads.tpcc import spec as tpcc_spec

pytestmark = pytest.mark.db
TINY = DataSize(items=200, accounts=100, booking_accounts=10, call_customers=5, ring_rows=4, sto_rows=100)
SHORT = {"warmup_s": 0.0, "duration_s": 1.0}  # the checks: a complete run that measured units


@pytest.fixture
def own_db(embedded_dsn: str) -> Iterator[str]:
    """A DSN of a new database on the embedded server, dropped afterwards."""
    name = f"capmark_datalock_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    yield make_conninfo(embedded_dsn, dbname=name)
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"drop database {name} with (force)")


def _setup(dsn: str, size: DataSize = TINY) -> list[str]:
    said: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        datamodel.setup(conn, size, say=said.append)
    return said


def _scalar(dsn: str, sql: str) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchone()[0]


def _exec(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql)


def _oid(dsn: str, table: str) -> int:
    return int(_scalar(dsn, f"select 'capmark.{table}'::regclass::oid"))


def test_a_dropped_table_is_rebuilt_alone_and_said(own_db: str):
    _setup(own_db)
    untouched = _oid(own_db, "account")
    _exec(own_db, "drop table capmark.item")
    said = _setup(own_db)
    assert len(said) == 1 and "capmark.item is missing" in said[0], said
    assert _scalar(own_db, "select count(*) from capmark.item") == TINY.items
    assert _scalar(own_db, "select count(*) from pg_indexes where indexname = 'item_grp_idx'") == 1
    assert _oid(own_db, "account") == untouched  # only what was missing is rebuilt
    assert _setup(own_db) == []  # and once it is back, nothing more is said or done


def test_an_emptied_table_is_refilled(own_db: str):
    _setup(own_db)
    _exec(own_db, "truncate capmark.account, capmark.pgbench_accounts")
    said = _setup(own_db)
    assert len(said) == 1, said
    assert "capmark.account is empty" in said[0] and "capmark.pgbench_accounts is empty" in said[0]
    assert _scalar(own_db, "select count(*) from capmark.account") == TINY.accounts
    assert _scalar(own_db, "select count(*) from capmark.pgbench_accounts") == 100_000


def test_a_dropped_sequence_rebuilds_its_table(own_db: str):
    _setup(own_db)
    _exec(own_db, "drop sequence capmark.stress_seq")
    said = _setup(own_db)
    assert "capmark.stress_seq is missing" in said[0], said
    assert _scalar(own_db, "select nextval('capmark.stress_seq')") == TINY.items + 1


class Heard(runner.RunObserver):
    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, message: str) -> None:
        self.said.append(message)


def test_a_run_after_a_table_was_dropped_rebuilds_it_and_succeeds(own_db: str, tmp_path: Path):
    spec = RunSpec(workloads=["srv-query1"], jobs=[1], dsn=own_db, results_dir=tmp_path, **SHORT)
    assert runner.run(spec).status == "complete"
    _exec(own_db, "drop table capmark.item")
    heard = Heard()
    run = runner.run(spec, heard)
    assert run.status == "complete", run.reason
    assert any("capmark.item is missing" in s for s in heard.said), heard.said
    assert run.tests[0].steps[0].units > 0


def test_a_dropped_or_emptied_tpcc_table_reloads_the_tpcc_data(own_db: str):
    _setup(own_db)  # a run sets up the shared model (and schema capmark) first
    said: list[str] = []
    with psycopg.connect(own_db, autocommit=True) as conn:
        assert tpcc_load.load(conn, own_db, 1, say=said.append) is not None
        conn.execute("drop table capmark.tpcc_stock")
        conn.execute("truncate capmark.tpcc_customer")
        said.clear()
        report = tpcc_load.load(conn, own_db, 1, say=said.append)
        assert report is not None
        assert "capmark.tpcc_stock is missing" in said[0] and "capmark.tpcc_customer is empty" in said[0], said
        assert conn.execute("select count(*) from capmark.tpcc_stock").fetchone()[0] == tpcc_spec.STOCK_PER_WAREHOUSE
        assert tpcc_load.load(conn, own_db, 1, say=said.append) is None  # complete again: nothing to do
