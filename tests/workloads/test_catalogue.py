"""Every workload of the catalogue runs one short step on a real PostgreSQL, and the database's own
statistics must have moved the way the workload claims."""

from __future__ import annotations

import psycopg
import pytest
from liveruns import run_without_report
from scipy.stats import binom

from capmark.config import RunSpec
from capmark.engines.postgres.stats import total
from capmark.measure import kpm
from capmark.workloads import registry

pytestmark = pytest.mark.db
TAIL = 1e-6  # probability that a correct step falls below a binomial bound
PARAMS = {"update_pct": "100", "rows_per_insert": "5", "dtype": "numeric", "n": "15"}


@pytest.fixture(scope="module")
def conn(embedded_dsn):
    with psycopg.connect(embedded_dsn, autocommit=True) as c:
        yield c


@pytest.fixture(scope="module")
def catalogue(embedded_dsn, tmp_path_factory):
    """Every workload with a half-second warm-up: without one, a read-only sto-random step dirtied a block and a
    tp-lookup step after the other tests' updates logged 1,145 WAL records that were not page images, both in their
    first second, which the warm-up takes."""
    spec = RunSpec(workloads=["full"], jobs=[1], warmup_s=0.5, duration_s=1.0, params=PARAMS, dsn=embedded_dsn,
                   results_dir=tmp_path_factory.mktemp("catalogue"))
    run = run_without_report(spec)
    return {t.workload: t for t in run.tests}


def db(step, column):
    return total(step.db_delta["database"], column) or 0.0


def table(step, column, name=None, prefix=None):
    """A per-table counter of schema capmark (pg_stat_user_tables), immune to catalog and other activity."""
    rows = step.db_delta["tables"]
    return sum(r[column] for r in rows if r["relname"] == name or (prefix and r["relname"].startswith(prefix)))


def wal_bytes(step):
    return total(step.db_delta["lsn"], "wal_lsn_bytes")


def test_every_workload_ran(catalogue):
    assert set(catalogue) == set(registry.WORKLOADS) - registry.DIAGNOSTIC
    for name, test in catalogue.items():
        step = test.steps[0]
        assert step.status == "ok", (name, step.notes)
        assert step.units > 0, name
        assert sum(step.errors.values()) == 0, (name, step.errors)
        values, _ = kpm.compute(step, test.per_unit)
        for key in test.kpms:
            assert key in values, (name, key)


@pytest.mark.parametrize("name", ["srv-query1", "srv-query25", "srv-report", "srv-scan", "srv-mixed"])
def test_srv_reads_from_the_buffer_cache(catalogue, name):
    step = catalogue[name].steps[0]
    hit, read = db(step, "blks_hit"), db(step, "blks_read")
    assert hit / (hit + read) >= 0.99


def test_srv_report_reads_more_blocks_per_query_than_query1(catalogue):
    def blocks_per_query(name):
        step = catalogue[name].steps[0]
        return (db(step, "blks_hit") + db(step, "blks_read")) / step.units
    assert blocks_per_query("srv-query1") < blocks_per_query("srv-query25") < blocks_per_query("srv-report")


def test_srv_scan_reads_the_whole_table_per_query(catalogue, conn):
    step = catalogue["srv-scan"].steps[0]
    pages = conn.execute("select relpages from pg_class where oid = 'capmark.item'::regclass").fetchone()[0]
    per_query = (db(step, "blks_hit") + db(step, "blks_read")) / step.units
    assert 0.9 * pages <= per_query <= 1.2 * pages + 10


@pytest.mark.parametrize("name,low_kb,high_kb", [("wal-lat1", 0.5, 3), ("wal-lat25", 20, 30), ("wal-lat125", 100, 160)])
def test_wal_size_per_commit(catalogue, name, low_kb, high_kb):
    step = catalogue[name].steps[0]
    kb = wal_bytes(step) / step.units / 1024
    assert low_kb <= kb <= high_kb, kb


def test_wal_latency_workloads_flush_every_commit_and_throughput_does_not(catalogue):
    sync = kpm.compute(catalogue["wal-lat1"].steps[0])[0]
    thr = kpm.compute(catalogue["wal-thr"].steps[0])[0]
    assert sync["wal_fsyncs_per_commit"] >= 0.9  # one job: every commit waits for its own flush
    assert thr["wal_mb_per_s"] > sync["wal_mb_per_s"]


