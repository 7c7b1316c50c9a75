"""capmark observe on the embedded PostgreSQL: what it stores against load the test makes itself (exact statement
calls, CPU charged to the application that used it), how faults break exactly the interval they fall in, how a
signal or SIGKILL leaves the stored intervals, and that it creates nothing on the server it observes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import autovacuum
import psycopg
import pytest
from commandline import assert_one_sentence, invoke
from observing import Said, observe_for

from capmark.capacity.workloads import COLLECTOR, WorkloadRules, application_transactions, attribute
from capmark.collect import procfs
from capmark.engines.postgres import embedded
from capmark.engines.postgres import observe as reader
from capmark.errors import CapmarkError
from capmark.observation_store import ObservationStore, is_observation, load_observation
from capmark.observations import IntervalStatus, Observation
from capmark.observe.collector import observe
from capmark.observe.round_trips import PROBES_PER_SAMPLE
from capmark.observe.spec import ObserveSpec
from capmark.store import load_run

pytestmark = pytest.mark.db
SRC = str(Path(__file__).resolve().parents[2] / "src")
LOAD_APP = "observe-test-load"
# A CPU-bound statement of ~10 ms: its backend's CPU is nearly all execution, none of it waiting on a disk
HEAVY_SQL = "select count(*) from generate_series(1, %s) g(i) where i %% 7 = 3"
HEAVY_ROWS = 100_000
CALLS = 60
MAX_ROUND_TRIP_S = 0.05  # an empty statement over a Unix socket: about 20 us idle, a few ms with both cores busy
# /proc's CPU times are whole ticks (USER_HZ, 10 ms): two readings of one process differ by up to a tick at each end
TICK_S = 1.0 / procfs.USER_HZ


def _two_intervals_after(done: threading.Event) -> Callable[[int], bool]:
    """Enough once two intervals were stored after the load ended: the one it ended in, and a quiet one after it
    (which must not charge the load again)."""
    seen: list[int] = []

    def enough(n: int) -> bool:
        if done.is_set():
            seen.append(n)
        return len(seen) >= 2

    return enough


def _catalog_counts(conn: psycopg.Connection) -> tuple[int, int, int, int]:
    row = conn.execute("select (select count(*) from pg_class), (select count(*) from pg_namespace), "
                       "(select count(*) from pg_extension), (select count(*) from pg_proc)").fetchone()
    assert row is not None
    return row


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        st = procfs.parse_pid_stat(fh.read())
    assert st is not None
    return st.user_s + st.sys_s


def _queryid(conn: psycopg.Connection) -> str:
    row = conn.execute("select queryid::text from capmark.pg_stat_statements where query like "
                       "'select count(*) from generate_series(%g(i) where i %'").fetchone()
    assert row is not None, "the test's statement is not in pg_stat_statements"
    return row[0]


def test_statements_calls_and_cpu_are_charged_exactly_and_nothing_is_created(embedded_dsn: str, tmp_path: Path):
    """The stored calls of the test's statement add up to the calls made (no interval loses or doubles any), and the
    CPU charged to its application is the CPU its backend used (read from /proc by the test), within a tick at each
    end; the host's busy CPU holds it. The server's catalogs count the same objects before and after."""
    admin = psycopg.connect(embedded_dsn, autocommit=True)
    before = _catalog_counts(admin)
    load = psycopg.connect(embedded_dsn, autocommit=True, application_name=LOAD_APP)
    backend = load.info.backend_pid
    done = threading.Event()

    def run_load() -> None:
        for _ in range(CALLS):
            load.execute(HEAVY_SQL, (HEAVY_ROWS,))
        done.set()

    loader = threading.Thread(target=run_load)

    def start_after_first(n: int) -> None:
        if n == 1:
            loader.start()

    cpu_before = _cpu_s(backend)
    obs = observe_for(embedded_dsn, tmp_path, 6.0, start_after_first, _two_intervals_after(done))
    cpu_used = _cpu_s(backend) - cpu_before
    loader.join()
    assert done.is_set()
    assert _catalog_counts(admin) == before
    queryid = _queryid(admin)
    load.close()
    admin.close()

    assert obs.status == "ended" and obs.statements_available
    assert all(i.status is IntervalStatus.OK for i in obs.intervals), [i.reason for i in obs.intervals]
    calls = sum(s.calls for i in obs.intervals for s in i.statements if s.query_id == queryid)
    assert calls == CALLS
    texts = [s.text for i in obs.intervals for s in i.statements if s.text]
    assert all(reader.TRANSACTION_CONTROL_TEXT.match(t) for t in texts), f"query text stored without being asked: {texts}"
    charged = sum(u.cpu_user_s + u.cpu_system_s for i in obs.intervals for u in i.sessions
                  if u.session.application == LOAD_APP)
    assert cpu_used > 0.2, f"the load used only {cpu_used:.2f} s of CPU: too little to check the charge"
    assert abs(charged - cpu_used) <= 2 * TICK_S + 0.01, (charged, cpu_used)
    host_busy = sum(i.host.busy_s for i in obs.intervals if i.host is not None)
    assert charged <= host_busy, (charged, host_busy)
    for i in obs.intervals:  # the load's one session was there at every sample, whatever it was doing
        seen = sum(c.samples for c in i.activity if c.session.application == LOAD_APP)
        assert seen == i.activity_samples > 0, (i.ordinal, seen, i.activity_samples)
        # each sample's round-trip probes land in its own interval: none lost at a boundary, none counted twice
        trips = i.round_trips
        assert trips is not None and trips.probes == i.activity_samples * PROBES_PER_SAMPLE, (i.ordinal, trips)
        assert 0 < trips.p50_s <= trips.p90_s <= trips.max_s < MAX_ROUND_TRIP_S, trips


CHURN_APP = "observe-test-churn"
CHURN_CONNECTIONS = 20
CHURN_ROWS = 1_500_000  # about 0.2 s of CPU a connection: most of them start and end between two 1 Hz samples


def test_connections_that_start_and_end_between_samples_are_charged_their_cpu(embedded_dsn: str, tmp_path: Path):
    """Short connections, one after another, each running a CPU-bound statement: the CPU charged to their application
    is what their backends used (each read from /proc by the test just before it closed), although most of them were
    never seen by a sample and the others were seen once. Charging only between two readings of one process left
    nearly all of it unattributed. Autovacuum is paused, so the connections are the only processes that come
    and go: in the suite its workers took up to 0.49 s of the connections' CPU or gave them up to 0.57 s of
    theirs, which the collector cannot tell apart (docs/production.md). Two clean-clone runs charged only 2.52 s of
    3.23 s and 2.82 s of 3.45 s, most likely where a sample caught the one connection it saw still starting (no
    database or user yet, and mostly no application): that nameless session took the CPU of every connection that
    ended unseen after it. Such a connection is now charged nothing until its session shows (test_sessions.py)."""
    used: list[float] = []
    done = threading.Event()

    def churn() -> None:
        for _ in range(CHURN_CONNECTIONS):
            with psycopg.connect(embedded_dsn, autocommit=True, application_name=CHURN_APP) as conn:
                conn.execute(HEAVY_SQL, (CHURN_ROWS,))
                used.append(_cpu_s(conn.info.backend_pid))
        done.set()

    loader = threading.Thread(target=churn)

    def start_after_first(n: int) -> None:
        if n == 1:
            loader.start()

    with psycopg.connect(embedded_dsn, autocommit=True) as admin, autovacuum.paused(admin):
        obs = observe_for(embedded_dsn, tmp_path, 9.0, start_after_first)  # its whole 9 s: see below
        ended_inside = done.is_set()
        loader.join()
    assert ended_inside, "the connections did not all end inside the observation"
    truth = sum(used)
    charged = sum(u.cpu_user_s + u.cpu_system_s for i in obs.intervals for u in i.sessions
                  if u.session.application == CHURN_APP)
    assert truth > 1.0, f"the connections used only {truth:.2f} s of CPU: too little to check the charge"
    # /proc gives whole ticks: each connection's reading is short of its CPU by up to a tick in user and in system
    # time, and its exit (after the reading) costs a little more. Ended two intervals after the last connection, one
    # clean-clone run charged 2.52 s of 3.23: the observation keeps its planned length here
    slack = 2 * TICK_S * (CHURN_CONNECTIONS + 1) + 0.002 * CHURN_CONNECTIONS
    assert truth - 2 * TICK_S <= charged <= truth + slack, (charged, truth)


def test_a_statistics_reset_breaks_exactly_its_interval(embedded_dsn: str, tmp_path: Path):
    """pg_stat_statements_reset() after interval 2 breaks interval 3 only; pg_stat_reset() after interval 4 breaks
    interval 5 only; each break is an event."""
    admin = psycopg.connect(embedded_dsn, autocommit=True)

    def reset(n: int) -> None:
        if n == 2:
            admin.execute("select capmark.pg_stat_statements_reset()")
        elif n == 4:
            admin.execute("select pg_stat_reset()")

    obs = observe_for(embedded_dsn, tmp_path, 7.0, reset, lambda n: n == 6)
    admin.close()
    statuses = [i.status.value for i in obs.intervals]
    assert statuses[:6] == ["ok", "ok", "broken", "ok", "broken", "ok"], [(i.status, i.reason) for i in obs.intervals]
    assert "pg_stat_statements was reset" in obs.intervals[2].reason
    assert "statistics of database postgres were reset" in obs.intervals[4].reason, obs.intervals[4].reason
    assert [e.kind for e in obs.events if e.kind == "reset"] == ["reset", "reset"]
    assert obs.intervals[3].statements, "the interval after the reset lost its statements"


def _start(results: Path, dsn: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "1000"}
    return subprocess.Popen([sys.executable, "-m", "capmark", "observe", "--dsn", dsn, "--interval", "1s",
                             "--results-dir", str(results), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _wait_intervals(results: Path, proc: subprocess.Popen, count: int) -> Path:
    deadline = time.time() + 60
    while time.time() < deadline:
        folders = [p for p in results.glob("*") if is_observation(p)]
        if folders:
            try:
                if len(load_observation(folders[0]).intervals) >= count:
                    return folders[0]
            except Exception:  # noqa: BLE001  the collector is writing its first rows
                pass
        if proc.poll() is not None:
            pytest.fail(f"capmark observe ended (exit {proc.returncode}): {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)
    pytest.fail("capmark observe stored no intervals in 60 s")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_observation_keeping_everything(embedded_dsn: str, tmp_path: Path, how: str):
    proc = _start(tmp_path, embedded_dsn)
    folder = _wait_intervals(tmp_path, proc, 2)
    proc.send_signal(getattr(signal, how))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    obs = load_observation(folder)
    assert obs.status == "ended", obs.reason
    assert len(obs.intervals) >= 2 and all(i.status is IntervalStatus.OK for i in obs.intervals)
    assert "Stored" in out and str(folder) in out
    with pytest.raises(CapmarkError, match=r"holds an observation of a live server .*, not a measured run; capmark "
                                           r"baseline"):
        load_run(folder)


def test_sigkill_leaves_the_finished_intervals_readable(embedded_dsn: str, tmp_path: Path):
    proc = _start(tmp_path, embedded_dsn)
    folder = _wait_intervals(tmp_path, proc, 2)
    proc.kill()
    proc.wait(timeout=10)
    obs = load_observation(folder)
    assert obs.status == "killed", obs.status
    assert str(proc.pid) in obs.reason
    assert len(obs.intervals) >= 2
    assert all(i.host is not None and i.activity_samples > 0 for i in obs.intervals)


@pytest.mark.parametrize(("dsn", "words"), [
    ("postgresql://nobody@127.0.0.1:1/none", ("Cannot connect",)),
    ("mysql://root@127.0.0.1:1/none", ("Cannot connect to MySQL/MariaDB",)),
])
def test_a_server_that_cannot_be_observed_is_one_sentence_and_stores_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, dsn: str, words: Any):
    code, out, err = invoke(["observe", "--dsn", dsn, "--results-dir", str(tmp_path / "results"), "--for", "5s",
                             "--interval", "1s"],
                            capsys, monkeypatch)
    assert_one_sentence(code, out, err, *words)
    assert not list((tmp_path / "results").glob("*/*")) if (tmp_path / "results").exists() else True


def _observe_two_intervals(dsn: str, results: Path) -> tuple[Observation, list[str]]:
    """Two 1 s intervals of the server at dsn, and every sentence the collector said meanwhile."""
    said = Said()
    store = ObservationStore(results)
    observe(ObserveSpec(dsn=dsn, interval_s=1.0, planned_s=2.0, results_dir=results), store, said)
    store.close()
    return load_observation(store.folder), said.sentences


def _create_once(dsn: str, exists: str, create: str) -> None:
    """A database or role the test needs, made unless an earlier test made it (CREATE DATABASE has no IF NOT EXISTS)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        if not admin.execute(exists).fetchone():
            admin.execute(create)


