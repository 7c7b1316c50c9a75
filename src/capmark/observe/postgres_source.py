"""The PostgreSQL side of `capmark observe`: pg_stat_activity and the backends' /proc at each sample; the cumulative
views, pg_stat_statements and the counting epoch at each interval's edge; and the collector's own transactions, which
pg_stat_database counts with the applications' and the analysis takes out.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from capmark.collect import hosts
from capmark.collect.hostsource import HostSource
from capmark.config import redact_dsn
from capmark.engines import postgres as pg
from capmark.engines.base import Delta, TargetInfo
from capmark.engines.postgres import observe as reader
from capmark.engines.postgres.stats import flush_own_stats
from capmark.errors import CapmarkError
from capmark.observations import Observation, StatementDelta
from capmark.observe import deltas
from capmark.observe.host import ProcessSampler
from capmark.observe.sessions import SessionTracker, wait_of
from capmark.observe.source import Opened, Say, first_line, host_facts, now_iso, settings_of
from capmark.observe.spec import ObserveSpec


@dataclass
class PostgresReading:
    """One reading of the server's cumulative counters at an interval's edge."""

    epoch: reader.ServerEpoch
    statements: dict[reader.StatementKey, reader.StatementRow]
    views: Delta
    own_transactions: int  # the collector's own transactions (its sessions') counted when the views were read


def connect(dsn: str) -> Any:
    conn = pg.connect(dsn, application_name=reader.OBSERVE_APPLICATION)
    conn.prepare_threshold = None  # see PostgresSource.own_transactions
    return conn


@dataclass
class PostgresSource:
    spec: ObserveSpec
    dsn: str
    info: TargetInfo
    conn: Any
    host: HostSource
    statements: bool  # pg_stat_statements can be read
    errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    # The transactions the collector's own session committed: the server counts them with the applications' in
    # pg_stat_database, and the analysis takes them out. Each sample, each round-trip probe, each publish and each
    # reading is one; the first use of the prepared sampling statement commits one more, in the first reading, before
    # any interval, and psycopg prepares nothing else by itself on these sessions (connect), which would commit one
    # more uncounted.
    own_transactions: int = 0
    procs: ProcessSampler = field(init=False)

    def __post_init__(self) -> None:
        self.procs = ProcessSampler(self.host)

    @staticmethod
    def wait_of(row: reader.ActivityRow) -> tuple[str, str]:
        return wait_of(row)

    def own_pids(self) -> list[int]:
        return [self.conn.info.backend_pid, *self.host.own_pids()]

    def sample(self, tracker: SessionTracker) -> None:
        try:
            rows = reader.sample_activity(self.conn, self.own_pids())
        finally:
            self.own_transactions += 1
        procs, postmaster = self.procs.read([r.pid for r in rows])
        tracker.add(rows, procs, postmaster)

    def round_trip(self) -> float:
        try:
            return reader.time_round_trip(self.conn)
        finally:
            self.own_transactions += 1  # the server counts an empty statement as a committed transaction

    def read(self) -> PostgresReading:
        # every transaction of the collector's sessions so far lands in this reading: without publishing, a
        # session's counts reach the views up to a second late, in the next interval
        self.own_transactions += flush_own_stats(self.conn, self.info)
        self.host.publish_statistics(self.info)
        own = self.own_transactions + self.host.transactions()
        with self.conn.transaction():  # one snapshot of the statistics for every view (stats_fetch_consistency)
            self.conn.execute("select pg_stat_clear_snapshot()")
            views = reader.read_views(self.conn, self.info)
            statements = reader.read_statements(self.conn, self.info, self.spec.store_query_text) \
                if self.statements else {}
            epoch = reader.read_epoch(self.conn, self.info, self.statements, views)
        self.own_transactions += 1
        return PostgresReading(epoch, statements, views, own)

    def counters(self, before: PostgresReading, after: PostgresReading) -> tuple[deltas.Counters | None,
                                                                                 deltas.Break | None]:
        """The interval's statements and views, or why they cannot be differenced."""
        broke = deltas.epoch_break(before.epoch, after.epoch)
        if broke is not None:
            return None, broke
        evicted = before.epoch.statements_dealloc != after.epoch.statements_dealloc
        changed, broke = deltas.statement_deltas(before.statements, after.statements, evicted=evicted)
        if broke is not None:
            return None, broke
        views, broke = deltas.views_delta(before.views, after.views)
        if broke is not None:
            return None, broke
        top: list[StatementDelta] = deltas.top_statements(changed, after.statements, self.spec.top_statements)
        return deltas.Counters(top, len(changed), views, after.own_transactions - before.own_transactions), None

    def restart(self, before: PostgresReading, after: PostgresReading) -> str | None:
        if after.epoch.started_at == before.epoch.started_at:
            return None
        return f"The server restarted (its postmaster started at {after.epoch.started_at})."

    def lost(self) -> bool:
        return bool(self.conn.closed or self.conn.broken)

    def error_text(self, err: BaseException) -> str:
        return first_line(err)

    def rollback(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self.conn.rollback()

    def reconnect(self) -> None:
        """A new session, and a new host source where the old one read /proc through the lost server."""
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = connect(self.dsn)
        if isinstance(self.host, hosts.ProcHost) and self.host.name == "sql":
            with contextlib.suppress(Exception):
                self.host.close()
            self.host = hosts.sql_source(self.dsn)
            self.procs.host = self.host

    def close(self) -> None:
        for closing in (self.conn, self.host):
            with contextlib.suppress(Exception):
                closing.close()


def statements_readable(conn: Any, info: TargetInfo, progress: Say) -> bool:
    if not info.has("pg_stat_statements"):
        progress.say(reader.statements_hint(info))
        return False
    try:
        reader.read_statements(conn, info, with_text=False)
        return True
    except psycopg.errors.InsufficientPrivilege:
        role = conn.execute("select current_user").fetchone()[0]
        progress.say(f"The role '{role}' may not read pg_stat_statements, so no statement is collected; a database "
                     f"administrator runs GRANT {reader.MONITOR_ROLE} TO {role}.")
        return False


def open_postgres(spec: ObserveSpec, dsn: str, is_embedded: bool, progress: Say, observation_id: str) -> Opened:
    """The PostgreSQL server behind dsn, described and ready to observe; CapmarkError (nothing left open) when its
    statistics cannot be read."""
    conn = connect(dsn)
    host: HostSource | None = None
    try:
        info = pg.describe(conn, dsn, embedded=is_embedded)
        role, all_stats, readable = reader.role_facts(conn)
        if not readable:
            raise CapmarkError(f"The role '{role}' may not read the server's statistics views; a database administrator "
                               f"runs GRANT {reader.MONITOR_ROLE} TO {role}.")
        notes = []
        if not all_stats:
            notes.append(f"The role '{role}' is not a member of {reader.MONITOR_ROLE}, so other roles' statements and "
                         f"sessions are hidden; a database administrator runs GRANT {reader.MONITOR_ROLE} TO {role}.")
            progress.say(notes[-1])
        statements = statements_readable(conn, info, progress)
        if not statements:
            notes.append(reader.statements_hint(info))
        host = hosts.choose(spec.host_metrics, dsn, conn, info.data_directory, pg.connect, spec.node_exporter, None,
                            spec.node_exporter_token)
        devices, facts = host_facts(host, info, progress, notes)
        observation = Observation(
            observation_id=observation_id, created_at=now_iso(), status="running", reason="",
            settings=settings_of(spec, host),
            target={**asdict(info), "dsn_redacted": redact_dsn(dsn),
                    "started_at": str(conn.execute("select pg_postmaster_start_time()").fetchone()[0]),
                    "collector_query_ids": reader.own_query_ids(conn, info, spec.store_query_text)},
            host=facts, block_size=reader.block_size(conn), host_cores=host.facts.cores,
            statements_available=statements)
        source = PostgresSource(spec=spec, dsn=dsn, info=info, conn=conn, host=host, statements=statements)
        return Opened(source, observation, devices, notes)
    except BaseException:
        for closing in (conn, host):
            if closing is not None:
                with contextlib.suppress(Exception):
                    closing.close()
        raise
