"""Service demands on real runs of the embedded PostgreSQL (issue 4)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from liveruns import run_without_report

from capmark import api
from capmark.config import RunSpec
from capmark.driver import step as step_module
from capmark.measure.demands import demands_of_test, disk_key, host_busy_s, per_commit, step_demands
from capmark.measure.reconcile import reconcile
from capmark.store import load_run

pytestmark = pytest.mark.db


# /proc/stat and /proc/PID/stat count CPU in clock ticks, each reading truncated to a whole tick: a delta
# over a window is off by less than one tick per counter. The host's line has one counter per state, and a
# process one for user and one for system time.
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# Share of the CPU the host spent outside other programs (the instance, the driver, the kernel) that capmark
# must attribute to the instance and the driver on a CPU-bound step. Measured here on srv-query1 at 2 jobs
# on 2 cores: 0.95 to 1.04 over six steps, with up to 2.7 s of 4 s taken by other programs; the kernel's own
# work (interrupts, steal) is not process CPU. A lost job backend halves the share.
ATTRIBUTED_FLOOR = 0.9


@dataclass
class Reading:
    """What a test-side instrument saw at one of capmark's OS snapshots."""

    others_s: dict[int, float]  # CPU seconds of every process outside the instance and this one, by pid
    instance_lag_s: float  # from capmark's /proc/stat read to the end of its instance sample
    others_lag_s: float  # from capmark's /proc/stat read to the end of this instrument's sample


def _cpu_outside(postmaster_pid: int) -> dict[int, float]:
    """CPU of every other process, children that were reaped included (a short-lived process's time moves to
    its parent when it exits, so it is not lost between the two readings)."""
    out = {}
    for proc in psutil.process_iter():
        try:
            if proc.pid in (os.getpid(), postmaster_pid) or proc.ppid() == postmaster_pid:
                continue
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return out


@pytest.fixture(scope="module")
def runs(embedded_dsn, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("demands")
    readings: list[Reading] = []
    os_reading = step_module._os_reading

    def with_other_processes(ctx):
        t0 = time.perf_counter()
        reading = os_reading(ctx)
        t1 = time.perf_counter()
        others = _cpu_outside(ctx.info.postmaster_pid)
        readings.append(Reading(others, t1 - t0, time.perf_counter() - t0))
        return reading

    with pytest.MonkeyPatch.context() as patch:  # an extra instrument beside capmark's snapshots, nothing replaced
        patch.setattr(step_module, "_os_reading", with_other_processes)
        cpu = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[2], warmup_s=0.5, duration_s=2.0, dsn=embedded_dsn,
                                         results_dir=folder))
    wal = run_without_report(RunSpec(workloads=["wal-lat1"], jobs=[1, 8], warmup_s=0.5, duration_s=2.0, dsn=embedded_dsn,
                                     results_dir=folder))
    dbwr = request.getfixturevalue("dbwr_run")  # after the others: its checkpoints must not fall in their windows
    return {"cpu": cpu, "wal": wal, "dbwr": dbwr, "cpu_readings": readings}


def _attributed(step) -> tuple[float, int]:
    """CPU seconds of the instance's processes and the driver, and how many processes' counters moved."""
    busy_roles = [r for r in step.process_cpu.values() if r["user_s"] + r["sys_s"] > 0]
    cpu = sum(r["user_s"] + r["sys_s"] for r in busy_roles) + step.driver_cpu["user_s"] + step.driver_cpu["sys_s"]
    return cpu, sum(r["processes"] for r in busy_roles) + 1


def test_attributed_cpu_never_exceeds_what_the_host_did(runs):
    """Processes cannot use more CPU than the host was busy: double counting, a wrong tick size or a process
    window longer than the host's would show here."""
    step = runs["cpu"].tests[0].steps[0]
    before, after = runs["cpu_readings"]
    attributed, processes = _attributed(step)
    cores = step.os["cores"]
    resolution = TICK_S * (2 * cores + 2 * processes)  # one tick per core and per busy process, per reading
    skew = cores * (before.instance_lag_s + after.instance_lag_s)  # processes are read just after /proc/stat
    assert attributed <= host_busy_s(step) + resolution + skew
    assert attributed > 0.2 * step.elapsed_s  # the jobs' CPU was measured at all


