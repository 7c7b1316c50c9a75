"""The MySQL/MariaDB server the tests measure: the machine's (CI has one), or the one CAPMARK_TEST_MYSQL_DSN names."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

LOCAL_MYSQL = "mysql://root@127.0.0.1:3306/"
ANSWER_TIMEOUT_S = 3


def dsn(database: str = "") -> str:
    """The server's URL, naming `database` (empty: capmark's own)."""
    parts = urlsplit(os.environ.get("CAPMARK_TEST_MYSQL_DSN") or LOCAL_MYSQL)
    return urlunsplit(parts._replace(path=f"/{database}"))


def connect(database: str = "") -> Any:
    """A connection as capmark opens them (autocommit), to `database` where given."""
    from capmark.engines.mysql.connection import connect as capmark_connect

    return capmark_connect(dsn(database))


def answering() -> str:
    """The server's URL; the calling test skips, saying why, where mysqlclient is missing or no server answers."""
    pytest.importorskip("MySQLdb", reason="mysqlclient (capmark's MySQL extra) is not installed")
    from capmark.engines.mysql.connection import connect as capmark_connect
    from capmark.errors import CapmarkError

    try:
        capmark_connect(dsn(), timeout_s=ANSWER_TIMEOUT_S).close()
    except CapmarkError as err:
        pytest.skip(f"no MySQL/MariaDB server answers: {err}")
    return dsn()
