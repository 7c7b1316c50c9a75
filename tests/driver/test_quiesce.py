"""Settling before a test, on the real embedded PostgreSQL: the CHECKPOINT really writes the dirty buffers,
the wait watches the data device for a full idle window, and a vacuum on capmark's tables holds it up
until the limit, which is then reported."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from capmark.collect import hosts
from capmark.driver.quiesce import IDLE_WINDOW_S, quiesce
from capmark.engines.postgres.engine import POSTGRESQL

pytestmark = pytest.mark.db
STATS_WAIT_S = 10.0  # the checkpointer reports its counters shortly after the checkpoint ends


@pytest.fixture
def fresh_db(embedded_dsn: str) -> Iterator[str]:
    name = f"capmark_quiesce_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    yield make_conninfo(embedded_dsn, dbname=name)
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"drop database {name} with (force)")


def _local(conn: psycopg.Connection) -> hosts.HostSource:
    """This machine's /proc, where the embedded server runs."""
    return hosts.choose("local", "", conn, None, None)


def _data_devices(conn: psycopg.Connection) -> list[str]:
    device, _ = _local(conn).data_device(conn.execute("show data_directory").fetchone()[0])
    return [device] if device else []


def _dirty_buffers(admin: psycopg.Connection, dbname: str, table: str) -> int:
    """Dirty shared buffers of one table of another database (pg_buffercache sees the whole cluster)."""
    return admin.execute(
        "select count(*) from capmark.pg_buffercache b where b.isdirty and b.relfilenode = %s "
        "and b.reldatabase = (select oid from pg_database where datname = %s)",
        (table, dbname)).fetchone()[0]


def _requested_checkpoints(conn: psycopg.Connection) -> int:
    conn.execute("select pg_stat_clear_snapshot()")
    return conn.execute("select num_requested from pg_stat_checkpointer").fetchone()[0]


def _checkpoint_busy_s(conn: psycopg.Connection) -> float:
    """The seconds the checkpointer has spent writing and syncing, as the server counts them."""
    conn.execute("select pg_stat_clear_snapshot()")
    return conn.execute("select (write_time + sync_time) / 1000 from pg_stat_checkpointer").fetchone()[0]


def test_quiesce_checkpoints_the_dirty_buffers_and_waits_a_full_idle_window(embedded_dsn: str, fresh_db: str):
    with psycopg.connect(fresh_db, autocommit=True) as conn, psycopg.connect(embedded_dsn, autocommit=True) as admin:
        dbname = conn.info.dbname
        conn.execute("create table dirty (id int, pad text) with (autovacuum_enabled = off)")
        conn.execute("insert into dirty select g, repeat('d', 200) from generate_series(1, 100000) g")  # 25 MB
        filenode = conn.execute("select pg_relation_filenode('dirty')").fetchone()[0]
        assert _dirty_buffers(admin, dbname, filenode) > 0
        requested = _requested_checkpoints(admin)
        busy_before = _checkpoint_busy_s(admin)
        devices = _data_devices(conn)

        result = quiesce(conn, POSTGRESQL, devices, _local(conn), limit_s=30)

        assert result.checkpoint_done
        assert _dirty_buffers(admin, dbname, filenode) == 0
        deadline = time.monotonic() + STATS_WAIT_S
        while _requested_checkpoints(admin) == requested and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _requested_checkpoints(admin) > requested
        if devices and not result.limit_hit:
            # what the checkpoint wrote (25 MB) keeps the device busy: only a whole window after its writes ends
            # the wait
            checkpoint_s = _checkpoint_busy_s(admin) - busy_before
            assert result.seconds >= IDLE_WINDOW_S + checkpoint_s, (result.seconds, checkpoint_s)
        if result.limit_hit:
            assert result.seconds >= 30 and result.note()
        else:
            assert result.note() == ""


def test_a_vacuum_on_capmark_tables_holds_the_wait_until_the_limit(fresh_db: str):
    """A vacuum slowed down by cost-based delay stays at work; quiesce waits for it, then says so."""
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("create schema capmark")
        conn.execute("create table capmark.churn (id int, pad text) with (autovacuum_enabled = off)")
        conn.execute("insert into capmark.churn select g, repeat('c', 200) from generate_series(1, 30000) g")
        conn.execute("delete from capmark.churn where id % 2 = 0")
    vacuum_conn = psycopg.connect(fresh_db, autocommit=True)
    vacuum_pid = vacuum_conn.info.backend_pid

    def slow_vacuum() -> None:
        vacuum_conn.execute("set vacuum_cost_delay = '100ms'")
        vacuum_conn.execute("set vacuum_cost_limit = 1")
        with contextlib.suppress(psycopg.errors.QueryCanceled):  # the test cancels it when done
            vacuum_conn.execute("vacuum capmark.churn")

    worker = threading.Thread(target=slow_vacuum)
    worker.start()
    try:
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            deadline = time.monotonic() + STATS_WAIT_S
            while not conn.execute("select count(*) from pg_stat_progress_vacuum where pid = %s",
                                   (vacuum_pid,)).fetchone()[0] and time.monotonic() < deadline:
                time.sleep(0.05)
            result = quiesce(conn, POSTGRESQL, [], _local(conn), limit_s=1.5)
            assert result.limit_hit
            assert result.seconds >= 1.5
            assert "vacuum of capmark.churn" in result.still_busy
            assert "vacuum of capmark.churn" in result.note()
            conn.execute("select pg_cancel_backend(%s)", (vacuum_pid,))
    finally:
        worker.join(timeout=30)
        vacuum_conn.close()
