"""Sampled latency timing in server-side slices: every unit still counted exactly, the sample scaled to whole
units, percentiles that agree with timing every unit, and steps that say how they were sampled."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator

import psycopg
import pytest

from capmark.collect import hosts
from capmark.driver.sampling import (
    IN_LOOP_FACTOR,
    MAX_EVERY,
    SAMPLE_MARGIN,
    SAMPLE_TARGET,
    TIMING_SHARE,
    SliceSampling,
    every_for,
    scale_counts,
)
from capmark.driver.step import StepContext, StepPlan, run_step
from capmark.engines.postgres import connect, describe
from capmark.engines.postgres.maintenance import checkpoint
from capmark.histogram import N_BUCKETS, RELATIVE_WIDTH, LatencyHistogram
from capmark.results import StepResult
from capmark.workloads import datamodel, registry
from capmark.workloads.base import slice_call

SIZE = datamodel.size_for(1)

# --- without a database --------------------------------------------------------------------------------


def test_scaled_counts_are_whole_units_adding_up_to_the_exact_count():
    rng = random.Random(5)
    for _ in range(300):
        sampled = [rng.choice([0, 0, 0, 1, 2, 7, 40]) for _ in range(rng.randint(1, 60))]
        timed = sum(sampled)
        if not timed:
            continue
        units = timed * rng.randint(1, 12) + rng.randint(0, 11)
        scaled = scale_counts(sampled, units)
        assert sum(scaled) == units and all(isinstance(c, int) and c >= 0 for c in scaled)
        for c, s in zip(sampled, scaled, strict=True):  # each bucket its share, off by less than one unit
            assert abs(s - c * units / timed) < 1
    assert scale_counts([3, 0, 5], 8) == [3, 0, 5]  # a full sample is returned as it is


def test_k_keeps_timing_within_its_share_and_no_thinner():
    timing, unit = 1.2e-6, 10e-6
    k = every_for(timing, unit, None)
    cost = IN_LOOP_FACTOR * timing  # what timing a unit costs between real units
    assert cost / k <= TIMING_SHARE * unit < cost / (k - 1)
    assert every_for(timing, 1e-3, None) == 1  # a long unit is timed every time
    assert every_for(1.0, 1e-9, None) == MAX_EVERY


def test_k_leaves_every_type_enough_timed_units():
    timing, unit = 1e-6, 1e-6
    alone = every_for(timing, unit, None)  # what timing's cost alone asks for
    assert alone == math.ceil(IN_LOOP_FACTOR * timing / (TIMING_SHARE * unit)) > 100
    assert every_for(timing, unit, [10e6]) == alone
    assert every_for(timing, unit, [10e6, 200_000]) == 200_000 // (SAMPLE_TARGET * SAMPLE_MARGIN)
    assert every_for(timing, unit, [10e6, 15_000]) == 1  # a type with fewer units is timed in full
    assert every_for(timing, unit, [0.0, 10e6]) == alone  # a type that does not occur does not count


def test_a_type_missed_by_the_sample_keeps_its_units():
    s = SliceSampling(every=4)
    first = [0] * (2 * N_BUCKETS)
    first[100], first[N_BUCKETS + 200] = 10, 3
    s.fold(first, [40, 12], 0.01, 1e-6, measure=True)
    second = [0] * (2 * N_BUCKETS)
    second[101] = 5
    query, update = s.fold(second, [20, 2], 0.005, 1e-6, measure=True)  # no update timed in this slice
    assert sum(query) == 20 and sum(update) == 2
    assert update[200] == 2  # where this job's timed updates lay
    assert s.units == [60, 14] and s.timed == [15, 3]


# --- on the embedded server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conn(embedded_dsn: str) -> Iterator[psycopg.Connection]:
    c = connect(embedded_dsn, application_name="capmark sampling test")
    datamodel.setup(c, SIZE, say=lambda m: None)
    used = [registry.get(n) for n in ("srv-query1", "srv-mixed")]
    datamodel.install_procedures(c, [w.procedure_sql for w in used])
    datamodel.warm_cache(c, ["item", "booking", "callrec"], say=lambda m: None)
    c.execute("set max_parallel_workers_per_gather = 0")  # srv-mixed's scan: one seq_scan per unit
    yield c
    c.close()


def _scans(c: psycopg.Connection) -> dict[str, int]:
    """The server's own count of index and sequential scans per table, published up to now."""
    c.execute("select pg_stat_force_next_flush()")
    rows = c.execute("select relname, coalesce(idx_scan, 0), seq_scan from pg_stat_user_tables "
                     "where schemaname = 'capmark' and relname in ('item', 'booking', 'callrec')").fetchall()
    c.execute("select pg_stat_clear_snapshot()")
    return {f"{rel}.{kind}": n for rel, idx, seq in rows for kind, n in (("idx", idx), ("seq", seq))}


def _slice(c: psycopg.Connection, workload: str, seconds: float, every: int) -> tuple:
    return c.execute(slice_call(registry.get(workload).procedure),
                     (seconds, json.dumps(SIZE.as_params()), every)).fetchone()


