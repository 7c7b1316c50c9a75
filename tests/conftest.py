"""Targets for integration tests: the embedded PostgreSQL 18 always; CAPMARK_TEST_DSN when set; in CI
also the machine's PostgreSQL on 127.0.0.1:5432 when it answers."""

from __future__ import annotations

import os
from pathlib import Path

import mysqlserver
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



@pytest.fixture(scope="session")
def mysql_dsn() -> str:
    """A MySQL/MariaDB server to measure (tests/mysqlserver.py); the tests that need one skip, saying why, where
    none answers."""
    return mysqlserver.answering()