def test_without_pg_stat_statements_it_says_how_and_goes_on(embedded_dsn: str, tmp_path: Path):
    """A database where the extension is not created: one sentence naming shared_preload_libraries and CREATE
    EXTENSION, and the intervals still hold the activity and the host."""
    _create_once(embedded_dsn, "select 1 from pg_database where datname = 'observe_nopss'",
                 "create database observe_nopss")
    dsn = embedded_dsn.replace("/postgres?", "/observe_nopss?")
    obs, said = _observe_two_intervals(dsn, tmp_path)
    hint = [m for m in said if "pg_stat_statements" in m]
    assert len(hint) == 1 and "shared_preload_libraries" in hint[0] and "CREATE EXTENSION" in hint[0], said
    assert not obs.statements_available
    assert len(obs.intervals) == 2 and all(i.status is IntervalStatus.OK and i.activity_samples for i in obs.intervals)
    assert any(e.kind == "missing" for e in obs.events)


def test_a_lost_connection_breaks_its_interval_and_the_collector_reconnects(embedded_dsn: str, tmp_path: Path):
    """The collector's backend terminated after interval 2: interval 3 is broken with the reason, the collector
    reconnects at once (saying so in an event) and the intervals after it are fine."""
    admin = psycopg.connect(embedded_dsn, autocommit=True)

    def terminate(n: int) -> None:
        if n == 2:
            admin.execute("select pg_terminate_backend(pid) from pg_stat_activity where application_name = %s",
                          ("capmark observe",))

    obs = observe_for(embedded_dsn, tmp_path, 6.0, terminate, lambda n: n == 5)
    admin.close()
    statuses = [i.status.value for i in obs.intervals]
    assert statuses[:2] == ["ok", "ok"] and statuses[2] == "broken", statuses
    assert "connection to the server was lost" in obs.intervals[2].reason
    assert statuses[3:] and set(statuses[3:]) == {"ok"}, statuses
    assert [e.kind for e in obs.events if e.kind in ("disconnected", "reconnected")] == ["disconnected", "reconnected"]


