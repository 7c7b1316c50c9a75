"""Autovacuum paused on a test's server, for tests that count what every process of the server did: a worker commits
transactions of its own and comes and goes between samples like a short connection."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

DRAIN_S = 60.0  # how long the workers already at work (on what earlier tests left) may take to end


@contextmanager
def paused(conn: psycopg.Connection) -> Iterator[None]:
    """No autovacuum worker during the block (conn in autocommit mode); the setting is reset however it ends."""
    try:
        conn.execute("alter system set autovacuum = off")
        conn.execute("select pg_reload_conf()")
        deadline = time.monotonic() + DRAIN_S
        while _workers(conn):
            assert time.monotonic() < deadline, f"autovacuum workers still ran after {DRAIN_S:g} s"
            time.sleep(0.1)
        yield
    finally:
        conn.execute("alter system reset autovacuum")
        conn.execute("select pg_reload_conf()")


def _workers(conn: psycopg.Connection) -> int:
    row = conn.execute("select count(*) from pg_stat_activity where backend_type = 'autovacuum worker'").fetchone()
    return row[0] if row else 0