def test_dl_buffer_reports_exactly_the_rows_it_inserted(catalogue):
    test = catalogue["dl-buffer"]
    step = test.steps[0]
    assert table(step, "n_tup_ins", "dl_row") == step.units * 5
    assert kpm.compute(step, test.per_unit)[0]["rows_per_s"] == pytest.approx(step.units * 5 / step.elapsed_s)


@pytest.mark.parametrize("name,rows", [("tp-light", 1), ("tp-medium", 25), ("tp-heavy", 125)])
def test_tp_updates_the_rows_it_claims(catalogue, name, rows):
    step = catalogue[name].steps[0]
    assert step.histograms["update"].total == step.units  # update_pct=100
    assert db(step, "tup_updated") >= step.units * rows


def jobs_wal_bytes(step):
    """WAL the step's job backends generated themselves (PostgreSQL 18's per-backend statistics), which autovacuum
    or a checkpoint running in the same window does not add to; the server's whole WAL where that view is missing."""
    rows = step.db_delta.get("backend_wal")
    return total(rows, "wal_bytes") if rows else wal_bytes(step)


def test_dl_direct_loads_without_wal(catalogue):
    """The load's own backends log almost nothing: a checkpoint's page images or autovacuum of another test's tables
    in the same second (7.9 MB in one clean-clone run) are not the load's WAL, so the per-backend figure is judged."""
    step = catalogue["dl-direct"].steps[0]
    assert table(step, "n_tup_ins", prefix="dl_direct_") == step.units * 10_000
    assert jobs_wal_bytes(step) / (step.units * 10_000) < 5  # an unlogged table: almost no WAL per row


def test_tp_lookup_writes_no_wal(catalogue):
    """A lookup logs nothing of its own. With data checksums (initdb's default since PostgreSQL 18) the first read of
    a row another test changed sets its hint bits and logs that page's image once after each checkpoint: page
    images are allowed, any other record is not."""
    step = catalogue["tp-lookup"].steps[0]
    rows = step.db_delta.get("backend_wal")
    if rows:
        records, images = total(rows, "wal_records"), total(rows, "wal_fpi")
        assert (records - images) / step.units < 0.001, (records, images, step.units)
        assert images < 0.01 * step.units, (images, step.units)  # a page image per hundred lookups would be a write
    else:
        assert jobs_wal_bytes(step) / step.units < 1
    assert db(step, "xact_commit") >= step.units


def test_stress_mixed_executes_its_weights(catalogue):
    step = catalogue["stress-mixed"].steps[0]
    shares = {t: h.total / step.units * 100 for t, h in step.histograms.items()}
    for kind, weight in (("query", 10), ("insert", 25), ("update", 60), ("delete", 5)):
        assert shares[kind] == pytest.approx(weight, abs=3), shares


def test_stress_requests_touch_what_they_claim(catalogue):
    step = catalogue["stress-insert"].steps[0]
    assert table(step, "n_tup_ins", "stress_item") == step.units
    assert db(catalogue["stress-update"].steps[0], "tup_updated") >= 0.99 * catalogue["stress-update"].steps[0].units


INFORMATIVE_SHARE = 0.5  # at least half the original ids present: the binomial lower bound is then well above 0


def test_stress_delete_removes_the_rows_its_requests_find(catalogue, conn):
    """Each request deletes a uniformly drawn id of the original rows, so the rows it removes are binomial in the
    requests with the share of those ids still present. The test's preparation restores the full table (ids
    1..items), so at any request of the window the share present is at least 1 - (deleted in the warm-up + deleted
    so far) / items, and the warm-up is half as long as the window (allowed as many deletes again). Counting the
    rows left at the end instead would count later tests' deletes too (stress-mixed deletes after its own
    restore), which made this fail on a fast machine."""
    step = catalogue["stress-delete"].steps[0]
    items = conn.execute("select start_value - 1 from pg_sequences where schemaname = 'capmark' "
                         "and sequencename = 'stress_seq'").fetchone()[0]
    deleted = table(step, "n_tup_del", "stress_item")
    share_low = max(0.0, 1 - 2 * deleted / items)
    # a bound near 0 would pass with no row deleted at all: the table must be large enough for the bound to bite
    assert share_low >= INFORMATIVE_SHARE and deleted > 0, (deleted, items, share_low)
    assert binom.ppf(TAIL, step.units, share_low) <= deleted <= step.units, (deleted, step.units, share_low, items)


