"""Planning from production, end to end: a small production (tests/production.py: three pgbench applications on the
embedded PostgreSQL) went through a quiet part, a peak and a dip with `capmark observe --interval 5s` running, then ran
at 1.2x, 1.44x and 1.728x the peak's rates; the observation's peak, workloads, baseline model and what-if are checked
against what pgbench and the host measured.

It was measured once and stored (tests/fixtures/production-planning: how, and its figures), since its truth is
pgbench's, pg_stat_statements' and /proc's, not capmark's: the checks are of the analysis (the peak found, the
workloads defined, the model calibrated and grown), which the recording holds still, and five minutes of live load
in every run of the suite would measure only the machine's noise again. What the collector stores against load of
known size is checked live in test_observe.py. Record the fixture again when the observation's format changes.

The truth is pgbench's (each transaction's completion time from its log), the server's own statement times read by
the emulator around each phase, and the host's /proc/stat at 1 s, never the observation's own figures: a check of
the model against the numbers it was calibrated on would pass whatever the collector got wrong.

Response time is pgbench's from each transaction's actual start: the wait of an open arrival for a free client
(schedule lag) is outside the database host's model, the rest is what it should hold. The pgbench clients ran on the
database host, so the CPU no database process explains grows with the load (unattributed="load").
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import production
import pytest

from capmark.store import DB_NAME

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "production-planning"

# The goals (capacity planning from production, validation with a real server)
COUNT_TOLERANCE = 0.02  # each workload's transactions over the observation against its pgbench process
BASELINE_CPU_POINTS = 0.03  # modelled CPU utilisation against the host's, on the peak
BASELINE_RESPONSE = 0.15  # each workload's mean time per transaction from its start (pgbench's), modelled, on the peak
PREDICTED_CPU_POINTS = 0.05  # at each growth level the host carries, on the peak's host
PREDICTED_RESPONSE = 0.20  # at a carried level, against the what-if with the level's CPU cost per transaction
# A level's measured mean time per transaction is itself uncertain: its four slices' means moved by up to a fifth
# from one another on a host whose wake-ups were slow (reports at x1.44: 5.80 ms over slices whose production CPU
# grew 1.26x to 1.46x). The bound widens by two standard errors of the slices' mean, at most this much.
RESPONSE_NOISE_CAP = 0.15
# A growth level the host did not carry: its CPU this busy, or an application falling behind its schedule
# (production.kept_up).
SATURATED_CPU = 0.90


@pytest.fixture(scope="module")
def recorded() -> production.Recorded:
    return production.recorded_from(json.loads(gzip.decompress((RECORDING / "truth.json.gz").read_bytes())))


@pytest.fixture(scope="module")
def observation_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("observation")
    (folder / DB_NAME).write_bytes(gzip.decompress((RECORDING / "observation.sqlite.gz").read_bytes()))
    return folder


@pytest.fixture(scope="module")
def capacity() -> Any:
    """The analysis package; the test fails (never skips) while its entry points are missing."""
    try:
        from capmark import capacity
        from capmark.capacity.demands import CPU
        from capmark.observation_store import load_observation
    except ImportError as err:
        pytest.fail(f"the analysis of an observation is missing: {err}")
    missing = [n for n in ("baseline", "whatif", "solve", "PeakOptions", "WhatIfRequest", "parse_growth")
               if not hasattr(capacity, n)]
    if missing:
        pytest.fail(f"capmark.capacity has no {', '.join(missing)} yet")
    return SimpleNamespace(api=capacity, cpu=CPU, load=load_observation)


@pytest.fixture(scope="module")
def base(recorded: production.Recorded, observation_folder: Path, capacity: Any) -> Any:
    observation = capacity.load(observation_folder)
    assert not [i for i in observation.intervals if i.status != "ok"], [i.reason for i in observation.intervals]
    return capacity.api.baseline(observation, None, capacity.api.PeakOptions(by="cpu", length_s=recorded.peak_s),
                                 unattributed="load")


def _told(run: production.LevelRun, peak: production.PhaseRun) -> str:
    """A level's measurement in words, with what it was judged from."""
    slices = ", ".join(f"{s.growth():.3f}" for s in run.slices)
    return (f"CPU {run.cpu_at(peak):.3f} at the peak's host ({run.cpu_busy():.3f} as run); the production's own CPU "
            f"grew {run.growth():.3f}x (slices {slices}; {run.production_cpu():.3f} at the level; "
            f"{peak.production_cpu():.3f} of the peak's {peak.cpu_busy():.3f})")