def test_instance_and_driver_account_for_the_host_cpu_other_programs_left(runs):
    """What the host's processes did (user + nice + system) less every other program's CPU, measured by this
    test at capmark's own snapshots, is the instance and the driver: capmark must find at least
    ATTRIBUTED_FLOOR of it whatever else runs on the machine, and no more than all of it."""
    step = runs["cpu"].tests[0].steps[0]
    before, after = runs["cpu_readings"]
    pids = before.others_s.keys() | after.others_s.keys()
    others = sum(after.others_s.get(p, 0.0) - before.others_s.get(p, 0.0) for p in pids)
    moved = sum(1 for p in pids if after.others_s.get(p) != before.others_s.get(p))
    secs = step.os["cpu_seconds"]
    process_busy = secs["user"] + secs["nice"] + secs["system"]
    attributed, processes = _attributed(step)
    cores = step.os["cores"]
    resolution = TICK_S * (3 * cores + 2 * processes + 2 * moved)
    skew = cores * (before.others_lag_s + after.others_lag_s)  # other processes are read after the instance
    left = process_busy - others
    assert left > step.elapsed_s / 2, f"other programs took {others:.2f} s of {process_busy:.2f} s: nothing to check"
    assert attributed >= ATTRIBUTED_FLOOR * left - resolution - skew, (attributed, left, others)
    assert attributed <= left + resolution + skew, (attributed, left, others)  # nothing counted twice
    d, _ = step_demands(step)
    assert d["cpu_client_backends_s"] * step.units > 0.8 * attributed  # srv-query1 is backend CPU


def test_group_commit_shows_in_wal_fsyncs_per_commit(runs):
    one, eight = runs["wal"].tests[0].steps
    assert per_commit(one)["wal_fsyncs_per_commit"] == pytest.approx(1.0, abs=0.05)
    assert per_commit(eight)["wal_fsyncs_per_commit"] < 0.8
    doc = demands_of_test(runs["wal"].tests[0])
    assert any("WAL fsyncs falls" in note for note in doc["varies"])


def test_forced_checkpoints_are_attributed_to_the_checkpointer(runs):
    d, _ = step_demands(runs["dbwr"].tests[0].steps[0])
    assert d["db_writes_checkpointer_blocks"] > 0
    assert d["db_writes_checkpointer_blocks"] > d["db_writes_backends_blocks"]


def test_cached_reads_reach_no_device(runs):
    step = runs["cpu"].tests[0].steps[0]
    d, _ = step_demands(step)
    device_reads = sum(d.get(disk_key(dev, "read_bytes")) or 0.0 for dev in step.os.get("disks") or {})
    assert device_reads < 1.0  # bytes per query: every read hit shared buffers
    assert d["db_reads_blocks"] < 0.001
    pairs = {p["name"]: p for p in reconcile(step)}
    assert pairs["process CPU vs host busy CPU"]["agree"]


def test_demands_from_storage_equal_demands_computed_live(runs):
    for run in (runs["cpu"], runs["wal"], runs["dbwr"]):
        stored = load_run(Path(run.folder))
        for live_test, stored_test in zip(run.tests, stored.tests, strict=True):
            assert json.dumps(demands_of_test(live_test), sort_keys=True, default=str) == \
                json.dumps(demands_of_test(stored_test), sort_keys=True, default=str)


def test_demands_command_prints_json(runs):
    doc = api.demands(f"{runs['wal'].folder}:wal-lat1")
    assert doc.to_json()["schema"] == "capmark.demands/1"
    assert [t.workload for t in doc.tests] == ["wal-lat1"]
    keys = {c["key"] for c in doc.tests[0].components}
    assert {"cpu_client_backends_s", "cpu_os_overhead_s", "wal_bytes", "wal_fsyncs"} <= keys


def test_nested_statements_show_per_statement_costs(embedded_dsn, tmp_path):
    run = run_without_report(RunSpec(workloads=["tp-light"], jobs=[1], warmup_s=0.5, duration_s=1.5, dsn=embedded_dsn,
                                     params={"update_pct": "100"}, nested_statements=True, results_dir=tmp_path))
    statements = demands_of_test(run.tests[0])["statements"][-1]
    update = [s for s in statements if s["query"].startswith("update capmark.account")]
    assert update and update[0]["calls"] >= run.tests[0].steps[0].units * 0.99
    assert update[0]["wal_bytes_per_call"] > 0

