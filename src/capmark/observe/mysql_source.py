"""The MySQL and MariaDB side of `capmark observe`: performance_schema's threads (or PROCESSLIST) and the server's
threads' /proc at each sample; the statement digests and the status counters at each interval's edge.

A connection is served by a thread of the one server process, so a session's CPU is its OS thread's (performance_schema
names it: THREAD_OS_ID). The server's other threads (InnoDB's page cleaners, purge, log writer; threads no table
lists) are background work, SYSTEM in the analysis. Digests are per schema, not per user: the analysis splits each
among the workloads by the samples that showed it, as it does every statement.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from capmark.collect import hosts
from capmark.collect.hostsource import HostSource
from capmark.engines import registry
from capmark.engines.base import TargetInfo
from capmark.engines.mysql import connection as my
from capmark.engines.mysql import grants
from capmark.engines.mysql import observe as reader
from capmark.engines.mysql.describe import describe
from capmark.engines.mysql.waits import wait_class
from capmark.engines.postgres.observe import ActivityRow, StatementKey, StatementRow
from capmark.errors import CapmarkError
from capmark.observations import STATEMENT_USERS, Observation
from capmark.observe import deltas
from capmark.observe.host import ThreadSampler
from capmark.observe.sessions import CLIENT_BACKEND, SessionTracker
from capmark.observe.source import Opened, Say, host_facts, now_iso, settings_of
from capmark.observe.spec import ObserveSpec
from capmark.results import WaitClass, WaitKey

UNLISTED_THREAD = "server thread"  # a thread of the server that performance_schema does not list


@dataclass
class MysqlReading:
    epoch: reader.Epoch
    statements: dict[StatementKey, StatementRow]
    status: dict[str, float]
    user_commands: dict[tuple[str, str], float]  # (user, command) -> statements so far


def wait_of(row: ActivityRow) -> tuple[str, str]:
    """The sample's wait class (results.WaitClass) and the engine's own wait ('' for none)."""
    if row.state and row.state != "active" and row.backend_type == CLIENT_BACKEND:
        return WaitClass.CLIENT.value, ""
    if not row.wait_event_type:
        return WaitClass.CPU.value, ""
    return wait_class(WaitKey(row.wait_event_type, row.wait_event)).value, f"{row.wait_event_type}:{row.wait_event}"


def _driver_errors() -> tuple[type[BaseException], ...]:
    import MySQLdb

    return (MySQLdb.Error,)


def connect(dsn: str, *, in_schema: bool = True) -> Any:
    """The collector's session, in its own schema (see engines/mysql/observe.py); in_schema=False before the user's
    privileges are known (describe says what a user without them lacks, in one sentence)."""
    conn = my.connect(dsn)
    if in_schema:
        conn.select_db(reader.OBSERVE_SCHEMA)
    return conn


def status_delta(before: dict[str, float], after: dict[str, float]) -> tuple[dict[str, float], deltas.Break | None]:
    """The status counters over the interval (the gauges as at its end); a counter lower than before breaks it."""
    out: dict[str, float] = {}
    for name in reader.STATUS_COUNTERS:
        if name in after and name in before:
            d = after[name] - before[name]
            if d < 0:
                return {}, deltas.Break("backwards", f"the server's status counter {name} went backwards (from "
                                                     f"{before[name]:.0f} to {after[name]:.0f})")
            out[name] = d
    out.update({name: after[name] for name in reader.STATUS_GAUGES if name in after})
    return out, None


@dataclass
class MysqlSource:
    spec: ObserveSpec
    dsn: str
    info: TargetInfo
    conn: Any
    host: HostSource
    threads: bool  # performance_schema lists the threads (with their OS ids)
    statements: bool  # the digests can be read
    errors: tuple[type[BaseException], ...] = field(default_factory=_driver_errors)
    procs: ThreadSampler = field(init=False)

    def __post_init__(self) -> None:
        self.procs = ThreadSampler(self.host)

    @staticmethod
    def wait_of(row: ActivityRow) -> tuple[str, str]:
        return wait_of(row)

    def sample(self, tracker: SessionTracker) -> None:
        if not self.threads:
            tracker.add(reader.sample_processlist(self.conn), {}, None)
            self.procs.read_host_only()
            return
        rows, own = reader.sample_threads(self.conn)
        procs, main = self.procs.read([])
        if main is not None:  # the main thread is the tracker's 'postmaster', charged once as that
            rows = [r for r in rows if r.pid != main[0]]
        listed = {r.pid for r in rows}
        rows += [ActivityRow(tid, "", "", "", "", UNLISTED_THREAD, "", "", "", "", False, None)
                 for tid in procs if tid not in listed and tid not in own]
        for tid in own:
            procs.pop(tid, None)
        tracker.add(rows, procs, main)

    def round_trip(self) -> float:
        return reader.time_round_trip(self.conn)

    def read(self) -> MysqlReading:
        epoch = reader.read_epoch(self.conn)
        statements = reader.read_digests(self.conn, self.spec.store_query_text) if self.statements else {}
        users = reader.read_user_commands(self.conn) if self.statements else {}
        return MysqlReading(epoch, statements, reader.read_status(self.conn), users)

    def counters(self, before: MysqlReading, after: MysqlReading) -> tuple[deltas.Counters | None,
                                                                           deltas.Break | None]:
        if reader.restarted(before.epoch, after.epoch):
            return None, deltas.Break("restart", f"the server restarted ({after.epoch.uptime_s:.0f} s ago)")
        changed, broke = deltas.statement_deltas(before.statements, after.statements, evicted=False)
        if broke is not None:
            return None, deltas.Break("reset", "performance_schema's statement digests were reset (TRUNCATE of "
                                               "events_statements_summary_by_digest)")
        status, broke = status_delta(before.status, after.status)
        if broke is not None:
            return None, broke
        top = deltas.top_statements(changed, after.statements, self.spec.top_statements)
        users = [{"user": user, "command": command, "calls": calls - before.user_commands.get((user, command), 0.0)}
                 for (user, command), calls in after.user_commands.items()
                 if calls > before.user_commands.get((user, command), 0.0)]
        return deltas.Counters(top, len(changed), {"status": [status], STATEMENT_USERS: users}, None), None

    def restart(self, before: MysqlReading, after: MysqlReading) -> str | None:
        if not reader.restarted(before.epoch, after.epoch):
            return None
        return f"The server restarted ({after.epoch.uptime_s:.0f} s before it answered again)."

    def lost(self) -> bool:
        try:
            self.conn.ping()
            return False
        except self.errors:
            return True

    def error_text(self, err: BaseException) -> str:
        return my.error_text(err)

    def rollback(self) -> None:
        """Nothing to roll back: the session is in autocommit, and a ROLLBACK would be a digest of no known owner."""

    def _server_pid(self) -> int | None:
        rows = reader.q.rows(self.conn, reader.MAIN_THREAD_SQL) if self.threads else []
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def reconnect(self) -> None:
        """A new session; after a restart the server's new process is the one whose threads are read."""
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = connect(self.dsn)
        pid = self._server_pid()
        if isinstance(self.host, hosts.ProcHost) and pid is not None and pid != self.host.postmaster_pid:
            self.host.postmaster_pid = pid
            self.procs.tids = []

    def close(self) -> None:
        for closing in (self.conn, self.host):
            with contextlib.suppress(Exception):
                closing.close()


