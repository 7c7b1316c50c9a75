"""Who used the server between two activity samples: the ASH-like profile and each process's CPU and IO.

Each pg_stat_activity sample adds one count to the cell of every process it shows (session, query, state, wait).
Each process's /proc CPU and IO between two consecutive samples is charged to the session it was serving at the
later sample, the way a run charges CPU by role. A process first seen at a sample is charged from there on; a pid
reused by another process (another start time) starts again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from capmark.engines.postgres.observe import ActivityRow
from capmark.engines.postgres.waits import wait_class
from capmark.observations import NO_QUERY, ActivityCell, SessionKey, SessionUse
from capmark.results import WaitClass, WaitKey

CLIENT_BACKEND = "client backend"
PARALLEL_WORKER = "parallel worker"  # serves its leader's session: charged to it
POSTMASTER = "postmaster"  # the server's parent process, not in pg_stat_activity


@dataclass(frozen=True)
class ProcReading:
    """A server process's /proc counters at one sample."""

    start_ticks: int  # tells a reused pid from the same process
    user_s: float
    sys_s: float
    read_bytes: float
    write_bytes: float


def session_of(row: ActivityRow, leaders: dict[int, SessionKey]) -> SessionKey:
    """A client backend by its database, user, application and client; a parallel worker as its leader; every other
    background process by its backend type."""
    if row.backend_type == PARALLEL_WORKER and row.leader_pid in leaders:
        return leaders[row.leader_pid]
    if row.backend_type != CLIENT_BACKEND:
        return SessionKey(backend_type=row.backend_type or "unknown")
    return SessionKey(database=row.database, user=row.user, application=row.application, client=row.client)


def wait_of(row: ActivityRow) -> tuple[str, str]:
    """The sample's wait class (results.WaitClass) and the engine's own event ('' for none)."""
    if row.state and row.state != "active" and row.backend_type == CLIENT_BACKEND:
        return WaitClass.CLIENT.value, row.wait_event
    if not row.wait_event_type:
        return WaitClass.CPU.value, ""
    return wait_class(WaitKey(row.wait_event_type, row.wait_event)).value, f"{row.wait_event_type}:{row.wait_event}"


@dataclass
class _Use:
    user_s: float = 0.0
    sys_s: float = 0.0
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    pids: set[int] = field(default_factory=set)


@dataclass
class SessionTracker:
    """Accumulates one interval's cells and uses; `take()` hands them over and starts the next interval (the
    processes' last readings carry over, so nothing between two samples is lost at an interval's edge)."""

    cells: Counter[tuple[SessionKey, str, str, bool, str, str]] = field(default_factory=Counter)
    uses: dict[SessionKey, _Use] = field(default_factory=dict)
    samples: int = 0
    last: dict[int, ProcReading] = field(default_factory=dict)
    active_by_application: Counter[str] = field(default_factory=Counter)

    def add(self, rows: Iterable[ActivityRow], procs: dict[int, ProcReading],
            postmaster: tuple[int, ProcReading] | None = None) -> None:
        rows = list(rows)
        self.samples += 1
        leaders = {r.pid: session_of(r, {}) for r in rows if r.backend_type == CLIENT_BACKEND}
        keyed = [(r.pid, session_of(r, leaders)) for r in rows]
        for row, (_, key) in zip(rows, keyed, strict=True):
            wclass, event = wait_of(row)
            self.cells[(key, row.query_id or NO_QUERY, row.state, row.in_transaction, wclass, event)] += 1
            if row.state == "active" and not key.is_background:
                self.active_by_application[key.application or key.user or key.database] += 1
        if postmaster is not None:
            keyed.append((postmaster[0], SessionKey(backend_type=POSTMASTER)))
            procs = {**procs, postmaster[0]: postmaster[1]}
        seen: dict[int, ProcReading] = {}
        for pid, key in keyed:
            now = procs.get(pid)
            if now is None:
                continue
            seen[pid] = now
            before = self.last.get(pid)
            if before is None or before.start_ticks != now.start_ticks:
                self.uses.setdefault(key, _Use()).pids.add(pid)
                continue
            use = self.uses.setdefault(key, _Use())
            use.pids.add(pid)
            use.user_s += max(0.0, now.user_s - before.user_s)
            use.sys_s += max(0.0, now.sys_s - before.sys_s)
            use.read_bytes += max(0.0, now.read_bytes - before.read_bytes)
            use.write_bytes += max(0.0, now.write_bytes - before.write_bytes)
        self.last = seen

    def take(self) -> tuple[list[ActivityCell], list[SessionUse], int]:
        cells = [ActivityCell(session=k, query_id=q, state=s, in_transaction=x, wait_class=w, wait_event=e, samples=n)
                 for (k, q, s, x, w, e), n in self.cells.items()]
        uses = [SessionUse(session=k, cpu_user_s=u.user_s, cpu_system_s=u.sys_s, read_bytes=u.read_bytes,
                           write_bytes=u.write_bytes, processes=len(u.pids)) for k, u in self.uses.items()]
        samples = self.samples
        self.cells, self.uses, self.samples = Counter(), {}, 0
        return cells, uses, samples

    def busiest(self) -> str:
        """The application (else user, else database) with the most active samples since the last call."""
        top = self.active_by_application.most_common(1)
        self.active_by_application = Counter()
        return top[0][0] if top else ""
