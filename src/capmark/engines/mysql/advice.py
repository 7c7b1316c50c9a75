"""What to try when a bottleneck signature fires on MySQL or MariaDB (InnoDB): its settings and views by name."""

from __future__ import annotations

ADVICE: dict[str, list[str]] = {
    "software_serialization": [
        "find the serializing resource: performance_schema's wait events (mutexes, rw-locks) and the InnoDB "
        "status's SEMAPHORES section",
        "shorten or split the critical section; avoid one global lock, counter or AUTO_INCREMENT hot spot per "
        "transaction (innodb_autoinc_lock_mode = 2 lets inserts interleave)"],
    "single_threaded_io": [
        "look for the serializing writer (the redo log flush, the page cleaner)",
        "raise InnoDB's IO concurrency (innodb_io_capacity, innodb_page_cleaners, innodb_write_io_threads) where "
        "it applies"],
    "lock_contention": [
        "find the hot rows (information_schema.INNODB_TRX and the lock waits in performance_schema.data_lock_waits "
        "or INNODB_LOCK_WAITS)",
        "spread updates over more rows, shorten transactions, or lower the concurrency to the knee"],
    "poor_caching": [
        "raise innodb_buffer_pool_size (InnoDB reads with O_DIRECT, so the OS cache does not help)",
        "add or fix indexes so fewer pages are touched", "partition or archive cold data"],
    "commit_bound": [
        "a device with faster flushes (lower fsync latency: NVMe, battery-backed cache)",
        "batch work into fewer transactions, or innodb_flush_log_at_trx_commit = 2 where losing up to a second of "
        "commits on an operating-system crash is acceptable",
        "with the binary log on, binlog_commit_wait_count / binlog_group_commit_sync_delay widen the group commits"],
    "background_interference": [
        "smooth the page cleaner's flushing (innodb_io_capacity, innodb_adaptive_flushing, a larger redo log)",
        "watch the purge lag (history list length) and schedule heavy maintenance off peak"],
}
