"""The disk-speed what-if against the real change, on two stored real runs of sto-random (random reads), wal-lat1
(a flush per commit) and dl-buffer (an insert and its flush per unit) at 1, 2 and 4 jobs, with the embedded server's
reads and writes throttled to 300 a second and then to 600 (`capmark run --server-iops`; how they were recorded:
tests/fixtures/README.md). The model of each run, with the disk twice or half as fast (`whatif --disk-speed`),
predicts the other.

Behind the throttle the disk itself is fast: its busy time was 0.033 ms per read where the throttle held each read
for 3.3 ms. A model that took the disk's busy time for the device served the throttle's time as a fixed delay, and
a faster disk changed nothing (-50 % to -65 % throughput at 600 requests a second predicted from 300, on these runs;
+38 % to +673 % the other way).
"""

from __future__ import annotations

import json

import pytest
from storedruns import unpack
from typer.testing import CliRunner

from capmark.cli import app
from capmark.plan import dbmodel
from capmark.plan.calibrate import calibrate, validate
from capmark.plan.dbhost import database_host
from capmark.plan.iothrottle import IoThrottle, io_throttle
from capmark.results import RunResult, TestResult
from capmark.store import load_run

SLOW, FAST = "plan-io-300", "plan-io-600"
IOPS = {SLOW: 300.0, FAST: 600.0}
# The goals of the what-if levers against the real change: throughput within 10 %, mean response time within 15 %
GOAL_THROUGHPUT = 0.10
GOAL_RESPONSE = 0.15
COMMITS = ("wal-lat1", "dl-buffer")
# At one job a unit's response time is its CPU and its time at the throttled disk, one after the other: the device
# time the model serves is most of it (at least this share), and no more than it by more than what the writes of
# background processes, charged to every unit, add (measured: up to 4 %).
DEVICE_SHARE_LOW, DEVICE_SHARE_HIGH = 0.8, 1.05
# Validation's reads station under a throttle that every step saturates (sto-random reads as fast as the limit
# lets them at every job count): busier than this, and within the CPU's goal of the model's
SATURATED_PCT = 80
DEVICE_POINTS = 5


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    results = tmp_path_factory.mktemp("disk-lever")
    return {name: load_run(results / run_id) for name, run_id in zip((SLOW, FAST), unpack(results, SLOW, FAST),
                                                                      strict=True)}


def _test(run: RunResult, workload: str) -> TestResult:
    return next(t for t in run.tests if t.workload == workload)


def _measured(test: TestResult, jobs: int) -> tuple[float, float]:
    step = next(s for s in test.steps if s.jobs == jobs)
    return step.measures.throughput, step.measures.latency.mean_s or 0.0


def _predicted(source: RunResult, workload: str, speed: float, jobs: int) -> tuple[float, float]:
    model = calibrate(_test(source, workload), host=database_host(source))
    p = dbmodel.solve(model, jobs, config=dbmodel.Config(model.cores, disk_speed=speed))
    return p.throughput or 0.0, p.response_time_s or 0.0


def test_the_throttle_holds_each_direction_at_its_tighter_limit() -> None:
    """300 reads of 1 MB at 300 requests and 100 MB a second take 3 s (the bytes' limit), 300 writes of 4 kB at 150
    requests a second 2 s; a disk without a limit in a direction holds nothing there."""
    mb, sector = 1_000_000, 512
    throttle = IoThrottle((), read_iops=300, write_iops=150, read_mbps=100)
    reads, writes = throttle.held_s({"reads": 300, "sectors_read": 300 * mb // sector, "writes": 300,
                                     "sectors_written": 300 * 8})
    assert (reads, writes) == (pytest.approx(3.0), pytest.approx(2.0))
    assert IoThrottle((), read_iops=300).held_s({"reads": 30, "writes": 999, "sectors_written": 8}) == (
        pytest.approx(0.1), 0.0)


@pytest.mark.parametrize("device,disk,held", [
    ("vda", "vda", True), ("sda1", "sda", True), ("nvme0n1p2", "nvme0n1", True), ("sdb", "sda", False),
    ("sdaa", "sda", False), ("nvme0n10", "nvme0n1", False), ("nvme0n1", "nvme0n1", True)])
def test_a_partition_is_held_by_its_disks_throttle(device: str, disk: str, held: bool) -> None:
    """The throttle holds a whole disk; a step counts the device the data folder is mounted from."""
    assert IoThrottle((disk,), read_iops=100).applies_to(device) is held
    assert IoThrottle((), read_iops=100).applies_to(device)  # a run that recorded no disk names: every disk


def test_an_unlimited_direction_keeps_its_share_of_the_disks_own_busy_time() -> None:
    """Reads limited, writes not: the writes' station is what the disk was busy writing (by the requests' times),
    not nothing, and the reads' is the throttle's."""
    disk = {"reads": 300, "writes": 100, "io_ms": 400, "read_ms": 100, "write_ms": 300}
    assert IoThrottle((), read_iops=100).stations_s(disk) == (pytest.approx(3.0), pytest.approx(0.3))


def test_spread_over_disks_each_keeps_a_write_queue(runs: dict[str, RunResult]) -> None:
    """`--disks 1` is the platform as measured; `--disks 2` halves both queues."""
    run = runs[SLOW]
    model = calibrate(_test(run, "sto-random"), host=database_host(run))
    jobs = 16  # enough that two reads queues are both kept busy
    measured = dbmodel.solve(model, jobs, config=dbmodel.Config(model.cores)).throughput or 0.0
    one = dbmodel.solve(model, jobs, config=dbmodel.Config(model.cores, disks=1)).throughput
    two = dbmodel.solve(model, jobs, config=dbmodel.Config(model.cores, disks=2)).throughput or 0.0
    assert one == pytest.approx(measured, rel=1e-6)
    # reads bound (the throttle's 300 a second): twice the disks nearly doubles it and cannot more than double it
    assert 1.8 * measured <= two <= 2 * measured, (two, measured)


