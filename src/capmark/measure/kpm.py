"""Key performance metrics of a step, computed from its raw material (never from the database)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from capmark.collect.procfs import SECTOR_BYTES
from capmark.engines import registry
from capmark.engines.base import DbCounters
from capmark.results import Measures, StepResult, TestResult
from capmark.workloads.tpcc import spec as tpcc_spec


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
    # family-specific
    KpmColumn("scan_mb_per_s", "Scanned", "MB/s", 1),
    KpmColumn("rows_per_s", "Rows", "rows/s", 0),
    KpmColumn("mops", "Operations", "Mops", 3),
    KpmColumn("rt_mean_s", "Time per unit", "s", 4),
    KpmColumn("wal_kb_per_txn", "WAL per txn", "kB", 2),
    KpmColumn("wal_flush_ms_per_commit", "WAL flush per commit", "ms", 3),
    KpmColumn("wal_writes_per_commit", "WAL writes per commit", "", 3),
    KpmColumn("wal_fsyncs_per_commit", "WAL fsyncs per commit", "", 3),
    KpmColumn("extend_mb_per_s", "Extended", "MB/s", 2),
    KpmColumn("ckpt_blocks_per_s", "Checkpointer writes", "blocks/s", 0),
    KpmColumn("bgwriter_blocks_per_s", "Bgwriter writes", "blocks/s", 0),
    KpmColumn("backend_blocks_per_s", "Backend writes", "blocks/s", 0),
    KpmColumn("written_mb_per_s", "Data written", "MB/s", 2),
    KpmColumn("db_read_iops", "DB reads", "IOPS", 0),
    KpmColumn("db_read_ms", "DB read time", "ms", 3),
    KpmColumn("device_iops", "Device IOPS", "IOPS", 0),
    KpmColumn("device_mb_per_s", "Device", "MB/s", 1),
    KpmColumn("device_read_ms", "Device read time", "ms", 3),
    KpmColumn("os_cache_read_pct", "OS cache served", "%", 1),
    KpmColumn("nopm", "NOPM", "new orders/min", 0),
    KpmColumn("tpm", "TPM", "transactions/min", 0),
    KpmColumn("nopm_per_core", "NOPM per core", "new orders/min", 0),
    KpmColumn("rollback_pct", "Rolled back", "% of new orders", 2),
    KpmColumn("efficiency_pct", "Efficiency", "% of spec max", 1),
    KpmColumn("lag_p99_ms", "Start lag p99", "ms", 3),
    KpmColumn("lag_max_ms", "Start lag max", "ms", 3),
)}



def column_of(key: str, test: TestResult) -> KpmColumn:
    """A KPM column as the test's engine names it: its write-ahead log is PostgreSQL's WAL or InnoDB's redo log."""
    column = COLUMNS[key]
    engine = registry.of_delta(test.steps[0].db_delta) if test.steps else None
    if engine is None or engine.log_label == "WAL" or not column.label.startswith("WAL"):
        return column
    log = engine.log_label
    return dataclasses.replace(column, label=log[:1].upper() + log[1:] + column.label[len("WAL"):])


def unit_of(column: KpmColumn, throughput_label: str) -> str:
    return column.unit.replace("{tput}", throughput_label)


def counters(step: StepResult) -> DbCounters:
    """What the database counted in the step's window, in engine-neutral terms (from the stored delta)."""
    return registry.of_delta(step.db_delta).counters(step.db_delta)


def log_label(step: StepResult) -> str:
    """What the step's engine calls its write-ahead log, for text: PostgreSQL's "WAL", InnoDB's "redo log"."""
    return registry.of_delta(step.db_delta).log_label


def wal_io(step: StepResult) -> dict[str, float] | None:
    """Log writes, fsyncs and their times (ms) in the window; None where the server does not count them."""
    return _log_io(counters(step))


def _log_io(c: DbCounters) -> dict[str, float] | None:
    if not c.log_io_measured:
        return None
    return {"writes": c.log_writes or 0.0, "fsyncs": c.log_fsyncs or 0.0, "write_ms": c.log_write_ms or 0.0,
            "fsync_ms": c.log_fsync_ms or 0.0}


def wal_io_per_commit(step: StepResult, commits: float | None) -> dict[str, float | None]:
    """WAL flush time (ms), writes and fsyncs per commit of the workload; None where not measurable."""
    c = counters(step)
    io = _log_io(c)
    if not io or not commits:
        return dict.fromkeys(("wal_flush_ms_per_commit", "wal_writes_per_commit", "wal_fsyncs_per_commit"))
    timed = c.log_write_ms is not None or c.log_fsync_ms is not None
    return {"wal_flush_ms_per_commit": (io["write_ms"] + io["fsync_ms"]) / commits if timed else None,
            "wal_writes_per_commit": io["writes"] / commits, "wal_fsyncs_per_commit": io["fsyncs"] / commits}


def workload_commits(step: StepResult) -> float | None:
    """Commits in the window less capmark's own (its sampler's, control session's and jobs' statistics
    transactions), which the database counts alongside the workload's."""
    commits = counters(step).commits
    if commits is None:
        return None
    own = float(sum((step.instruments or {}).get("capmark_transactions", {}).values()))
    return max(0.0, commits - own)


