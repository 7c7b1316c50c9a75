"""One interval's deltas from two readings of the server's cumulative counters, and whether they can be trusted.

Pure functions over what engines/postgres/observe.py read: the statements' deltas (the top N by execution time kept,
the rest summed as OTHER_STATEMENTS), the cumulative views' deltas, and the reason an interval is broken (a restart,
a reset, a counter that went backwards), so that no delta is ever taken across a new counting epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from capmark.engines.base import Delta
from capmark.engines.deltas import delta as view_delta
from capmark.engines.deltas import numeric
from capmark.engines.postgres.observe import COUNTERS, GAUGES, VIEW_KEYS, ServerEpoch, StatementKey, StatementRow, row_key
from capmark.observations import OTHER_STATEMENTS, StatementDelta

Statements = dict[StatementKey, StatementRow]


@dataclass(frozen=True)
class Counters:
    """An interval's server-side deltas, as the interval stores them."""

    statements: list[StatementDelta]
    statements_total: int  # distinct statements that changed, before the top N was kept
    database: Delta  # the engine's own views' deltas
    collector_transactions: int | None  # the collector's own transactions, where the engine counts them


@dataclass(frozen=True)
class Break:
    """Why an interval's counters cannot be differenced: its kind (an ObservationEvent kind) and one sentence."""

    kind: str  # restart, reset, backwards
    text: str


def epoch_break(before: ServerEpoch, after: ServerEpoch) -> Break | None:
    """A restart or a statistics reset between two readings."""
    if before.started_at != after.started_at:
        return Break("restart", f"the server restarted (its postmaster started at {after.started_at})")
    if before.statements_reset != after.statements_reset:
        return Break("reset", f"pg_stat_statements was reset (at {after.statements_reset})")
    for key, at in after.resets.items():
        if before.resets.get(key, at) != at:
            return Break("reset", f"the statistics of {key.replace(' None', ' (shared objects)')} were reset "
                                  f"(at {at})")
    return None


def statement_deltas(before: Statements, after: Statements, *, evicted: bool) -> tuple[dict[StatementKey,
                                                                                         dict[str, float]], Break | None]:
    """Each statement's counters over the interval, for those that changed. A statement new since `before` counts
    from zero. A counter lower than before means the entry was evicted and made again (when `evicted`: then it
    counts from zero) or the counters went backwards (a Break)."""
    out: dict[StatementKey, dict[str, float]] = {}
    for key, row in after.items():
        prev = before.get(key)
        if prev is None:
            d = dict(row.counters)
        else:
            d = {c: row.counters[c] - prev.counters[c] for c in COUNTERS}
            if d["calls"] < 0 or any(v < 0 for v in d.values()):
                if not evicted:
                    return {}, Break("backwards", f"the counters of statement {key.query_id} went backwards")
                d = dict(row.counters)
        if d["calls"] > 0 or d["exec_time_s"] > 0 or d["plan_time_s"] > 0:
            out[key] = d
    return out, None


def top_statements(changed: dict[StatementKey, dict[str, float]], rows: Statements,
                   top_n: int) -> list[StatementDelta]:
    """The top_n statements by execution time, each as it is, and one OTHER_STATEMENTS row summing the rest. A
    statement's text is what the reader read: every text with --store-query-text, else only that of statements
    that begin or end a transaction (they hold no data)."""
    ranked = sorted(changed.items(), key=lambda kv: (-kv[1]["exec_time_s"], -kv[1]["calls"], kv[0].query_id))
    kept = [StatementDelta(query_id=key.query_id, database=rows[key].database, user=rows[key].user,
                           toplevel=key.toplevel, text=rows[key].text,  # the reader reads only what may be kept
                           command=rows[key].command,
                           **d)  # type: ignore[arg-type]  # d holds exactly the COUNTERS, each a float
            for key, d in ranked[:top_n]]
    rest = ranked[top_n:]
    if rest:
        sums = {c: sum(d[c] for _, d in rest) for c in COUNTERS}
        kept.append(StatementDelta(query_id=OTHER_STATEMENTS, database="", user="",
                                   **sums))  # type: ignore[arg-type]  # the COUNTERS, each a float
    return kept


def views_delta(before: Delta, after: Delta) -> tuple[Delta, Break | None]:
    """The cumulative views' deltas (gauges kept at their value at the end); a counter lower than before breaks."""
    out = view_delta(before, after, VIEW_KEYS)
    for view, rows in out.items():
        ends = {row_key(view, r): r for r in after.get(view, [])}
        for row in rows:
            end = ends.get(row_key(view, row), {})
            for name, value in row.items():
                if name in GAUGES:
                    row[name] = end.get(name, value)
                elif numeric(value) and value < 0:
                    where = " ".join(str(v) for v in row_key(view, row) if v is not None)
                    return {}, Break("backwards", f"{name} of pg_stat_{view}{' ' + where if where else ''} went "
                                                  "backwards")
    return out, None
