"""Each engine's wait events in capmark's neutral wait classes, and the shares the diagnosis reads from them.

Every row is a real event name as the engine's sampler stores it, chosen so that a plausible wrong mapping fails:
a name-prefix rule (WAL* -> log), a kind rule (IO -> io, Lock -> lock), a case-sensitive match (PostgreSQL 17 renamed
WALSync to WalSync), or a keyword rule ("commit", "lock", "binlog") applied where it misleads.
"""

from __future__ import annotations

import pytest

from capmark.diagnose.features import step_view
from capmark.engines import registry
from capmark.engines.mysql import waits as mysql_waits
from capmark.engines.postgres import waits as postgres_waits
from capmark.histogram import LatencyHistogram
from capmark.results import StepResult, WaitClass, WaitKey, wait_shares

CPU, READ, WRITE, LOG, LOCK, CLIENT, OTHER = (WaitClass.CPU, WaitClass.IO_READ, WaitClass.IO_WRITE,
                                              WaitClass.LOG_FLUSH, WaitClass.LOCK, WaitClass.CLIENT, WaitClass.OTHER)

POSTGRES = [
    ("CPU", CPU),
    ("Client:ClientRead", CLIENT),
    ("Client:idle in transaction", CLIENT),  # the sampler's state of a session between statements
    ("IO:DataFileRead", READ),
    ("IO:DataFilePrefetch", READ),  # not a write because it is not named *Read
    ("IO:AioIoCompletion", READ),  # PostgreSQL 18's asynchronous IO reads for the backend
    ("IO:DataFileWrite", WRITE),
    ("IO:DataFileExtend", WRITE),  # not the Lock:extend that queues for the extension
    ("IO:DataFileSync", WRITE),  # a data file's fsync is no log flush
    ("IO:WALSync", LOG),  # PostgreSQL 14-16
    ("IO:WalSync", LOG),  # 17+: the same event, renamed
    ("IO:WalWrite", LOG),
    ("IO:WALInitSync", LOG),
    ("IO:WalRead", READ),  # on the log, but a read
    ("IO:BuffileWrite", WRITE),  # a temporary file (17+ spelling), not the log
    ("LWLock:WALWrite", LOG),  # queueing behind the backend that flushes: group commit, not a hot spot
    ("LWLock:WALBufMapping", LOG),
    ("LWLock:WALInsert", LOCK),  # WAL-named, but a latch in memory that a faster log device does not relieve
    ("LWLock:BufferContent", LOCK),
    ("LWLock:LockManager", LOCK),
    ("LWLock:BufferIO", READ),  # up to 16: another backend reads the page; an LWLock, but no latch contention
    ("IPC:BufferIo", READ),  # 17+
    ("IPC:SyncRep", LOG),  # the commit waits for the standby's flush
    ("IPC:ExecuteGather", OTHER),
    ("Lock:transactionid", LOCK),
    ("Lock:tuple", LOCK),
    ("Lock:advisory", LOCK),
    ("BufferPin:BufferPin", LOCK),
    ("Timeout:SpinDelay", LOCK),  # a contended spinlock, not a sleep the session asked for
    ("Timeout:PgSleep", OTHER),
    ("Activity:WalWriterMain", OTHER),  # WAL-named, but the walwriter idling
    ("Extension:Extension", OTHER),
]