def _near(model: float, truth: float, rel: float) -> bool:
    return math.isfinite(model) and abs(model - truth) <= rel * truth


def _pgbench_rates(run: production.PhaseRun) -> dict[str, float]:
    return {a.app: a.transactions / run.phase.seconds for a in run.apps.values()}


def test_the_peak_found_is_the_real_one(recorded: production.Recorded, base: Any) -> None:
    real = recorded.phase("peak").start
    assert abs(base.peak.start - real) <= recorded.interval_s, (base.peak.start - real, base.peak)


def test_each_workloads_transactions_match_its_pgbench(recorded: production.Recorded, observation_folder: Path,
                                                       base: Any, capacity: Any) -> None:
    observation = capacity.load(observation_folder)
    start, end = observation.intervals[0].start, observation.intervals[-1].end
    shares = {w.name: w for w in base.workloads}
    for app in production.APPS:
        truth = sum(r.apps[app].completed_between(start, end) for r in recorded.runs)
        assert truth > 0
        assert shares[app].units == pytest.approx(truth, rel=COUNT_TOLERANCE), (app, shares[app].units, truth)


def test_the_baseline_models_the_peaks_cpu(recorded: production.Recorded, base: Any, capacity: Any) -> None:
    """The model at pgbench's own peak rates against the host's CPU over the real peak."""
    peak = recorded.phase("peak")
    solved = capacity.api.solve(base.model, {**base.model.rates, **_pgbench_rates(peak)})
    cpu = solved.utilisation[capacity.cpu]
    assert abs(cpu - peak.cpu_busy()) <= BASELINE_CPU_POINTS, (cpu, peak.cpu_busy())


# The model's response time per workload is its time at the database host's resources (its share of the CPU, with
# the clients' CPU spread over the workloads as unattributed="load" does, the disk and the WAL flush, with their
# queues) and its clients' round trips (a lookup one, an order four), each at the collector's probed round trip grown
# with the CPU's queue. The like-for-like truth is pgbench's own time per transaction from its actual start (its
# schedule lag, the wait of an open arrival for a free client, left out). Recorded on 2026-12-03: on the peak, orders
# 1.360 ms modelled against 1.345 ms, reports 4.333 against 3.918, lookups 0.233 against 0.279; at 1.728x the rates
# 2.772 against 4.079, 7.793 against 7.579 and 0.597 against 0.749. What the model still lacks is the client's own
# work inside each transaction, which no database statistic sees: pgbench used 57 us of CPU a lookup at the peak (one
# thread serves 16 clients, reads each result and logs each transaction), beside the lookup's 98 us of server CPU and
# its 90 us round trip. Only lookups, whose time is mostly the client's and the trip's, miss by more than the bound.
class ClientTimeMissing(AssertionError):
    """Only lookups, most of whose time the client spends, missed; orders and reports did not."""


CLIENT_TIME_WORKLOADS = {production.LOOKUPS}
RESPONSE_LACKS_CLIENT_TIME = ("the model holds no time for the client's own work inside a transaction (pgbench's 57 us "
                              "of CPU a lookup at the peak), which the database server cannot see")


