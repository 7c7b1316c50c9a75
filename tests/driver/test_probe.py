"""The host's CPU scaling probe: measured through the database, on the real server, against a platform whose
answer is known because capmark made it so (the server confined to one core)."""

from __future__ import annotations

import os

import psutil
import psycopg
import pytest

from capmark.config import PlatformLimits
from capmark.driver import platform, probe
from capmark.engines import registry

# Two sessions on one core share it: whatever the host's noise, they cannot do more than one core's work. The
# median of three alternating rounds of ~40 statements each stays within a few % of it on a busy host.
ONE_CORE_TOLERANCE = 0.08


@pytest.mark.parametrize("growth", [0.0, 0.2, 0.43, 1.0])
def test_the_growth_is_recovered_from_the_effective_cores_it_gives(growth):
    cores = 8
    effective = {k: k / (1 + growth * (k - 1)) for k in range(1, cores + 1)}
    assert probe.growth_of(effective) == pytest.approx(growth, abs=1e-12)


def test_a_sessions_rate_is_whole_statements_over_the_time_they_took_not_a_count_in_the_window():
    """A window that cuts statements in two must not round the rate: 0.13 s statements are 7.69/s, while the 15
    that end inside a 2 s window would say 7.5 (a 2.5 % error at each level, 5 % in a ratio of two levels)."""
    ends = [0.05 + 0.13 * i for i in range(20)]
    assert probe.session_rate(ends, 0.0, 2.0) == pytest.approx(1 / 0.13, rel=1e-9)
    assert probe.session_rate(ends, 1.9, 2.0) == 0.0  # one statement in the window has no duration to measure


def test_levels_stay_few_on_a_large_host():
    assert probe.probe_levels(2) == [1, 2, 4]
    assert probe.probe_levels(6) == [1, 2, 4, 6, 12]
    assert probe.probe_levels(64) == [1, 2, 4, 8, 16, 32, 64, 128]


@pytest.mark.db
@pytest.mark.skipif(platform.missing_controllers(PlatformLimits(cpus=1)) != "", reason="needs root and cgroup v1 "
                    "cpuset")
def test_on_a_server_confined_to_one_core_two_sessions_do_one_cores_work(embedded_dsn):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs a host of two cores or more")
    with psycopg.connect(embedded_dsn) as conn:
        postmaster = psutil.Process(conn.execute("select pg_backend_pid()").fetchone()[0]).ppid()
    engine = registry.for_dsn(embedded_dsn)
    with platform.confined(PlatformLimits(cpus=1), postmaster, [], "test-probe"):
        scaling = probe.measure(engine, embedded_dsn, 2)
    print(scaling)
    assert scaling.effective_cores["2"] == pytest.approx(1.0, abs=ONE_CORE_TOLERANCE), scaling
    assert scaling.effective_cores["4"] == pytest.approx(1.0, abs=ONE_CORE_TOLERANCE), scaling
    assert scaling.statements_per_s_one > 0


def test_a_probe_disturbed_by_other_programs_is_not_kept():
    """More sessions than cores doing more than the cores, or k sessions more than k cores: not the host's scaling."""
    def scaling(effective):
        return probe.PlatformScaling(cores=2, effective_cores=effective, growth=0.0, statements_per_s_one=20.0,
                                     measured_at="")
    assert probe.plausible(scaling({"1": 1.0, "2": 1.45, "4": 1.40}))
    assert not probe.plausible(scaling({"1": 1.0, "2": 1.59, "4": 1.78}))  # measured on a busy host
    assert not probe.plausible(scaling({"1": 1.0, "2": 2.4, "4": 2.3}))
