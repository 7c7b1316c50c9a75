"""The MySQL data model and statements against a live MariaDB/MySQL on 127.0.0.1:3306 (user root, no password).

They work in database capmark itself (capmark creates nothing elsewhere) at small sizes, holding capmark's setup
lock for the whole module so that another capmark run using the same server waits instead of rebuilding the model
under them (GET_LOCK is re-entrant within a session, so setup() on the same connection still takes it).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import mysqlserver
import pytest

from capmark.engines.mysql import datamodel as dm
from capmark.engines.mysql.statements import STATEMENTS, wal_update_for
from capmark.errors import CapmarkError

SIZES = {"items": 2000, "accounts": 1500, "booking_accounts": 120, "call_customers": 30, "ring_rows": 100,
         "sto_rows": 3000, "pgbench_scale": 1}
OTHER = {**SIZES, "items": 1200, "booking_accounts": 80, "ring_rows": 60}


def expected_counts(s: dict[str, int]) -> dict[str, int]:
    return {"item": s["items"], "account": s["accounts"], "booking": s["booking_accounts"] * 25,
            "callrec": s["call_customers"] * 125, "wal_ring": 32 * s["ring_rows"], "dl_row": 0,
            "sto_block": s["sto_rows"], "stress_item": s["items"], "pgbench_branches": s["pgbench_scale"],
            "pgbench_tellers": 10 * s["pgbench_scale"], "pgbench_accounts": 100_000 * s["pgbench_scale"],
            "pgbench_history": 0}


@pytest.fixture(scope="module")
def conn(mysql_dsn: str) -> Iterator[Any]:
    c = mysqlserver.connect()
    assert scalar(c, "select get_lock(%s, 600)", (dm.SETUP_LOCK,)) == 1
    try:
        yield c
    finally:
        scalar(c, "select release_lock(%s)", (dm.SETUP_LOCK,))
        c.close()


def rows(c: Any, sql: str, args: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    cur = c.cursor()
    cur.execute(sql, args)
    out = list(cur.fetchall())
    cur.close()
    return out


def scalar(c: Any, sql: str, args: tuple[Any, ...] | None = None) -> Any:
    return rows(c, sql, args)[0][0]


def counts(c: Any) -> dict[str, int]:
    return {t.name: int(scalar(c, f"select count(*) from capmark.{t.name}")) for t in dm.tables(SIZES)}


def execute(c: Any, text: str, *args: Any) -> tuple[list[tuple[Any, ...]], int]:
    """PREPARE and EXECUTE as the MySQL client session does; the rows returned and ROW_COUNT()."""
    cur = c.cursor()
    cur.execute("prepare capmark_test from %s", (text,))
    for i, value in enumerate(args):
        cur.execute(f"set @p{i} = %s", (value,))
    using = " using " + ", ".join(f"@p{i}" for i in range(len(args))) if args else ""
    cur.execute("execute capmark_test" + using)
    got = list(cur.fetchall())
    cur.execute("select row_count()")
    changed = int(cur.fetchone()[0])
    cur.execute("deallocate prepare capmark_test")
    cur.close()
    return got, changed


@pytest.fixture(scope="module")
def model(conn: Any) -> Any:
    """A model built now: one left by an earlier run at these sizes holds the rows its tests inserted."""
    conn.cursor().execute("drop table if exists capmark.meta")
    dm.setup(conn, SIZES, say=lambda s: None)
    assert dm.plan(conn, SIZES) == []
    return conn


def test_row_counts_equal_the_sizes(model: Any) -> None:
    assert counts(model) == expected_counts(SIZES)


def test_values_match_postgresql(model: Any) -> None:
    # the same generated values as PostgreSQL's model gives these rows
    assert rows(model, "select grp, qty, price, name, length(pad) from capmark.item where id = 1234") == [
        (234, 1234 * 7919 % 100, Decimal(1234 * 31 % 10000) / 100, "item 1234", 80)]
    assert rows(model, "select callee, duration_s from capmark.callrec where customer_id = 3 and seq = 7") == [
        ("+41 44 0000382", 21)]
    assert rows(model, "select min(length(payload)), max(length(payload)) from capmark.wal_ring") == [(960, 960)]
    assert scalar(model, "select payload = repeat(md5(3 * 100000 + 9), 30) from capmark.wal_ring "
                         "where job = 3 and id = 9") == 1
    assert scalar(model, "select length(payload) from capmark.sto_block where id = 5") == 896
    assert rows(model, "select min(seq), max(seq), count(distinct account_id) from capmark.booking") == [
        (1, 25, SIZES["booking_accounts"])]
    assert scalar(model, "select length(filler) from capmark.pgbench_accounts where aid = 1") == 0  # PAD CHAR
    indexes = {r[0] for r in rows(model, "select index_name from information_schema.statistics "
                                         "where table_schema = 'capmark' and table_name = 'dl_row'")}
    assert indexes == {"dl_row_id_idx", "dl_row_k1_idx", "dl_row_k2_idx"}
    assert scalar(model, "select count(*) from information_schema.tables where table_schema = 'capmark' "
                         "and table_name = %s", (dm.NUMBERS,)) == 0


def test_every_statement_prepares_executes_and_touches_its_rows(model: Any) -> None:
    c = model
    expect_rows = {"srv-query1": 1, "srv-query25": 25, "srv-report": 125, "account_read": 1, "account_lock": 1,
                   "booking_read": 25, "booking_lock": 25, "callrec_read": 125, "callrec_lock": 125, "query": 1,
                   "srv-scan": 1}
    expect_changed = {"account_update": 1, "booking_update": 25, "callrec_update": 125, "update": 1}
    args = {name: (7,) for name in STATEMENTS}
    tested = set()
    for name, n in expect_rows.items():
        got, _ = execute(c, STATEMENTS[name], *args[name][:STATEMENTS[name].count("?")])
        assert len(got) == n, name
        tested.add(name)
    assert execute(c, STATEMENTS["srv-scan"])[0] == [(SIZES["items"],
                                                      sum(g * 7919 % 100 for g in range(1, SIZES["items"] + 1)))]
    for name, n in expect_changed.items():
        assert execute(c, STATEMENTS[name], 7)[1] == n, name
        tested.add(name)

    # wal_update rewrites exactly ids pos+1..pos+rows of the job's slot
    before = dict(rows(c, "select id, payload from capmark.wal_ring where job = 5"))
    assert execute(c, STATEMENTS["wal_update"], 5, 10, 25)[1] == 25
    after = dict(rows(c, "select id, payload from capmark.wal_ring where job = 5"))
    assert {i for i in before if before[i] != after[i]} == set(range(11, 36))
    assert {len(p) for p in after.values()} == {960}
    assert execute(c, wal_update_for(1), 5, 40)[1] == 1
    tested.add("wal_update")

    # dl_insert adds its argument's rows in one statement
    start = scalar(c, "select count(*) from capmark.dl_row")
    assert execute(c, STATEMENTS["dl_insert"], 7)[1] == 7
    assert scalar(c, "select count(*) from capmark.dl_row") == start + 7
    assert rows(c, "select min(length(payload)), max(k1) <= 1000000, max(k2) <= 1000 from capmark.dl_row") == [
        (100, 1, 1)]
    tested.add("dl_insert")

    # stress insert continues after the loaded rows; delete removes one row
    assert execute(c, STATEMENTS["insert"], 42)[1] == 1
    new_id = scalar(c, "select max(id) from capmark.stress_item")
    assert new_id > SIZES["items"]
    assert rows(c, "select val, length(payload) from capmark.stress_item where id = %s", (new_id,)) == [(42, 60)]
    assert execute(c, STATEMENTS["delete"], new_id)[1] == 1
    tested.update({"insert", "delete"})
    assert tested == set(STATEMENTS)


def test_catalogue_statement_names_all_have_mysql_text() -> None:
    from capmark.workloads.registry import WORKLOADS
    # workloads with tables of their own (tpcc) are PostgreSQL's only, and refused on MySQL (tests/workloads/test_tpcc.py)
    names = {k for w in WORKLOADS.values() if w.own_data is None for k in w.client_statements}
    assert names <= set(STATEMENTS)
    assert all("$" not in text for text in STATEMENTS.values())


def test_rebuild_at_another_size_replaces_the_model(model: Any) -> None:
    c = model
    try:
        assert dm.plan(c, OTHER)
        assert dm.setup(c, OTHER, say=lambda s: None) > 0
        assert dm.plan(c, OTHER) == []
        assert dm.plan(c, SIZES)
        assert counts(c) == expected_counts(OTHER)
        assert dm.setup(c, OTHER, say=lambda s: None) == 0.0
    finally:
        dm.setup(c, SIZES, say=lambda s: None)
    assert counts(c) == expected_counts(SIZES)


@pytest.mark.parametrize("ddl, drop, named", [
    ("create view capmark.mymodel_view_on_item as select id, name from capmark.item", "drop view capmark.{}",
     "view capmark.mymodel_view_on_item"),
    ("create trigger capmark.mymodel_trigger before insert on capmark.dl_row for each row set new.k2 = new.k2",
     "drop trigger capmark.{}", "trigger capmark.mymodel_trigger on capmark.dl_row"),
])
def test_others_objects_make_setup_refuse_and_nothing_is_dropped(model: Any, ddl: str, drop: str,
                                                                 named: str) -> None:
    c = model
    name = named.split()[1].split(".")[1]
    before = counts(c)
    rows(c, ddl)
    try:
        with pytest.raises(CapmarkError) as err:
            dm.setup(c, OTHER, say=lambda s: None)
        assert named in str(err.value)
        assert str(err.value).count(".") <= 4  # one sentence
        assert counts(c) == before
        assert dm.plan(c, SIZES) == []  # the model (and its bookkeeping) is untouched
    finally:
        rows(c, drop.format(name))


def test_interrupted_setup_is_rebuilt(model: Any) -> None:
    rows(model, "drop table capmark.meta")  # what a setup cut short leaves: no bookkeeping row
    assert dm.plan(model, SIZES)
    assert dm.setup(model, SIZES, say=lambda s: None) > 0
    assert dm.plan(model, SIZES) == []


def test_a_dropped_or_emptied_table_is_rebuilt_alone_and_said(model: Any) -> None:
    rows(model, "insert into capmark.dl_row (k1, k2, payload) values (7, 7, 'kept')")  # a table left as it is
    rows(model, "drop table capmark.item")
    rows(model, "truncate table capmark.account")
    said: list[str] = []
    assert dm.setup(model, SIZES, say=said.append) > 0
    assert len(said) == 1 and "capmark.item is missing" in said[0] and "capmark.account is empty" in said[0], said
    assert scalar(model, "select count(*) from capmark.dl_row where payload = 'kept'") == 1
    rows(model, "delete from capmark.dl_row")
    assert counts(model) == expected_counts(SIZES)
    assert dm.plan(model, SIZES) == [] and dm.damage(model, SIZES) == {}
    assert dm.setup(model, SIZES, say=said.append) == 0.0


def test_warm_cache_reads_tables_and_indexes(model: Any) -> None:
    said: list[str] = []
    dm.warm_cache(model, ["item", "booking", "callrec", "dl_row"], say=said.append)
    assert said == []  # small tables fit in the buffer pool


@pytest.mark.parametrize("grants, exists, ok", [
    (["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"], True, True),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `capmark`.* TO `u`@`%`"], False, True),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `capm%`.* TO `u`@`%`"], True, True),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `cap\\_mark`.* TO `u`@`%`"], True, False),
    (["GRANT SELECT, INSERT ON *.* TO `u`@`%`"], True, False),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `capmark`.`item` TO `u`@`%`"], True, False),
    (["GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX ON `capmark`.* TO `u`@`%`"], True, False),
])
def test_privileges_from_grants(grants: list[str], exists: bool, ok: bool) -> None:
    problem = dm.missing_privileges(grants, exists)
    assert (problem is None) == ok
    if problem and "ALTER" in problem and "CREATE" not in problem:
        assert problem.endswith("(it lacks ALTER)")


def test_check_privileges_passes_for_root(conn: Any) -> None:
    dm.check_privileges(conn)
