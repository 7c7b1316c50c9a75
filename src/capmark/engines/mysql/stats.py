"""Snapshots of MySQL's and MariaDB's cumulative statistics (SHOW GLOBAL STATUS, INNODB_METRICS, performance_schema),
taken before and after each step, and their mapping onto capmark's engine-neutral counters.

Every figure here is live: the server counts as it goes, so a reading needs no flush. None of the reads adds to a
counter it reads (measured on MariaDB 10.11: SHOW GLOBAL STATUS and information_schema reads leave Handler_commit
alone).
"""

from __future__ import annotations

from typing import Any

from capmark.engines import deltas
from capmark.engines.base import DbCounters, Delta, Row, TargetInfo
from capmark.engines.deltas import numeric, plain, total

ENGINE = "mysql"  # registry.ENGINE_VIEW names this engine in every snapshot

# view -> columns identifying a row (rows are matched on these when taking deltas)
KEYS: dict[str, tuple[str, ...]] = {
    "engine": (),
    "status": (),
    "innodb_metrics": ("name",),
    "statements": ("schema_name", "digest"),
    "waits": ("event_name",),
    "files": ("event_name",),
}

DATABASE = "capmark"  # the workload's database: by default only its statements' text is kept
QUERY_CHARS = 300  # statement text kept per digest, as for PostgreSQL's top statements
PS_PER_MS = 1e9  # performance_schema times are picoseconds

# The digests of capmark's own database only: on a shared server the digest text of other applications is theirs.
STATEMENTS_SQL = """
    SELECT SCHEMA_NAME AS schema_name, DIGEST AS digest, LEFT(DIGEST_TEXT, {chars}) AS query,
           COUNT_STAR AS calls, SUM_TIMER_WAIT / {ps} AS total_exec_time, SUM_LOCK_TIME / {ps} AS lock_time,
           SUM_ROWS_SENT + SUM_ROWS_AFFECTED AS `rows`, SUM_ROWS_EXAMINED AS rows_examined,
           SUM_NO_INDEX_USED AS no_index_used, SUM_CREATED_TMP_DISK_TABLES AS tmp_disk_tables
    FROM performance_schema.events_statements_summary_by_digest {where}"""
WAITS_SQL = f"""
    SELECT EVENT_NAME AS event_name, COUNT_STAR AS count, SUM_TIMER_WAIT / {PS_PER_MS} AS time
    FROM performance_schema.events_waits_summary_global_by_event_name WHERE COUNT_STAR > 0"""
# File IO split by read, write and the rest (fsync, open, close): the times of data files and of the redo log.
FILES_SQL = f"""
    SELECT EVENT_NAME AS event_name, COUNT_READ AS reads, SUM_TIMER_READ / {PS_PER_MS} AS read_ms,
           SUM_NUMBER_OF_BYTES_READ AS read_bytes, COUNT_WRITE AS writes, SUM_TIMER_WRITE / {PS_PER_MS} AS write_ms,
           SUM_NUMBER_OF_BYTES_WRITE AS write_bytes, COUNT_MISC AS misc, SUM_TIMER_MISC / {PS_PER_MS} AS misc_ms
    FROM performance_schema.file_summary_by_event_name WHERE EVENT_NAME LIKE 'wait/io/file/innodb/%'"""
DATA_FILE = "wait/io/file/innodb/innodb_data_file"
LOG_FILE = "wait/io/file/innodb/innodb_log_file"


def _rows(conn: Any, sql: str, params: Any = None) -> list[Row]:
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        names = [d[0].lower() for d in cur.description or []]
        return [{n: plain(v) for n, v in zip(names, row, strict=True)} for row in cur.fetchall()]
    finally:
        cur.close()


def _number(text: Any) -> int | float | None:
    """A status value as a number; None for text (ON/OFF, dates, names)."""
    if numeric(text):
        return text  # type: ignore[no-any-return]
    try:
        return int(text)
    except (TypeError, ValueError):
        pass
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def status(conn: Any) -> dict[str, int | float]:
    """Every numeric SHOW GLOBAL STATUS variable."""
    out: dict[str, int | float] = {}
    for row in _rows(conn, "SHOW GLOBAL STATUS"):
        name, value = row["variable_name"], _number(row["value"])
        if value is not None:
            out[name] = value
    return out


