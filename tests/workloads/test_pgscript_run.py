"""Running a script on a real server: per-command statistics, statements prepared once per connection, \\sleep,
retries after a real serialization failure (the same random values on the retry, the variables restored after
the last try), errors that leave the connection idle, and the checks made before a run."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import pq

from capmark.workloads.pgscript import ScriptError, ScriptRunner, ScriptRuntimeError, parse_script
from capmark.workloads.pgscript.randoms import PgPrng, random_uniform
from capmark.workloads.pgscript.values import TextValue

pytestmark = pytest.mark.db

TABLE = "capmark.pgscript_run"
SLEEP_MS = 30
CONFLICT_PAUSE_S = 0.2  # how long the script holds its snapshot while another session updates the row
WAIT_S = 10


@pytest.fixture(scope="module")
def dsn(embedded_dsn):
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("create schema if not exists capmark")
        conn.execute(f"drop table if exists {TABLE}")
        conn.execute(f"create table {TABLE} (id int primary key, v int)")
    yield embedded_dsn
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute(f"drop table if exists {TABLE}")


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"delete from {TABLE}")
        c.execute(f"insert into {TABLE} values (1, 0)")
        yield c


def idle(conn) -> bool:
    return conn.pgconn.transaction_status == pq.TransactionStatus.IDLE and conn.pgconn.pipeline_status == 0


def test_commands_are_timed_and_prepared_once_per_connection(conn):
    script = parse_script(f"\\set id 1\nselect v from {TABLE} where id = :id \\gset\n\\sleep {SLEEP_MS} ms\n"
                          f"update {TABLE} set v = :v + 1 where id = :id;\n", "t.sql")
    runner = ScriptRunner(script, conn, statement_prefix="pgs_t_")
    for _ in range(3):
        assert runner.run().ok
    assert runner.stats.counts == [3, 3, 3, 3]
    assert runner.round_trips == 2 + 3 * 2  # two PREPAREs, then two executions a run
    assert 3 * SLEEP_MS / 1000 <= runner.stats.seconds[2] < 3 * SLEEP_MS / 1000 + 1.0
    assert all(s > 0 for s in runner.stats.seconds)
    names = conn.execute("select name from pg_prepared_statements where name like 'pgs_t_%' order by 1").fetchall()
    assert [n for (n,) in names] == ["pgs_t_1", "pgs_t_3"]
    assert conn.execute(f"select v from {TABLE} where id = 1").fetchone() == (3,)
    assert runner.vars["v"] == TextValue("2")  # \gset stores text, as pgbench


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_text_variables_reach_sql_as_their_text_in_every_mode(conn, mode):
    script = parse_script("select :d::text as t, :n + 1 as n1 \\gset\n"
                          "select ':d' as quoted, $$:d$$ as dollar \\gset\n")
    runner = ScriptRunner(script, conn, query_mode=mode, variables={"d": "007", "n": 41})
    assert runner.run().ok
    written = "7" if mode == "simple" else "007"  # simple mode writes the text into SQL: 007::text is a number
    assert runner.vars["t"] == TextValue(written) and runner.vars["n1"] == TextValue("42")
    assert runner.vars["quoted"] == TextValue(":d") == runner.vars["dollar"]  # quoted text is never replaced


@pytest.mark.parametrize("mode", ["simple", "extended", "prepared"])
def test_aset_keeps_the_last_row_and_ignores_an_empty_result(conn, mode):
    script = parse_script("select 1 as a where false \\aset\nselect g as b from generate_series(1, 3) g \\aset\n")
    runner = ScriptRunner(script, conn, query_mode=mode, variables={"a": "before"})
    assert runner.run().ok
    assert runner.vars["a"] == TextValue("before") and runner.vars["b"] == TextValue("3")


def test_conditionals_take_the_first_true_branch(conn):
    script = parse_script("\\if :x = 1\n\\set r 10\n\\elif :x = 2\n\\set r 20\n\\elif :x = 3\n\\set r 30\n"
                          "\\else\n\\if :x > 100\n\\set r 1000\n\\else\n\\set r 40\n\\endif\n\\endif\n\\set after 1\n")
    got = {}
    for x in (1, 2, 3, 4, 500):
        runner = ScriptRunner(script, conn, variables={"x": x})
        runner.run()
        got[x] = (runner.vars["r"], runner.vars["after"])
    assert got == {1: (10, 1), 2: (20, 1), 3: (30, 1), 4: (40, 1), 500: (1000, 1)}


def _conflicting_update(dsn: str, victim_pid: int, done: threading.Event) -> None:
    """Wait until the script holds its snapshot (it is in pg_sleep), then update the row under it."""
    with psycopg.connect(dsn, autocommit=True) as other:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            row = other.execute("select 1 from pg_stat_activity where pid = %s and state = 'active' "
                                "and query like '%%pg_sleep%%'", [victim_pid]).fetchone()
            if row:
                other.execute(f"update {TABLE} set v = v + 100 where id = 1")
                break
            time.sleep(0.005)
    done.set()


SERIALIZABLE = parse_script(f"""\\set r random(1, 1000000000)
begin isolation level repeatable read;
select v from {TABLE} where id = 1;
select pg_sleep({CONFLICT_PAUSE_S});
update {TABLE} set v = v + 1 where id = 1;
commit;
""", "ser.sql")
UPDATE_INDEX = 4


def _run_with_conflict(dsn, conn, max_tries):
    runner = ScriptRunner(SERIALIZABLE, conn, rng=PgPrng(99))
    done = threading.Event()
    thread = threading.Thread(target=_conflicting_update, args=(dsn, conn.info.backend_pid, done))
    thread.start()
    try:
        result = runner.run(max_tries=max_tries)
    finally:
        thread.join(WAIT_S)
    assert done.is_set()
    return runner, result


def test_a_serialization_failure_is_retried_with_the_same_random_values(dsn, conn):
    runner, result = _run_with_conflict(dsn, conn, max_tries=3)
    assert (result.ok, result.tries) == (True, 2)
    assert conn.execute(f"select v from {TABLE} where id = 1").fetchone() == (101,)
    assert runner.stats.retries[UPDATE_INDEX] == 1 and sum(runner.stats.failures) == 0
    assert runner.vars["r"] == random_uniform(PgPrng(99), 1, 1000000000)  # the retry redrew the first value
    assert idle(conn)


def test_a_serialization_failure_on_the_last_try_fails_the_transaction(dsn, conn):
    runner, result = _run_with_conflict(dsn, conn, max_tries=1)
    assert (result.ok, result.tries, result.sqlstate, result.failure) == (False, 1, "40001", "serialization")
    assert conn.execute(f"select v from {TABLE} where id = 1").fetchone() == (100,)
    assert runner.stats.failures[UPDATE_INDEX] == 1 and sum(runner.stats.retries) == 0
    assert "r" not in runner.vars  # the variables are as they were before the transaction
    assert runner.rng.getstate() != PgPrng(99).getstate()  # but the generator moved on
    assert idle(conn)
    assert runner.run().ok  # the connection is usable for the next transaction


@pytest.mark.parametrize(("text", "line", "phrase", "sqlstate"), [
    (f"begin;\nupdate {TABLE} set v = 1;\nselect * from capmark.no_such;\ncommit;\n", 3,
     'relation "capmark.no_such" does not exist', "42P01"),
    ("select 1;\nselect :a,\n  :nope;\n", 3, 'undefined variable "nope" in an SQL command', None),
    ("\\set x 1\n\\set y :x / 0\n", 2, "\\set y: division by zero", None),
    ("\\if :nope\n\\endif\n", 1, '\\if: undefined variable "nope"', None),
    (f"begin;\nupdate {TABLE} set v = 7;\n", 2, "the transaction still open", None),
    ("select 1 \\gset\n", 1, "cannot store column '?column?'", None),
    ("\\sleep :s\n", 1, '\\sleep: invalid sleep time "soon"', None),
    (f"\\startpipeline\nupdate {TABLE} set v = 5;\nselect 1/0;\n\\endpipeline\n", 3, "division by zero", "22012"),
])
def test_errors_name_the_line_and_leave_the_connection_idle(conn, text, line, phrase, sqlstate):
    runner = ScriptRunner(parse_script(text, "e.sql"), conn, variables={"a": 1, "s": "soon"})
    with pytest.raises(ScriptRuntimeError) as err:
        runner.run()
    assert str(err.value).startswith(f"e.sql line {line}: ") and phrase in str(err.value), str(err.value)
    assert err.value.sqlstate == sqlstate
    assert idle(conn)
    assert conn.execute(f"select v from {TABLE} where id = 1").fetchone() == (0,)  # rolled back


def test_a_pipeline_runs_its_commands_in_order(conn):
    script = parse_script(f"\\startpipeline\nbegin;\nupdate {TABLE} set v = v + 1;\nupdate {TABLE} set v = v * 10;\n"
                          f"commit;\n\\syncpipeline\nupdate {TABLE} set v = v + :d;\n\\endpipeline\n"
                          f"select v from {TABLE} \\gset\n")
    runner = ScriptRunner(script, conn, query_mode="extended", variables={"d": 5})
    assert runner.run().ok and runner.vars["v"] == TextValue("15") and idle(conn)


@pytest.mark.parametrize(("text", "options", "phrase"), [
    ("\\startpipeline\nselect 1;\n\\endpipeline\n", {"query_mode": "simple"}, "line 1, column 1: a pipeline needs"),
    ("select 1 \\; select 2;\n", {"query_mode": "prepared"}, "line 1, column 1: a compound SQL command"),
    ("select 1;\n\\shell echo hi\n", {}, "line 2, column 1: \\shell runs a shell command, which capmark runs only "
     "when the command line allows it; add --allow-shell"),
    ("select 1;\n", {"query_mode": "fast"}, "unknown query mode 'fast'"),
])
def test_what_cannot_run_is_refused_before_the_run(conn, text, options, phrase):
    with pytest.raises(ScriptError) as err:
        ScriptRunner(parse_script(text, "r.sql"), conn, **options)
    assert phrase in str(err.value) and not isinstance(err.value, ScriptRuntimeError)


def test_shell_commands_run_when_allowed(conn):
    script = parse_script("\\setshell x echo 41\n\\set y :x + 1\n\\shell true\n\\setshell z echo :y\n")
    runner = ScriptRunner(script, conn, allow_shell=True)
    assert runner.run().ok and (runner.vars["y"], runner.vars["z"]) == (42, 42)
    failing = ScriptRunner(parse_script("\\shell false\n", "sh.sql"), conn, allow_shell=True)
    with pytest.raises(ScriptRuntimeError, match="sh.sql line 1: \\\\shell command failed"):
        failing.run()


def test_shell_words_are_the_commands_arguments_with_no_shell_between(conn, tmp_path):
    """A variable is one argument whatever it holds (a ';' does not start a second command, spaces do not split
    it), ::x is the text :x, and a command that does not exist fails its script in one sentence."""
    pwned = tmp_path / "PWNED"
    value = f"x; touch {pwned}"
    script = parse_script("\\setshell n expr length :v\n\\setshell m expr length ::ab\n", "w.sql")
    runner = ScriptRunner(script, conn, allow_shell=True, variables={"v": value})
    assert runner.run().ok
    assert (runner.vars["n"], runner.vars["m"]) == (len(value), len(":ab"))
    assert not pwned.exists()
    missing = ScriptRunner(parse_script("\\shell no-such-command-capmark :v\n", "m.sql"), conn, allow_shell=True,
                           variables={"v": "1"})
    with pytest.raises(ScriptRuntimeError) as err:
        missing.run()
    message = str(err.value)
    assert message.startswith("m.sql line 1: ") and "no-such-command-capmark" in message and "not found" in message
    assert message.endswith(".") and ". " not in message
