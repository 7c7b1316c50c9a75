"""Who waits for the WAL flush, on the embedded PostgreSQL: a reader that prunes dead row versions writes WAL, yet its
transaction takes no transaction id (the server's own pg_current_xact_id_if_assigned), so no commit of it waits for
a flush; the planning analysis must tell it from a writer by pg_stat_statements' counters alone (query text is
optional), or it charges readers a share of the flush they never wait for."""

from __future__ import annotations

import psycopg
import pytest

from capmark.capacity.workloads import changes_rows
from capmark.observations import StatementDelta

pytestmark = pytest.mark.db
SCHEMA = "row_changes_test"  # the test's own, dropped at the end
ROWS = 400
PAD = 300  # bytes a row: about 25 rows a page, so that the updates fill pages with dead versions
UPDATE_ROUNDS = 6
COUNTERS = "calls, rows, wal_records, wal_fpi, wal_bytes"


def _counters(conn: psycopg.Connection, tag: str) -> dict[str, float]:
    """pg_stat_statements' counters of the statement whose text carries tag (a comment), summed."""
    row = conn.execute(f"select {', '.join(f'coalesce(sum({c}), 0)::float8' for c in COUNTERS.split(', '))} "
                       "from capmark.pg_stat_statements where query like %s", (f"%{tag}%",)).fetchone()
    assert row is not None
    return dict(zip(COUNTERS.split(", "), row, strict=True))


def _delta(conn: psycopg.Connection, tag: str, before: dict[str, float]) -> StatementDelta:
    after = _counters(conn, tag)
    d = {k: after[k] - before[k] for k in after}
    return StatementDelta(query_id=tag, database="postgres", user="postgres", calls=d["calls"], rows=d["rows"],
                          wal_records=d["wal_records"], wal_fpi=d["wal_fpi"], wal_bytes=d["wal_bytes"])


@pytest.fixture()
def conn(embedded_dsn: str):
    with psycopg.connect(embedded_dsn, autocommit=True) as c:
        c.execute(f"drop schema if exists {SCHEMA} cascade")
        c.execute(f"create schema {SCHEMA}")
        c.execute(f"create table {SCHEMA}.t (id int primary key, v int not null, pad text not null) "
                  "with (fillfactor = 100, autovacuum_enabled = off)")
        yield c
        c.execute(f"drop schema {SCHEMA} cascade")


def test_a_pruning_reader_writes_wal_without_a_transaction_id_and_is_told_from_writers(conn: psycopg.Connection):
    tags = {k: f"/* row-changes {k} */" for k in ("insert", "update", "update-none", "read")}
    before = {k: _counters(conn, tag) for k, tag in tags.items()}
    for i in range(ROWS):
        conn.execute(f"insert into {SCHEMA}.t values (%s, 0, repeat('x', {PAD})) {tags['insert']}", (i,))
    for _ in range(UPDATE_ROUNDS):  # leaves dead versions on every page; no snapshot holds them visible
        for i in range(ROWS):
            conn.execute(f"update {SCHEMA}.t set v = v + 1 where id = %s {tags['update']}", (i,))
    conn.execute(f"update {SCHEMA}.t set v = v + 1 where id < 0 {tags['update-none']}")
    with conn.transaction():  # the first reads of the pages prune them: WAL, but no transaction id
        lsn = conn.execute("select pg_current_wal_insert_lsn()").fetchone()[0]
        for i in range(ROWS):
            conn.execute(f"select v from {SCHEMA}.t where id = %s {tags['read']}", (i,))
        xid = conn.execute("select pg_current_xact_id_if_assigned()").fetchone()[0]
        wrote = conn.execute("select pg_current_wal_insert_lsn() - %s::pg_lsn", (lsn,)).fetchone()[0]
    stats = {k: _delta(conn, tag, before[k]) for k, tag in tags.items()}

    read = stats["read"]
    assert read.calls == ROWS and read.rows == ROWS
    assert read.wal_records > 0 and wrote > 0, "the reads pruned nothing: the test's table did not get dead versions"
    assert xid is None, "a transaction that only read took a transaction id: its commit would wait for the flush"
    assert not changes_rows(read), read
    assert changes_rows(stats["insert"]) and changes_rows(stats["update"]), (stats["insert"], stats["update"])
    assert stats["update-none"].calls == 1 and not changes_rows(stats["update-none"]), stats["update-none"]
