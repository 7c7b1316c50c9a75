"""Sampled latency timing in server-side slices: every unit still counted exactly, the sample scaled to whole
units, percentiles that agree with timing every unit, and steps that say how they were sampled."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from capmark.collect import hosts
from capmark.driver.sampling import (
    MAX_EVERY,
    SAMPLE_MARGIN,
    SAMPLE_TARGET,
    SliceSampling,
    every_for,
    scale_counts,
)
from capmark.driver.step import StepContext, StepPlan, run_step
from capmark.engines.postgres import connect, describe
from capmark.engines.postgres.maintenance import checkpoint
from capmark.histogram import BUCKETS_PER_E, N_BUCKETS, RELATIVE_WIDTH, LatencyHistogram, bucket_bounds, bucket_of
from capmark.results import StepResult
from capmark.workloads import datamodel, registry
from capmark.workloads.base import procedure_sql, slice_call

SIZE = datamodel.size_for(1)
QUERY1 = registry.get("srv-query1").procedure

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


def test_k_grows_with_what_timing_costs_against_a_unit():
    """What timing really costs between units is counted in instructions by benchmarks/instructions_per_unit.py (on a
    shared machine the CPU time per unit drifts by more than the 2 % share); here, the choice at its ends and between."""
    assert every_for(1e-6, 1e-3, None) == 1  # a unit a thousand times longer than timing it: every unit timed
    assert every_for(1.0, 1e-9, None) == MAX_EVERY  # never thinner than the deadline check allows
    assert every_for(math.inf, 1e-6, None) == every_for(1e-6, math.nan, None) == 1  # nothing measured yet
    ks = [every_for(1e-6, unit, None) for unit in (1e-6, 2e-6, 5e-6, 20e-6, 100e-6, 1e-3)]
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1]  # the shorter the unit, the thinner the sample
    costs = [every_for(timing, 5e-6, None) for timing in (0.2e-6, 1e-6, 5e-6)]
    assert costs == sorted(costs) and costs[0] < costs[-1]  # the dearer timing is, the thinner the sample


def test_k_leaves_every_type_enough_timed_units():
    timing, unit = 1e-6, 1e-6
    alone = every_for(timing, unit, None)  # what timing's cost alone asks for
    assert alone > 10  # a unit as short as timing it is sampled thinly
    assert every_for(timing, unit, [10e6]) == alone  # plenty of units: the cost decides
    rare = 200_000
    k = every_for(timing, unit, [10e6, rare])
    assert 1 < k < alone and rare / k >= SAMPLE_TARGET * SAMPLE_MARGIN  # the rarer type keeps its sample
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


def _timed(c: psycopg.Connection, procedure: str, every: int, seconds: float, params: dict | None = None
           ) -> tuple[list[int], float, float]:
    """One slice's timed units of its first type, scaled to its counts; its busy time; its cost of timing a unit."""
    hist, _errors, busy_s, units, timing_s = c.execute(slice_call(procedure), (
        seconds, json.dumps(params if params is not None else SIZE.as_params()), every)).fetchone()
    return SliceSampling(every=every).fold(hist, units, busy_s, timing_s, measure=True)[0], busy_s, timing_s


@pytest.mark.db
def test_a_slice_reads_the_clock_to_the_microsecond(conn):
    """PostgreSQL's timestamps count whole microseconds, so every unit reads a whole number of them, timed in full or
    sampled. Read as seconds since 1970 in a float8 they were rounded to multiples of 0.238 us, and a unit of 2 to 3 us
    fell into buckets that hold no whole microsecond (1.907, 2.146, 2.384, 2.623, 2.861 us)."""
    fine = 1 / RELATIVE_WIDTH  # below ~25 us a bucket is narrower than a microsecond, so it shows the readings
    for every in (1, 8):
        counts, _busy_s, _timing_s = _timed(conn, QUERY1, every, 0.2)
        short = [i for i, n in enumerate(counts) if n and bucket_bounds(i)[1] * 1e6 <= fine]
        assert short, "srv-query1 took no unit shorter than 25 us"
        between = [(round(bucket_bounds(i)[0] * 1e6, 3), round(bucket_bounds(i)[1] * 1e6, 3)) for i in short
                   if math.ceil(bucket_bounds(i)[0] * 1e6) >= bucket_bounds(i)[1] * 1e6]
        assert not between, f"units read between two microseconds (k = {every}): {between}"


