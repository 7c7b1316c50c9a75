"""Planning from production, end to end on the embedded PostgreSQL: `capmark observe --interval 5s` runs while three
pgbench applications (tests/production.py) go through a quiet part, a peak and a dip; the observation's peak,
workloads, baseline model and what-if are then checked against what pgbench and the host measured, and the what-if's
growth levels against the three applications really run at 1.2x, 1.44x and 1.728x the peak's rates.

The truth is pgbench's (each transaction's completion time from its log), the server's own statement times read by
the emulator around each phase, and the host's /proc/stat at 1 s, never the observation's own figures: a check of
the model against the numbers it was calibrated on would pass whatever the collector got wrong.

Response time is the server's: its statements' execution time per transaction, what a model of the database host
covers. What pgbench sees on top (round trips, its own client, the wait for a free client of an open arrival) is
outside the database host's model and is shown beside it by benchmarks/production_planning.py. The pgbench clients
run on the database host, so the CPU no database process explains grows with the load (unattributed="load").
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import production
import pytest

pytestmark = pytest.mark.db

INTERVAL_S = 5
QUIET_S, PEAK_S, DIP_S = 30, 50, 30  # the peak is ten intervals: the shortest peak the analysis accepts
GROWTH_S = 25  # each growth level
LEAD_S = 3.0  # the collector's first interval starts before the first phase
TAIL_S = 2 * INTERVAL_S  # and its last ends after the last phase
STARTUP_LIMIT_S = 60.0  # capmark observe connects and stores the observation record within this (a loaded machine)

# The goals (capacity planning from production, validation with a real server)
COUNT_TOLERANCE = 0.02  # each workload's transactions over the observation against its pgbench process
BASELINE_CPU_POINTS = 0.03  # modelled CPU utilisation against the host's, on the peak
BASELINE_RESPONSE = 0.15  # each workload's mean response time in the server, model against measured, on the peak
PREDICTED_CPU_POINTS = 0.05  # at each growth level the host carries
# A growth level runs a minute after the peak. Where the host's own speed moved in between (its reference loop's CPU
# time, tests/production.py), the level's CPU moves by that share whatever the model does: the bound widens to it,
# never beyond this, which a model that ignored the growth still fails at 1.44x and 1.728x (0.2 and 0.3 cores).
PREDICTED_CPU_NOISE_CAP = 0.15
# A level measured while the host's speed is within this share of the peak's is taken as it is; else it is measured
# again, up to LEVEL_TRIES times in all (a quiet host's levels moved -9 to +8 %, a noisy one's 41 %).
SAME_SPEED = 0.10
LEVEL_TRIES = 3
PREDICTED_RESPONSE = 0.20
# A growth level the host did not carry: its CPU this busy, or an application completing fewer than this share of the
# transactions it was asked for (pgbench's clients fell behind their schedule).
SATURATED_CPU = 0.90
SATURATED_COMPLETION = 0.97
# pgbench -R starts transactions at Poisson times: over a phase the count asked for is itself Poisson, with a standard
# deviation of its square root (63 of 3,938 for reports over 30 s, so 3 % short is 1.9 deviations: 3 % of phases).
# An application whose clients kept up completes at least the larger of the two shortfalls below what it was asked.
POISSON_DEVIATIONS = 4.0


@dataclass
class Observed:
    folder: Path
    runs: list[production.PhaseRun]
    output: str

    def phase(self, name: str) -> production.PhaseRun:
        return next(r for r in self.runs if r.phase.name == name)


def _capmark(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "capmark.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


@pytest.fixture(scope="module")
def observed(embedded_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    """The production's profile with capmark observe running through it (the command line, as a user starts it)."""
    probe = subprocess.run([sys.executable, "-m", "capmark.cli", "observe", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"capmark observe is not a command yet: {(probe.stderr or probe.stdout).strip()[-300:]}")
    production.build(embedded_dsn)
    results = tmp_path_factory.mktemp("observations")
    planned = LEAD_S + QUIET_S + PEAK_S + DIP_S + TAIL_S
    proc = _capmark("observe", "--dsn", embedded_dsn, "--interval", f"{INTERVAL_S}s", "--for", f"{planned:.0f}s",
                    "--results-dir", str(results), env=dict(os.environ, COLUMNS="200"))
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while not any(results.iterdir()):
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.communicate(timeout=30)[0] if proc.poll() is not None else "(still starting)"
                pytest.fail(f"capmark observe stored no observation within {STARTUP_LIMIT_S:g} s: {out[-500:]}")
            time.sleep(0.2)
        time.sleep(LEAD_S)
        runs = production.run_profile(embedded_dsn, production.profile(QUIET_S, PEAK_S, DIP_S))
        output = proc.communicate(timeout=planned + 120)[0]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    assert proc.returncode == 0, output[-1000:]
    folders = [f for f in results.iterdir() if f.is_dir()]
    assert len(folders) == 1, folders
    yield Observed(folders[0], runs, output)


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
def base(observed: Observed, capacity: Any) -> Any:
    observation = capacity.load(observed.folder)
    assert not [i for i in observation.intervals if i.status != "ok"], [i.reason for i in observation.intervals]
    return capacity.api.baseline(observation, None, capacity.api.PeakOptions(by="cpu", length_s=PEAK_S),
                                 unattributed="load")


def _speed_drift(observed: Observed, run: production.PhaseRun) -> float:
    """How far the host's speed (its reference loop's CPU time) moved from the peak to this run, as a share."""
    peak, level = observed.phase("peak").reference_s(), run.reference_s()
    return level / peak - 1 if peak and level else 0.0


@pytest.fixture(scope="module")
def grown(observed: Observed, embedded_dsn: str) -> list[production.PhaseRun]:
    """The three applications at each growth level, after the observation. A level measured while another tenant
    had moved the host's speed away from the peak's is measured again (the closest of its tries is kept): the model
    predicts the level on the host of the peak."""
    runs = []
    for phase in production.growth(GROWTH_S):
        tries = []
        for _ in range(LEVEL_TRIES):
            tries.append(production.run_profile(embedded_dsn, [phase])[0])
            if abs(_speed_drift(observed, tries[-1])) <= SAME_SPEED:
                break
        print(f"{phase.name}: the host's speed moved {', '.join(f'{_speed_drift(observed, r):+.0%}' for r in tries)} "
              "from the peak")
        runs.append(min(tries, key=lambda r: abs(_speed_drift(observed, r))))
    return runs


def _near(model: float, truth: float, rel: float) -> bool:
    return math.isfinite(model) and abs(model - truth) <= rel * truth


def _kept_up(transactions: int, asked: float) -> bool:
    """Whether an application completed what pgbench's Poisson schedule asked of it, within that schedule's noise."""
    return transactions >= asked - max((1 - SATURATED_COMPLETION) * asked, POISSON_DEVIATIONS * math.sqrt(asked))


def _pgbench_rates(run: production.PhaseRun) -> dict[str, float]:
    return {a.app: a.transactions / run.phase.seconds for a in run.apps.values()}


def test_the_production_commits_what_pgbench_says(observed: Observed) -> None:
    """The emulator itself: every transaction pgbench logged reached the server once (its statement's calls in
    pg_stat_statements over the phase), none failed, and each application ran at its rate."""
    for run in observed.runs:
        for app in run.apps.values():
            assert app.failed == 0, (run.phase.name, app.app, app.failed)
            assert app.server.calls == app.transactions, (run.phase.name, app.app, app.server.calls, app.transactions)
            asked = app.rate * run.phase.seconds
            assert _kept_up(app.transactions, asked), (run.phase.name, app.app, app.transactions, asked)


def test_the_peak_found_is_the_real_one(observed: Observed, base: Any) -> None:
    real = observed.phase("peak").start
    assert abs(base.peak.start - real) <= INTERVAL_S, (base.peak.start - real, base.peak)


def test_each_workloads_transactions_match_its_pgbench(observed: Observed, base: Any, capacity: Any) -> None:
    observation = capacity.load(observed.folder)
    start, end = observation.intervals[0].start, observation.intervals[-1].end
    shares = {w.name: w for w in base.workloads}
    for app in production.APPS:
        truth = sum(r.apps[app].completed_between(start, end) for r in observed.runs)
        assert truth > 0
        assert shares[app].units == pytest.approx(truth, rel=COUNT_TOLERANCE), (app, shares[app].units, truth)


def test_the_baseline_models_the_peaks_cpu(observed: Observed, base: Any, capacity: Any) -> None:
    """The model at pgbench's own peak rates against the host's CPU over the real peak."""
    peak = observed.phase("peak")
    solved = capacity.api.solve(base.model, {**base.model.rates, **_pgbench_rates(peak)})
    cpu = solved.utilisation[capacity.cpu]
    assert abs(cpu - peak.cpu_busy()) <= BASELINE_CPU_POINTS, (cpu, peak.cpu_busy())


# The model's response time per workload holds every resource's time per transaction: all of its backend's CPU
# (parse, bind, execute, commit: 50 us per lookup measured from /proc), the disk and the WAL flush. The server's
# statement time per transaction holds only execution (10 us per lookup), and the observation's "measured" response
# time is that statement time too, so the two are not the same quantity: modelled 0.12 ms against 0.011 ms for
# lookups, 1.06 ms against 0.043 ms for orders (whose commit flush no statement time holds), 4.3 ms against 2.6 ms
# for reports. A like-for-like measured response needs the activity samples (Little's law on the active sessions).
RESPONSE_IS_NOT_LIKE_FOR_LIKE = ("the model's response time holds all of a transaction's CPU, disk and WAL flush "
                                 "time, the measured one only its statements' execution time")


@pytest.mark.xfail(strict=True, reason=RESPONSE_IS_NOT_LIKE_FOR_LIKE)
def test_the_baseline_models_each_workloads_response_time(observed: Observed, base: Any, capacity: Any) -> None:
    """The model at pgbench's own peak rates against the server's mean time per transaction over the real peak."""
    peak = observed.phase("peak")
    solved = capacity.api.solve(base.model, {**base.model.rates, **_pgbench_rates(peak)})
    misses = {app: (solved.response_s[app], peak.apps[app].server_time_per_txn_s) for app in production.APPS
              if not _near(solved.response_s[app], peak.apps[app].server_time_per_txn_s, BASELINE_RESPONSE)}
    assert not misses, f"modelled vs measured mean time in the server per transaction, s: {misses}"


def _carried(base: Any, capacity: Any, grown: list[production.PhaseRun]) -> list[tuple[Any, production.PhaseRun]]:
    """Each growth level's scenario beside its measured run, for the levels the host carried."""
    doc = capacity.api.whatif(base, capacity.api.WhatIfRequest(growth=(capacity.api.parse_growth("20%x3"),)))
    scenarios = [s for s in doc.scenarios if s.period > 0]
    assert len(scenarios) == len(grown)
    pairs = []
    for scenario, run in zip(scenarios, grown, strict=True):
        kept_up = all(_kept_up(a.transactions, a.rate * run.phase.seconds) for a in run.apps.values())
        if run.cpu_busy() < SATURATED_CPU and kept_up:
            pairs.append((scenario, run))
    assert pairs, [(r.phase.name, r.cpu_busy()) for r in grown]
    return pairs


def _speed_bound(observed: Observed, run: production.PhaseRun) -> tuple[float, float]:
    """The bound on a growth level's CPU error, and how far the host's speed moved from the peak to it."""
    drift = _speed_drift(observed, run)
    return min(PREDICTED_CPU_NOISE_CAP, max(PREDICTED_CPU_POINTS, abs(drift) * run.cpu_busy())), drift


def test_the_what_if_predicts_the_grown_cpu(observed: Observed, base: Any, capacity: Any,
                                            grown: list[production.PhaseRun]) -> None:
    misses = []
    for scenario, run in _carried(base, capacity, grown):
        bound, drift = _speed_bound(observed, run)
        if abs(scenario.utilisation[capacity.cpu] - run.cpu_busy()) > bound:
            misses.append(f"{run.phase.name} CPU {scenario.utilisation[capacity.cpu]:.3f} modelled, "
                          f"{run.cpu_busy():.3f} measured (bound {bound:.3f}; the host's speed moved {drift:+.0%} "
                          "from the peak)")
    assert not misses, misses


@pytest.mark.xfail(strict=True, reason=RESPONSE_IS_NOT_LIKE_FOR_LIKE)
def test_the_what_if_predicts_the_grown_response_times(base: Any, capacity: Any,
                                                        grown: list[production.PhaseRun]) -> None:
    misses = []
    for scenario, run in _carried(base, capacity, grown):
        for w in scenario.workloads:
            if w.name not in run.apps:
                continue
            measured = run.apps[w.name].server_time_per_txn_s
            if not _near(w.response_s, measured, PREDICTED_RESPONSE):
                misses.append(f"{run.phase.name} {w.name} {w.response_s * 1e3:.3f} ms modelled, "
                              f"{measured * 1e3:.3f} ms measured")
    assert not misses, misses
