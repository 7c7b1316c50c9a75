"""What to try when a bottleneck signature fires on PostgreSQL: its settings, views and wait events by name."""

from __future__ import annotations

ADVICE: dict[str, list[str]] = {
    "software_serialization": [
        "find the serializing resource in the wait profile (Lock:advisory, Lock:transactionid, LWLock)",
        "shorten or split the critical section; avoid one global lock or counter per transaction"],
    "single_threaded_io": [
        "look for the serializing writer (WAL flush, a single checkpointer or bgwriter pass)",
        "raise IO concurrency (effective_io_concurrency, io_method, more writers) where it applies"],
    "lock_contention": [
        "find the hot rows or pages (pg_locks, the top wait events)",
        "spread updates over more rows, shorten transactions, or lower the concurrency to the knee"],
    "poor_caching": [
        "raise shared_buffers (and let the OS cache help if direct IO is off)",
        "add or fix indexes so fewer pages are touched", "partition or archive cold data"],
    "commit_bound": [
        "a device with faster flushes (lower fsync latency: NVMe, battery-backed cache)",
        "batch work into fewer transactions, or synchronous_commit = off where losing the last commits on a crash is "
        "acceptable", "commit_delay to widen the batches at high concurrency"],
    "background_interference": [
        "spread checkpoints (checkpoint_completion_target, larger max_wal_size)",
        "tune autovacuum cost limits, or schedule heavy maintenance off peak"],
}