# Delays in the middle of their bucket (in us), near 1 ms and 5 ms: a unit waits for one of them and its reading is
# the delay plus the loop's few microseconds, 2 % short of the bucket's upper edge. A unit sleeps through all but the
# last 2.5 ms (pg_sleep overshoots by up to a millisecond; a process that slept gets a CPU back at once), then reads
# the clock until the delay has passed.
DELAYS_US = (math.exp((bucket_of(1e-3) + 0.5) / BUCKETS_PER_E), math.exp((bucket_of(5e-3) + 0.5) / BUCKETS_PER_E))
WAIT_SQL = procedure_sql("slice_test_known_delay", "d interval := make_interval(secs => (p_params->>'delay_s')::float8); "
                         "t_end timestamptz;", """
      t_end := clock_timestamp() + d;
      perform pg_sleep(greatest(0, extract(epoch from d) - 0.0025));
      loop exit when clock_timestamp() >= t_end; end loop;
      {rec}""")


# a unit that loses its CPU near its end reads longer; a server that waited for a CPU more than this share of its
# time lost it in a few percent of the units, enough to move their p95
BUSY_SHARE = 0.02


def _cpu_wait_s(c: psycopg.Connection) -> float | None:
    """How long the server process of this session has waited for a CPU (the kernel's run-queue time); None where
    the kernel does not say."""
    pid = c.execute("select pg_backend_pid()").fetchone()[0]
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return None


# a unit that loses its CPU to the hypervisor (steal, which the guest's run-queue time does not show) reads longer;
# a bug in what is timed reads wrong every time, a neighbour's burst only in one try
DELAY_TRIES = 3


def _read_known_delay(conn: psycopg.Connection, delay_us: float) -> tuple[dict[int, dict[int, float]], str]:
    """p50 and p95 of the known delay timed every unit and one in three; and how long the server waited for a CPU."""
    wait_before = _cpu_wait_s(conn)
    read, busy = {}, 0.0
    for every in (1, 3):
        h = LatencyHistogram()
        for _ in range(2):
            counts, busy_s, _timing_s = _timed(conn, "slice_test_known_delay", every, 0.3, {"delay_s": delay_us * 1e-6})
            h.add_bucket_counts(counts, busy_s)
            busy += busy_s
        read[every] = {q: h.percentile(q) for q in (50, 95)}
    wait_after = _cpu_wait_s(conn)
    waited = ""
    if wait_before is not None and wait_after is not None:
        share = (wait_after - wait_before) / busy
        waited = f"the server waited for a CPU {share:.0%} of the time" + (
            " (a busy machine: rerun)" if share > BUSY_SHARE else "")
    return read, waited


# The same delay timed by plain PL/pgSQL around each unit, no slice and no histogram: the host's own jitter, read
# beside the slices. On a 2-vCPU guest it moves for minutes at a time: p95 of the 1 ms delay read 1,013-1,081 us in
# every try of some runs (the server waiting for a CPU 0 % of the time: the hypervisor's doing, which no guest
# counter shows), 972-1,012 us in others.
REFERENCE_SQL = """
create or replace function capmark.test_known_delay_reference(p_delay float8, p_units int) returns float8[]
language plpgsql as $$
declare
  d interval := make_interval(secs => p_delay); t0 timestamptz; t_end timestamptz; took float8[] := '{}';
begin
  for i in 1 .. p_units loop
    t0 := clock_timestamp();
    t_end := t0 + d;
    perform pg_sleep(greatest(0, p_delay - 0.0025));
    loop exit when clock_timestamp() >= t_end; end loop;
    took := took || extract(epoch from clock_timestamp() - t0)::float8;
  end loop;
  return took;
end $$"""
REFERENCE_S = 0.6  # as long as a try's slices of one kind
# Tries in all when the host's own p95 of the delay is outside its bucket in some of them: such a try can tell
# nothing at p95, and a noisy spell lasts minutes
MAX_DELAY_TRIES = 8


def _reference_p95(conn: psycopg.Connection, delay_us: float) -> float:
    units = max(20, round(REFERENCE_S / (delay_us * 1e-6)))
    took = conn.execute("select capmark.test_known_delay_reference(%s, %s)", (delay_us * 1e-6, units)).fetchone()[0]
    return float(np.percentile(took, 95))


