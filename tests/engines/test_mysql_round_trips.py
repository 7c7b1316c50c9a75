"""Round trips a MySQL/MariaDB session counts are the statements the server counts (its Questions status counter,
kept by the server per session, independently of capmark): MariaDB's one EXECUTE ... USING a unit, and MySQL's
SET of the parameters followed by EXECUTE ... USING the user variables, which MariaDB runs as well."""

from __future__ import annotations

import mysqlserver
import pytest

from capmark.engines.mysql.describe import is_mariadb
from capmark.engines.mysql.engine import MYSQL
from capmark.engines.mysql.session import MysqlSession

pytestmark = pytest.mark.db

STATEMENTS = {"one-key": "SELECT ? + 1", "two-keys": "SELECT CONCAT(?, '-', ?)", "none": "SELECT 1"}
# (statement, parameters) as the workloads call them: one integer key (the fast path), several or a string, none
UNITS: list[tuple[str, tuple[int | str, ...]]] = [("one-key", (7,)), ("two-keys", (3, "it's")), ("none", ())]
REPEATS = 5


COUNTERS = ("Questions", "Com_execute_sql", "Com_set_option")  # the session's, as the server counts them


@pytest.fixture
def conn(mysql_dsn: str):
    connection = mysqlserver.connect()
    yield connection
    connection.close()


def run_units(session: MysqlSession) -> None:
    for _ in range(REPEATS):
        session.begin()
        for name, params in UNITS:
            session.run(name, *params)
        session.commit()


@pytest.mark.parametrize("literal_using", [True, False], ids=["mariadb-literals", "mysql-user-variables"])
def test_round_trips_are_the_statements_the_server_counted(conn, literal_using):
    session = MysqlSession(conn, STATEMENTS, literal_using=literal_using)
    trips0 = session.round_trips
    counted = mysqlserver.server_counted(conn, COUNTERS, lambda: run_units(session))
    assert session.round_trips - trips0 == counted["Questions"]
    assert counted["Com_execute_sql"] == REPEATS * len(UNITS)  # every unit ran its prepared statement once
    with_params = sum(1 for _, params in UNITS if params)
    # MySQL's way sets the parameters in a statement of its own before each EXECUTE that takes some
    assert counted["Com_set_option"] == (0 if literal_using else REPEATS * with_params)


def test_the_engine_uses_literals_on_mariadb(conn):
    """The path the engine picks for this server; the count above holds for either."""
    session = MYSQL.session(conn, STATEMENTS)
    trips0 = session.round_trips
    counted = mysqlserver.server_counted(conn, COUNTERS, lambda: run_units(session))
    assert session.round_trips - trips0 == counted["Questions"]
    if is_mariadb(conn.get_server_info()):
        assert counted["Com_set_option"] == 0
        assert counted["Questions"] == REPEATS * (len(UNITS) + 2)  # a unit each, and BEGIN and COMMIT
