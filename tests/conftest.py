"""Targets for integration tests: the embedded PostgreSQL 18 always; CAPMARK_TEST_DSN when set; in CI
also the machine's PostgreSQL on 127.0.0.1:5432 when it answers."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import mysqlserver
import psycopg
import pytest

from capmark.engines.postgres import embedded
from capmark.results import RunResult

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"

# A suite started in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and so would
# every capmark the tests start: the Ctrl-C tests would then test nothing. A user's terminal delivers SIGINT.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Modules that rebuild a server's shared data model at sizes of their own run after every other test: before, the
# MariaDB model at small sizes (test_mysql_datamodel) made the next run at the default sizes build it again, about
# a minute on this machine, once per suite.
REBUILD_THE_SHARED_MODEL = ("tests/engines/test_mysql_datamodel.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("::")[0] in REBUILD_THE_SHARED_MODEL)  # stable: the rest keep order


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
def embedded_dsn() -> str:
    """The session's embedded server, in a folder outside pytest's temporary tree: the server's own system user
    (tests run as root) may not enter that tree, and capmark opens no folder it did not create."""
    base = None if os.environ.get("CAPMARK_TEST_DATA_DIR") else Path(tempfile.mkdtemp(prefix="capmark-test-pg-"))
    if base is not None:
        base.chmod(0o755)
    data_dir = base / "data" if base is not None else Path(os.environ["CAPMARK_TEST_DATA_DIR"])
    url = embedded.start(data_dir)
    yield url
    if base is not None:
        embedded.stop(data_dir)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def dbwr_run(embedded_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """dbwr-thr at one job, measured once for the tests that read its forced checkpoints (the demands attributed to
    the checkpointer, the checkpoint inside the measured units)."""
    from liveruns import run_without_report

    from capmark.config import RunSpec

    return run_without_report(RunSpec(workloads=["dbwr-thr"], jobs=[1], warmup_s=0.5, duration_s=2.5,
                                      dsn=embedded_dsn, results_dir=tmp_path_factory.mktemp("dbwr")))


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
