"""Do the instruments agree? Pairs of figures for the same thing from the database and from the OS.

Shallahamer's OraPub post on IO read wait occurrences warns that wait-event counts undercount IO calls and
that averages hide skew; the same care applies here: where two instruments disagree, the demands use the one
closer to the resource (device counters for the disk, process CPU for the CPU split) and say so.
"""

from __future__ import annotations

from typing import TypedDict

from capmark.collect.procfs import SECTOR_BYTES
from capmark.engines import registry
from capmark.measure import kpm
from capmark.measure.demands import driver_database_host_s, host_busy_s, other_programs_cpu_s, wal_written_bytes
from capmark.measure.kpm import db_reads, log_label
from capmark.results import StepResult, WaitClass, wait_counts

THRESHOLD = 0.2  # disagree when the ratio is off by more than 20 %
MINIMUM = {"bytes": 1e6, "s": 0.05}  # below this on both sides there is too little to compare


class Pair(TypedDict):
    name: str
    database: float | None  # or "process" figure
    os: float | None
    unit: str
    ratio: float | None  # database / os
    agree: bool | None
    sentence: str
    used: str  # which figure the demands use, and why


def _pair(name: str, db: float | None, os_: float | None, unit: str, used: str, disagree: str, *,
          at_least: bool = False) -> Pair:
    """at_least: the first figure may rightly exceed the second (only falling short of it is a disagreement)."""
    small = max(db or 0.0, os_ or 0.0) < MINIMUM.get(unit, 0.0)
    ratio = db / os_ if db is not None and os_ and not small else None
    agree = None if ratio is None else ratio >= 1 - THRESHOLD if at_least else abs(ratio - 1) <= THRESHOLD
    return Pair(name=name, database=db, os=os_, unit=unit, ratio=ratio, agree=agree,
                sentence="" if agree in (True, None) else disagree.format(ratio=ratio), used=used)


# The wait classes of a session in IO the database times: data reads, data writes and the log's writes and flushes.
# A session queueing for another's IO (several commits waiting on one log flush) is sampled in them too, so the
# sampled time may exceed the timed IO; falling short of it is the undercount (Shallahamer, OraPub).
IO_CLASSES = (WaitClass.IO_READ, WaitClass.IO_WRITE, WaitClass.LOG_FLUSH)


def reconcile(step: StepResult) -> list[Pair]:
    pairs: list[Pair] = []
    log = log_label(step)
    busy = host_busy_s(step)
    attributed = None
    if step.process_cpu:
        attributed = sum(r.get("user_s", 0.0) + r.get("sys_s", 0.0) for r in step.process_cpu.values())
        attributed += driver_database_host_s(step)  # a driver on another machine used none of this host's CPU
        attributed += other_programs_cpu_s(step) or 0.0  # measured too: another program's CPU is no undercount
    pairs.append(_pair("process CPU vs host busy CPU", attributed, busy, "s",
                       "process CPU per role; the rest of host busy CPU is a remainder no process accounts for",
                       "The measured processes (instance, driver, other programs) account for {ratio:.0%} of host "
                       "busy CPU: the remainder is OS overhead (interrupts, kernel threads) or programs that started "
                       "and ended inside the window."))
    disks = step.os.get("disks") or {}
    dev_read = sum(d.get("sectors_read", 0) for d in disks.values()) * SECTOR_BYTES if disks else None
    dev_write = sum(d.get("sectors_written", 0) for d in disks.values()) * SECTOR_BYTES if disks else None
    reads = db_reads(step)
    pairs.append(_pair("database reads vs device reads", reads[1] if reads else None, dev_read, "bytes",
                       "device reads for disk demand; database reads for who asked",
                       "The database read {ratio:.1f} x what reached the device: the difference came from the OS "
                       "page cache (or the device served reads for others)."))
    db_write = kpm.counters(step).data_written_bytes
    wal_written = wal_written_bytes(step)
    all_writes = (db_write or 0.0) + (wal_written or 0.0) if db_write is not None else None
    pairs.append(_pair(f"database writes (data + {log}) vs device writes", all_writes, dev_write, "bytes",
                       "device writes for disk demand",
                       "The database reported {ratio:.2f} x the bytes the device wrote: writes still in the OS cache "
                       "(not yet flushed), file-system journaling, or writes by other programs explain a gap."))
    pairs.append(_pair(f"{log} bytes written vs device bytes written", wal_written, dev_write, "bytes",
                       f"{log} written for the log demand (the {log} shares the data device here)",
                       f"The {log} is {{ratio:.0%}} of what the device wrote; the rest is data files and other IO."))
    counts = wait_counts(step.waits, registry.of_delta(step.db_delta).wait_class)
    io_samples = sum(counts.get(c, 0) for c in IO_CLASSES)
    if step.wait_samples:
        sampled_s = io_samples / (step.wait_samples / step.elapsed_s) if step.elapsed_s else None
        io_s = (kpm.counters(step).io_time_ms or 0.0) / 1000 or None
        pairs.append(_pair("IO time: wait-event samples vs database IO timing", sampled_s, io_s, "s",
                           "database IO timing (track_io_timing); wait samples only show where time goes (sessions "
                           "queueing for another's IO, such as one log flush, are sampled there too)",
                           "Wait-event samples see {ratio:.0%} of the IO time the database timed: short IO waits "
                           "fall between 10 Hz samples (Shallahamer, OraPub's undercount).", at_least=True))
    return pairs