def open_mysql(spec: ObserveSpec, dsn: str, progress: Say, observation_id: str) -> Opened:
    """The MySQL or MariaDB server behind dsn, described and ready to observe; CapmarkError (nothing left open) when it
    cannot be read."""
    conn = connect(dsn, in_schema=False)
    host: HostSource | None = None
    try:
        info = describe(conn, dsn, embedded=False)
        conn.select_db(reader.OBSERVE_SCHEMA)
        notes: list[str] = []
        threads = statements = info.has("performance_schema")
        if not threads:
            notes.append(reader.performance_schema_hint())
        elif missing := reader.missing_consumers(conn):
            notes.append(reader.consumers_hint(missing))
            threads = not {"thread_instrumentation", "global_instrumentation"} & set(missing)
            statements = threads and "statements_digest" not in missing
        host = hosts.choose(spec.host_metrics, dsn, conn, info.data_directory, None, spec.node_exporter,
                            hosts.ThreadedServer.of(registry.for_dsn(dsn), info), spec.node_exporter_token)
        for note in notes:  # once the options are known to be good: a refused one is the only sentence
            progress.say(note)
        devices, facts = host_facts(host, info, progress, notes)
        source = MysqlSource(spec=spec, dsn=dsn, info=info, conn=conn, host=host, threads=threads,
                             statements=statements)
        # the collector's own statements, each run once, so that their digests exist and are known as its own
        source.sample(SessionTracker())
        source.round_trip()
        first = source.read()
        observation = Observation(
            observation_id=observation_id, created_at=now_iso(), status="running", reason="",
            settings=settings_of(spec, host),
            target={**asdict(info), "dsn_redacted": my.parse(dsn).redacted(),
                    "started_at": dt.datetime.fromtimestamp(time.time() - first.epoch.uptime_s, dt.UTC).isoformat(
                        timespec="seconds"),
                    "collector_query_ids": reader.own_digests(conn) if statements else []},
            host=facts, block_size=reader.page_size(conn), host_cores=host.facts.cores,
            statements_available=statements)
        return Opened(source, observation, devices, notes)
    except CapmarkError:
        _close(conn, host)
        raise
    except BaseException as err:
        if not isinstance(err, _driver_errors()):
            _close(conn, host)
            raise
        account = _account(conn)
        _close(conn, host)
        raise CapmarkError(f"The server could not be read ({my.error_text(err)}); run GRANT PROCESS ON *.* TO "
                           f"{account} and GRANT SELECT ON performance_schema.* TO {account}.") from None


def _account(conn: Any) -> str:
    """The session's account as a GRANT names it, or 'the user' where the session cannot say."""
    try:
        return grants.account(reader.q.scalar(conn, "SELECT CURRENT_USER()"))
    except Exception:  # noqa: BLE001 - a lost session: the sentence names no account
        return "the user"


def _close(*closing: Any) -> None:
    for c in closing:
        if c is not None:
            with contextlib.suppress(Exception):
                c.close()