# KPM column (COLUMNS) -> value in the column's unit, None where the step could not measure it
Values = dict[str, float | None]


# open-ended: the step table's kpm column as stored (KPM column -> value, and "na_reasons"), of any capmark version
Stored = dict[str, Any]


def of(step: StepResult, per_unit: dict[str, float] | None = None, stored: Stored | None = None
       ) -> tuple[Values, dict[str, str]]:
    """The step's KPMs as stored when the run measured it (`stored`: the step table's kpm column; computed from
    its raw record where there is none), and for each None the reason."""
    if stored and "throughput" in stored:
        return {k: v for k, v in stored.items() if k != "na_reasons"}, dict(stored.get("na_reasons") or {})
    return compute(step, per_unit)


def stored_form(measured: Measures) -> Stored:
    """The step table's kpm column: the record's key figures, with the reasons for those that are n/a."""
    return {**measured.kpm, "na_reasons": measured.unavailable}


def compute(step: StepResult, per_unit: dict[str, float] | None = None) -> tuple[Values, dict[str, str]]:
    """KPM values (None where not measurable) and, for each None, the reason.

    per_unit holds what one unit of work stands for, as its workload declares it (rows, ops).
    """
    values: Values = {"jobs": step.jobs, "elapsed_s": step.elapsed_s}
    reasons: dict[str, str] = {}
    el = step.elapsed_s or float("nan")

    cpu = step.os.get("cpu_pct") if step.os else None
    for key, state in (("cpu_busy_pct", "busy"), ("cpu_user_pct", "user"), ("cpu_sys_pct", "system"),
                       ("cpu_idle_pct", "idle"), ("cpu_iowait_pct", "iowait")):
        if cpu:
            values[key] = cpu[state] + (cpu["nice"] if state == "user" else 0.0)
        else:
            values[key] = None
            reasons[key] = ("the database host's CPU counters were not measured (no host-metrics source; the run's "
                            "notes say why)")

    units = step.units
    values["throughput"] = units / el
    values["throughput_per_job"] = units / el / step.jobs
    lat = step.latency.summary()
    for key, src in (("rt_mean_ms", "mean_s"), ("rt_p50_ms", "p50_s"), ("rt_p95_ms", "p95_s"),
                     ("rt_p99_ms", "p99_s"), ("rt_max_ms", "max_s")):
        values[key] = _ms(lat[src])
        if values[key] is None:
            reasons[key] = "no unit of work completed"

    db = counters(step)
    read = db.physical_reads
    hit = db.logical_reads - read if db.logical_reads is not None and read is not None else None
    values["logical_reads_per_s"] = (hit + read) / el if hit is not None and read is not None else None
    values["physical_reads_per_s"] = read / el if read is not None else None
    values["buffer_hit_pct"] = 100.0 * hit / (hit + read) if hit is not None and read and hit + read else (
        100.0 if hit else None)
    if values["buffer_hit_pct"] is None:
        reasons["buffer_hit_pct"] = "no block was accessed"
    commits = workload_commits(step)
    values["commits_per_s"] = commits / el if commits is not None else None
    wal = db.log_bytes
    values["wal_mb_per_s"] = wal / el / 1e6 if wal is not None else None
    _family_kpms(step, values, reasons, per_unit or {}, el, units, wal, commits, hit, read, db)
    _writer_kpms(step, values, reasons, el)
    _storage_kpms(step, values, reasons, el)
    lag = step.schedule_lag
    values["lag_p99_ms"] = _ms(lag.percentile(99)) if lag and lag.total else None
    values["lag_max_ms"] = _ms(lag.observed_max_s) if lag and lag.total else None
    return values, reasons


def _ms(seconds: float | None) -> float | None:
    return seconds * 1000 if seconds is not None else None


# KPM column -> the writer as the engines name it (PostgreSQL's three; another engine's writers show in demands)
WRITERS = {"ckpt_blocks_per_s": "checkpointer", "bgwriter_blocks_per_s": "background writer",
           "backend_blocks_per_s": "backends"}


def _writer_kpms(step: StepResult, values: Values, reasons: dict[str, str], el: float) -> None:
    """Data blocks written by each writer, where the server says who wrote them."""
    c = counters(step)
    writes = c.data_writes
    blocks: list[float] = []
    for key, who in WRITERS.items():
        if writes is not None and who in writes:
            values[key] = writes[who] / el
            blocks.append(writes[who] / el)
        else:
            values[key] = None
            reasons[key] = "this server reports no writes per writer"
    values["written_mb_per_s"] = sum(blocks) * c.page_bytes / 1e6 if blocks else None


def db_reads(step: StepResult) -> tuple[float, float, float | None] | None:
    """Data-file reads in the window: (count, bytes, total read time ms or None)."""
    c = counters(step)
    if c.read_ios is None:
        return None
    return c.read_ios, c.read_bytes or 0.0, c.read_time_ms


