"""tpcc on the embedded PostgreSQL: the load holds the specification's rows per warehouse, a run in either mode keeps
the consistency conditions, follows the standard mix and the specification's input distributions, and counts
exactly the new orders the order table gained; keying and think times bound throughput by the users; downstream
(demands, model, diagnosis) takes it with no special case."""

from __future__ import annotations

import autovacuum
import psycopg
import pytest
from liveruns import run_without_report
from scipy.stats import binom

from capmark import api
from capmark.config import RunSpec
from capmark.engines import registry as engines
from capmark.measure import kpm
from capmark.workloads import registry
from capmark.workloads.tpcc import checks, load, spec

pytestmark = pytest.mark.db
WAREHOUSES = 2  # two, so that a loader or a terminal that only ever sees warehouse 1 shows
TAIL = 1e-6  # probability that a correct run falls outside a binomial bound
MIX_UNITS = 2_000  # fewer units leave the 4 % types' binomial bounds too wide to tell a weight from another
JOBS = 4
WAREHOUSE_COLUMN = {"tpcc_warehouse": "w_id", "tpcc_district": "d_w_id", "tpcc_customer": "c_w_id",
                    "tpcc_history": "h_w_id", "tpcc_order": "o_w_id", "tpcc_new_order": "no_w_id",
                    "tpcc_stock": "s_w_id", "tpcc_order_line": "ol_w_id"}


@pytest.fixture(scope="module")
def conn(embedded_dsn):
    with psycopg.connect(embedded_dsn, autocommit=True) as c:
        yield c


@pytest.fixture(scope="module")
def loaded(conn, embedded_dsn):
    """A fresh load, and what the tables held right after it (before any run changes them)."""
    conn.execute("drop table if exists capmark.tpcc_meta")  # force the loader to run
    report = load.load(conn, embedded_dsn, WAREHOUSES, say=lambda message: None)
    per_warehouse = {table: dict(conn.execute(f"select {col}, count(*) from capmark.{table} group by 1").fetchall())
                     for table, col in WAREHOUSE_COLUMN.items()}
    lines_ordered = dict(conn.execute("select o_w_id, sum(o_ol_cnt) from capmark.tpcc_order group by 1").fetchall())
    items = conn.execute("select count(*), count(*) filter (where i_data like '%ORIGINAL%') "
                         "from capmark.tpcc_item").fetchone()
    names = conn.execute("select count(distinct (c_w_id, c_d_id)), min(n), max(n) from (select c_w_id, c_d_id, "
                         "count(distinct c_last) as n from capmark.tpcc_customer where c_id <= 1000 "
                         "group by 1, 2) s").fetchone()
    new_orders = conn.execute("select min(no_o_id), max(no_o_id) from capmark.tpcc_new_order").fetchone()
    return {"report": report, "per_warehouse": per_warehouse, "lines_ordered": lines_ordered, "items": items,
            "names": names, "new_orders": new_orders}


def test_load_holds_the_specifications_rows_per_warehouse(loaded):
    per_warehouse = loaded["per_warehouse"]
    for table, rows in spec.ROWS_PER_WAREHOUSE.items():
        assert per_warehouse[table] == dict.fromkeys(range(1, WAREHOUSES + 1), rows), table
    # order lines: as many as the orders say, 5-15 each, 10 on average (sd 0.18 % of 300,000: bound at 2 %)
    assert per_warehouse["tpcc_order_line"] == loaded["lines_ordered"]
    for lines in per_warehouse["tpcc_order_line"].values():
        assert abs(lines - spec.ORDER_LINES_PER_WAREHOUSE_MEAN) < 0.02 * spec.ORDER_LINES_PER_WAREHOUSE_MEAN
    assert loaded["items"][0] == spec.ITEMS
    low, high = binom.ppf([TAIL, 1 - TAIL], spec.ITEMS, spec.ORIGINAL_PCT / 100)
    assert low <= loaded["items"][1] <= high
    # customers 1-1,000 of every district take the 1,000 last names once each
    assert loaded["names"] == (WAREHOUSES * spec.DISTRICTS_PER_WAREHOUSE, 1000, 1000)
    assert loaded["new_orders"] == (spec.FIRST_UNDELIVERED_ORDER, spec.ORDERS_PER_DISTRICT)
    report = loaded["report"]
    assert report.rows["tpcc_stock"] == WAREHOUSES * spec.STOCK_PER_WAREHOUSE
    assert report.workers >= 1 and report.seconds > report.copy_s > 0


def test_server_and_python_spell_last_names_alike(conn, measured):
    """The specification's own example: 371 is PRI CALLY OUGHT."""
    assert spec.last_name(371) == "PRICALLYOUGHT"
    got = [r[0] for r in conn.execute("select capmark.tpcc_last_name(n) from generate_series(0, 999) n").fetchall()]
    assert got == [spec.last_name(n) for n in range(1000)]


