"""The compiled lookup loop on MySQL/MariaDB (engines/mysql/_lookups.c): each lookup one binary-protocol execution
that the server counts as such, keys uniform over the table's rows, each lookup timed on the clock the Python path
reads, a statement the server stops handed back as the driver's error with the loop still usable, and a step whose
lookups the server saw arrive by that protocol."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import mysqlserver
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
from capmark.engines.mysql.engine import MYSQL
from capmark.engines.mysql.session import compiled_lookups

pytestmark = pytest.mark.db

STATEMENTS = {"plus-one": "SELECT ? + 1", "keep": "INSERT INTO cm_keys VALUES (?)",
              "delay": "SELECT SLEEP(0.02) FROM DUAL WHERE ? > 0", "long": "SELECT SLEEP(0.5) FROM DUAL WHERE ? > 0"}


COUNTERS = ("Questions", "Com_stmt_execute", "Com_execute_sql")  # the session's, as the server counts them


@pytest.fixture
def conn(mysql_dsn: str):
    connection = mysqlserver.connect()
    connection.query(b"CREATE DATABASE IF NOT EXISTS capmark")  # capmark's own; the table is this session's only
    connection.select_db("capmark")
    connection.query(b"CREATE TEMPORARY TABLE cm_keys (v BIGINT)")
    yield connection
    connection.close()


def test_the_compiled_loop_is_built_where_the_client_librarys_headers_are():
    """.ci/run installs libmariadb's headers: an install that skips the build (a broken setup.py) would run every
    MySQL lookup through the slower Python path, silently."""
    assert compiled_lookups(), "capmark.engines.mysql._lookups was not built; see setup.py"


def test_each_lookup_is_one_binary_execution_the_server_counted(conn):
    session = MYSQL.session(conn, STATEMENTS)
    loop = lookups(session, "plus-one")
    durations, ends = buffers(500)
    trips0 = session.round_trips
    counted = mysqlserver.server_counted(conn, COUNTERS, lambda: loop.run(1000, FAR, durations, ends, 0, 500))
    assert session.round_trips - trips0 == counted["Questions"] == 500
    assert counted["Com_stmt_execute"] == 500  # the binary protocol's execution
    assert counted["Com_execute_sql"] == 0  # not the text EXECUTE ... USING of the Python path


def test_keys_are_uniform_over_one_to_key_max(conn):
    session = MYSQL.session(conn, STATEMENTS)
    durations, ends = buffers(DRAWS)
    done, error, _ = lookups(session, "keep").run(KEY_MAX, FAR, durations, ends, 0, DRAWS)
    assert (done, error) == (DRAWS, None)
    conn.query(b"SELECT v, COUNT(*) FROM cm_keys GROUP BY v ORDER BY v")
    counts = dict(conn.store_result().fetch_row(maxrows=0))
    assert_uniform(counts)


def test_a_known_delay_is_timed_as_the_python_path_times_it(conn):
    session = MYSQL.session(conn, STATEMENTS)
    assert_timed_like_the_python_path(session, "delay")


def test_paced_lookups_wait_for_their_arrivals_and_are_timed_from_them(conn):
    assert_paced_by_its_arrivals(MYSQL.session(conn, STATEMENTS), "plus-one")


def test_a_batch_stops_at_its_end_before_starting_another_lookup(conn):
    session = MYSQL.session(conn, STATEMENTS)
    durations, ends = buffers(1000)
    end = time.perf_counter() + 0.1
    done, error, _ = lookups(session, "delay").run(10, end, durations, ends, 0, 1000)
    assert error is None and 2 <= done < 1000  # ~5 of 20 ms fit in 0.1 s; none starts after the end
    assert ends[done - 1] - durations[done - 1] < end <= time.perf_counter()


def test_a_statement_the_server_stops_is_the_drivers_error_and_the_loop_goes_on(conn):
    if "mariadb" not in conn.get_server_info().lower():
        pytest.skip("max_statement_time is MariaDB's")
    session = MYSQL.session(conn, STATEMENTS)
    loop = lookups(session, "long")
    durations, ends = buffers(4)
    conn.query(b"SET SESSION max_statement_time = 0.05")
    trips0 = session.round_trips
    before = time.perf_counter()
    done, error, failed_at = loop.run(10, FAR, durations, ends, 0, 4)
    assert done == 0 and error is not None
    assert before < failed_at < before + 0.05  # when the failed lookup started, for its second of the series
    assert isinstance(error, MYSQL.error) and MYSQL.is_cancel(error), error
    assert "max_statement_time" in MYSQL.error_text(error)
    assert session.round_trips - trips0 == 1  # the failed execution was a round trip too
    conn.query(b"SET SESSION max_statement_time = 0")
    assert loop.run(10, FAR, durations, ends, 0, 1)[:2] == (1, None)


def test_a_lookup_on_a_closed_connection_fails_as_a_lost_connection_and_frees_safely():
    """A job's connection can be closed (a failed step) while its loop still exists: running it then is the client
    library's error, and freeing it must not touch the freed connection (a crash, not an exception, so it runs in a
    process of its own)."""
    code = (
        "import gc, mysqlserver, numpy\n"
        "from capmark.engines.mysql._lookups import Lookup\n"
        "conn = mysqlserver.connect()\n"
        "loop = Lookup(conn, b'SELECT ? + 1', 1)\n"
        "conn.close()\n"
        "d = numpy.zeros(4)\n"
        "done, error, _ = loop.run(10, float('inf'), d, d.copy(), 0, 4)\n"
        "print(done, error[0] >= 2000)\n"
        "del conn\n"
        "gc.collect()\n"
        "del loop\n"
        "gc.collect()\n"
        "print('freed')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=mysqlserver.__file__.rsplit("/", 1)[0])
    assert out.returncode == 0 and out.stdout.split() == ["0", "True", "freed"], out


def test_a_statement_the_server_refuses_is_the_drivers_error(conn):
    conn.query(b"CREATE TEMPORARY TABLE cm_gone (v BIGINT)")
    session = MYSQL.session(conn, {"gone": "SELECT v FROM cm_gone WHERE v = ?"})
    conn.query(b"DROP TEMPORARY TABLE cm_gone")  # after the session's own PREPARE: the loop's prepare is refused
    with pytest.raises(MYSQL.error) as refused:
        session.key_lookups("gone", 1)
    assert "cm_gone" in MYSQL.error_text(refused.value)
    assert not MYSQL.error_text(refused.value).startswith("(")  # words, not the (code, message) tuple


def global_status(conn: Any) -> dict[str, int]:
    conn.query(b"SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_stmt_execute', 'Com_execute_sql')")
    return {name: int(value) for name, value in conn.store_result().fetch_row(maxrows=0)}


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_client_side_step_sends_its_lookups_by_the_path_it_names(mysql_dsn, conn, path, monkeypatch, tmp_path):
    """The server counts how the step's lookups arrived: binary executions where the loop is compiled, text
    EXECUTEs where the Python path runs (CAPMARK_LOOKUPS=python, read in the job processes)."""
    monkeypatch.setenv(LOOKUPS_ENV, path)
    before = global_status(conn)
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[2], warmup_s=0, duration_s=2, dsn=mysql_dsn,
                                     mode="client", results_dir=tmp_path))
    after = global_status(conn)
    step = run.tests[0].steps[0]
    assert step.status == "ok" and step.units > 1000, step
    # the run says which path it took (the report's environment, and compare when two runs differ in it)
    assert run.environment["capmark"]["lookups"] == {"compiled": "compiled loop", "python": "Python"}[path]
    text = after["Com_execute_sql"] - before["Com_execute_sql"]
    binary = after["Com_stmt_execute"] - before["Com_stmt_execute"] - text  # MariaDB counts a text EXECUTE in both
    print(f"{path}: {step.units:,} lookups in the window; the server counted {binary:,} binary and {text:,} text "
          f"executions over the step")
    arrived, other = (binary, text) if path == "compiled" else (text, binary)
    # no warm-up: every lookup the server ran is one of the window's, folded once (a job's timings are folded 8,192
    # at a time: a lookup lost or folded twice at a boundary shows here)
    assert arrived == step.units
    assert other < step.units / 100  # capmark's own statements around the step, not the lookups