@pytest.mark.db
@pytest.mark.parametrize("delay_us", DELAYS_US, ids=("1ms", "5ms"))
def test_a_known_delay_reads_as_itself_timed_in_full_or_sampled(conn, delay_us):
    """Units that last a known time read it at p50 and p95 within the delay's own bucket, whether every unit or one
    in three is timed: the timed interval is one whole unit, no more, no less. A unit that loses its CPU near its end
    reads longer, so a try outside the bucket is tried again. A try whose p95 only is outside while the host's own
    p95 of the same delay (timed around each unit by plain PL/pgSQL, beside the slices) is outside too tells nothing
    at p95: it is not counted, up to MAX_DELAY_TRIES in all, and the test is skipped with the figures when no try
    could tell. The failure says every try's figures and how long the server waited for a CPU."""
    conn.execute(WAIT_SQL)
    conn.execute(REFERENCE_SQL)
    low, high = bucket_bounds(bucket_of(delay_us * 1e-6))
    tries, judged = [], 0
    for _ in range(MAX_DELAY_TRIES):
        reference = _reference_p95(conn, delay_us)
        read, waited = _read_known_delay(conn, delay_us)
        reference = max(reference, _reference_p95(conn, delay_us))
        outside = {(every, q): p for every, at in read.items() for q, p in at.items() if not low <= p < high}
        if not outside:
            return
        said = ", ".join(f"k = {every}: p{q} read {p * 1e6:.1f} us" for (every, q), p in outside.items())
        jitter = {q for _, q in outside} == {95} and not reference < high
        tries.append(f"{said} ({waited}; the host's own p95 {reference * 1e6:.1f} us)")
        judged += not jitter
        if judged >= DELAY_TRIES:
            break
    bucket = f"[{low * 1e6:.1f}, {high * 1e6:.1f}) us"
    if not judged:
        pytest.skip(f"the host's own p95 of a {delay_us:.1f} us delay was outside its bucket {bucket} in each of "
                    f"{len(tries)} tries, so no try could tell: " + "; ".join(tries))
    pytest.fail(f"a delay of {delay_us:.1f} us read outside its bucket {bucket} in {judged} of {len(tries)} tries "
                f"(the others at the host's own jitter): " + "; ".join(tries))


# A shared host's neighbours can slow one kind of slice for a whole round (a 2-vCPU CI host read sampled p50 17 %
# above every-unit p50 once, and within a bucket in the runs before and after): a disagreement is measured again,
# up to this many times in all, and the test fails only when every try disagrees.
AGREEMENT_TRIES = 3


@pytest.mark.db
def test_sampled_percentiles_agree_with_timing_every_unit(conn):
    """Slices timing every unit and slices timing one in 8 alternate, so both see the same machine. Timing every
    unit puts the previous unit's bucket arithmetic into each latency, which a sampled unit leaves out: the two
    may differ by that cost (what the slice measures as its cost of timing) plus a bucket's width. (While the sampled
    unit was a separate copy of the unit and the clock a float epoch, sampled slices read p50 30 % above.)"""
    every, rounds = 8, 8
    tries = []
    for _ in range(AGREEMENT_TRIES):
        # right after a heavy test a checkpoint is still writing; its bursts slowed one kind of slice by 30 % (in
        # CI, and here after the Ray node test). Finish it first, as a measured step does (driver/quiesce.py).
        checkpoint(conn)
        full, sampled = LatencyHistogram(), LatencyHistogram()
        timing = math.inf
        for _ in range(rounds):
            for k, into in ((1, full), (every, sampled)):
                counts, busy_s, timing_s = _timed(conn, QUERY1, k, 0.2)
                into.add_bucket_counts(counts, busy_s)
                timing = min(timing, timing_s)
        assert sampled.total >= SAMPLE_TARGET
        # a sampled histogram's mean comes from the busy time over every unit, as a full one's does
        assert sampled.mean_s == pytest.approx(full.mean_s, rel=0.25)
        outside = []
        for q in (50, 90):
            f, s = full.percentile(q), sampled.percentile(q)
            if not f - timing - 2 * RELATIVE_WIDTH * f <= s <= f + 2 * RELATIVE_WIDTH * f:
                outside.append(f"p{q} {s * 1e6:.2f} us sampled against {f * 1e6:.2f} us timing every unit "
                               f"(its timing cost {timing * 1e6:.2f} us)")
        if not outside:
            return
        tries.append(", ".join(outside))
    pytest.fail(f"sampled and every-unit percentiles disagreed beyond a bucket's width in each of {AGREEMENT_TRIES} "
                "tries: " + "; ".join(tries))


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
