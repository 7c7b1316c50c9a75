"""What MySQL's and MariaDB's sessions are doing at one instant (the step's 10 Hz sampler).

information_schema.PROCESSLIST gives each connection's command and state; where performance_schema is on,
events_waits_current names the wait a running statement is in. Reading either commits nothing (measured on
MariaDB 10.11: Handler_commit does not move).
"""

from __future__ import annotations

from typing import Any

from capmark.engines.base import ActivitySample
from capmark.engines.mysql import queries as q

# A session in an InnoDB lock wait (a row lock, or a table lock such as AUTO-INC) keeps its statement's state in
# PROCESSLIST ('Updating', 'Update', 'Statistics': measured on MariaDB 10.11), as if it ran; INNODB_TRX's trx_state
# says it waits (read with the PROCESS privilege capmark requires)
PROCESSLIST_SQL = ("SELECT p.ID, p.COMMAND, p.STATE, p.USER, t.trx_state FROM information_schema.PROCESSLIST p "
                   "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
                   "WHERE p.ID <> CONNECTION_ID()")
LOCK_WAIT = "LOCK WAIT"  # INNODB_TRX.trx_state of a transaction waiting for a lock
LOCK_WAIT_KEY = "Lock:InnoDB lock wait"
# The wait each job thread is in now (END_EVENT_ID is NULL while it lasts); idle waits are the client's, not a wait
WAITS_SQL = ("SELECT t.PROCESSLIST_ID, w.EVENT_NAME FROM performance_schema.events_waits_current w "
             "JOIN performance_schema.threads t ON t.THREAD_ID = w.THREAD_ID "
             "WHERE w.END_EVENT_ID IS NULL AND w.EVENT_NAME <> 'idle' AND t.PROCESSLIST_ID IN ({ids})")
# A program's name: only performance_schema knows it (the client's program_name connection attribute)
PROGRAMS_SQL = ("SELECT PROCESSLIST_ID, ATTR_VALUE FROM performance_schema.session_connect_attrs "
                "WHERE ATTR_NAME = 'program_name' AND PROCESSLIST_ID IN ({ids})")

IDLE = "Sleep"  # a connection waiting for its client's next statement
NOT_CLIENTS = ("Daemon", "Binlog Dump", "Binlog Dump GTID", "Slave_IO", "Slave_SQL", "Slave_worker")
SYSTEM_USERS = ("system user", "event_scheduler")
# States of a running statement that are a wait rather than work, as (wait type, state prefix). 'Commit' is the
# commit, which at one connection is nearly all the redo log flush (measured: the commonest state of an autocommit
# UPDATE loop on MariaDB 10.11).
STATE_WAITS = (("IO", "Commit"), ("Client", "Writing to net"), ("Client", "Reading from net"),
               ("Client", "Sending to client"), ("Timeout", "User sleep"), ("Lock", "User lock"),
               ("Lock", "Waiting for table"), ("Lock", "Waiting for global read lock"), ("Lock", "Locked"))
WAITING = "Waiting"  # any other 'Waiting for ...' state


def sample(conn: Any, job_pids: list[int], own_pids: list[int], performance_schema: bool = False) -> ActivitySample:
    """One PROCESSLIST reading (and, with performance_schema, the jobs' current waits and other programs' names).

    own_pids: this run's connections (jobs included), which are neither workload nor interference.
    """
    rows = q.rows(conn, PROCESSLIST_SQL)
    jobs = set(job_pids)
    mine = [r for r in rows if r[0] in jobs]
    others = [r for r in rows if r[0] not in jobs and r[0] not in own_pids and r[1] != IDLE
              and r[1] not in NOT_CLIENTS and r[3] not in SYSTEM_USERS]
    running = [r[0] for r in mine if r[1] != IDLE]
    waits = _current_waits(conn, running) if performance_schema and running else {}
    programs = _programs(conn, [r[0] for r in others]) if performance_schema and others else {}
    out = ActivitySample()
    for pid, command, state, _user, trx_state in mine:
        out.waits.append(LOCK_WAIT_KEY if trx_state == LOCK_WAIT else waits.get(pid) or wait_key(command, state or ""))
    out.others = [("active", programs.get(pid, ""), user or "") for pid, _command, _state, user, _trx in others]
    return out


def wait_key(command: str, state: str) -> str:
    """A job connection's wait from PROCESSLIST alone: idle, a state that names a wait, or on CPU."""
    if command == IDLE:
        return "Client:idle"
    for kind, prefix in STATE_WAITS:
        if state.startswith(prefix):
            return f"{kind}:{state}"
    if state.startswith(WAITING):
        return f"Lock:{state}" if "lock" in state.lower() else f"Wait:{state}"
    return "CPU"


def event_key(event_name: str) -> str:
    """performance_schema's wait/io/file/innodb/innodb_log_file as 'io:file/innodb/innodb_log_file'."""
    parts = event_name.split("/")
    if len(parts) < 3:
        return event_name
    return f"{parts[1]}:{'/'.join(parts[2:])}"


def _current_waits(conn: Any, pids: list[int]) -> dict[int, str]:
    ids = ",".join(str(int(p)) for p in pids)
    return {int(pid): event_key(name) for pid, name in q.rows(conn, WAITS_SQL.format(ids=ids))}


def _programs(conn: Any, pids: list[int]) -> dict[int, str]:
    ids = ",".join(str(int(p)) for p in pids)
    return {int(pid): str(name) for pid, name in q.rows(conn, PROGRAMS_SQL.format(ids=ids))}