def test_each_run_recorded_its_throttle_and_the_disk_it_held(runs: dict[str, RunResult]) -> None:
    for name, run in runs.items():
        throttle = database_host(run).io_throttle
        assert throttle is not None
        assert (throttle.read_iops, throttle.write_iops) == (IOPS[name], IOPS[name])
        disks = {d for t in run.tests for s in t.steps for d in s.os.get("disks") or {}}
        assert throttle.devices and set(throttle.devices) <= disks, (throttle.devices, disks)
    assert io_throttle({"cpus": 1, "read_iops": None}) is None  # a run confined to a core throttled no disk


@pytest.mark.parametrize("workload", ["sto-random", *COMMITS])
def test_the_throttle_is_the_device_the_model_serves(runs: dict[str, RunResult], workload: str) -> None:
    """At one job the device's time per unit is the throttle's: the response time it explains is most of the
    measured one (the rest is CPU), where the disk's own busy time was a few per cent of it."""
    for name, run in runs.items():
        test = _test(run, workload)
        model = calibrate(test, host=database_host(run))
        device = sum(model.devices.values()) + model.flush_requests * model.flush_device_s
        _, response = _measured(test, 1)
        assert DEVICE_SHARE_LOW * response <= device <= DEVICE_SHARE_HIGH * response, (name, workload, device, response)
        assert any(f"reads {IOPS[name]:g} a second" in n for n in model.notes), model.notes  # the user is told


DIRECTIONS = [(SLOW, FAST, 2.0), (FAST, SLOW, 0.5)]
MEASURED = [("sto-random", 1), ("sto-random", 2), ("sto-random", 4), *((w, j) for w in COMMITS for j in (1, 4))]


def _judge(runs: dict[str, RunResult], workload: str, source: str, target: str, speed: float, jobs: int) -> None:
    measured_x, measured_r = _measured(_test(runs[target], workload), jobs)
    predicted_x, predicted_r = _predicted(runs[source], workload, speed, jobs)
    told = f"{workload} at {jobs} jobs, {source} -> {target}: {predicted_x:.0f}/s predicted, {measured_x:.0f} measured"
    assert predicted_x == pytest.approx(measured_x, rel=GOAL_THROUGHPUT), told
    assert predicted_r == pytest.approx(measured_r, rel=GOAL_RESPONSE), (told, predicted_r, measured_r)


@pytest.mark.parametrize("source,target,speed", DIRECTIONS)
@pytest.mark.parametrize("workload,jobs", MEASURED)
def test_the_disk_speed_what_if_predicts_the_other_throttle(runs: dict[str, RunResult], workload: str, source: str,
                                                              target: str, speed: float, jobs: int) -> None:
    _judge(runs, workload, source, target, speed, jobs)


# The kernel's throttle lets a disk's requests through in slices of 100 ms: a slice's share of requests goes at
# once, the next waits for the next slice (wal-lat1 at one job: p50 0.19 ms, p95 96 ms at 300 a second). Two jobs'
# commits then meet in the long waits and share a flush (1.4 commits a flush measured; the model, which serves a
# flush in its mean time, batches none: the other job's commit arrives when the flush it waited for has ended). A
# disk that serves each request in about the same time would not batch them either; the throttle is a burstier
# disk than the one it emulates.
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="the throttle's 100 ms slices batch two jobs' commits "
                   "(1.4 a flush), which a flush served in its mean time does not")
@pytest.mark.parametrize("source,target,speed", DIRECTIONS)
@pytest.mark.parametrize("workload", COMMITS)
def test_two_jobs_commits_under_the_other_throttle(runs: dict[str, RunResult], workload: str, source: str,
                                                   target: str, speed: float) -> None:
    _judge(runs, workload, source, target, speed, 2)


def test_the_whatif_command_answers_with_the_throttle_twice_as_fast(runs: dict[str, RunResult]) -> None:
    source, target = runs[SLOW], runs[FAST]
    out = CliRunner().invoke(app, ["whatif", f"{source.folder}:wal-lat1", "--disk-speed", "2", "--at", "1",
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    (answer,) = json.loads(out.output)["tests"]
    faster = next(s for s in answer["scenarios"] if s["changes"].get("disk_speed") == 2)
    measured_x, _ = _measured(_test(target, "wal-lat1"), 1)
    predicted_x = faster["prediction"]["throughput"]
    assert predicted_x == pytest.approx(measured_x, rel=GOAL_THROUGHPUT), (faster, measured_x)
    assert "disk vda writes" in out.output  # the flushes wait at the throttled disk's write queue


def test_validation_judges_a_throttled_disk_by_what_the_throttle_held(runs: dict[str, RunResult]) -> None:
    """The model's utilization of the reads' station against the throttle's share of the window (reads over the
    limit), not against the fast disk's busy time (a few per cent)."""
    run = runs[SLOW]
    doc = validate(_test(run, "sto-random"), host=database_host(run))
    for row in doc["steps"]:
        (util,) = row["measured"]["device_util_pct"].values()
        assert SATURATED_PCT < util <= 100, row["measured"]
        assert all(abs(e) <= DEVICE_POINTS for e in row["device_error_points"].values()), row["device_error_points"]
