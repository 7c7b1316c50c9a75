"""The compiled lookup loop on PostgreSQL (engines/postgres/_lookups.c): each lookup one execution of the session's
prepared statement that the server counts, keys uniform over the table's rows, each lookup timed on the clock the
Python path reads, a statement the server cancels handed back as psycopg's error with the loop still usable, a
closed connection an error and never a crash, and a step whose lookups the server counted one for one. Several
loops run together from one thread (run_together, a crew of jobs) keep each of those per connection, overlap their
executions, and fail one by one."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import psycopg
import psycopg.sql
import pytest
from liveruns import run_without_report
from lookuploops import (
    DELAY_AGREEMENT,
    DELAY_S,
    DRAWS,
    FAR,
    KEY_MAX,
    assert_paced_by_its_arrivals,
    assert_timed_like_the_python_path,
    assert_uniform,
    buffers,
    lookups,
)

from capmark.config import RunSpec
from capmark.engines.base import LOOKUPS_ENV, run_together
from capmark.engines.postgres.engine import POSTGRESQL
from capmark.engines.postgres.session import compiled_lookups

pytestmark = pytest.mark.db

PROBE = "select $1::bigint as cm_compiled_probe"  # no constant: the server stores the text as it is
STATEMENTS = {"plus-one": PROBE, "keep": "insert into cm_keys values ($1)",
              "delay": "select pg_sleep(0.02) where $1::int > 0", "long": "select pg_sleep(0.5) where $1::int > 0"}


def keyed_connection(dsn: str) -> psycopg.Connection:
    connection = psycopg.connect(dsn, autocommit=True)
    connection.execute("create temp table cm_keys (v bigint)")  # each connection's own
    return connection


@pytest.fixture
def conn(embedded_dsn: str) -> Iterator[psycopg.Connection]:
    connection = keyed_connection(embedded_dsn)
    yield connection
    connection.close()


CREW = 3


@pytest.fixture
def crew(embedded_dsn: str) -> Iterator[list[psycopg.Connection]]:
    """Connections whose loops run together, each with its own table of the keys it drew."""
    connections = [keyed_connection(embedded_dsn) for _ in range(CREW)]
    yield connections
    for connection in connections:
        connection.close()


def calls(conn: psycopg.Connection, query: str) -> int:
    """The server's count of executions of `query` (pg_stat_statements, in whichever schema it was created)."""
    row = conn.execute("select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
                       "where e.extname = 'pg_stat_statements'").fetchone()
    if row is None:
        pytest.skip("pg_stat_statements is not installed in the embedded server's database")
    view = psycopg.sql.SQL("select coalesce(sum(calls), 0) from {}.pg_stat_statements where query = %s").format(
        psycopg.sql.Identifier(row[0]))
    total = conn.execute(view, (query,)).fetchone()
    return int(total[0]) if total else 0


def test_the_compiled_loop_is_built_and_bound_to_psycopgs_libpq():
    """A broken setup.py, or a libpq the loop cannot find in this process, would run every lookup through the slower
    Python path, silently."""
    assert compiled_lookups(), "capmark.engines.postgres._lookups was not built or not bound; see setup.py"


def test_each_lookup_is_one_execution_the_server_counted(conn):
    session = POSTGRESQL.session(conn, STATEMENTS)
    loop = lookups(session, "plus-one")
    durations, ends = buffers(500)
    before, trips0 = calls(conn, PROBE), session.round_trips
    assert loop.run(1000, FAR, durations, ends, 0, 500)[:2] == (500, None)
    assert calls(conn, PROBE) - before == 500 == session.round_trips - trips0


def test_keys_are_uniform_over_one_to_key_max(conn):
    session = POSTGRESQL.session(conn, STATEMENTS)
    durations, ends = buffers(DRAWS)
    done, error, _ = lookups(session, "keep").run(KEY_MAX, FAR, durations, ends, 0, DRAWS)
    assert (done, error) == (DRAWS, None)
    counts = dict(conn.execute("select v, count(*) from cm_keys group by v order by v").fetchall())
    assert_uniform(counts)


def test_a_known_delay_is_timed_as_the_python_path_times_it(conn):
    session = POSTGRESQL.session(conn, STATEMENTS)
    assert_timed_like_the_python_path(session, "delay")


def test_paced_lookups_wait_for_their_arrivals_and_are_timed_from_them(conn):
    assert_paced_by_its_arrivals(POSTGRESQL.session(conn, STATEMENTS), "plus-one")