@pytest.mark.db
@pytest.mark.parametrize(("workload", "every", "seconds"), [("srv-query1", 7, 0.5), ("srv-mixed", 5, 1.0)])
def test_a_sampled_slice_counts_every_unit_of_every_type(conn, workload, every, seconds):
    """Each type's count is the server's own: srv-mixed's query1, query25 and report are one index scan of item,
    booking and callrec each, its scan one sequential scan of item; srv-query1's unit one index scan of item."""
    before = _scans(conn)
    hist, _errors, busy_s, units, timing_s = _slice(conn, workload, seconds, every)
    after = _scans(conn)
    moved = {k: after[k] - before[k] for k in after}
    if workload == "srv-query1":
        assert units == [moved["item.idx"]]
    else:
        assert units == [moved["item.idx"], moved["booking.idx"], moved["callrec.idx"], moved["item.seq"]]
    assert sum(hist) * every == sum(units)  # whole rounds: exactly one unit in k timed
    for t in range(len(units)):
        assert sum(hist[t * N_BUCKETS:(t + 1) * N_BUCKETS]) <= units[t]
    assert seconds <= busy_s < seconds + 0.1
    assert 0 < timing_s < 1e-3


@pytest.mark.db
@pytest.mark.xfail(strict=False, reason=(
    "open defect: after any earlier measured step on the same server, sampled slices read srv-query1's p50 30 % "
    "above timing every unit (2.83-2.89 us against 2.17-2.22 us in 4 clean-clone CI runs and locally); alone, or "
    "after a whole api.run, they agree. Reproduce: pytest tests/test_instruments.py tests/test_latency_sampling.py "
    "-k 'clean_step or agree_with_timing'. Not a checkpoint (finishing one first changes nothing)."))
def test_sampled_percentiles_agree_with_timing_every_unit(conn):
    """Slices timing every unit and slices timing one in 8 alternate, so both see the same machine. Timing every
    unit puts the previous unit's bucket arithmetic into each latency, which a sampled unit leaves out: the two
    may differ by that cost (what the slice measures as its cost of timing) plus a bucket's width."""
    every, rounds = 8, 8
    # right after a heavy test a checkpoint is still writing; its bursts slowed one kind of slice by 30 % (in CI,
    # and here after the Ray node test). Finish it first, as a measured step does (driver/quiesce.py).
    checkpoint(conn)
    full, sampled = LatencyHistogram(), LatencyHistogram()
    timing = math.inf
    for _ in range(rounds):
        for k, into in ((1, full), (every, sampled)):
            s = SliceSampling(every=k)
            hist, _errors, busy_s, units, timing_s = _slice(conn, "srv-query1", 0.2, k)
            into.add_bucket_counts(s.fold(hist, units, busy_s, timing_s, measure=True)[0], busy_s)
            timing = min(timing, timing_s)
    assert sampled.total >= SAMPLE_TARGET
    for q in (50, 90):
        f, s = full.percentile(q), sampled.percentile(q)
        assert f - timing - 2 * RELATIVE_WIDTH * f <= s <= f + 2 * RELATIVE_WIDTH * f, (q, f, s, timing)
    # a sampled histogram's mean comes from the busy time over every unit, as a full one's does
    assert sampled.mean_s == pytest.approx(full.mean_s, rel=0.25)


@pytest.fixture(scope="module")
def ctx(embedded_dsn: str, conn: psycopg.Connection) -> Iterator[StepContext]:
    control = connect(embedded_dsn, application_name="capmark control")
    info = describe(control, embedded_dsn, embedded=True)
    host = hosts.choose("local", embedded_dsn, control, info.data_directory, connect)
    info.postmaster_pid = host.postmaster_pid
    yield StepContext(dsn=embedded_dsn, info=info, control=control, host=host)
    control.close()


@pytest.mark.db
def test_a_step_counts_every_unit_and_says_how_its_latencies_were_sampled(ctx):
    w = registry.get("srv-query1")
    step = run_step(ctx, w, w.resolve_params({}), SIZE, StepPlan(1, 1, 0.5, 2.0, "server", collectors=False))
    tables = {r["relname"]: r for r in step.db_delta["tables"]}
    assert step.units == tables["item"]["idx_scan"] == sum(step.series_units)  # exact, as the server counts
    stored = StepResult.from_dict(json.loads(json.dumps(step.to_dict())))
    sampling = stored.instruments["latency_sampling"]
    query = sampling["types"]["query"]
    assert query["units"] == stored.histograms["query"].total == step.units
    assert query["timed"] >= min(step.units, SAMPLE_TARGET)  # percentiles never rest on fewer timed units
    # one job runs the window back to back: its busy time, the histogram's sum, is the window's length
    assert 0.9 * step.elapsed_s < stored.histograms["query"].sum_s <= step.elapsed_s
    if step.units >= 2 * SAMPLE_TARGET * SAMPLE_MARGIN:  # enough units to sample (a loaded machine may not have)
        assert sampling["every_max"] > 1 and query["timed"] < step.units
    if query["timed"] < step.units:
        every = (str(sampling["every_min"]) if sampling["every_min"] == sampling["every_max"]
                 else f"{sampling['every_min']} to {sampling['every_max']}")
        assert (f"Latency of query sampled: 1 in {every} units timed ({query['timed']:,} of {step.units:,})"
                in " ".join(stored.notes)), stored.notes
    else:
        assert not any("sampled" in n for n in stored.notes)