def _enabled(row: Row) -> bool:
    """MariaDB marks an enabled metric ENABLED = 1, MySQL 8 STATUS = 'enabled'."""
    return row.get("enabled") in (1, "1") or str(row.get("status", "")).lower() == "enabled"


def innodb_metrics(conn: Any) -> list[Row]:
    return [{"name": r["name"], "subsystem": r["subsystem"], "count": r["count"]}
            for r in _rows(conn, "SELECT * FROM information_schema.INNODB_METRICS") if _enabled(r)]


def snapshot(conn: Any, info: TargetInfo, backend_pids: list[int] | None = None,
             all_statements: bool = False) -> Delta:
    """One reading of the server's cumulative statistics; views this server or user cannot read are absent.

    The engine row carries the page size as text, so that a delta keeps it (numbers are differenced).
    """
    counted = status(conn)
    snap: Delta = {
        "engine": [{"name": ENGINE, "version": info.version, "page_bytes": str(counted.get("Innodb_page_size", ""))}],
        "status": [dict(counted)],
    }
    if info.has("innodb_metrics") or "innodb_metrics" not in info.capabilities:
        snap["innodb_metrics"] = innodb_metrics(conn)
    if info.has("performance_schema"):
        where = "" if all_statements else "WHERE SCHEMA_NAME = %s"
        snap["statements"] = _rows(conn, STATEMENTS_SQL.format(chars=QUERY_CHARS, ps=PS_PER_MS, where=where),
                                   None if all_statements else (DATABASE,))
        snap["waits"] = _rows(conn, WAITS_SQL)
        snap["files"] = _rows(conn, FILES_SQL)
    return snap


def statements_rule(all_statements: bool) -> str:
    """The rule that chose which statements' text was stored, in words for the report."""
    if all_statements:
        return ("Top statements: every database's statement digests were stored (--all-statements), including other "
                "applications' SQL text.")
    return (f"Top statements: only statement digests run in database {DATABASE} were stored; --all-statements stores "
            "every database's.")


def delta(before: Delta, after: Delta) -> Delta:
    """after - before for every numeric column, matching rows of each view by its key columns."""
    return deltas.delta(before, after, KEYS)


# InnoDB's transaction counters (disabled by default: innodb_monitor_enable = 'trx_%' switches them on). Together
# they count every committed InnoDB transaction once; Handler_commit also counts each statement of an explicit
# transaction, and any non-InnoDB table's (Aria system tables) commits.
TRX_METRICS = ("trx_rw_commits", "trx_ro_commits", "trx_nl_ro_commits")
# The redo log's current LSN, by server: MariaDB (and Percona Server), MySQL 8.0.30+
LSN_VARIABLES = ("Innodb_lsn_current", "Innodb_redo_log_current_lsn")


