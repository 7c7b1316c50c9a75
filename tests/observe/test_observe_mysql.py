"""capmark observe on MariaDB: against load the test makes itself on a private server with performance_schema on
(exact digest calls, the CPU of a connection's thread charged to its user, explicit transactions counted by their
COMMITs, nothing created), a lost connection, and the machine's server, whose performance_schema is off."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mariadbprivate
import pytest
from observing import Said, observe_for

from capmark.capacity.workloads import COLLECTOR, WorkloadRules, attribute
from capmark.collect import procfs
from capmark.engines.mysql import observe as reader
from capmark.engines.mysql.connection import connect
from capmark.errors import CapmarkError
from capmark.observation_store import ObservationStore
from capmark.observations import IntervalStatus
from capmark.observe.collector import observe
from capmark.observe.round_trips import PROBES_PER_SAMPLE
from capmark.observe.spec import ObserveSpec

pytestmark = pytest.mark.db
SCHEMA = "obs_shop"
HEAVY_USER, ORDERS_USER = "obs_heavy", "obs_orders"
# A CPU-bound statement of about 50 ms on this machine: its thread's CPU is nearly all execution
HEAVY_SQL = "SELECT BENCHMARK(150000, MD5('capmark'))"
HEAVY_CALLS = 40
ORDERS = 30
ORDER_PAUSE_S = 0.1  # between two orders: their session idles after its COMMIT, where 1 Hz samples find it
TICK_S = 1.0 / procfs.USER_HZ  # /proc's CPU times are whole ticks


@pytest.fixture(scope="module")
def private_mariadb() -> Iterator[str]:
    with mariadbprivate.running("--performance-schema=ON", *(f"--performance-schema-consumer-{c}=ON" for c in
                                                             ("events-statements-current", "events-waits-current"))
                                ) as url:
        admin = connect(url)
        cur = admin.cursor()
        for sql in (f"CREATE DATABASE {SCHEMA}", f"CREATE TABLE {SCHEMA}.items (id INT PRIMARY KEY, v INT) "
                    "ENGINE=InnoDB", f"INSERT INTO {SCHEMA}.items SELECT seq, 0 FROM {SCHEMA}.seq_1_to_100",
                    *(f"CREATE USER '{u}'@'%'" for u in (HEAVY_USER, ORDERS_USER)),
                    *(f"GRANT ALL ON {SCHEMA}.* TO '{u}'@'%'" for u in (HEAVY_USER, ORDERS_USER))):
            cur.execute(sql)
        cur.close()
        admin.close()
        yield url


def _as(url: str, user: str) -> str:
    return url.replace("root@", f"{user}@").rstrip("/") + f"/{SCHEMA}"


def _server_pid(conn: Any) -> int:
    cur = conn.cursor()
    cur.execute("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE NAME = 'thread/sql/main'")
    (pid,) = cur.fetchone()
    cur.close()
    return int(pid)


def _thread_of(admin: Any, connection_id: int) -> int:
    cur = admin.cursor()
    cur.execute("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = %s", (connection_id,))
    (tid,) = cur.fetchone()
    cur.close()
    return int(tid)


def _thread_cpu_s(pid: int, tid: int) -> float:
    with open(f"/proc/{pid}/task/{tid}/stat") as fh:
        st = procfs.parse_pid_stat(fh.read())
    assert st is not None
    return st.user_s + st.sys_s


def _process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        st = procfs.parse_pid_stat(fh.read())
    assert st is not None
    return st.user_s + st.sys_s


def _counts(admin: Any) -> tuple[int, ...]:
    cur = admin.cursor()
    cur.execute("SELECT (SELECT COUNT(*) FROM information_schema.TABLES), (SELECT COUNT(*) FROM "
                "information_schema.SCHEMATA), (SELECT COUNT(*) FROM mysql.user), (SELECT COUNT(*) FROM "
                "information_schema.ROUTINES)")
    row = cur.fetchone()
    cur.close()
    return tuple(int(v) for v in row)


def _digest(admin: Any, like: str) -> str:
    cur = admin.cursor()
    cur.execute("SELECT DIGEST FROM performance_schema.events_statements_summary_by_digest WHERE DIGEST_TEXT LIKE %s",
                (like,))
    rows = cur.fetchall()
    cur.close()
    assert len(rows) == 1, rows
    return str(rows[0][0])


def test_digests_thread_cpu_and_commits_are_charged_to_their_users(private_mariadb: str, tmp_path: Path):
    """The heavy user's digest calls add up to the calls made, the CPU charged to it is what its connection's thread
    used (read by the test from /proc, within a tick at each end), the orders user's units are its COMMITs, every
    sample saw both sessions, the probes land in their intervals, and the server holds the same objects after."""
    admin = connect(private_mariadb)
    before = _counts(admin)
    heavy, orders = connect(_as(private_mariadb, HEAVY_USER)), connect(_as(private_mariadb, ORDERS_USER))
    server, tid = _server_pid(admin), _thread_of(admin, heavy.thread_id())
    done = threading.Event()

    def load() -> None:
        hc, oc = heavy.cursor(), orders.cursor()
        for n in range(max(HEAVY_CALLS, ORDERS)):
            if n < HEAVY_CALLS:
                hc.execute(HEAVY_SQL)
                hc.fetchall()
            if n < ORDERS:
                oc.execute("BEGIN")
                oc.execute(f"UPDATE {SCHEMA}.items SET v = v + 1 WHERE id = %s", (n % 100 + 1,))
                oc.execute("COMMIT")
                time.sleep(ORDER_PAUSE_S)
        done.set()

    loader = threading.Thread(target=load)
    seen_after: list[int] = []

    def start(n: int) -> None:
        if n == 1:
            loader.start()

    def enough(n: int) -> bool:
        if done.is_set():
            seen_after.append(n)
        return len(seen_after) >= 2

    cpu_before, server_before = _thread_cpu_s(server, tid), _process_cpu_s(server)
    obs = observe_for(private_mariadb, tmp_path, 30.0, start, enough)
    assert done.is_set()
    loader.join()
    cpu_used, server_used = _thread_cpu_s(server, tid) - cpu_before, _process_cpu_s(server) - server_before
    assert _counts(admin) == before
    heavy_digest, commit_digest = _digest(admin, "SELECT `BENCHMARK`%"), _digest(admin, "COMMIT%")
    for conn in (heavy, orders, admin):
        conn.close()

    assert obs.status == "ended" and obs.statements_available and obs.target["engine"] == "mysql"
    assert all(i.status is IntervalStatus.OK for i in obs.intervals), [i.reason for i in obs.intervals]
    assert sum(s.calls for i in obs.intervals for s in i.statements if s.query_id == heavy_digest) == HEAVY_CALLS
    assert sum(s.calls for i in obs.intervals for s in i.statements if s.query_id == commit_digest) == ORDERS
    texts = [s.text for i in obs.intervals for s in i.statements if s.text]
    assert texts and all(reader.TRANSACTION_CONTROL.match(t) for t in texts), texts
    charged = sum(u.cpu_user_s + u.cpu_system_s for i in obs.intervals for u in i.sessions
                  if u.session.user == HEAVY_USER)
    assert cpu_used > 0.5, f"the heavy user's thread used only {cpu_used:.2f} s of CPU: too little to check"
    assert abs(charged - cpu_used) <= 2 * TICK_S + 0.01, (charged, cpu_used)
    assert charged <= sum(i.host.busy_s for i in obs.intervals if i.host is not None)
    # every thread's CPU charged once: all of it together no more than the server process used while observed
    # (one more tick for each of the process's and the thread readings' rounding)
    everything = sum(u.cpu_user_s + u.cpu_system_s for i in obs.intervals for u in i.sessions)
    assert everything <= server_used + 2 * TICK_S, (everything, server_used)
    for i in obs.intervals:
        for user in (HEAVY_USER, ORDERS_USER):
            seen = sum(c.samples for c in i.activity if c.session.user == user)
            assert seen == i.activity_samples > 0, (i.ordinal, user, seen, i.activity_samples)
        trips = i.round_trips
        assert trips is not None and trips.probes == i.activity_samples * PROBES_PER_SAMPLE, (i.ordinal, trips)
    attribution = attribute(obs, WorkloadRules(group_by="user"))
    units = {name: sum(iu.workloads[name].units for iu in attribution.intervals.values() if name in iu.workloads)
             for name in attribution.names}
    assert attribution.explicit[ORDERS_USER] and not attribution.explicit[HEAVY_USER]
    assert units[ORDERS_USER] == pytest.approx(ORDERS), units
    assert units[HEAVY_USER] == pytest.approx(HEAVY_CALLS), units
    own = set(obs.target["collector_query_ids"])
    assert own and all(s.query_id not in own for i in obs.intervals for s in i.statements
                       if s.database == SCHEMA), "an application's statement was taken for the collector's"
    assert COLLECTOR in attribution.names


def test_a_killed_connection_breaks_its_interval_and_the_collector_reconnects(private_mariadb: str, tmp_path: Path):
    admin = connect(private_mariadb)

    def kill(n: int) -> None:
        if n == 2:
            cur = admin.cursor()
            cur.execute("SELECT PROCESSLIST_ID FROM performance_schema.threads WHERE PROCESSLIST_DB = %s AND "
                        "PROCESSLIST_ID <> CONNECTION_ID()", (reader.OBSERVE_SCHEMA,))
            for (pid,) in cur.fetchall():
                cur.execute(f"KILL {int(pid)}")
            cur.close()

    obs = observe_for(private_mariadb, tmp_path, 8.0, kill, lambda n: n == 5)
    admin.close()
    statuses = [i.status.value for i in obs.intervals]
    assert statuses[:2] == ["ok", "ok"] and statuses[2] == "broken", statuses
    assert "connection to the server was lost" in obs.intervals[2].reason, obs.intervals[2].reason
    assert statuses[3:] and set(statuses[3:]) == {"ok"}, statuses
    assert [e.kind for e in obs.events if e.kind in ("disconnected", "reconnected")] == ["disconnected", "reconnected"]


def test_a_truncated_digest_table_breaks_exactly_its_interval(private_mariadb: str, tmp_path: Path):
    """TRUNCATE of the digest summary after interval 2, while a session keeps running one statement: interval 3 is
    broken (its digest's calls went backwards), the reset is an event, and the intervals after it count again."""
    admin, load = connect(private_mariadb), connect(_as(private_mariadb, HEAVY_USER))
    stop = threading.Event()

    def run() -> None:
        cur = load.cursor()
        while not stop.is_set():
            cur.execute(f"SELECT v FROM {SCHEMA}.items WHERE id = 7")
            cur.fetchall()
            time.sleep(0.01)

    def truncate(n: int) -> None:
        if n == 2:
            cur = admin.cursor()
            cur.execute("TRUNCATE performance_schema.events_statements_summary_by_digest")
            cur.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        obs = observe_for(private_mariadb, tmp_path, 8.0, truncate, lambda n: n == 5)
    finally:
        stop.set()
        thread.join()
    load.close()
    admin.close()
    statuses = [i.status.value for i in obs.intervals]
    assert statuses[:5] == ["ok", "ok", "broken", "ok", "ok"], [(i.status, i.reason) for i in obs.intervals]
    assert "digests were reset" in obs.intervals[2].reason, obs.intervals[2].reason
    assert [e.kind for e in obs.events if e.kind == "reset"] == ["reset"]
    assert any(s.database == SCHEMA and s.calls > 0 for s in obs.intervals[3].statements)


def test_a_server_restart_breaks_exactly_its_interval_and_the_new_servers_threads_are_read(tmp_path: Path):
    """The server restarted after interval 2: interval 3 is broken, the restart is an event, the collector
    reconnects, and the intervals after it read the new server process's threads (the old one's are gone)."""
    with mariadbprivate.server("--performance-schema=ON") as private:
        obs = observe_for(private.url, tmp_path, 12.0, lambda n: private.restart() if n == 2 else None,
                       lambda n: n == 5)
    statuses = [i.status.value for i in obs.intervals]
    assert statuses[:2] == ["ok", "ok"] and statuses[2] == "broken", [(i.status, i.reason) for i in obs.intervals]
    assert "restarted" in obs.intervals[2].reason, obs.intervals[2].reason
    assert "restart" in [e.kind for e in obs.events], obs.events
    assert statuses[3:] and set(statuses[3:]) == {"ok"}, statuses
    for i in obs.intervals[3:]:
        assert sum(u.processes for u in i.sessions) > 0, f"interval {i.ordinal} read no thread of the new server"


def test_without_performance_schema_it_says_what_to_enable_and_samples_the_sessions(tmp_path: Path):
    """A MariaDB with performance_schema off (its default): one event says what to switch on, no statement is
    stored, and a session sleeping through the observation is in every sample, active."""
    with mariadbprivate.running("--performance-schema=OFF") as dsn:
        _host_metrics_through_sql_is_refused_before_anything_is_said(dsn, tmp_path / "refused")
        _observe_without_performance_schema(dsn, tmp_path)


def _host_metrics_through_sql_is_refused_before_anything_is_said(dsn: str, results: Path) -> None:
    """MySQL cannot read the host's files through SQL: the option is refused in one sentence, and the note about
    performance_schema, which would otherwise come first, is not said."""
    said = Said()
    store = ObservationStore(results)
    with pytest.raises(CapmarkError, match=r"--host-metrics sql .* MySQL/MariaDB does not have; use"):
        observe(ObserveSpec(dsn=dsn, interval_s=1.0, planned_s=2.0, host_metrics="sql", results_dir=results),
                store, said)
    store.close()
    assert said.sentences == []


def _observe_without_performance_schema(dsn: str, tmp_path: Path) -> None:
    sleeper = connect(dsn)
    done = threading.Event()

    def sleep() -> None:
        cur = sleeper.cursor()
        cur.execute("SELECT SLEEP(10)")
        cur.fetchall()
        done.set()

    thread = threading.Thread(target=sleep)
    thread.start()
    time.sleep(0.3)
    obs = observe_for(dsn, tmp_path, 3.0, lambda n: None, lambda n: n == 2)
    thread.join()
    sleeper.close()
    assert not obs.statements_available
    assert any("performance_schema = ON" in e.text for e in obs.events if e.kind == "missing"), obs.events
    assert all(not i.statements for i in obs.intervals)
    for i in obs.intervals[:2]:
        active = sum(c.samples for c in i.activity if c.state == "active" and c.session.user == "root")
        assert active == i.activity_samples > 0, (i.ordinal, active, i.activity_samples)


def test_a_user_without_process_hears_the_grant_and_nothing_is_stored(private_mariadb: str, tmp_path: Path):
    """A user that may not see other sessions cannot observe them: one sentence with the GRANT, no observation."""
    admin = connect(private_mariadb)
    cur = admin.cursor()
    cur.execute("CREATE USER IF NOT EXISTS 'obs_plain'@'%'")
    cur.close()
    admin.close()
    store = ObservationStore(tmp_path)
    with pytest.raises(CapmarkError, match=r"lacks the PROCESS privilege.*GRANT PROCESS ON \*\.\* TO"):
        observe(ObserveSpec(dsn=private_mariadb.replace("root@", "obs_plain@"), interval_s=1.0, planned_s=2.0,
                            results_dir=tmp_path), store)
    store.close()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size > 0 and "obs-" in str(p)]

