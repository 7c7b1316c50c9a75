"""The charge of short connections' CPU between activity samples, on readings written out by hand: which session
gets the CPU of processes that no two samples bracket."""

from __future__ import annotations

from capmark.engines.postgres.observe import ActivityRow
from capmark.observations import SessionKey
from capmark.observe.sessions import ProcReading, SessionTracker

POSTMASTER_PID = 1
APP = SessionKey(database="shop", user="web", application="checkout")


def _row(pid: int, state: str = "active") -> ActivityRow:
    starting = state == "starting"
    return ActivityRow(pid=pid, database="" if starting else APP.database, user="" if starting else APP.user,
                       application=APP.application, client="", backend_type="client backend", state=state,
                       wait_event_type="", wait_event="", query_id="", in_transaction=False, leader_pid=None)


def _cpu(user_s: float, start: int) -> ProcReading:
    return ProcReading(start, user_s, 0.0, 0.0, 0.0)


def _postmaster(reaped_user_s: float) -> tuple[int, ProcReading]:
    return POSTMASTER_PID, ProcReading(0, 0.0, 0.0, 0.0, 0.0, reaped_user_s, 0.0)


def test_a_connection_seen_only_while_starting_does_not_take_the_ended_connections_cpu_from_its_session():
    """Sample 1 sees connection 10 running; by sample 2 it has ended (0.2 s in all), one more ended unseen (0.3 s)
    and connection 11 is seen still starting; by sample 3 connection 11 has ended (0.2 s) and another ended unseen
    (0.4 s). All 1.1 s belong to the shop's checkout sessions. Charged by whom connection 11 served when it was
    seen, 0.6 s went to a session with no database and user, which workload rules by database or user miss."""
    tracker = SessionTracker()
    tracker.add([], {}, _postmaster(0.0))
    tracker.add([_row(10)], {10: _cpu(0.1, start=100)}, _postmaster(0.0))
    tracker.add([_row(11, "starting")], {11: _cpu(0.0, start=200)}, _postmaster(0.5))
    tracker.add([], {}, _postmaster(1.1))
    _, uses, _ = tracker.take()
    charged = {u.session: round(u.cpu_user_s, 6) for u in uses if u.cpu_user_s}
    assert charged == {APP: 1.1}, charged


def test_a_connection_first_seen_starting_is_charged_all_its_cpu_once_its_session_shows():
    """Seen starting at sample 2 (0.01 s so far), then running at sample 3 (0.25 s): all 0.25 s go to its session,
    none to the nameless one it showed while starting."""
    tracker = SessionTracker()
    tracker.add([], {}, _postmaster(0.0))
    tracker.add([_row(12, "starting")], {12: _cpu(0.01, start=300)}, _postmaster(0.0))
    tracker.add([_row(12)], {12: _cpu(0.25, start=300)}, _postmaster(0.0))
    _, uses, _ = tracker.take()
    charged = {u.session: round(u.cpu_user_s, 6) for u in uses if u.cpu_user_s}
    assert charged == {APP: 0.25}, charged
