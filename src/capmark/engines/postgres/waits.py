"""PostgreSQL's wait events (pg_stat_activity's wait_event_type and wait_event, as the sampler stores them) in
capmark's engine-neutral wait classes.

The names follow the server's pg_wait_events (PostgreSQL 17+) and the wait-event tables of the monitoring chapter
(14-16). PostgreSQL 17 renamed many IO and IPC events (WALSync -> WalSync, BufFileRead -> BuffileRead, BufferIO ->
BufferIo), so events are compared without regard to case. The LWLock names are tranche names and kept their case.
"""

from __future__ import annotations

from capmark.results import WaitClass, WaitKey

# Latches on the log path that a commit queues behind: WALWrite is held by the backend writing and flushing WAL, and
# the others wait for it to finish (group commit); WALBufMapping is taken to replace a WAL buffer page, which must
# first be written out when the buffers are full. A faster log device shortens both. WALInsert is not here: it is
# contention for the (eight) slots that copy records into the WAL buffers, a latch in memory that a faster device does
# not relieve, so it counts as a lock.
_LOG_LWLOCKS = frozenset({"walwrite", "walbufmapping", "walbufmappinglock", "walwritelock"})
# Waiting for another backend's IO on the buffer this one needs (an LWLock up to 16, IPC:BufferIo from 17): nearly
# always a read of the same page
_BUFFER_IO = "bufferio"
# IO events on the log (WalSync, WalWrite, WalInitSync, ... 17+; WALSync, WALWrite ... before): writes and flushes
_LOG_IO_PREFIX = "wal"
# IO events that read, wherever they read from (DataFileRead, DataFilePrefetch, WalRead, SlruRead, BuffileRead, ...)
_READS = ("read", "prefetch")
# Aurora PostgreSQL's commit, waiting for its storage to acknowledge the log records
_AURORA_COMMIT = "xactsync"
# PostgreSQL 18's asynchronous IO (io_method worker or io_uring) issues reads only: a backend waiting for it waits
# for a read another process (or the kernel) carries out
_AIO_READS = frozenset({"aioiocompletion", "aioiouringsubmit", "aioiouringexecution"})
# IPC events with a neutral meaning; every other IPC event (parallel query, replication, ...) is "other"
_IPC = {
    _BUFFER_IO: WaitClass.IO_READ,
    "syncrep": WaitClass.LOG_FLUSH,  # a commit waits for a synchronous standby to flush its WAL
    "procarraygroupupdate": WaitClass.LOCK,  # queued behind the group leader clearing xids (ProcArrayLock)
    "xactgroupupdate": WaitClass.LOCK,  # queued behind the group leader setting commit status (XactSLRULock)
    "multixactcreation": WaitClass.LOCK,
}
# Timeout events: SpinDelay backs off from a contended spinlock; the others are sleeps the session asked for
_SPIN = "spindelay"


def wait_class(key: WaitKey) -> WaitClass:
    """The neutral class of one PostgreSQL wait key ("IO:DataFileRead", "Lock:transactionid", "CPU", ...)."""
    kind, event = key.kind, key.event.lower()
    if kind == "CPU":
        return WaitClass.CPU
    if kind == "Client":  # ClientRead, ClientWrite, and the sampler's idle states ("Client:idle in transaction")
        return WaitClass.CLIENT
    if kind in ("Lock", "BufferPin"):  # heavyweight locks (rows, tables, advisory, extension); a buffer's pin
        return WaitClass.LOCK
    if kind == "LWLock":  # latches on shared structures: buffer content and mapping, lock manager, proc array, ...
        if event == _BUFFER_IO:
            return WaitClass.IO_READ
        return WaitClass.LOG_FLUSH if event in _LOG_LWLOCKS else WaitClass.LOCK
    if kind == "IO":
        if event in _AIO_READS or any(w in event for w in _READS):
            return WaitClass.IO_READ
        if event.startswith(_LOG_IO_PREFIX) or event == _AURORA_COMMIT:
            return WaitClass.LOG_FLUSH
        return WaitClass.IO_WRITE  # DataFileWrite, DataFileExtend, DataFileFlush, DataFileSync, SlruWrite, ...
    if kind == "IPC":
        return _IPC.get(event, WaitClass.OTHER)
    if kind == "Timeout" and event == _SPIN:
        return WaitClass.LOCK
    return WaitClass.OTHER  # Activity, Extension, InjectionPoint, other Timeouts (PgSleep, VacuumDelay), unknown
