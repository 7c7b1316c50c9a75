"""What `capmark observe` reads from MySQL and MariaDB, read-only: performance_schema's statement digests and threads
(each connection's user, host, schema, command and state, its client's program_name, its current statement's digest
and wait, and the OS thread that serves it), InnoDB's open transactions, and SHOW GLOBAL STATUS.

Without performance_schema only information_schema.PROCESSLIST and the status counters are there: sessions are
sampled (user, host, schema, command) but no statement is collected and no thread's CPU can be told to a connection.
The collector works in the performance_schema schema, so that its own statements' digests carry that schema and are
told apart from the applications' (no application keeps tables there).
"""

from __future__ import annotations

import re
import time
import zlib
from dataclasses import dataclass
from typing import Any

from capmark.engines.mysql import queries as q
from capmark.engines.mysql.activity import IDLE, LOCK_WAIT, event_key, wait_key
from capmark.engines.postgres.observe import COUNTERS, ActivityRow, StatementKey, StatementRow

OBSERVE_SCHEMA = "performance_schema"
QUERY_TEXT_CHARS = 300  # as runs store a statement's text
PS_PER_S = 1e12  # performance_schema's timers are picoseconds
CLIENT_BACKEND = "client backend"  # the SessionKey backend type of a client connection, as for PostgreSQL
# A connection's thread: MySQL's and MariaDB's one-thread-per-connection and thread-pool workers serving a session
CONNECTION_THREADS = ("thread/sql/one_connection", "thread/sql/thread_pool_worker")
# A MySQL server restart is told by its uptime: the server's start as the collector's clock minus Uptime moves by
# up to a second (Uptime counts whole seconds) and by the collector's own clock steps
RESTART_SLACK_S = 3.0
# The digest of a statement that only begins or ends a transaction holds no data: its text is kept without
# --store-query-text, as for PostgreSQL (the analysis counts an explicit-transaction workload's units by it)
TRANSACTION_CONTROL = re.compile(r"^\s*(begin|start\s+transaction|commit|rollback)(\s+work)?\s*;?\s*$", re.IGNORECASE)

# SHOW GLOBAL STATUS counters kept in each interval (deltas) and gauges (their value at the interval's end)
STATUS_COUNTERS = ("Questions", "Com_commit", "Com_rollback", "Handler_commit", "Handler_rollback", "Connections",
                   "Bytes_received", "Bytes_sent", "Innodb_rows_read", "Innodb_rows_inserted", "Innodb_rows_updated",
                   "Innodb_rows_deleted", "Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads",
                   "Innodb_data_reads", "Innodb_data_writes", "Innodb_data_read", "Innodb_data_written",
                   "Innodb_data_fsyncs", "Innodb_os_log_written", "Innodb_os_log_fsyncs", "Created_tmp_disk_tables",
                   "Slow_queries")
STATUS_GAUGES = ("Threads_connected", "Threads_running")

THREADS_SQL = """
    SELECT t.THREAD_ID, t.THREAD_OS_ID, t.PROCESSLIST_ID, t.NAME, COALESCE(t.PROCESSLIST_DB, ''),
           COALESCE(t.PROCESSLIST_USER, ''), COALESCE(t.PROCESSLIST_HOST, ''), COALESCE(t.PROCESSLIST_COMMAND, ''),
           COALESCE(t.PROCESSLIST_STATE, ''), a.ATTR_VALUE, s.DIGEST, w.EVENT_NAME, x.trx_state
    FROM performance_schema.threads t
    LEFT JOIN performance_schema.session_connect_attrs a
           ON a.PROCESSLIST_ID = t.PROCESSLIST_ID AND a.ATTR_NAME = 'program_name'
    LEFT JOIN performance_schema.events_statements_current s ON s.THREAD_ID = t.THREAD_ID
    LEFT JOIN performance_schema.events_waits_current w
           ON w.THREAD_ID = t.THREAD_ID AND w.END_EVENT_ID IS NULL AND w.EVENT_NAME <> 'idle'
    LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = t.PROCESSLIST_ID
    WHERE t.PROCESSLIST_ID IS NULL OR t.PROCESSLIST_ID <> CONNECTION_ID()
    ORDER BY t.THREAD_ID, s.NESTING_EVENT_LEVEL, w.EVENT_ID DESC"""