@pytest.fixture(scope="module", params=["server", "client"])
def measured(request, conn, loaded, embedded_dsn, tmp_path_factory):
    """One step at 4 jobs on 2 warehouses, checked afterwards; and the server's clock before it, to tell the rows the
    run wrote from the loaded ones. Autovacuum is paused, as its workers' commits would count with the transactions'
    (CI once counted 1.2 % more commits than committed units)."""
    since = conn.execute("select localtimestamp").fetchone()[0]
    mode = request.param
    with autovacuum.paused(conn):
        run = run_without_report(RunSpec(workloads=["tpcc"], jobs=[JOBS], warmup_s=1.0,
                                         duration_s=6.0 if mode == "server" else 12.0, mode=mode,
                                         params={"warehouses": str(WAREHOUSES), "check": "on"}, dsn=embedded_dsn,
                                         results_dir=tmp_path_factory.mktemp(f"tpcc-{mode}")))
    return run.tests[0], since


def test_consistency_conditions_hold_after_a_run_at_4_jobs(measured):
    test, _ = measured
    assert test.status == "ok", (test.reason, test.notes)
    assert "checks of the database after the test: all hold" in test.notes
    assert any(note.startswith("cached variant") for note in test.notes)


@pytest.mark.parametrize(("number", "breaking"), [
    (1, "update capmark.tpcc_district set d_ytd = d_ytd + 1 where d_w_id = 2 and d_id = 3"),
    (2, "update capmark.tpcc_district set d_next_o_id = d_next_o_id + 1 where d_w_id = 1 and d_id = 7"),
    (3, "delete from capmark.tpcc_new_order where (no_w_id, no_d_id, no_o_id) = (select no_w_id, no_d_id, "
        "no_o_id + 1 from capmark.tpcc_new_order where no_w_id = 1 and no_d_id = 4 order by no_o_id limit 1)"),
    (4, "delete from capmark.tpcc_order_line where (ol_w_id, ol_d_id, ol_o_id, ol_number) = (2, 5, 17, 1)"),
])
def test_each_consistency_condition_finds_where_it_breaks(conn, loaded, number, breaking):
    """A check query that always passes would let a broken transaction through; each condition must catch its own
    breach, and name the warehouse or district."""
    assert checks.violations(conn) == []
    with conn.transaction() as tx:  # the breach is rolled back with the transaction
        conn.execute(breaking)
        found = checks.violations(conn)
        raise psycopg.Rollback(tx)
    assert [f.split(" (")[0] for f in found] == [f"consistency condition {number}"], found
    assert checks.violations(conn) == []


def test_the_mix_follows_the_standard_weights(measured):
    """Each unit draws its type by the weights: each type's count is binomial in the units, and its bound comes
    from the units the step ran (a slow host runs fewer, and the bound widens with them). At 5,000 units a 4 %
    type may read 2.6 to 5.5 %: a type dropped or given another type's weight falls outside."""
    test, _ = measured
    step = test.steps[0]
    counts = {name: h.total for name, h in step.histograms.items()}
    counts["new_order"] += counts.pop("new_order_rollback")
    assert step.units >= MIX_UNITS, step.units
    for name, weight in spec.MIX_PCT.items():
        low, high = binom.ppf([TAIL, 1 - TAIL], step.units, weight / 100)
        assert low <= counts[name] <= high, (name, counts[name], low, high, step.units)


def test_new_orders_counted_equal_the_growth_of_the_order_table(measured):
    """Committed new orders are the order and new-order rows inserted in the window; rolled-back ones insert none."""
    test, _ = measured
    step = test.steps[0]
    assert sum(step.errors.values()) == 0, step.errors
    inserted = {r["relname"]: r["n_tup_ins"] for r in step.db_delta["tables"] if r["relname"].startswith("tpcc_")}
    committed = step.histograms["new_order"].total
    assert committed > 0
    assert inserted["tpcc_order"] == committed
    assert inserted["tpcc_new_order"] == committed
    values, _ = kpm.compute(step, test.per_unit)
    assert values["nopm"] == pytest.approx(committed / step.elapsed_s * 60)