def test_pls_computes_the_right_answers(catalogue, conn):
    assert conn.execute("select capmark.fibo(20)").fetchone()[0] == 6765
    assert conn.execute("select capmark.nth_prime(1000)").fetchone()[0] == 7919
    test = catalogue["pls-add"]
    values = kpm.compute(test.steps[0], test.per_unit)[0]
    assert values["mops"] == pytest.approx(test.steps[0].units * 1000 / test.steps[0].elapsed_s / 1e6)


def test_da_rowstore_scans_every_row_per_query(catalogue):
    test = catalogue["da-rowstore"]
    step = test.steps[0]
    values = kpm.compute(step, test.per_unit)[0]
    assert values["rows_per_s"] == pytest.approx(step.units * 100_000 / step.elapsed_s)
    assert db(step, "tup_returned") >= step.units * 100_000 * 0.99




def test_dbwr_makes_the_checkpointer_write(catalogue):
    test = catalogue["dbwr-thr"]
    values = kpm.compute(test.steps[0], test.per_unit)[0]
    assert values["ckpt_blocks_per_s"] > 0  # job 1 checkpoints every slice on the embedded server
    assert db(test.steps[0], "tup_updated") >= test.steps[0].units * 50 * 0.99


def test_sto_random_reads_reach_the_device_and_dirty_nothing(catalogue):
    step = catalogue["sto-random"].steps[0]  # write_pct defaults to 0
    assert step.histograms["write"].total == 0
    calls = [r for r in step.db_delta.get("statements", []) if "slice_sto_random" in (r.get("query") or "")]
    assert calls and sum(r["shared_blks_dirtied"] for r in calls) == 0
    values = kpm.compute(step)[0]
    assert values["db_read_iops"] > 0
    bypassed = not any("not bypassed" in n for n in step.notes)
    if bypassed and values["os_cache_read_pct"] is not None:
        # the embedded server reads data files with O_DIRECT where the file system allows it
        assert values["os_cache_read_pct"] < 10


def test_sto_read_scans_from_storage(catalogue):
    step = catalogue["sto-read"].steps[0]
    hit, read = db(step, "blks_hit"), db(step, "blks_read")
    assert read / (hit + read) > 0.9  # the table was evicted from shared buffers before every scan


def test_sto_scatter_writes_from_the_foreground(catalogue):
    values = kpm.compute(catalogue["sto-scatter"].steps[0])[0]
    assert values["backend_blocks_per_s"] > 0


def test_tp_custom_follows_its_default_weights(catalogue):
    step = catalogue["tp-custom"].steps[0]
    weights = {"lookup": 20, "report": 20, "light": 20, "medium": 20, "heavy": 10, "insert": 10}
    for kind, weight in weights.items():
        assert step.histograms[kind].total / step.units * 100 == pytest.approx(weight, abs=5)


def test_da_storage_reads_its_table_from_outside_shared_buffers(catalogue):
    """The workload's own hits only: the database's blks_hit also counts an autovacuum that may start after the
    quiesce (seen in CI: 40,078 vacuum hits beside 686 of the scans), which says nothing about the eviction."""
    step = catalogue["da-storage"].steps[0]
    hit = sum(r.get("hits") or 0 for r in step.db_delta["io"]
              if r.get("object") == "relation" and r.get("backend_type") in ("client backend", "parallel worker"))
    read = db(step, "blks_read")  # blocks (pg_stat_io counts read operations of up to io_combine_limit blocks)
    assert read / (hit + read) > 0.9


def test_every_client_side_workload_runs_from_the_driver(embedded_dsn, tmp_path):
    names = [w.name for w in registry.WORKLOADS.values() if w.client_side]
    assert len(names) >= 18
    run = run_without_report(RunSpec(workloads=names, jobs=[1], warmup_s=0, duration_s=1.0, mode="client",
                                     params={"update_pct": "50"}, dsn=embedded_dsn, results_dir=tmp_path))
    for test in run.tests:
        step = test.steps[0]
        assert step.status == "ok" and step.units > 0 and sum(step.errors.values()) == 0, (test.workload, step.notes)
        assert step.round_trips >= step.units, test.workload