def test_a_server_restart_breaks_exactly_its_interval_and_the_collector_goes_on(tmp_path: Path):
    """A server of the test's own, stopped and started again after interval 2: the interval holding the restart is
    broken and says the server restarted (an event too), the collector reconnects by itself, and the intervals
    after it are whole: none of them takes the counters that began again from zero as a delta."""
    base = Path(tempfile.mkdtemp(prefix="capmark-test-restart-"))
    base.chmod(0o755)  # the server's own system user enters it (tests run as root)
    data_dir = base / "data"
    dsn = embedded.start(data_dir)

    def restart(n: int) -> None:
        if n == 2:
            embedded.stop(data_dir)
            embedded.start(data_dir)

    try:
        obs = observe_for(dsn, tmp_path, 8.0, restart, lambda n: n == 5)
    finally:
        embedded.stop(data_dir)
        shutil.rmtree(base, ignore_errors=True)
    statuses = [i.status.value for i in obs.intervals]
    broken = [k for k, st in enumerate(statuses) if st == "broken"]
    assert broken == [2], [(i.status, i.reason) for i in obs.intervals]
    assert "the server restarted" in obs.intervals[2].reason, obs.intervals[2].reason
    assert len(statuses) >= 5, statuses  # at least two whole intervals after the restart
    assert "restart" in [e.kind for e in obs.events], obs.events
    for i in obs.intervals[3:]:  # deltas of counters that began again: none negative
        assert all(s.calls >= 0 and s.exec_time_s >= 0 for s in i.statements), i.ordinal
        assert i.host is None or i.host.busy_s >= 0