@pytest.mark.xfail(strict=True, raises=ClientTimeMissing, reason=RESPONSE_LACKS_CLIENT_TIME)
def test_the_baseline_models_each_workloads_response_time(recorded: production.Recorded, base: Any, capacity: Any) -> None:
    """The model at pgbench's own peak rates against pgbench's mean time per transaction from its start, over the
    real peak."""
    peak = recorded.phase("peak")
    solved = capacity.api.solve(base.model, {**base.model.rates, **_pgbench_rates(peak)})
    for app in production.APPS:
        print(f"peak {app}: {solved.response_s[app] * 1e3:.3f} ms modelled, "
              f"{peak.apps[app].mean_from_start_s * 1e3:.3f} ms measured")
    misses = {app: (solved.response_s[app], peak.apps[app].mean_from_start_s) for app in production.APPS
              if not _near(solved.response_s[app], peak.apps[app].mean_from_start_s, BASELINE_RESPONSE)}
    _judge_response(misses, "modelled vs measured mean time per transaction, s")


def _judge_response(misses: dict[str, Any], what: str) -> None:
    """A miss of a workload whose time is mostly the server's fails the test; a miss of only lookups is the known
    gap (ClientTimeMissing)."""
    assert not set(misses) - CLIENT_TIME_WORKLOADS, f"{what}: {misses}"
    if misses:
        raise ClientTimeMissing(f"{what}: {misses}")


def _carried(recorded: production.Recorded, base: Any, capacity: Any) -> list[tuple[Any, production.LevelRun]]:
    """Each growth level's scenario beside its measured run, for the levels the host carried: under SATURATED_CPU
    both as it ran and on the peak's host (a saturated level's production CPU is capped, so its growth is not the
    load's), and every application keeping up in every slice."""
    peak = recorded.phase("peak")
    doc = capacity.api.whatif(base, capacity.api.WhatIfRequest(growth=(capacity.api.parse_growth("20%x3"),)))
    scenarios = [s for s in doc.scenarios if s.period > 0]
    assert len(scenarios) == len(recorded.levels)
    pairs = []
    for scenario, run in zip(scenarios, recorded.levels, strict=True):
        kept_up = all(production.kept_up(a.transactions, a.rate * s.level.phase.seconds)
                      for s in run.slices for a in s.level.apps.values())
        if max(run.cpu_busy(), run.cpu_at(peak)) < SATURATED_CPU and kept_up:
            pairs.append((scenario, run))
    assert pairs, ("no growth level was carried: " + ", ".join(
        f"{r.name}: {_told(r, peak)}" for r in recorded.levels))
    return pairs


# The production's CPU per transaction falls above its peak, where no observation reaches: against the peak's, x0.85 to
# x0.92 at 1.728x the rates in six runs, x0.96 in another (wake-ups shared by more work: a lookup's backend spent
# 8.6 % less CPU and made 1.05 context switches a transaction against 1.28), x0.93 to x0.98 at 1.44x, x0.94 to x0.985
# at 1.2x. The observation's own intervals, up to the peak's 40-50 % busy, show that fall in some runs and not in
# others, and a model that does not carry it over-predicts 1.728x by up to 8 points (the goal is 5). A level that the
# model over-predicts beyond the goal and whose cost fell below what the model carried by more than this (the slices
# measure a level's growth within +-1.5 %) is that known gap: the model must then be within the goal of the level at
# the cost it carried, and the test is marked xfailed with the level's figures. Any other miss fails. Whether a run
# shows the gap is the host's doing (x0.961 in one run, x0.85 in another), so the gap cannot be a fixed expectation:
# a static strict xfail failed the run in which the cost held and the model met the goal.
COST_FALL_UNSEEN = 0.05