# the first row of a thread is its top-level statement (a stored program's statements nest under it) and its
# innermost wait
MAIN_THREAD_SQL = "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE NAME = 'thread/sql/main'"
PROCESSLIST_SQL = """
    SELECT p.ID, COALESCE(p.DB, ''), COALESCE(p.USER, ''), COALESCE(p.HOST, ''), COALESCE(p.COMMAND, ''),
           COALESCE(p.STATE, ''), x.trx_state
    FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID
    WHERE p.ID <> CONNECTION_ID()"""
DIGESTS_SQL = """
    SELECT COALESCE(SCHEMA_NAME, ''), DIGEST, COUNT_STAR, SUM_TIMER_WAIT, SUM_ROWS_SENT + SUM_ROWS_AFFECTED,
           LEFT(DIGEST_TEXT, {chars})
    FROM performance_schema.events_statements_summary_by_digest"""
USER_COMMANDS_SQL = ("SELECT USER, EVENT_NAME, COUNT_STAR FROM performance_schema."
                     "events_statements_summary_by_user_by_event_name WHERE COUNT_STAR > 0 AND USER IS NOT NULL")
OWN_COMMANDS_SQL = ("SELECT EVENT_NAME, COUNT_STAR FROM performance_schema.events_statements_summary_by_thread_by_"
                    "event_name WHERE COUNT_STAR > 0 AND THREAD_ID = (SELECT THREAD_ID FROM performance_schema.threads "
                    "WHERE PROCESSLIST_ID = CONNECTION_ID())")
# Event names whose digests start with another command's word
COMMAND_FAMILIES = {"insert_select": "insert", "replace_select": "replace", "update_multi": "update",
                    "delete_multi": "delete", "set_option": "set", "call_procedure": "call"}
# Digests whose first word is not their command's
TEXT_COMMANDS = {"start": "begin", "with": "select"}
CONSUMERS_SQL = "SELECT NAME, ENABLED FROM performance_schema.setup_consumers"
# performance_schema's consumers the collector reads: without the first two no thread is listed, without the third
# no digest is counted; the last two say which statement each session runs and what it waits for (both off by
# default in MariaDB: digests are then split among workloads by the sessions of their schema)
NEEDED_CONSUMERS = ("global_instrumentation", "thread_instrumentation", "statements_digest")
HELPFUL_CONSUMERS = ("events_statements_current", "events_waits_current")
NOT_CLIENT_COMMANDS = ("Daemon", "Binlog Dump", "Binlog Dump GTID", "Slave_IO", "Slave_SQL", "Slave_worker")
SYSTEM_USERS = ("system user", "event_scheduler")


@dataclass(frozen=True)
class Epoch:
    """When the server started, by the collector's monotonic clock, and its uptime at the reading."""

    started_at: float
    uptime_s: float


def own_id(conn: Any) -> int:
    return int(q.scalar(conn, "SELECT CONNECTION_ID()"))


def missing_consumers(conn: Any) -> list[str]:
    """The consumers the collector reads that are off (it never switches them on: the server is only read)."""
    enabled = {str(name): str(on).upper() == "YES" for name, on in q.rows(conn, CONSUMERS_SQL)}
    return [c for c in (*NEEDED_CONSUMERS, *HELPFUL_CONSUMERS) if not enabled.get(c, False)]


