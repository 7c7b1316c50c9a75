"""MySQL's and MariaDB's session waits, as the sampler stores them (engines/mysql/activity.py), in capmark's
engine-neutral wait classes.

Two sources name them. Without performance_schema (MariaDB's default), a job's PROCESSLIST command and state give
"Client:idle", "IO:Commit", "Lock:Waiting for table metadata lock", "Wait:Waiting for ...", "Timeout:User sleep", or
"CPU"; an InnoDB lock wait (information_schema.INNODB_TRX's trx_state LOCK WAIT) is "Lock:InnoDB lock wait". With it,
events_waits_current's instrument wait/<kind>/<rest> is "<kind>:<rest>", with lower-case kinds: "io:file/innodb/
innodb_data_file", "synch:mutex/innodb/log_sys_mutex", "lock:metadata/sql/mdl", "io:socket/sql/client_connection".
"""

from __future__ import annotations

from capmark.results import WaitClass, WaitKey

# --- PROCESSLIST states ------------------------------------------------------------------------------------------------

# A state that names the commit: the redo log flush (MariaDB 'Commit', MySQL 8 'waiting for handler commit'), the
# binary log's group commit, or a replica's acknowledgement of it (semi-synchronous replication)
_COMMIT_STATES = ("commit", "binlog", "binary log", "semi-sync")

# --- performance_schema instruments ------------------------------------------------------------------------------------

# Files whose waits are the commit: InnoDB's redo log (ib_logfile*, MySQL 8.0.30+ #ib_redo*) and the binary log
_LOG_FILES = frozenset({"file/innodb/innodb_log_file", "file/sql/binlog", "file/sql/binlog_index"})
# Files a job's session writes: the doublewrite buffer, temporary tablespaces, a transaction's binlog cache spilled to
# disk, the general and slow query logs
_WRITTEN_FILES = frozenset({"file/innodb/innodb_dblwr_file", "file/innodb/innodb_temp_file", "file/sql/binlog_cache",
                            "file/sql/query_log", "file/sql/slow_log"})
# Latches (synch/mutex, rwlock, sxlock, prlock, cond) on the log path: InnoDB's log_sys and its writer, flusher and
# notifier threads' mutexes; the binary log's LOCK_log, LOCK_sync, LOCK_commit, COND_done (MYSQL_BIN_LOG::...) and
# MariaDB's LOCK_commit_ordered. Queueing for them is group commit.
_LOG_LATCHES = ("/innodb/log_", "bin_log", "binlog", "commit_ordered")
# Condition variables that are a lock wait: metadata locks (MDL_context::COND_wait_status), GET_LOCK's user locks,
# table locks; others (SLEEP()'s Item_func_sleep::cond, thread caches) are not
_LOCK_CONDS = ("lock", "mdl")


def wait_class(key: WaitKey) -> WaitClass:
    """The neutral class of one MySQL/MariaDB wait key (see the module's description for the two forms)."""
    kind, event = key.kind, key.event.lower()
    if kind == "CPU":
        return WaitClass.CPU
    # PROCESSLIST states (capitalised kinds)
    if kind == "Client":  # idle between statements ('Sleep'), or writing to, reading from, sending to the client
        return WaitClass.CLIENT
    if kind == "Lock":  # row lock waits (INNODB_TRX), metadata and table locks, GET_LOCK, FLUSH TABLES WITH READ LOCK
        return WaitClass.LOCK
    if kind in ("IO", "Wait"):
        return WaitClass.LOG_FLUSH if any(s in event for s in _COMMIT_STATES) else WaitClass.OTHER
    # performance_schema instruments (lower-case kinds)
    if kind == "io":
        return _io(event)
    if kind == "lock":  # lock/table/sql/handler (table locks), lock/metadata/sql/mdl (metadata locks)
        return WaitClass.LOCK
    if kind == "synch":
        if any(s in event for s in _LOG_LATCHES):
            return WaitClass.LOG_FLUSH
        if event.startswith("cond/"):
            return WaitClass.LOCK if any(s in event for s in _LOCK_CONDS) else WaitClass.OTHER
        return WaitClass.LOCK  # mutexes and rw-locks on shared structures: buffer pool, lock system, trx system, ...
    return WaitClass.OTHER  # 'Timeout:User sleep' (SLEEP()), unknown kinds


def _io(event: str) -> WaitClass:
    if event.startswith("socket/"):  # the client connection's socket: the network
        return WaitClass.CLIENT
    if event.startswith("table/"):
        # io/table/sql/handler times a row operation through the storage engine (fetch, insert, update), on cached
        # data nearly all CPU; the file waits it causes are instruments of their own (io/file/...)
        return WaitClass.CPU
    if event in _LOG_FILES:
        return WaitClass.LOG_FLUSH
    if event in _WRITTEN_FILES:
        return WaitClass.IO_WRITE
    # innodb_data_file and the other table files (MyISAM, Aria, frm): a job's session reads pages it missed; InnoDB
    # writes data pages from its page cleaner threads, not from the sessions
    return WaitClass.IO_READ
