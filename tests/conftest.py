"""Targets for integration tests: the embedded PostgreSQL 18 always; CAPMARK_TEST_DSN when set; in CI
also the machine's PostgreSQL on 127.0.0.1:5432 when it answers."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from capmark.engines import embedded

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def _answers(dsn: str) -> bool:
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
        return True
    except psycopg.Error:
        return False


def _target_names() -> list[str]:
    names = ["embedded"]
    if os.environ.get("CAPMARK_TEST_DSN"):
        names.append("env-dsn")
    if os.environ.get("CI") and _answers(LOCAL_PG) and os.environ.get("CAPMARK_TEST_DSN") != LOCAL_PG:
        names.append("local-pg")
    return names


@pytest.fixture(scope="session")
def embedded_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    data_dir = Path(os.environ.get("CAPMARK_TEST_DATA_DIR") or tmp_path_factory.mktemp("pg") / "data")
    url = embedded.start(data_dir)
    yield url
    if not os.environ.get("CAPMARK_TEST_DATA_DIR"):
        embedded.stop(data_dir)


@pytest.fixture(scope="session", params=_target_names())
def target_dsn(request: pytest.FixtureRequest) -> str:
    if request.param == "embedded":
        return request.getfixturevalue("embedded_dsn")
    if request.param == "env-dsn":
        return os.environ["CAPMARK_TEST_DSN"]
    return LOCAL_PG


# MySQL/MariaDB: the machine's server (CI has one), or CAPMARK_TEST_MYSQL_DSN
LOCAL_MYSQL = "mysql://root@127.0.0.1:3306/"


@pytest.fixture(scope="session")
def mysql_dsn() -> str:
    """A MySQL/MariaDB server to measure; the tests that need one skip, saying why, where none answers."""
    dsn = os.environ.get("CAPMARK_TEST_MYSQL_DSN") or LOCAL_MYSQL
    pytest.importorskip("MySQLdb", reason="mysqlclient (capmark's MySQL extra) is not installed")
    from capmark.engines.mysql.connection import connect
    from capmark.errors import CapmarkError

    try:
        connect(dsn, timeout_s=3).close()
    except CapmarkError as err:
        pytest.skip(f"no MySQL/MariaDB server answers: {err}")
    return dsn
