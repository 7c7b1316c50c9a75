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


def session_status(conn: Any, names: tuple[str, ...]) -> dict[str, int]:
    """This session's counters `names` as the server keeps them (per session, independently of capmark)."""
    listed = ", ".join(f"'{n}'" for n in names)
    conn.query(f"SHOW SESSION STATUS WHERE Variable_name IN ({listed})".encode())
    return {name: int(value) for name, value in conn.store_result().fetch_row(maxrows=0)}


def server_counted(conn: Any, names: tuple[str, ...], work: Any) -> dict[str, int]:
    """How much of each counter `work` added on this session, less what reading the counters adds (measured here
    from two readings in a row, not assumed)."""
    first, second = session_status(conn, names), session_status(conn, names)
    reading = {k: second[k] - first[k] for k in second}
    before = session_status(conn, names)
    work()
    after = session_status(conn, names)
    return {k: after[k] - before[k] - reading[k] for k in after}