def _storage_kpms(step: StepResult, values: Values, reasons: dict[str, str], el: float) -> None:
    got = db_reads(step)
    if got:
        reads, nbytes, read_ms = got
        values["db_read_iops"] = reads / el
        values["db_read_ms"] = read_ms / reads if read_ms is not None and reads else None
        if values["db_read_ms"] is None:
            reasons["db_read_ms"] = "no reads, or track_io_timing is off"
    else:
        values["db_read_iops"] = values["db_read_ms"] = None
        nbytes = None
    disks = (step.os or {}).get("disks") or {}
    if not disks:
        for key in ("device_iops", "device_mb_per_s", "device_read_ms", "os_cache_read_pct"):
            values[key] = None
            reasons[key] = "no device counters: the database host was not measured or its data device is unknown"
        return
    dev_reads = sum(d.get("reads", 0) for d in disks.values())
    dev_ops = dev_reads + sum(d.get("writes", 0) for d in disks.values())
    dev_read_bytes = sum(d.get("sectors_read", 0) for d in disks.values()) * SECTOR_BYTES
    dev_bytes = dev_read_bytes + sum(d.get("sectors_written", 0) for d in disks.values()) * SECTOR_BYTES
    values["device_iops"] = dev_ops / el
    values["device_mb_per_s"] = dev_bytes / el / 1e6
    values["device_read_ms"] = sum(d.get("read_ms", 0) for d in disks.values()) / dev_reads if dev_reads else None
    if nbytes:
        values["os_cache_read_pct"] = max(0.0, min(100.0, 100.0 * (1 - dev_read_bytes / nbytes)))
    else:
        values["os_cache_read_pct"] = None
        reasons["os_cache_read_pct"] = "the database read nothing from its data files"


def _family_kpms(step: StepResult, values: Values, reasons: dict[str, str], per_unit: dict[str, float],
                 el: float, units: int, wal: float | None, commits: float | None, hit: float | None,
                 read: float | None, db: DbCounters) -> None:
    values["scan_mb_per_s"] = ((hit or 0) + (read or 0)) * db.page_bytes / el / 1e6 if hit is not None else None
    values["rows_per_s"] = units * per_unit["rows"] / el if "rows" in per_unit else None
    values["mops"] = units * per_unit["ops"] / el / 1e6 if "ops" in per_unit else None
    mean = step.latency.mean_s
    values["rt_mean_s"] = mean
    values["wal_kb_per_txn"] = wal / units / 1024 if wal is not None and units else None
    for key, value in wal_io_per_commit(step, commits).items():
        values[key] = value
        if value is None:
            reasons[key] = (f"this server reports no {log_label(step)} write/fsync counts" if not wal_io(step)
                            else "the workload committed nothing in the window" if not commits
                            else "this server does not time its log writes and flushes (MySQL and MariaDB time them "
                                 "in performance_schema, which is off)")
    if db.data_extend_bytes is not None:
        values["extend_mb_per_s"] = db.data_extend_bytes / el / 1e6
    else:
        values["extend_mb_per_s"] = None
        reasons["extend_mb_per_s"] = ("this server does not count data-file extensions (PostgreSQL counts them from "
                                      "version 16)")
    _order_kpms(step, values, reasons, per_unit, el)


# The transaction types whose counts make NOPM: committed new orders, and those rolled back as the spec asks
NEW_ORDER_TYPE, ROLLED_BACK_TYPE = tpcc_spec.TYPES[tpcc_spec.NEW_ORDER], tpcc_spec.TYPES[tpcc_spec.ROLLBACK]


def _order_kpms(step: StepResult, values: Values, reasons: dict[str, str], per_unit: dict[str, float],
                el: float) -> None:
    """NOPM (committed new orders per minute), TPM (transactions per minute), per core of the database host, the
    share of new orders rolled back, and NOPM against the specification's ceiling when users key and think."""
    keys = ("nopm", "tpm", "nopm_per_core", "rollback_pct", "efficiency_pct")
    if NEW_ORDER_TYPE not in step.histograms:
        for key in keys:
            values[key] = None
        return
    committed = step.histograms[NEW_ORDER_TYPE].total
    rolled_back = step.histograms[ROLLED_BACK_TYPE].total if ROLLED_BACK_TYPE in step.histograms else 0
    nopm = committed / el * 60
    values["nopm"] = nopm
    values["tpm"] = step.units / el * 60
    cores = (step.os or {}).get("cores")
    values["nopm_per_core"] = nopm / cores if cores else None
    if not cores:
        reasons["nopm_per_core"] = "the database host's cores are not known (no host-metrics source)"
    values["rollback_pct"] = 100.0 * rolled_back / (committed + rolled_back) if committed + rolled_back else None
    if values["rollback_pct"] is None:
        reasons["rollback_pct"] = "no new order in the window"
    ceiling = per_unit.get("max_nopm")
    values["efficiency_pct"] = 100.0 * nopm / ceiling if ceiling else None
    if not ceiling:
        reasons["efficiency_pct"] = ("only with keying and think times (--param keying=on), which bound NOPM at "
                                     "12.86 per warehouse")