def consumers_hint(missing: list[str]) -> str:
    needed = [m for m in missing if m in NEEDED_CONSUMERS]
    if "global_instrumentation" in needed or "thread_instrumentation" in needed:
        lost = "connections' threads are not listed, so no connection's CPU is measured and no statement is collected"
    elif needed:
        lost = "statement digests are not counted, so no statement is collected"
    elif "events_statements_current" in missing:
        lost = ("the statement each session runs is not shown, so each statement's calls are split by each user's "
                "statements of that kind, then by their sessions in its schema")
    else:
        lost = "what each session waits for is not shown, so its waits are told only from its state"
    names = ", ".join(f"'{m}'" for m in missing)
    settings = ", ".join(f"performance-schema-consumer-{m.replace('_', '-')} = ON" for m in missing)
    return (f"performance_schema's consumers {', '.join(missing)} are off: {lost}; a database administrator enables "
            f"them (UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME IN ({names}), or "
            f"{settings} in the server's configuration), and observation goes on meanwhile with what the server "
            "shows.")


def performance_schema_hint() -> str:
    return ("performance_schema is off, so statements are not collected and no connection's CPU is measured; a "
            "database administrator sets performance_schema = ON in the server's configuration and restarts the "
            "server, and observation continues meanwhile with information_schema.PROCESSLIST and the status "
            "counters.")


def read_epoch(conn: Any) -> Epoch:
    """The server's start by the collector's monotonic clock (a step of the wall clock is no restart)."""
    uptime = float(q.rows(conn, "SHOW GLOBAL STATUS LIKE 'Uptime'")[0][1])
    return Epoch(started_at=time.monotonic() - uptime, uptime_s=uptime)


def restarted(before: Epoch, after: Epoch) -> bool:
    return after.uptime_s < before.uptime_s or abs(after.started_at - before.started_at) > RESTART_SLACK_S


def read_status(conn: Any) -> dict[str, float]:
    wanted = set(STATUS_COUNTERS) | set(STATUS_GAUGES)
    out = {}
    for name, value in q.rows(conn, "SHOW GLOBAL STATUS"):
        if str(name) in wanted:
            try:
                out[str(name)] = float(value)
            except (TypeError, ValueError):
                continue
    return out


def statement_key(schema: str, digest: str) -> StatementKey:
    """A digest is per schema: the schema's name stands in PostgreSQL's database oid (users are not told apart)."""
    return StatementKey(query_id=digest, user_oid=0, database_oid=zlib.crc32(schema.encode()), toplevel=True)


def read_digests(conn: Any, with_text: bool) -> dict[StatementKey, StatementRow]:
    """Every digest's cumulative counters. The row without a digest (statements that found the table full) is kept
    under the id 'other'."""
    out: dict[StatementKey, StatementRow] = {}
    for schema, digest, calls, timer, rows, text in q.rows(conn, DIGESTS_SQL.format(chars=QUERY_TEXT_CHARS)):
        counters = dict.fromkeys(COUNTERS, 0.0)
        counters.update(calls=float(calls or 0), exec_time_s=float(timer or 0) / PS_PER_S, rows=float(rows or 0))
        kept = str(text) if text is not None and (with_text or TRANSACTION_CONTROL.match(str(text))) else None
        out[statement_key(str(schema), str(digest or "other"))] = StatementRow(str(schema), "", counters, kept,
                                                                               command_of_text(str(text or "")))
    return out


def command_of_text(text: str) -> str:
    """A digest's command: the first word of its text, lower case ("update" for UPDATE `t` SET ...)."""
    words = text.split(None, 1)
    word = words[0].lower().strip("(") if words else ""
    return TEXT_COMMANDS.get(word, word)


def command_of_event(event_name: str) -> str:
    """An event's command as command_of_text names it: statement/sql/insert_select is an INSERT, update_multi an
    UPDATE, and so on."""
    name = event_name.rsplit("/", 1)[-1].lower()
    return COMMAND_FAMILIES.get(name, name)


def read_user_commands(conn: Any) -> dict[tuple[str, str], float]:
    """Each user's statements by command, cumulative (performance_schema's summary by user and event name), less
    the collector's own session's: its readings would otherwise count as its user's work."""
    out: dict[tuple[str, str], float] = {}
    for user, event, count in q.rows(conn, USER_COMMANDS_SQL):
        key = (str(user or ""), command_of_event(str(event)))
        out[key] = out.get(key, 0.0) + float(count or 0)
    me = str(q.scalar(conn, "SELECT SUBSTRING_INDEX(USER(), '@', 1)"))
    for event, count in q.rows(conn, OWN_COMMANDS_SQL):
        key = (me, command_of_event(str(event)))
        if key in out:
            out[key] = max(0.0, out[key] - float(count or 0))
    return out