MYSQL = [
    ("CPU", CPU),
    ("Client:idle", CLIENT),
    ("Client:Writing to net", CLIENT),
    ("IO:Commit", LOG),  # MariaDB's commit state is the redo log flush, not a data file write
    ("Wait:waiting for handler commit", LOG),  # MySQL 8's commit state
    ("Wait:Waiting for semi-sync ACK from slave", LOG),
    ("Wait:Waiting on cond", OTHER),
    ("Timeout:User sleep", OTHER),
    ("Lock:InnoDB lock wait", LOCK),  # a row lock (INNODB_TRX LOCK WAIT) that PROCESSLIST shows as 'Updating'
    ("Lock:Waiting for table metadata lock", LOCK),
    ("Lock:Waiting for commit lock", LOCK),  # names the commit, but is FLUSH TABLES WITH READ LOCK's lock
    ("io:file/innodb/innodb_data_file", READ),
    ("io:file/innodb/innodb_log_file", LOG),  # an IO wait, but the redo log's
    ("io:file/sql/binlog", LOG),
    ("io:file/sql/binlog_cache", WRITE),  # a transaction's cache spilled to a temporary file, not the binary log
    ("io:file/innodb/innodb_dblwr_file", WRITE),
    ("io:socket/sql/client_connection", CLIENT),  # an io instrument, but the network to the client
    ("io:table/sql/handler", CPU),  # an io instrument, but row operations in the engine, on cached data CPU
    ("lock:table/sql/handler", LOCK),
    ("lock:metadata/sql/mdl", LOCK),
    ("synch:mutex/innodb/log_sys_mutex", LOG),  # a mutex, but the redo log's: group commit
    ("synch:mutex/sql/MYSQL_BIN_LOG::LOCK_commit", LOG),
    ("synch:cond/sql/MYSQL_BIN_LOG::COND_done", LOG),
    ("synch:mutex/innodb/lock_mutex", LOCK),
    ("synch:sxlock/innodb/hash_table_locks", LOCK),
    ("synch:rwlock/innodb/dict_operation_lock", LOCK),
    ("synch:cond/sql/MDL_context::COND_wait_status", LOCK),
    ("synch:cond/sql/Item_func_sleep::cond", OTHER),  # SLEEP(): a condition variable, but no lock
]


@pytest.mark.parametrize(("key", "expected"), POSTGRES, ids=[k for k, _ in POSTGRES])
def test_postgres_event_classes(key, expected):
    assert postgres_waits.wait_class(WaitKey.of(key)) is expected


@pytest.mark.parametrize(("key", "expected"), MYSQL, ids=[k for k, _ in MYSQL])
def test_mysql_event_classes(key, expected):
    assert mysql_waits.wait_class(WaitKey.of(key)) is expected


def test_every_engine_names_its_classes_through_the_protocol():
    assert registry.named("postgresql").wait_class(WaitKey.of("Lock:transactionid")) is LOCK
    assert registry.named("mysql").wait_class(WaitKey.of("Lock:InnoDB lock wait")) is LOCK
    assert registry.named("mysql").wait_class(WaitKey.of("IO:Commit")) is LOG
    for engine in registry.all_engines():
        assert engine.wait_class(WaitKey.of("CPU")) is CPU
        assert engine.wait_class(WaitKey.of("Client:idle")) is CLIENT
        assert engine.wait_class(WaitKey.of("Nonsense:whatever")) is OTHER


def test_shares_leave_the_client_out_and_add_up():
    waits = {"CPU": 3, "Lock:tuple": 1, "Client:ClientRead": 6, "IO:WalSync": 0}
    shares = wait_shares(waits, postgres_waits.wait_class)
    assert shares == {CPU: 0.75, LOCK: 0.25}
    assert wait_shares({"Client:idle": 5}, postgres_waits.wait_class) == {}


def _step(waits: dict[str, int]) -> StepResult:
    h = LatencyHistogram()
    h.record(0.001)
    return StepResult(1, 2, "ok", "", 3.0, ["t"], {"t": h}, {}, waits=waits)


def test_every_unknown_kind_counts_in_other():
    """Before: each unknown kind overwrote the 'other' share with its own, so only the last one survived (0.25)."""
    view = step_view(_step({"CPU": 2, "Foo:a": 1, "Bar:b": 1, "Client:idle": 4}), classify=postgres_waits.wait_class)
    assert view.waits == {CPU: 0.5, OTHER: 0.5}


def test_the_view_keeps_the_engines_own_names_beside_their_classes():
    view = step_view(_step({"CPU": 5, "Lock:InnoDB lock wait": 4, "IO:Commit": 1, "Client:idle": 9}),
                     classify=mysql_waits.wait_class)
    assert view.waits == {CPU: 0.5, LOCK: 0.4, LOG: 0.1}
    assert view.top_waits == [("Lock:InnoDB lock wait", 0.4), ("IO:Commit", 0.1)]  # no CPU, no client
    assert view.top_classes == {"Lock:InnoDB lock wait": LOCK, "IO:Commit": LOG}
