"""MySQL/MariaDB statistics against the live server: what the counters count, measured, not assumed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import mysqlserver
import pytest

from capmark.engines.base import Capability, TargetInfo
from capmark.engines.mysql import stats

SCRATCH = "mystats"  # this test's own scratch database, dropped at the end
ROWS = 100
UPDATES = 300


def _connect() -> Any:
    return mysqlserver.connect(SCRATCH)


@pytest.fixture(scope="module")
def server(mysql_dsn: str) -> Iterator[Any]:
    conn = mysqlserver.connect()
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCRATCH}")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {SCRATCH}.t (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
    cur.execute(f"USE {SCRATCH}")
    cur.execute(f"INSERT IGNORE INTO t SELECT seq, 0 FROM seq_1_to_{ROWS}")  # MariaDB's sequence engine
    try:
        yield conn
    finally:
        cur.execute(f"DROP DATABASE IF EXISTS {SCRATCH}")
        conn.close()


def _info(conn: Any) -> TargetInfo:
    return TargetInfo(engine="mysql", version=conn.get_server_info(), version_num=0, dsn_redacted="",
                      embedded=False, local=True,
                      capabilities={"innodb_metrics": Capability(True), "performance_schema": Capability(False)})


def _updates(n: int, threads: int) -> None:
    def work(k: int) -> None:
        conn = _connect()
        cur = conn.cursor()
        for i in range(n // threads):
            cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", ((k * 13 + i) % ROWS + 1,))
        conn.close()
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _window(server: Any, action: Any) -> stats.DbCounters:
    info = _info(server)
    before = stats.snapshot(server, info)
    action()
    return stats.counters(stats.delta(before, stats.snapshot(server, info)))


def test_snapshot_names_its_engine_and_keeps_numbers_only(server):
    snap = stats.snapshot(server, _info(server))
    assert snap["engine"][0]["name"] == "mysql"
    status = snap["status"][0]
    assert all(isinstance(v, int | float) for v in status.values())
    assert status["Innodb_page_size"] in (4096, 8192, 16384, 32768, 65536)
    assert "Innodb_buffer_pool_load_status" not in status  # text, dropped
    metrics = {r["name"] for r in snap["innodb_metrics"]}
    assert "buffer_pool_read_requests" in metrics  # enabled by default
    delta = stats.delta(snap, stats.snapshot(server, _info(server)))
    assert stats.page_bytes(delta) == status["Innodb_page_size"]  # survives the delta


def test_autocommit_updates_are_counted_once_each(server):
    c = _window(server, lambda: _updates(UPDATES, 1))
    # the snapshots add no commit of their own: exactly the updates (no other client uses the scratch server's
    # tables during the test; a busy shared server could add its own)
    assert c.commits is not None and UPDATES <= c.commits <= UPDATES + 5
    assert c.log_bytes and c.log_bytes > UPDATES * 50  # every update writes redo
    assert c.log_written_bytes and c.log_written_bytes >= 0.9 * c.log_bytes


def test_one_connection_flushes_the_redo_log_once_per_commit(server):
    c = _window(server, lambda: _updates(UPDATES, 1))
    assert c.commits and c.log_fsyncs is not None and c.log_writes is not None
    assert 0.9 <= c.log_fsyncs / c.commits <= 1.2, (c.log_fsyncs, c.commits)
    assert 0.9 <= c.log_writes / c.commits <= 1.2


def test_point_selects_on_a_cached_table_read_no_pages(server):
    cur = server.cursor()
    cur.execute(f"SELECT SUM(v) FROM {SCRATCH}.t")  # warm: every page in the buffer pool
    cur.fetchall()

    def selects() -> None:
        conn = _connect()
        c2 = conn.cursor()
        for i in range(UPDATES):
            c2.execute("SELECT v FROM t WHERE id = %s", (i % ROWS + 1,))
            c2.fetchall()
        conn.close()
    c = _window(server, selects)
    assert c.logical_reads is not None and c.logical_reads >= UPDATES  # at least one page request per select
    assert c.physical_reads == 0
    assert c.commits is not None and c.commits >= UPDATES  # an autocommit SELECT on InnoDB commits too


def test_an_explicit_transaction_counts_each_statement_in_handler_commit(server):
    """Why commits prefers InnoDB's trx_* metrics where enabled: Handler_commit counts statements too."""
    def transaction() -> None:
        conn = _connect()
        conn.autocommit(False)
        cur = conn.cursor()
        for i in range(3):
            cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (i + 1,))
        conn.commit()
        conn.close()
    c = _window(server, transaction)
    assert c.commits == 4  # three statements and the COMMIT (the InnoDB trx_* metrics are disabled here)


def test_a_status_set_without_some_variables_gives_none_not_zero():
    """An older MySQL: no Innodb_lsn_current or Innodb_redo_log_current_lsn, no Innodb_os_log_fsyncs and no
    Innodb_data_fsyncs, no INNODB_METRICS and no performance_schema."""
    before = {"engine": [{"name": "mysql", "page_bytes": "16384"}],
              "status": [{"Handler_commit": 10, "Innodb_buffer_pool_read_requests": 100, "Innodb_log_writes": 5}]}
    after = {"engine": [{"name": "mysql", "page_bytes": "16384"}],
             "status": [{"Handler_commit": 25, "Innodb_buffer_pool_read_requests": 160, "Innodb_log_writes": 9}]}
    c = stats.counters(stats.delta(before, after))
    assert c.commits == 15 and c.logical_reads == 60 and c.log_writes == 4
    assert c.log_bytes is None and c.log_fsyncs is None and c.physical_reads is None and c.data_writes is None
    assert c.read_time_ms is None and c.log_fsync_ms is None and c.io_time_ms is None
    assert not c.log_io_measured


def test_mysql8_names_and_enabled_trx_metrics_are_used():
    def snap(commit: int, lsn: int, trx: int) -> dict:
        return {"engine": [{"name": "mysql", "page_bytes": "8192"}],
                "status": [{"Handler_commit": commit, "Innodb_redo_log_current_lsn": lsn, "Innodb_os_log_fsyncs": 3,
                            "Innodb_data_fsyncs": 50}],
                "innodb_metrics": [{"name": n, "subsystem": "transaction", "count": trx} for n in stats.TRX_METRICS],
                "files": [{"event_name": stats.LOG_FILE, "write_ms": 2.0 * trx, "misc_ms": 5.0 * trx}]}
    c = stats.counters(stats.delta(snap(100, 1000, 10), snap(500, 5000, 40)))
    assert c.commits == 90  # the three trx_* metrics (3 x 30) win over Handler_commit (400)
    assert c.log_bytes == 4000 and c.log_fsyncs == 0  # Innodb_os_log_fsyncs before Innodb_data_fsyncs
    assert c.page_bytes == 8192 and c.log_write_ms == 60 and c.log_fsync_ms == 150
