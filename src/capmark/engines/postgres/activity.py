"""What PostgreSQL's sessions are doing at one instant, from pg_stat_activity (the step's 10 Hz sampler)."""

from __future__ import annotations

import weakref

import psycopg

from capmark.engines.base import ActivitySample

# the sampler's own session is left out; the other client sessions are counted as interference
WAIT_SQL = ("select pid, pid = any(%s), state, wait_event_type, wait_event, backend_type, "
            "coalesce(application_name, ''), coalesce(usename::text, '') from pg_stat_activity "
            "where pid <> pg_backend_pid() and (pid = any(%s) "
            "or backend_type in ('checkpointer', 'autovacuum worker', 'client backend'))")
IDLE_CHECKPOINTER = "CheckpointerMain"  # an idle checkpointer waits here; anything else is checkpoint work

# connections on which WAIT_SQL has been prepared already
_prepared: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()


def sample(conn: psycopg.Connection, job_pids: list[int], own_pids: list[int]) -> ActivitySample:
    """One pg_stat_activity reading: the jobs' wait events, the other client backends, the checkpointer and
    autovacuum. own_pids: this run's sessions (jobs included), which are neither workload nor interference."""
    rows = conn.execute(WAIT_SQL, (job_pids, job_pids), prepare=True).fetchall()
    # psycopg prepares in a round trip of its own before the first execution: one more transaction
    out = ActivitySample(transactions=1 if conn in _prepared else 2)
    _prepared.add(conn)
    for pid, mine, state, wtype, event, backend_type, app, role in rows:
        if not mine:
            if backend_type == "checkpointer" and event != IDLE_CHECKPOINTER:
                out.checkpoint_busy = True
            out.autovacuum = out.autovacuum or backend_type == "autovacuum worker"
            if backend_type == "client backend" and pid not in own_pids:
                out.others.append((state, app, role))
            continue
        if state != "active":
            out.waits.append(f"Client:{state or 'unknown'}")
        elif wtype:
            out.waits.append(f"{wtype}:{event}")
        else:
            out.waits.append("CPU")
    return out