def test_a_statement_the_server_cancels_is_psycopgs_error_and_the_loop_goes_on(conn):
    session = POSTGRESQL.session(conn, STATEMENTS)
    loop = lookups(session, "long")
    durations, ends = buffers(4)
    conn.execute("set statement_timeout = '50ms'")
    trips0 = session.round_trips
    before = time.perf_counter()
    done, error, failed_at = loop.run(10, FAR, durations, ends, 0, 4)
    assert done == 0 and isinstance(error, psycopg.errors.QueryCanceled), error
    assert POSTGRESQL.is_cancel(error) and "statement timeout" in str(error)
    assert before < failed_at < before + 0.05  # when the failed lookup started, for its second of the series
    assert session.round_trips - trips0 == 1
    conn.execute("set statement_timeout = 0")
    assert loop.run(10, FAR, durations, ends, 0, 1)[:2] == (1, None)


def test_a_lookup_on_a_closed_connection_is_an_error_not_a_crash(embedded_dsn):
    """libpq frees a closed connection's memory: the loop must see that it is closed (a crash, not an exception,
    so it runs in a process of its own)."""
    code = (
        "import gc, sys, numpy, psycopg\n"
        "from capmark.engines.postgres.engine import POSTGRESQL\n"
        "conn = psycopg.connect(sys.argv[1], autocommit=True)\n"
        "loop = POSTGRESQL.session(conn, {'q': 'select $1::int + 1'}).key_lookups('q', 1)\n"
        "conn.close()\n"
        "d = numpy.zeros(4)\n"
        "done, error, _ = loop.run(10, float('inf'), d, d.copy(), 0, 4)\n"
        "print(done, type(error).__name__)\n"
        "del conn, loop\n"
        "gc.collect()\n"
        "print('freed')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, embedded_dsn], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["0", "OperationalError", "freed"], out


@pytest.mark.parametrize(("jobs", "procs", "path", "together"),
                         [(2, 2, "compiled", False), (4, 1, "together", True), (4, 1, "compiled", False)],
                         ids=["a job a process", "a crew of four", "four jobs on the server's cores"])
def test_a_client_side_step_counts_the_lookups_the_server_ran(embedded_dsn, conn, monkeypatch, tmp_path, jobs, procs,
                                                              path, together):
    """No warm-up: every execution of the lookup is one of the window's, folded once (a job's timings are folded
    8,192 at a time: a lookup lost or folded twice at a boundary shows here), whether each job runs its own loop or
    a process's jobs run theirs together (a crew, which the step records). The embedded server runs on the
    client's cores, so by default its jobs run apart."""
    monkeypatch.setenv(LOOKUPS_ENV, path)
    statement = "select id, grp, qty, price, name from capmark.item where id = $1"
    before = calls(conn, statement)
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[jobs], warmup_s=0, duration_s=2,
                                     dsn=embedded_dsn, mode="client", driver_procs=procs, results_dir=tmp_path))
    step = run.tests[0].steps[0]
    assert step.status == "ok" and step.units > 16_384, step
    executed = calls(conn, statement) - before
    print(f"{step.units:,} lookups in the window; the server executed {executed:,}")
    assert executed == step.units
    workers = [p for p in step.driver_cpu["processes"] if p["jobs"]]
    assert len(workers) == procs and all(p.get("together", False) is together for p in workers), workers


