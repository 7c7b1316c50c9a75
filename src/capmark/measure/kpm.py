"""Key performance metrics of a step, computed from its raw material (never from the database)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capmark.collect.pgstats import total
from capmark.results import StepResult


@dataclass(frozen=True)
class KpmColumn:
    key: str
    label: str
    unit: str  # display unit; values are stored in this unit
    digits: int


COLUMNS: dict[str, KpmColumn] = {c.key: c for c in (
    KpmColumn("jobs", "Jobs", "", 0),
    KpmColumn("cpu_busy_pct", "CPU busy", "%", 1),
    KpmColumn("cpu_user_pct", "CPU user", "%", 1),
    KpmColumn("cpu_sys_pct", "CPU sys", "%", 1),
    KpmColumn("cpu_idle_pct", "CPU idle", "%", 1),
    KpmColumn("cpu_iowait_pct", "CPU iowait", "%", 1),
    KpmColumn("throughput", "Throughput", "{tput}", 0),
    KpmColumn("throughput_per_job", "Per job", "{tput}", 0),
    KpmColumn("rt_mean_ms", "RT mean", "ms", 3),
    KpmColumn("rt_p50_ms", "RT p50", "ms", 3),
    KpmColumn("rt_p95_ms", "RT p95", "ms", 3),
    KpmColumn("rt_p99_ms", "RT p99", "ms", 3),
    KpmColumn("rt_max_ms", "RT max", "ms", 3),
    KpmColumn("logical_reads_per_s", "Logical reads", "blocks/s", 0),
    KpmColumn("physical_reads_per_s", "Physical reads", "blocks/s", 0),
    KpmColumn("buffer_hit_pct", "Buffer hit", "%", 2),
    KpmColumn("wal_mb_per_s", "WAL", "MB/s", 3),
    KpmColumn("commits_per_s", "Commits", "/s", 0),
    KpmColumn("elapsed_s", "Elapsed", "s", 1),
)}


def unit_of(column: KpmColumn, throughput_label: str) -> str:
    return column.unit.replace("{tput}", throughput_label)


def compute(step: StepResult) -> tuple[dict[str, Any], dict[str, str]]:
    """KPM values (None where not measurable) and, for each None, the reason."""
    values: dict[str, Any] = {"jobs": step.jobs, "elapsed_s": step.elapsed_s}
    reasons: dict[str, str] = {}
    el = step.elapsed_s or float("nan")

    cpu = step.os.get("cpu_pct") if step.os else None
    for key, state in (("cpu_busy_pct", "busy"), ("cpu_user_pct", "user"), ("cpu_sys_pct", "system"),
                       ("cpu_idle_pct", "idle"), ("cpu_iowait_pct", "iowait")):
        if cpu:
            values[key] = cpu[state] + (cpu["nice"] if state == "user" else 0.0)
        else:
            values[key] = None
            reasons[key] = "the database host is not local, so its CPU counters are not visible"

    units = step.units
    values["throughput"] = units / el
    values["throughput_per_job"] = units / el / step.jobs
    lat = step.latency.summary()
    for key, src in (("rt_mean_ms", "mean_s"), ("rt_p50_ms", "p50_s"), ("rt_p95_ms", "p95_s"),
                     ("rt_p99_ms", "p99_s"), ("rt_max_ms", "max_s")):
        values[key] = lat[src] * 1000 if lat[src] is not None else None
        if values[key] is None:
            reasons[key] = "no unit of work completed"

    db = step.db_delta.get("database", [])
    hit, read = total(db, "blks_hit"), total(db, "blks_read")
    values["logical_reads_per_s"] = (hit + read) / el if hit is not None and read is not None else None
    values["physical_reads_per_s"] = read / el if read is not None else None
    values["buffer_hit_pct"] = 100.0 * hit / (hit + read) if hit is not None and read and hit + read else (
        100.0 if hit else None)
    if values["buffer_hit_pct"] is None:
        reasons["buffer_hit_pct"] = "no block was accessed"
    commits = total(db, "xact_commit")
    values["commits_per_s"] = commits / el if commits is not None else None
    wal = total(step.db_delta.get("wal", []), "wal_bytes")
    if wal is None:
        wal = total(step.db_delta.get("lsn", []), "wal_lsn_bytes")
    values["wal_mb_per_s"] = wal / el / 1e6 if wal is not None else None
    return values, reasons
