"""The compiled lookup loop on PostgreSQL (engines/postgres/_lookups.c): each lookup one execution of the session's
prepared statement that the server counts, keys uniform over the table's rows, each lookup timed on the clock the
Python path reads, a statement the server cancels handed back as psycopg's error with the loop still usable, a
closed connection an error and never a crash, and a step whose lookups the server counted one for one."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import psycopg.sql
import pytest
from liveruns import run_without_report
from lookuploops import (
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
from capmark.engines.base import LOOKUPS_ENV
from capmark.engines.postgres.engine import POSTGRESQL
from capmark.engines.postgres.session import compiled_lookups

pytestmark = pytest.mark.db

PROBE = "select $1::bigint as cm_compiled_probe"  # no constant: the server stores the text as it is
STATEMENTS = {"plus-one": PROBE, "keep": "insert into cm_keys values ($1)",
              "delay": "select pg_sleep(0.02) where $1::int > 0", "long": "select pg_sleep(0.5) where $1::int > 0"}


@pytest.fixture
def conn(embedded_dsn: str) -> Iterator[psycopg.Connection]:
    connection = psycopg.connect(embedded_dsn, autocommit=True)
    connection.execute("create temp table cm_keys (v bigint)")
    yield connection
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


def test_a_client_side_step_counts_the_lookups_the_server_ran(embedded_dsn, conn, monkeypatch, tmp_path):
    """No warm-up: every execution of the lookup is one of the window's, folded once (a job's timings are folded
    8,192 at a time: a lookup lost or folded twice at a boundary shows here)."""
    monkeypatch.setenv(LOOKUPS_ENV, "compiled")
    statement = "select id, grp, qty, price, name from capmark.item where id = $1"
    before = calls(conn, statement)
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[2], warmup_s=0, duration_s=2, dsn=embedded_dsn,
                                     mode="client", results_dir=tmp_path))
    step = run.tests[0].steps[0]
    assert step.status == "ok" and step.units > 16_384, step
    executed = calls(conn, statement) - before
    print(f"{step.units:,} lookups in the window; the server executed {executed:,}")
    assert executed == step.units