def test_a_role_without_pg_monitor_hears_the_grant_and_goes_on(embedded_dsn: str, tmp_path: Path):
    """A plain role sees only its own sessions' details: one sentence names GRANT pg_monitor, the observation goes on
    and keeps the host and what the role may see."""
    _create_once(embedded_dsn, "select 1 from pg_roles where rolname = 'observe_plain'", "create role observe_plain login")
    dsn = embedded_dsn.replace("postgresql://postgres:@", "postgresql://observe_plain@")
    obs, said = _observe_two_intervals(dsn, tmp_path)
    grant = [m for m in said if "GRANT pg_monitor TO observe_plain" in m]
    assert len(grant) >= 1 and "not a member of pg_monitor" in " ".join(said), said
    assert obs.status == "ended" and len(obs.intervals) == 2
    assert all(i.host is not None and i.activity_samples for i in obs.intervals)


def test_the_collectors_own_statements_are_named_and_commits_keep_their_text(embedded_dsn: str, tmp_path: Path):
    """The query ids the collector gives as its own are the statements its readings ran (each read once per
    interval or per sample, and nobody else ran them); a COMMIT's text is kept without --store-query-text, while
    the data-bearing statement beside it keeps none."""
    load = psycopg.connect(embedded_dsn, autocommit=True, application_name=LOAD_APP)

    def commit_some(n: int) -> None:
        if n == 1:
            for _ in range(5):
                with load.transaction():
                    load.execute("select 1 + %s", (n,))

    obs = observe_for(embedded_dsn, tmp_path, 3.0, commit_some)
    own = set(obs.target["collector_query_ids"])
    assert len(own) >= 6, own  # activity, postmaster start, database, wal, bgwriter, block size at least
    calls: dict[str, float] = {}
    for interval in obs.usable():
        for s in interval.statements:
            if s.query_id in own:
                calls[s.query_id] = calls.get(s.query_id, 0.0) + s.calls
    assert calls, "none of the collector's own statements was among the stored ones"
    # each reader runs once per interval (or per activity sample); the deltas' edges may move one call across
    intervals, samples = len(obs.usable()), sum(i.activity_samples for i in obs.usable())
    assert len(calls) >= 6, calls
    assert all(min(abs(c - intervals), abs(c - samples)) <= 1 for c in calls.values()), (intervals, samples, calls)
    with psycopg.connect(embedded_dsn) as conn:
        mine = conn.execute("select queryid::text from capmark.pg_stat_statements "
                            "where query ~ '^select \\$[0-9] \\+ \\$[0-9]$'").fetchall()
    assert mine and not own & {r[0] for r in mine}
    texts = [s.text for i in obs.usable() for s in i.statements if s.text]
    assert any(t.strip().upper() == "COMMIT" for t in texts), texts
    assert not any("select 1 +" in t for t in texts), texts