def test_inputs_follow_the_specifications_distributions(conn, measured):
    """1 % of new orders roll back, 1 % of order lines come from another warehouse, 15 % of payments are by a
    customer of another warehouse; each a binomial bound on what the run did."""
    test, since = measured
    step = test.steps[0]
    committed, rolled = step.histograms["new_order"].total, step.histograms["new_order_rollback"].total
    low, high = binom.ppf([TAIL, 1 - TAIL], committed + rolled, spec.ROLLBACK_PCT / 100)
    assert low <= rolled <= high
    remote, lines = conn.execute(
        "select count(*) filter (where ol_supply_w_id <> ol_w_id), count(*) from capmark.tpcc_order_line l "
        "join capmark.tpcc_order o on (o_w_id, o_d_id, o_id) = (ol_w_id, ol_d_id, ol_o_id) "
        "where o_entry_d >= %s", (since,)).fetchone()
    low, high = binom.ppf([TAIL, 1 - TAIL], lines, spec.REMOTE_ORDER_LINE_PCT / 100)
    assert lines > 1_000 and low <= remote <= high
    # an order is all local exactly when the home warehouse supplies every line
    wrong = conn.execute(
        "select count(*) from capmark.tpcc_order o where o_entry_d >= %s and o_all_local <> (not exists ("
        "select 1 from capmark.tpcc_order_line where (ol_w_id, ol_d_id, ol_o_id) = (o_w_id, o_d_id, o_id) "
        "and ol_supply_w_id <> ol_w_id))::int", (since,)).fetchone()[0]
    assert wrong == 0
    remote, payments = conn.execute("select count(*) filter (where h_c_w_id <> h_w_id), count(*) "
                                    "from capmark.tpcc_history where h_date >= %s", (since,)).fetchone()
    low, high = binom.ppf([TAIL, 1 - TAIL], payments, spec.REMOTE_PAYMENT_PCT / 100)
    assert payments > 1_000 and low <= remote <= high


def test_keying_and_think_times_bound_throughput_by_the_users(loaded, embedded_dsn, tmp_path):
    """16 users, each at most one transaction per 2 s of keying (plus one carried in from the warm-up): thousands
    of transactions a second would mean the pauses are skipped, a response time of seconds that they are timed."""
    # 3 s after a 2 s warm-up: a user whose first type keys for 2 or 3 s (new order 18 s, payment 3 s, the others 2 s)
    # ends inside the window; that none of the 16 does has a chance of about 3e-6
    users, window = 16, 3.0
    run = run_without_report(RunSpec(workloads=["tpcc"], jobs=[users], warmup_s=2.0, duration_s=window, mode="client",
                                     params={"warehouses": str(WAREHOUSES), "keying": "on"}, dsn=embedded_dsn,
                                     results_dir=tmp_path))
    step = run.tests[0].steps[0]
    assert 1 <= step.units <= users * (window / min(spec.KEYING_S.values()) + 1)
    assert step.latency.observed_max_s < min(spec.KEYING_S.values())  # a pause inside the timing would show
    # the model's think time: keying plus mean think, weighted by the mix (0.45 x 30 + 0.43 x 15 + 0.04 x 26 s)
    assert step.pacing["think_s"] == pytest.approx(20.99)
    assert run.tests[0].per_unit["max_nopm"] == pytest.approx(25.72)  # the ceiling of 12.86 per warehouse, x 2
    values, _ = kpm.compute(step, run.tests[0].per_unit)
    assert values["efficiency_pct"] is not None


def test_lock_contention_at_many_jobs_per_warehouse_is_diagnosed(loaded, embedded_dsn, tmp_path):
    """4 jobs per warehouse queue on the warehouse and district rows (payments and new orders update them): the
    diagnosis names lock contention, and the model, what-if and sizing take the six types with no special case."""
    run = run_without_report(RunSpec(workloads=["tpcc"], jobs=[1, 4 * WAREHOUSES], warmup_s=1.0, duration_s=4.0,
                                     params={"warehouses": str(WAREHOUSES)}, dsn=embedded_dsn, results_dir=tmp_path))
    folder = run.folder
    diagnosis = api.diagnose(folder).tests[0]
    assert "lock_contention" in [finding.key for finding in diagnosis.findings], diagnosis.summary
    calibrated = api.calibrate(folder).tests[0]
    assert calibrated.answer is not None, calibrated.reason
    types = {t.name: t for t in calibrated.answer.calibration.types}
    assert list(types) == list(spec.TYPES)
    # each transaction commits once, so it waits for at most one WAL flush however long it runs; delivery (ten
    # districts in one transaction) is the longest because it works, not because it flushes
    assert all(t.flush_requests <= 1.0 for t in types.values()), types
    assert types["delivery"].scale > 1.5 * types["payment"].scale, types
    whatif = api.whatif(folder, changes={"cpus": 4}).tests[0]
    assert whatif.answer is not None and whatif.answer.converged, whatif.reason
    sized = api.size(folder, sla_text="p95<50ms").tests[0]
    assert sized.answer is not None and sized.answer.max_jobs >= 1, sized.reason


def test_tpcc_is_refused_on_mysql_in_one_sentence():
    why = registry.unavailable(registry.get("tpcc"), engines.named("mysql"), {})
    assert why == "its tables and transactions are written for PostgreSQL only"


def test_commits_are_one_per_transaction(measured):
    """Each transaction commits or rolls back once (the statistics views count both), in either mode."""
    test, _ = measured
    step = test.steps[0]
    commits = kpm.workload_commits(step)
    committed_units = step.units - step.histograms["new_order_rollback"].total
    assert commits == pytest.approx(committed_units, rel=0.01)
