"""Who used the server between two activity samples: the ASH-like profile and each process's CPU and IO.

Each pg_stat_activity sample adds one count to the cell of every process it shows (session, query, state, wait).
Each process's /proc CPU and IO between two consecutive samples is charged to the session it was serving at the
later sample, the way a run charges CPU by role; a pid reused by another process (another start time) starts again.

Processes come and go between samples, and each connection's start and end cost CPU that no two readings of it
bracket. A process first seen after the collection's first sample started since the one before, so all its CPU so
far is charged when it is first seen. The CPU of processes that ended since the last sample, after their last
reading (and of those that started and ended unseen), is what the postmaster's reaped children's CPU grew by less
those processes' last readings; it goes to the sessions they served, by their CPU between their last two readings.
Without it a 5 s interval in which 48 pgbench connections ended lost a tenth of its CPU to the unattributed.
A connection seen while it is still starting has no database or user yet, so whom it serves is not known: its CPU
waits for a sample that shows its session (or, if it ends first, goes with the other ended processes' CPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from capmark.engines.postgres.observe import ActivityRow
from capmark.engines.postgres.waits import wait_class
from capmark.observations import NO_QUERY, ActivityCell, SessionKey, SessionUse
from capmark.results import WaitClass, WaitKey

CLIENT_BACKEND = "client backend"
STARTING = "starting"  # a connection still authenticating: pg_stat_activity shows it without its database and user
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
    reaped_user_s: float = 0.0  # CPU of its children that ended and were waited for (the postmaster's backends)
    reaped_sys_s: float = 0.0


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
    served: dict[int, SessionKey] = field(default_factory=dict)  # whom each process served at the last sample
    recent_cpu: dict[int, float] = field(default_factory=dict)  # each process's CPU between its last two readings
    postmaster: tuple[int, ProcReading] | None = None  # its reading at the last sample
    sampled_before: bool = False  # a process first seen after the first sample started since the one before
    # the processes missing from the last sample: one that comes back (a /proc read that failed once) continues from
    # its reading rather than being charged its whole life again
    vanished: dict[int, ProcReading] = field(default_factory=dict)
    tail_shares: dict[SessionKey, float] = field(default_factory=dict)  # how the last ended processes' CPU went
    # a sample's wait class and the engine's own wait: PostgreSQL's by default
    classify: Callable[[ActivityRow], tuple[str, str]] = field(default_factory=lambda: wait_of)

    def add(self, rows: Iterable[ActivityRow], procs: dict[int, ProcReading],
            postmaster: tuple[int, ProcReading] | None = None) -> None:
        rows = list(rows)
        self.samples += 1
        leaders = {r.pid: session_of(r, {}) for r in rows if r.backend_type == CLIENT_BACKEND}
        keyed = [(r.pid, session_of(r, leaders)) for r in rows]
        for row, (_, key) in zip(rows, keyed, strict=True):
            wclass, event = self.classify(row)
            self.cells[(key, row.query_id or NO_QUERY, row.state, row.in_transaction, wclass, event)] += 1
            if row.state == "active" and not key.is_background:
                self.active_by_application[key.application or key.user or key.database] += 1
        keyed = [(pid, key) for (pid, key), row in zip(keyed, rows, strict=True) if row.state != STARTING]
        if postmaster is not None:
            keyed.append((postmaster[0], SessionKey(backend_type=POSTMASTER)))
            procs = {**procs, postmaster[0]: postmaster[1]}
        seen: dict[int, ProcReading] = {}
        served: dict[int, SessionKey] = {}
        recent: dict[int, float] = {}
        started: set[int] = set()
        for pid, key in keyed:
            now = procs.get(pid)
            if now is None:
                continue
            seen[pid], served[pid] = now, key
            use = self.uses.setdefault(key, _Use())
            use.pids.add(pid)
            before = self.last.get(pid) or self.vanished.get(pid)
            if before is None or before.start_ticks != now.start_ticks:
                if self.sampled_before and key.backend_type != POSTMASTER:  # it started since the last sample
                    before = ProcReading(now.start_ticks, 0.0, 0.0, 0.0, 0.0)
                    started.add(pid)
                else:
                    continue
            du, ds = max(0.0, now.user_s - before.user_s), max(0.0, now.sys_s - before.sys_s)
            use.user_s += du
            use.sys_s += ds
            use.read_bytes += max(0.0, now.read_bytes - before.read_bytes)
            use.write_bytes += max(0.0, now.write_bytes - before.write_bytes)
            recent[pid] = du + ds
        self._charge_ended(seen, served, started, postmaster)
        self.vanished = {pid: r for pid, r in self.last.items() if pid not in seen}
        self.last, self.served, self.recent_cpu = seen, served, recent
        self.postmaster = postmaster
        self.sampled_before = True

    def _charge_ended(self, seen: dict[int, ProcReading], now_served: dict[int, SessionKey], started: set[int],
                      postmaster: tuple[int, ProcReading] | None) -> None:
        """The CPU of the processes that ended since the last sample, after their last reading: what the postmaster's
        reaped children's CPU grew by, less those last readings; shared by their CPU between their last two
        readings (evenly where none had any). Where none of them was ever seen, it goes to the sessions of the
        processes that started since the last sample, else as the last such CPU went, else to the postmaster."""
        if postmaster is None or self.postmaster is None or postmaster[0] != self.postmaster[0] \
                or postmaster[1].start_ticks != self.postmaster[1].start_ticks:
            return
        before, now = self.postmaster[1], postmaster[1]
        ended = [pid for pid, r in self.last.items() if pid != postmaster[0]
                 and (pid not in seen or seen[pid].start_ticks != r.start_ticks)]
        tail_user = now.reaped_user_s - before.reaped_user_s - sum(self.last[p].user_s for p in ended)
        tail_sys = now.reaped_sys_s - before.reaped_sys_s - sum(self.last[p].sys_s for p in ended)
        tail_user, tail_sys = max(0.0, tail_user), max(0.0, tail_sys)
        if tail_user + tail_sys <= 0:
            return
        if ended:
            weights = {p: self.recent_cpu.get(p, 0.0) for p in ended}
            served = self.served
        else:  # only processes no sample saw: most like those that started since the last sample
            weights = {p: r.user_s + r.sys_s for p, r in seen.items() if p in started}
            served = now_served
        total = sum(weights.values())
        shares: dict[SessionKey, float] = {}
        for p, w in weights.items():
            key = served.get(p, SessionKey(backend_type=POSTMASTER))
            shares[key] = shares.get(key, 0.0) + (w / total if total > 0 else 1 / len(weights))
        shares = shares or self.tail_shares or {SessionKey(backend_type=POSTMASTER): 1.0}
        self.tail_shares = shares
        for key, share in shares.items():
            use = self.uses.setdefault(key, _Use())
            use.user_s += tail_user * share
            use.sys_s += tail_sys * share

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
