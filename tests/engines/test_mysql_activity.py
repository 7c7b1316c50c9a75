"""MySQL/MariaDB activity sampling against the live server: job sessions' states and other sessions."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import mysqlserver
import pytest

from capmark.collect.sampler import OtherSessions
from capmark.engines.mysql import activity

SCRATCH = "mystats_activity"  # this test's own scratch database, dropped at the end


@pytest.fixture(scope="module")
def server(mysql_dsn: str) -> Iterator[Any]:
    conn = mysqlserver.connect()
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCRATCH}")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {SCRATCH}.t (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
    cur.execute(f"INSERT IGNORE INTO {SCRATCH}.t VALUES (1, 0)")
    try:
        yield conn
    finally:
        cur.execute(f"DROP DATABASE IF EXISTS {SCRATCH}")
        conn.close()


def _id(conn: Any) -> int:
    cur = conn.cursor()
    cur.execute("SELECT CONNECTION_ID()")
    return int(cur.fetchone()[0])


def test_idle_job_is_the_clients_and_a_sleeping_one_waits(server):
    idle, busy = mysqlserver.connect(), mysqlserver.connect()
    pids = [_id(idle), _id(busy)]
    sleeper = threading.Thread(target=lambda: busy.cursor().execute("SELECT SLEEP(1)"))
    sleeper.start()
    time.sleep(0.3)
    sample = activity.sample(server, pids, pids)
    sleeper.join()
    idle.close()
    busy.close()
    assert sorted(sample.waits) == ["Client:idle", "Timeout:User sleep"]
    assert sample.transactions == 0  # reading PROCESSLIST commits nothing (measured by test_mysql_stats)
    assert not [o for o in sample.others if o[0] != "active"]


def test_a_blocked_job_is_not_on_cpu_and_another_client_is_interference(server):
    holder, blocked, outsider = (mysqlserver.connect() for _ in range(3))
    holder.autocommit(False)
    holder.cursor().execute(f"SELECT * FROM {SCRATCH}.t FOR UPDATE")  # holds the row lock
    pids = [_id(blocked)]
    lock_table = threading.Thread(target=lambda: blocked.cursor().execute(f"LOCK TABLES {SCRATCH}.t WRITE"))
    outside = threading.Thread(target=lambda: outsider.cursor().execute("SELECT SLEEP(1)"))
    try:
        # a metadata lock wait: LOCK TABLES ... WRITE waits for the holder's open transaction
        lock_table.start()
        outside.start()
        time.sleep(0.3)
        sample = activity.sample(server, pids, [*pids, _id(holder)])
    finally:
        holder.rollback()
        lock_table.join()
        outside.join()
    for conn in (holder, blocked, outsider):
        conn.close()
    assert len(sample.waits) == 1 and sample.waits[0].startswith("Lock:Waiting for table"), sample.waits
    others = OtherSessions()
    others.count(sample.others)
    assert others.active_samples == 1 and others.most_active >= 1  # the outsider's SLEEP, not the holder (own)
    assert all(user for _state, _app, user in sample.others)


def test_wait_keys_from_processlist_states():
    assert activity.wait_key("Sleep", "") == "Client:idle"
    assert activity.wait_key("Query", "Updating") == "CPU"
    assert activity.wait_key("Query", "Sending data") == "CPU"
    assert activity.wait_key("Query", "Commit") == "IO:Commit"
    assert activity.wait_key("Query", "Waiting for table metadata lock") == "Lock:Waiting for table metadata lock"
    assert activity.wait_key("Query", "Waiting for commit lock") == "Lock:Waiting for commit lock"
    assert activity.wait_key("Query", "Waiting on cond") == "Wait:Waiting on cond"
    assert activity.event_key("wait/io/file/innodb/innodb_log_file") == "io:file/innodb/innodb_log_file"


def test_an_update_loop_is_seen_committing_and_on_cpu(server):
    """The autocommit UPDATE loop of a commit benchmark: most samples show the commit (its redo flush)."""
    stop = threading.Event()
    pids: list[int] = []

    def loop() -> None:
        conn = mysqlserver.connect()
        pids.append(_id(conn))
        cur = conn.cursor()
        while not stop.is_set():
            cur.execute(f"UPDATE {SCRATCH}.t SET v = v + 1 WHERE id = 1")
        conn.close()
    worker = threading.Thread(target=loop)
    worker.start()
    time.sleep(0.2)
    seen: Counter = Counter()
    for _ in range(100):
        seen.update(activity.sample(server, pids, pids).waits)
        time.sleep(0.005)
    stop.set()
    worker.join()
    assert sum(seen.values()) == 100
    assert seen["IO:Commit"] > 20, seen