def own_digests(conn: Any) -> list[str]:
    """The digests of the collector's own statements (those run in its schema)."""
    return sorted(str(d) for (d,) in q.rows(conn, "SELECT DIGEST FROM performance_schema."
                                                  "events_statements_summary_by_digest WHERE SCHEMA_NAME = %s "
                                                  "AND DIGEST IS NOT NULL", (OBSERVE_SCHEMA,)))


def _state(command: str, trx_state: str | None) -> tuple[str, bool]:
    """PostgreSQL's words for a connection's state, and whether it idles inside a transaction."""
    if command == IDLE:
        return ("idle in transaction", True) if trx_state else ("idle", False)
    return "active", False


def _client(host: str) -> str:
    """The client's address without its port; '' for a local socket (as PostgreSQL shows one)."""
    if not host or host == "localhost":
        return ""
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _wait(command: str, state: str, event: str | None, trx_state: str | None) -> tuple[str, str]:
    if command == IDLE:
        return "", ""
    if trx_state == LOCK_WAIT:
        return "Lock", "InnoDB lock wait"
    key = event_key(event) if event else wait_key(command, state)
    if key == "CPU":
        return "", ""
    kind, _, rest = key.partition(":")
    return kind, rest


def sample_threads(conn: Any) -> tuple[list[ActivityRow], list[int]]:
    """Every performance_schema thread but the collector's own, as activity rows whose pid is the OS thread id; and
    the OS thread serving the collector (its CPU is the collector's)."""
    rows: list[ActivityRow] = []
    seen: set[int] = set()
    for (thread, os_id, pid, name, db, user, host, command, state, program, digest, event,
         trx) in q.rows(conn, THREADS_SQL):
        if thread in seen or os_id is None:
            continue
        seen.add(thread)
        is_client = pid is not None and str(name) in CONNECTION_THREADS and str(command) not in NOT_CLIENT_COMMANDS \
            and str(user) not in SYSTEM_USERS
        if not is_client:
            rows.append(ActivityRow(int(os_id), "", "", "", "", str(name).rsplit("/", 1)[-1] or "server thread",
                                    "", "", "", "", False, None))
            continue
        status, inside = _state(str(command), trx)
        kind, rest = _wait(str(command), str(state), event, trx)
        rows.append(ActivityRow(int(os_id), str(db), str(user), str(program or ""), _client(str(host)), CLIENT_BACKEND,
                                status, kind, rest, str(digest or ""), inside, None))
    own = [int(r[0]) for r in q.rows(conn, "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE "
                                         "PROCESSLIST_ID = CONNECTION_ID() AND THREAD_OS_ID IS NOT NULL")]
    return rows, own


def sample_processlist(conn: Any) -> list[ActivityRow]:
    """Without performance_schema: the client connections as PROCESSLIST shows them (no thread, digest or program),
    each under a negative pid that no OS thread has."""
    rows = []
    for pid, db, user, host, command, state, trx in q.rows(conn, PROCESSLIST_SQL):
        if str(command) in NOT_CLIENT_COMMANDS or str(user) in SYSTEM_USERS:
            continue
        status, inside = _state(str(command), trx)
        kind, rest = _wait(str(command), str(state), None, trx)
        rows.append(ActivityRow(-int(pid), str(db), str(user), "", _client(str(host)), CLIENT_BACKEND, status, kind,
                                rest, "", inside, None))
    return rows


def time_round_trip(conn: Any) -> float:
    """Seconds for one COM_PING to go to the server and back: the server parses and executes nothing for it."""
    start = time.perf_counter()
    conn.ping()
    return time.perf_counter() - start


def page_size(conn: Any) -> int:
    return int(q.scalar(conn, "SELECT @@innodb_page_size") or 16384)
