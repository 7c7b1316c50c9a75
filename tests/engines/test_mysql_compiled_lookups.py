"""The compiled lookup loop on MySQL/MariaDB (engines/mysql/_lookups.c): each lookup one binary-protocol execution
that the server counts as such, keys uniform over the table's rows, each lookup timed on the clock the Python path
reads, a statement the server stops handed back as the driver's error with the loop still usable, and a step whose
lookups the server saw arrive by that protocol."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

import mysqlserver
import numpy as np
import pytest
from liveruns import run_without_report

from capmark.config import RunSpec
from capmark.engines.base import LOOKUPS_ENV
from capmark.engines.mysql.engine import MYSQL
from capmark.engines.mysql.session import KeyLookups, MysqlSession, compiled_lookups

pytestmark = pytest.mark.db

FAR = float("inf")  # a batch's end that never comes: the batch runs its limit
STATEMENTS = {"plus-one": "SELECT ? + 1", "keep": "INSERT INTO cm_keys VALUES (?)",
              "delay": "SELECT SLEEP(0.02) FROM DUAL WHERE ? > 0", "long": "SELECT SLEEP(0.5) FROM DUAL WHERE ? > 0"}
KEY_MAX = 8
DRAWS = 8_000
# each key's count is binomial(DRAWS, 1/KEY_MAX): 4.5 standard deviations leave a false alarm once in 10^5 runs,
# while a key never drawn (or drawn twice as often, as an off-by-one on the range's end gives) is far outside
SIGMAS = 4.5
DELAYS = 30
DELAY_S = 0.02
# a 20 ms sleep timed in C around a binary execution against the same sleep timed by perf_counter around the text
# protocol's EXECUTE, alternately: the two paths differ by about 80 us (measured with a 5 ms sleep: p50 5.294 against
# 5.375 ms), 0.4 % of the delay; a wrong clock or unit, or a lookup timed without its result, is not within 2 %
DELAY_AGREEMENT = 0.02


def status(conn: Any) -> dict[str, int]:
    """This session's statement counters as the server keeps them."""
    conn.query(b"SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_execute', 'Com_execute_sql')")
    return {name: int(value) for name, value in conn.store_result().fetch_row(maxrows=0)}


def server_counted(conn: Any, work: Any) -> dict[str, int]:
    """What the server counted for `work`, less what reading the counters adds (measured, not assumed)."""
    first, second = status(conn), status(conn)
    reading = {k: second[k] - first[k] for k in second}
    before = status(conn)
    work()
    after = status(conn)
    return {k: after[k] - before[k] - reading[k] for k in after}


@pytest.fixture
def conn(mysql_dsn: str):
    connection = mysqlserver.connect()
    connection.query(b"CREATE DATABASE IF NOT EXISTS capmark")  # capmark's own; the table is this session's only
    connection.select_db("capmark")
    connection.query(b"CREATE TEMPORARY TABLE cm_keys (v BIGINT)")
    yield connection
    connection.close()


def lookups(session: MysqlSession, name: str, seed: int = 7) -> KeyLookups:
    loop = session.key_lookups(name, seed)
    assert loop is not None, "the compiled lookup loop is not built in this install"
    return loop


def buffers(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n), np.zeros(n)


def test_the_compiled_loop_is_built_where_the_client_librarys_headers_are():
    """.ci/run installs libmariadb's headers: an install that skips the build (a broken setup.py) would run every
    MySQL lookup through the slower Python path, silently."""
    assert compiled_lookups(), "capmark.engines.mysql._lookups was not built; see setup.py"


def test_each_lookup_is_one_binary_execution_the_server_counted(conn):
    session = MYSQL.session(conn, STATEMENTS)
    loop = lookups(session, "plus-one")
    durations, ends = buffers(500)
    trips0 = session.round_trips
    counted = server_counted(conn, lambda: loop.run(1000, FAR, durations, ends, 0, 500))
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
    assert sorted(counts) == list(range(1, KEY_MAX + 1)), counts
    expected = DRAWS / KEY_MAX
    sigma = (DRAWS * (1 / KEY_MAX) * (1 - 1 / KEY_MAX)) ** 0.5
    assert all(abs(c - expected) < SIGMAS * sigma for c in counts.values()), counts


def test_a_known_delay_is_timed_as_the_python_path_times_it(conn):
    session = MYSQL.session(conn, STATEMENTS)
    loop = lookups(session, "delay")
    durations, ends = buffers(DELAYS + 10)
    python_path, stamps = [], []
    for i in range(DELAYS):  # alternating, so that both see the host in the same state
        t0 = time.perf_counter()
        session.run("delay", 1)
        python_path.append(time.perf_counter() - t0)
        before = time.perf_counter()
        assert loop.run(10, FAR, durations, ends, 10 + i, 1)[:2] == (1, None)  # from index 10
        stamps.append((before, time.perf_counter()))
    assert not durations[:10].any()  # nothing written before `start`
    timed = durations[10:]
    print(f"20 ms sleep: p50 {statistics.median(timed) * 1e3:.3f} ms compiled, "
          f"{statistics.median(python_path) * 1e3:.3f} ms by perf_counter on the Python path")
    assert statistics.median(timed) == pytest.approx(statistics.median(python_path), rel=DELAY_AGREEMENT)
    assert timed.min() >= DELAY_S
    # the end times are perf_counter's clock: each lookup inside its call
    for (before, after), duration, end in zip(stamps, timed, ends[10:], strict=True):
        assert before < end - duration and end <= after


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
    text = after["Com_execute_sql"] - before["Com_execute_sql"]
    binary = after["Com_stmt_execute"] - before["Com_stmt_execute"] - text  # MariaDB counts a text EXECUTE in both
    print(f"{path}: {step.units:,} lookups in the window; the server counted {binary:,} binary and {text:,} text "
          f"executions over the step")
    arrived, other = (binary, text) if path == "compiled" else (text, binary)
    # no warm-up: every lookup the server ran is one of the window's, folded once (a job's timings are folded 8,192
    # at a time: a lookup lost or folded twice at a boundary shows here)
    assert arrived == step.units
    assert other < step.units / 100  # capmark's own statements around the step, not the lookups