def test_loops_run_together_each_on_its_own_connection_to_its_own_limit(crew):
    """Each loop's executions go to its own connection and its own buffers, from where it was asked, as many as its
    own limit: a loop that sent on the wrong connection, wrote another's buffer or stopped all at the first limit
    fails here."""
    sessions = [POSTGRESQL.session(c, STATEMENTS) for c in crew]
    loops = [lookups(s, "keep", seed=i) for i, s in enumerate(sessions)]
    limits = [DRAWS, DRAWS // 2, DRAWS // 4]
    starts = [0, 5, 100]
    arrays = [buffers(start + limit + 10) for start, limit in zip(starts, limits, strict=True)]
    trips0 = [s.round_trips for s in sessions]
    outcomes = run_together([(loop, durations, ends, start, limit) for loop, (durations, ends), start, limit
                             in zip(loops, arrays, starts, limits, strict=True)], KEY_MAX, FAR)
    assert [outcome[:2] for outcome in outcomes] == [(limit, None) for limit in limits]
    for c, s, trips, limit, start, (durations, ends) in zip(crew, sessions, trips0, limits, starts, arrays,
                                                             strict=True):
        assert c.execute("select count(*) from cm_keys").fetchone() == (limit,)
        assert s.round_trips - trips == limit
        assert not durations[:start].any() and not durations[start + limit:].any()  # only where it was asked
        assert (durations[start:start + limit] > 0).all() and (np.diff(ends[start:start + limit]) > 0).all()
    assert_uniform(dict(crew[0].execute("select v, count(*) from cm_keys group by v").fetchall()))


def test_loops_run_together_overlap_their_executions(crew):
    """One thread with an execution in flight on each connection: CREW sleeps of 20 ms take one sleep's time, not
    CREW of them, and each is timed as the Python path times one on its own (alternating, within 2 %)."""
    sessions = [POSTGRESQL.session(c, STATEMENTS) for c in crew]
    loops = [lookups(s, "delay", seed=i) for i, s in enumerate(sessions)]
    arrays = [buffers(DELAYS_TOGETHER) for _ in loops]
    python_path, walls = [], []
    for i in range(DELAYS_TOGETHER):
        t0 = time.perf_counter()
        sessions[0].run("delay", 1)
        python_path.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        outcomes = run_together([(loop, d, e, i, 1) for loop, (d, e) in zip(loops, arrays, strict=True)], 10, FAR)
        walls.append(time.perf_counter() - t0)
        assert [o[:2] for o in outcomes] == [(1, None)] * CREW
    timed = np.concatenate([d for d, _ in arrays])
    print(f"{CREW} sleeps together: wall p50 {statistics.median(walls) * 1e3:.2f} ms, each p50 "
          f"{statistics.median(timed) * 1e3:.3f} ms; alone on the Python path {statistics.median(python_path) * 1e3:.3f}")
    assert timed.min() >= DELAY_S
    assert statistics.median(timed) == pytest.approx(statistics.median(python_path), rel=DELAY_AGREEMENT)
    assert statistics.median(walls) < OVERLAPPED * DELAY_S


DELAYS_TOGETHER = 20
# three 20 ms sleeps sent together end within a millisecond of each other (22 ms measured on an idle host); one
# after another they take 60 ms: half a sleep of room on top of one sleep separates them on a busy host too
OVERLAPPED = 1.5


def test_a_failure_on_one_connection_leaves_the_others_running(crew):
    """The server cancels one connection's statement: that loop hands back psycopg's error and when the failed
    execution started; the others run to their limits, and the failed one's loop runs again afterwards."""
    sessions = [POSTGRESQL.session(c, STATEMENTS) for c in crew]
    crew[0].execute("set statement_timeout = '50ms'")
    loops = [lookups(sessions[0], "long")] + [lookups(s, "plus-one", seed=i) for i, s in enumerate(sessions[1:])]
    arrays = [buffers(300) for _ in loops]
    before = time.perf_counter()
    outcomes = run_together([(loop, d, e, 0, 300) for loop, (d, e) in zip(loops, arrays, strict=True)], 10, FAR)
    done, error, failed_at = outcomes[0]
    assert done == 0 and isinstance(error, psycopg.errors.QueryCanceled), error
    assert before < failed_at < before + 0.05
    assert [o[:2] for o in outcomes[1:]] == [(300, None)] * (CREW - 1)
    crew[0].execute("set statement_timeout = 0")
    outcomes = run_together([(loops[0], *buffers(1), 0, 1), (loops[1], *buffers(5), 0, 5)], 10, FAR)
    assert [o[:2] for o in outcomes] == [(1, None), (5, None)]


def test_a_connection_lost_while_running_together_fails_only_its_loop(crew, embedded_dsn):
    """The server ends one connection's backend in the middle of the batches: its loop says the connection failed,
    after the executions that completed; the others run to their limits."""
    sessions = [POSTGRESQL.session(c, STATEMENTS) for c in crew]
    loops = [lookups(s, "delay", seed=i) for i, s in enumerate(sessions)]
    arrays = [buffers(25) for _ in loops]
    victim = crew[0].info.backend_pid

    def terminate() -> None:
        time.sleep(0.15)
        with psycopg.connect(embedded_dsn, autocommit=True) as killer:
            killer.execute("select pg_terminate_backend(%s)", (victim,))

    killer = threading.Thread(target=terminate)
    killer.start()
    outcomes = run_together([(loop, d, e, 0, 25) for loop, (d, e) in zip(loops, arrays, strict=True)], 10, FAR)
    killer.join()
    done, error, _ = outcomes[0]
    assert 0 < done < 25 and isinstance(error, psycopg.OperationalError), outcomes[0]
    assert POSTGRESQL.is_broken(crew[0])
    assert [o[:2] for o in outcomes[1:]] == [(25, None)] * (CREW - 1)
