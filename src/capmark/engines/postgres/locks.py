"""Locks another session holds on capmark's tables: a bounded wait for capmark's control session, and who holds
the lock, from pg_stat_activity and pg_locks (pg_blocking_pids), in one sentence that says what to do."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from capmark.config import redact_text
from capmark.engines.base import LockHolder
from capmark.errors import LockBlocked

# The longest capmark's control session waits for a lock (setup, warming the cache, preparing a test): a session
# that holds one on a capmark table for longer is not about to let go, and the run says who it is instead.
LOCK_WAIT_LIMIT_S = 10
QUERY_CHARS = 80  # the holder's query text, shortened to this
_PASSWORD = re.compile(r"(password\s+)'(?:[^']|'')*'", re.IGNORECASE)

# Other sessions holding a lock on a relation of schema capmark in this database, the strongest mode first.
_HOLDERS_SQL = """
select distinct on (a.pid) a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''),
       coalesce(a.state, ''), a.xact_start, a.query_start, coalesce(a.query, ''), l.mode, l.relation::regclass::text
from pg_locks l
join pg_class c on c.oid = l.relation
join pg_namespace n on n.oid = c.relnamespace
join pg_stat_activity a on a.pid = l.pid
where l.granted and l.locktype = 'relation' and n.nspname = 'capmark' and l.pid <> pg_backend_pid()
  and l.database = (select oid from pg_database where datname = current_database())
order by a.pid, array_position(array['AccessExclusiveLock', 'ExclusiveLock', 'ShareRowExclusiveLock',
         'ShareLock', 'ShareUpdateExclusiveLock', 'RowExclusiveLock', 'RowShareLock', 'AccessShareLock'], l.mode)
"""

# For each of the given backends: what it waits for, the relation of a lock it waits on, and each session that
# blocks it (pg_blocking_pids), described.
_BLOCKED_SQL = """
select w.pid, coalesce(w.wait_event_type, ''), coalesce(w.wait_event, ''), coalesce(w.state, ''),
       (select string_agg(distinct l.relation::regclass::text, ', ') from pg_locks l
        where l.pid = w.pid and not l.granted and l.relation is not null),
       b.pid, coalesce(b.application_name, ''), coalesce(b.usename::text, ''), coalesce(b.state, ''), b.xact_start,
       b.query_start, coalesce(b.query, '')
from pg_stat_activity w
left join lateral unnest(pg_blocking_pids(w.pid)) as bp(pid) on true
left join pg_stat_activity b on b.pid = bp.pid
where w.pid = any(%s)
order by w.pid, b.pid
"""


@dataclass(frozen=True)
class Session:
    """Another session, as the run describes the one holding a lock."""

    pid: int
    application: str
    user: str
    state: str
    xact_start: dt.datetime | None
    query_start: dt.datetime | None
    query: str

    def describe(self) -> str:
        parts = [f"application '{self.application}'" if self.application else "no application_name"]
        parts += [f"user {self.user}"] if self.user else []
        parts += [self.state] if self.state else []
        if self.xact_start is not None:
            parts.append(f"its transaction started at {_when(self.xact_start)}")
        if self.query_start is not None:
            parts.append(f"its last query at {_when(self.query_start)}: '{shorten(self.query)}'")
        return f"pid {self.pid} ({', '.join(parts)})"

    def holder(self) -> LockHolder:
        """The session as the step's overrun watch stores it, waited on for no relation and by no job yet."""
        return LockHolder(pid=self.pid, application_name=self.application, user=self.user, state=self.state,
                          xact_start=_when(self.xact_start) if self.xact_start else None,
                          query_start=_when(self.query_start) if self.query_start else None,
                          query=shorten(self.query), describe=self.describe(), relations=[], jobs=[])


@dataclass
class Waiting:
    """One backend as pg_stat_activity shows it waiting, and who keeps it waiting."""

    state: str
    wait: str  # "type:event", or "CPU" when it waits for nothing
    relations: str  # the relations of the locks it waits on, comma separated
    blockers: list[Session] = field(default_factory=list)  # sessions outside the backends asked about
    behind: list[int] = field(default_factory=list)  # backends asked about that it queues behind


def _when(t: dt.datetime) -> str:
    return t.astimezone().isoformat(sep=" ", timespec="seconds")


