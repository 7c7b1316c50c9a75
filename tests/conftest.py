"""Targets for integration tests: the embedded PostgreSQL 18 always; CAPMARK_TEST_DSN when set; in CI
also the machine's PostgreSQL on 127.0.0.1:5432 when it answers."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import mysqlserver
import packages
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


# Fixtures that reach a live server: a test that uses one (directly or through another fixture), or is marked db
# (it may ask for one by name), measures.
LIVE_FIXTURES = frozenset({"embedded_dsn", "target_dsn", "mysql_dsn", "dbwr_run"})
# Folders whose tests read stored runs and measure nothing; they run first, while the packages some later tests need
# install in the background (tests/packages.py). Only their modules none of whose tests uses a live fixture, and not
# these: the report's workers are bounded in time (gone within 0.5 s of an interrupt), and a busy host could
# stretch that.
STORED_RUN_FOLDERS = ("tests/model/", "tests/capacity/", "tests/plan/", "tests/report/", "tests/analysis/")
TIMED_MODULES = ("tests/report/test_report_workers.py",)
# Modules that need an installed package (tests/packages.py): last among the stored-run tests, so the install has
# had the others' time to finish.
NEEDS_A_PACKAGE = ("tests/report/test_observation_html.py", "tests/report/test_report_browser.py")


_STORED_RUN_MODULES: set[str] = set()  # filled once the tests are collected


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _reads_stored_runs(item: pytest.Item) -> bool:
    return _module(item) in _STORED_RUN_MODULES


def _order(item: pytest.Item) -> int:
    if _module(item) in REBUILD_THE_SHARED_MODEL:
        return 3
    if not _reads_stored_runs(item):
        return 2
    return 1 if _module(item) in NEEDS_A_PACKAGE else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Whole modules move (a module split in two would set its module fixtures up twice)."""
    candidates = {_module(i) for i in items if _module(i).startswith(STORED_RUN_FOLDERS)} - set(TIMED_MODULES)
    live = {_module(i) for i in items if LIVE_FIXTURES & set(getattr(i, "fixturenames", ())) or i.get_closest_marker("db")}
    _STORED_RUN_MODULES.update(candidates - live)
    items.sort(key=_order)  # stable: within each group the tests keep their order
    # the packages of the helpers a collected test imported, each by the program it provides
    helpers = [sys.modules[name] for name in ("browser", "node_exporter_process") if name in sys.modules]
    if items and helpers:
        packages.start({program: package for helper in helpers for program, package in helper.PACKAGES.items()})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """No test that measures or starts a server runs while the background install uses the host."""
    if not _reads_stored_runs(item):
        packages.wait()


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