def test_the_what_if_predicts_the_grown_cpu(recorded: production.Recorded, base: Any, capacity: Any) -> None:
    """The model at each level's rates against the host of the peak at that level. The truth is anchored on the real
    peak and its levels ran at the peak's rates grown, so the model is asked at pgbench's own peak rates grown alike,
    as the baseline's check asks it at the peak: the window's rates were up to 2.2 % off pgbench's (reports, 1 point
    of the host at the peak), which the growth would carry into every level."""
    peak = recorded.phase("peak")
    misses, fallen = [], []
    for scenario, run in _carried(recorded, base, capacity):
        factor = run.rates_growth()
        rates = {**base.model.rates, **{app: r * factor for app, r in _pgbench_rates(peak).items()}}
        modelled, measured = capacity.api.solve(base.model, rates).utilisation[capacity.cpu], run.cpu_at(peak)
        cost = run.growth() / factor  # the production's CPU per transaction at the level against beside it
        carried = base.model.cpu_cost.factor(modelled) if base.model.cpu_cost is not None else 1.0
        # the level on the peak's host had its CPU per transaction been what the model carried
        at_carried_cost = peak.cpu_busy() + (factor * carried - 1) * peak.production_cpu()
        told = (f"{run.name}: CPU {modelled:.3f} modelled ({scenario.utilisation[capacity.cpu]:.3f} at the window's "
                f"rates grown); {_told(run, peak)}; x{cost:.3f} the peak's CPU per transaction, x{carried:.3f} "
                f"carried by the model, {at_carried_cost:.3f} at that cost")
        print(told)
        if abs(modelled - measured) <= PREDICTED_CPU_POINTS:
            continue
        # the gap is an over-prediction where the cost fell below what the model carried, and only that: a model
        # that carried too large a fall under-predicts, which is a plain miss
        if modelled > measured and cost < carried - COST_FALL_UNSEEN \
                and abs(modelled - at_carried_cost) <= PREDICTED_CPU_POINTS:
            fallen.append(told)
        else:
            misses.append(told)
    assert not misses, misses + [n for n in base.notes if "no database process explains" in n]
    if fallen:
        pytest.xfail("the CPU per transaction fell above the observed load, and the model carries no fall it did not "
                     f"see (known gap; the goal is missed there): {fallen}")


def _as_it_ran(base: Any, capacity: Any, scenario: Any, speed: float) -> Any:
    """The what-if for a growth level on a CPU `speed` times as fast as the peak's (LevelRun.speed_as_it_ran): the
    level with its CPU as busy as the host's was while it ran. What the load does to the CPU is the part of the
    prediction test_the_what_if_predicts_the_grown_cpu bounds; this one bounds the queueing on top.
    Judged with the model's own cost instead, a shared host's speed, which moves by up to 15 % between the
    observation and the levels, and the cost falling with the load (1.52-1.61x the CPU for 1.728x the rates) put
    reports 16-22 % over what was measured at 1.728x, and once at 4.33 ms against 2.75 ms."""
    request = capacity.api.WhatIfRequest(growth=(capacity.api.parse_growth("20%x3"),), cpu_speed=speed)
    doc = capacity.api.whatif(base, request)
    return next(s for s in doc.scenarios if s.period == scenario.period)


def test_the_what_if_predicts_the_grown_response_times(recorded: production.Recorded, base: Any,
                                                        capacity: Any) -> None:
    """Each workload's mean time per transaction from its start at each growth level the host carried, as run,
    against the what-if of that level with the host's CPU as busy as it was then."""
    peak = recorded.phase("peak")
    misses: dict[str, Any] = {}
    for scenario, run in _carried(recorded, base, capacity):
        apps = run.apps()
        cost = run.cost_against(peak)
        speed = run.speed_as_it_ran(scenario.utilisation[capacity.cpu])
        then = _as_it_ran(base, capacity, scenario, speed)
        for w in then.workloads:
            if w.name not in apps:
                continue
            measured = apps[w.name].mean_from_start_s
            slices = [s.level.apps[w.name].mean_from_start_s for s in run.slices]
            noise = min(RESPONSE_NOISE_CAP, 2 * statistics.stdev(slices) / math.sqrt(len(slices)) / measured)
            told = (f"{run.name} {w.name}: {w.response_s * 1e3:.3f} ms modelled, {measured * 1e3:.3f} ms measured "
                    f"(slices {', '.join(f'{x * 1e3:.3f}' for x in slices)}; bound {PREDICTED_RESPONSE + noise:.3f}), "
                    f"{cost:.3f}x the peak's CPU per transaction")
            print(told)
            if not _near(w.response_s, measured, PREDICTED_RESPONSE + noise):
                misses.setdefault(w.name, []).append(told)
    _judge_response(misses, "modelled vs measured mean time per transaction")