def counters(delta: Delta) -> DbCounters:
    """InnoDB's counters as engine-neutral ones; None where this server version does not count it.

    Sources, one line each:
    - commits: INNODB_METRICS trx_rw_commits + trx_ro_commits + trx_nl_ro_commits when all three are enabled, else
      Handler_commit (one per autocommit statement that touched a table; in an explicit transaction it counts each
      statement and the COMMIT; Com_commit counts only COMMIT statements and is not used)
    - logical_reads: Innodb_buffer_pool_read_requests (page requests to the buffer pool)
    - physical_reads: Innodb_buffer_pool_reads (requests the buffer pool missed; read-ahead pages are not in it)
    - read_ios: Innodb_data_reads (read calls on InnoDB files); read_bytes: Innodb_data_read
    - read_time_ms and data_time_ms: performance_schema file_summary_by_event_name, innodb_data_file (read, write,
      and "fsync" = its misc operations: fsync, open, close); None without performance_schema
    - data_writes: Innodb_buffer_pool_pages_flushed, all by the page cleaner (MySQL 8 and MariaDB 10.5+ flush the
      flush list and the LRU list in the page cleaner threads)
    - data_written_bytes: Innodb_data_written (data files and the doublewrite buffer; MariaDB 10.11 leaves the
      redo log out of it, measured)
    - data_extends: None (InnoDB extends files by extents ahead of need and counts no extensions)
    - log_bytes: growth of the redo LSN (Innodb_lsn_current on MariaDB, Innodb_redo_log_current_lsn on MySQL 8.0.30+,
      else the INNODB_METRICS log_lsn_current where enabled)
    - log_writes: Innodb_log_writes; log_written_bytes: Innodb_os_log_written
    - log_fsyncs: Innodb_os_log_fsyncs (MySQL, MariaDB before 10.8); MariaDB 10.8+ dropped it, so there it is
      Innodb_data_fsyncs, which also counts the data files' fsyncs after page flushes
    - log_write_ms, log_fsync_ms: performance_schema innodb_log_file write and misc time; None without it
    - io_time_ms: performance_schema, every InnoDB file's read, write and misc time
    """
    st = (delta.get("status") or [{}])[0]
    metrics = {r["name"]: float(r["count"]) for r in delta.get("innodb_metrics", [])
               if "name" in r and numeric(r.get("count"))}  # the enabled metrics' counts, by name
    files = delta.get("files", [])

    def var(*names: str) -> float | None:
        """The first of these status variables the server has."""
        for name in names:
            if numeric(st.get(name)):
                return float(st[name])
        return None

    data = [r for r in files if r.get("event_name") == DATA_FILE]
    log = [r for r in files if r.get("event_name") == LOG_FILE]
    return DbCounters(
        commits=_commits(metrics, var("Handler_commit")),
        logical_reads=var("Innodb_buffer_pool_read_requests"),
        physical_reads=var("Innodb_buffer_pool_reads"),
        read_ios=var("Innodb_data_reads"),
        read_bytes=var("Innodb_data_read"),
        read_time_ms=total(data, "read_ms"),
        page_bytes=page_bytes(delta),
        io_operations=False,  # data_writes are pages flushed, not write calls
        data_writes=({"page cleaner": flushed} if (flushed := var("Innodb_buffer_pool_pages_flushed")) is not None
                     else None),
        data_written_bytes=var("Innodb_data_written"),
        data_extends=None,
        data_time_ms=({"read": total(data, "read_ms"), "write": total(data, "write_ms"),
                       "fsync": total(data, "misc_ms")} if data else None),
        io_time_ms=(sum(total(files, k) or 0.0 for k in ("read_ms", "write_ms", "misc_ms")) if files else None),
        log_bytes=_log_bytes(var(*LSN_VARIABLES), metrics),
        log_records=None,  # InnoDB counts mini-transactions (Innodb_log_write_requests), not log records
        log_writes=var("Innodb_log_writes"),
        log_fsyncs=var("Innodb_os_log_fsyncs", "Innodb_data_fsyncs"),
        log_write_ms=total(log, "write_ms"),
        log_fsync_ms=total(log, "misc_ms"),
        log_written_bytes=var("Innodb_os_log_written"),
    )


def _commits(metrics: dict[str, float], handler_commit: float | None) -> float | None:
    if all(name in metrics for name in TRX_METRICS):
        return sum(metrics[name] for name in TRX_METRICS)
    return handler_commit


def _log_bytes(lsn: float | None, metrics: dict[str, float]) -> float | None:
    return lsn if lsn is not None else metrics.get("log_lsn_current")


DEFAULT_PAGE = 16384  # InnoDB's default page size (innodb_page_size), for deltas that do not name theirs


def page_bytes(delta: Delta) -> int:
    """The page size the snapshot recorded as text in the engine row."""
    rows = delta.get("engine") or [{}]
    number = _number(rows[0].get("page_bytes"))
    return int(number) if number else DEFAULT_PAGE


__all__ = ["KEYS", "counters", "delta", "page_bytes", "snapshot", "statements_rule", "total"]