QUIET_DB = "capmark_observe_quiet"  # a database no one else uses: every transaction in it is the collector's


def test_the_collectors_own_transactions_are_what_the_server_counted(embedded_dsn: str, tmp_path: Path):
    """The collector counts the transactions its own sessions commit (sampling, reading, the host's /proc through
    SQL), which pg_stat_database counts with the applications'. Observing a database no one else uses, with the host
    read through SQL from a session of its own, the server's count of the database's transactions is the collector's
    in every interval; the analysis then gives the applications none. Caught: a count that leaves out the reading's
    publishing of its statistics or the host session's statements, a statement that psycopg prepares by itself on
    its sixth run (a transaction of its own: eight readings here), or an analysis that takes the collector's
    transactions from its statement calls (a reading runs several statements in one transaction)."""
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"drop database if exists {QUIET_DB}")
        admin.execute(f"create database {QUIET_DB}")
    quiet = psycopg.conninfo.make_conninfo(embedded_dsn, dbname=QUIET_DB)
    try:
        with psycopg.connect(embedded_dsn, autocommit=True) as admin, autovacuum.paused(admin):
            store = ObservationStore(tmp_path)
            try:
                observe(ObserveSpec(dsn=quiet, interval_s=1.0, sample_hz=4.0, planned_s=8.0, results_dir=tmp_path,
                                    host_metrics="sql"), store)
            finally:
                store.close()
    finally:
        with psycopg.connect(embedded_dsn, autocommit=True) as admin:
            admin.execute(f"drop database if exists {QUIET_DB} with (force)")
    obs = load_observation(store.folder)
    usable = obs.usable()
    assert len(usable) >= 3, [(i.status, i.reason) for i in obs.intervals]
    server, counted = [], []
    for interval in usable:
        row = next(r for r in interval.database["database"] if r.get("datname") == QUIET_DB)
        server.append(row["xact_commit"] + row["xact_rollback"] - row["sessions"])
        counted.append(interval.collector_transactions)
    # at 4 samples a second each interval holds at least 4 samples, a publish and a reading: a count that left out
    # the host session's statements (one per sample) would be short by as many
    assert min(server) >= 6, server
    assert counted == server, (counted, server)
    attribution = attribute(obs, WorkloadRules())
    assert [attribution.intervals[i.ordinal].workloads[COLLECTOR].units for i in usable] == server
    assert [application_transactions(i) for i in usable] == [0.0] * len(usable)