def shorten(query: str) -> str:
    """A query's text on one line, at most QUERY_CHARS, with passwords and URL secrets masked."""
    text = redact_text(_PASSWORD.sub(r"\1'***'", " ".join(query.split())))
    return text if len(text) <= QUERY_CHARS else text[:QUERY_CHARS - 3] + "..."


def bound_waits(conn: Any) -> None:
    """Make the session give up a lock wait after LOCK_WAIT_LIMIT_S (the server raises lock_not_available)."""
    conn.execute("select set_config('lock_timeout', %s, false)", (f"{LOCK_WAIT_LIMIT_S}s",))


def holders(conn: Any) -> list[tuple[Session, str, str]]:
    """Other sessions holding a lock on a table of schema capmark: (session, lock mode, relation), strongest first."""
    rows = conn.execute(_HOLDERS_SQL).fetchall()
    out = [(Session(*row[:7]), row[7], row[8]) for row in rows]
    strength = ["AccessExclusiveLock", "ExclusiveLock", "ShareRowExclusiveLock", "ShareLock"]
    return sorted(out, key=lambda h: strength.index(h[1]) if h[1] in strength else len(strength))


def blocked(conn: Any, what: str) -> LockBlocked:
    """The sentence for a lock wait of capmark's control session that ran out: what capmark waited for, who holds a
    lock on its tables, and what to do."""
    try:
        found = holders(conn)
    except psycopg.Error:
        found = []
    if not found:
        return LockBlocked(f"Waited {LOCK_WAIT_LIMIT_S} s for a lock {what} and gave up; the session that "
                           "held it has let go since: run again.")
    session, mode, relation = found[0]
    others = f" (also held by pid {', '.join(str(s.pid) for s, _m, _r in found[1:])})" if len(found) > 1 else ""
    return LockBlocked(f"Waited {LOCK_WAIT_LIMIT_S} s for a lock {what} and gave up: {session.describe()} "
                       f"holds {mode} on {relation}{others}; end that session (select pg_terminate_backend("
                       f"{session.pid})) or wait until its transaction ends, then run again.")


@contextmanager
def bounded(conn: Any, what: str) -> Iterator[None]:
    """A lock wait that ran out (lock_timeout) becomes LockBlocked, naming the session that holds the lock."""
    try:
        yield
    except psycopg.errors.LockNotAvailable:
        raise blocked(conn, what) from None


def waits(conn: Any, pids: list[int]) -> dict[int, Waiting]:
    """For each backend of pids: its state, wait event, the relations of the locks it waits on, and the sessions
    outside pids that block it (one more level up when it queues behind another of pids)."""
    out: dict[int, Waiting] = {}
    ours = set(pids)
    for pid, wtype, event, state, relations, bpid, *blocker in conn.execute(_BLOCKED_SQL, (pids,)).fetchall():
        entry = out.setdefault(pid, Waiting(state, f"{wtype}:{event}" if wtype else "CPU", relations or ""))
        if bpid is None:
            continue
        if bpid in ours:
            entry.behind.append(bpid)
        elif all(s.pid != bpid for s in entry.blockers):
            entry.blockers.append(Session(bpid, *blocker))
    for entry in out.values():  # a job queued behind another job waits, in the end, for what that one waits for
        for other in entry.behind:
            for s in out[other].blockers if other in out else []:
                if all(x.pid != s.pid for x in entry.blockers):
                    entry.blockers.append(s)
    return out


def lock_blockers(conn: Any, pids: list[int]) -> list[LockHolder]:
    """The sessions outside pids that keep any of pids waiting on a lock, each with the relations it is waited on
    for and the jobs it blocks (their indexes in pids, from 1)."""
    found: dict[int, LockHolder] = {}
    for pid, entry in waits(conn, pids).items():
        if not entry.wait.startswith("Lock:"):
            continue
        for s in entry.blockers:
            holder = found.setdefault(s.pid, s.holder())
            if entry.relations and entry.relations not in holder["relations"]:
                holder["relations"].append(entry.relations)
            holder["jobs"].append(pids.index(pid) + 1)
    return list(found.values())


def cancel_backends(conn: Any, pids: list[int]) -> None:
    """Cancel the statements the given backends run (the jobs of a step that waits past its plan)."""
    conn.execute("select pg_cancel_backend(pid) from unnest(%s::int[]) as p(pid)", (pids,))
