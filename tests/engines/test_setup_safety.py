"""capmark's data setup on a real embedded PostgreSQL stays inside schema capmark: it never drops a user's
object, works for a role its DBA gave a schema but not the database, and keeps pg_stat_statements in capmark.
Each test uses a fresh database of its own and a tiny model, so nothing here depends on --scale."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from capmark.engines.postgres import describe, embedded
from capmark.errors import CapmarkError
from capmark.workloads import datamodel
from capmark.workloads.base import DataSize

pytestmark = pytest.mark.db
TINY = DataSize(items=200, accounts=100, booking_accounts=10, call_customers=5, ring_rows=4, sto_rows=100)
TINY_BIGGER = DataSize(items=300, accounts=100, booking_accounts=10, call_customers=5, ring_rows=4, sto_rows=100)


@pytest.fixture
def fresh_db(embedded_dsn: str) -> Iterator[str]:
    """The name of a new database on the embedded server, dropped afterwards."""
    name = f"capmark_safety_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    yield name
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"drop database {name} with (force)")


def _quiet(message: str) -> None:
    """Setup's say(): these tests read the database, not the messages."""


def _setup(dsn: str, dbname: str, size: DataSize, **conninfo: str) -> None:
    with psycopg.connect(dsn, dbname=dbname, autocommit=True, **conninfo) as conn:
        datamodel.setup(conn, size, say=_quiet)


def _meta_items(dsn: str, dbname: str) -> int:
    with psycopg.connect(dsn, dbname=dbname) as conn:
        return conn.execute("select items from capmark.meta").fetchone()[0]


def test_a_users_view_on_a_capmark_table_stops_the_rebuild_and_survives(embedded_dsn: str, fresh_db: str):
    _setup(embedded_dsn, fresh_db, TINY)
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as conn:
        conn.execute("create view public.my_items as select id, name from capmark.item where qty > 50")
    with pytest.raises(CapmarkError, match=r"view public\.my_items depends on them") as caught:
        _setup(embedded_dsn, fresh_db, TINY_BIGGER)
    assert "\n" not in str(caught.value)
    with psycopg.connect(embedded_dsn, dbname=fresh_db) as conn:
        assert conn.execute("select to_regclass('public.my_items') is not null").fetchone()[0]
        assert conn.execute("select count(*) from public.my_items").fetchone()[0] > 0
    assert _meta_items(embedded_dsn, fresh_db) == TINY.items  # nothing was rebuilt


def test_a_users_foreign_key_and_owned_sequence_are_named(embedded_dsn: str, fresh_db: str):
    """A foreign key from another schema, and a sequence owned by a capmark column (DROP TABLE takes such a
    sequence along even without CASCADE)."""
    _setup(embedded_dsn, fresh_db, TINY)
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as conn:
        conn.execute("create table public.orders (id int, account_id int references capmark.account (id))")
        conn.execute("create sequence capmark.my_seq owned by capmark.item.id")
    with pytest.raises(CapmarkError) as caught:
        _setup(embedded_dsn, fresh_db, TINY_BIGGER)
    assert "table constraint orders_account_id_fkey on public.orders" in str(caught.value)
    assert "sequence capmark.my_seq" in str(caught.value)
    with psycopg.connect(embedded_dsn, dbname=fresh_db) as conn:
        assert conn.execute("select to_regclass('capmark.my_seq') is not null").fetchone()[0]
        assert conn.execute("select count(*) from pg_constraint where conname = 'orders_account_id_fkey'"
                            ).fetchone()[0] == 1


def test_setup_rebuilds_when_nothing_else_depends(embedded_dsn: str, fresh_db: str):
    """The refusal is not a blanket one: capmark's own indexes and keys do not count as dependents."""
    _setup(embedded_dsn, fresh_db, TINY)
    _setup(embedded_dsn, fresh_db, TINY_BIGGER)
    assert _meta_items(embedded_dsn, fresh_db) == TINY_BIGGER.items
    with psycopg.connect(embedded_dsn, dbname=fresh_db) as conn:
        assert conn.execute("select count(*) from capmark.item").fetchone()[0] == TINY_BIGGER.items


@pytest.fixture
def limited_role(embedded_dsn: str, fresh_db: str) -> Iterator[str]:
    """A role with CREATE and USAGE on a schema capmark its DBA made, and no CREATE on the database."""
    role = f"capmark_limited_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as admin:
        admin.execute(f"create role {role} login")
        admin.execute("create schema capmark")
        admin.execute(f"grant usage, create on schema capmark to {role}")
        assert not admin.execute("select has_database_privilege(%s, current_database(), 'CREATE')",
                                 (role,)).fetchone()[0]
    yield role
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as admin:
        admin.execute(f"drop owned by {role}")
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute(f"drop role {role}")


def test_a_role_with_rights_on_the_dbas_schema_sets_up_the_model(embedded_dsn: str, fresh_db: str,
                                                                  limited_role: str):
    _setup(embedded_dsn, fresh_db, TINY, user=limited_role)
    with psycopg.connect(embedded_dsn, dbname=fresh_db) as conn:
        owner = conn.execute("select tableowner from pg_tables where schemaname = 'capmark' and tablename = 'item'"
                             ).fetchone()[0]
    assert owner == limited_role
    assert _meta_items(embedded_dsn, fresh_db) == TINY.items


def test_a_role_that_may_not_drop_the_tables_gets_one_sentence(embedded_dsn: str, fresh_db: str,
                                                                limited_role: str):
    _setup(embedded_dsn, fresh_db, TINY)  # as the admin: the tables are the admin's
    with pytest.raises(CapmarkError, match=f"The role '{limited_role}' may not rebuild capmark's data model"
                                           r" \(must be owner of table meta\)"):
        _setup(embedded_dsn, fresh_db, TINY_BIGGER, user=limited_role)
    assert _meta_items(embedded_dsn, fresh_db) == TINY.items


def test_pg_stat_statements_is_created_in_schema_capmark_and_found(embedded_dsn: str, fresh_db: str):
    embedded._ensure_extensions(make_conninfo(embedded_dsn, dbname=fresh_db))
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as conn:
        schema = conn.execute("select extnamespace::regnamespace::text from pg_extension "
                              "where extname = 'pg_stat_statements'").fetchone()[0]
        assert schema == "capmark"
        public_objects = conn.execute("select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                                      "where n.nspname = 'public'").fetchone()[0]
        assert public_objects == 0
        view = describe(conn, embedded_dsn, embedded=True).statements_view
        assert view == "capmark.pg_stat_statements"  # what the statistics snapshots read, on any connection
        conn.execute("select 12345 as capmark_marker")
        found = conn.execute(f"select count(*) from {view} where query like '%%capmark_marker%%'").fetchone()[0]
        assert found >= 1


def test_a_pg_stat_statements_the_user_made_in_public_is_left_there(embedded_dsn: str, fresh_db: str):
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as conn:
        conn.execute("create extension pg_stat_statements schema public")
    embedded._ensure_extensions(make_conninfo(embedded_dsn, dbname=fresh_db))
    with psycopg.connect(embedded_dsn, dbname=fresh_db, autocommit=True) as conn:
        schema = conn.execute("select extnamespace::regnamespace::text from pg_extension "
                              "where extname = 'pg_stat_statements'").fetchone()[0]
        assert schema == "public"
        assert describe(conn, embedded_dsn, embedded=True).statements_view == "public.pg_stat_statements"
