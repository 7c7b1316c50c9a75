"""Deltas of cumulative statistics: what a window added, whatever the engine's views are called."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from capmark.engines.base import Delta, Row


def plain(value: Any) -> Any:
    """A value as stored in JSON: numbers as floats, times as ISO text."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


def numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _sum_by_key(rows: list[Row], keys: tuple[str, ...]) -> dict[tuple[Any, ...], Row]:
    out: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        k = tuple(row.get(c) for c in keys)
        if k not in out:
            out[k] = dict(row)
        else:
            for name, v in row.items():
                if numeric(v) and numeric(out[k].get(name)):
                    out[k][name] += v
    return out


def delta(before: Delta, after: Delta, keys_of: dict[str, tuple[str, ...]]) -> Delta:
    """after - before for every numeric column, matching rows of each view by its key columns (keys_of)."""
    out: Delta = {}
    for view, rows_after in after.items():
        keys = keys_of.get(view, ())
        b = _sum_by_key(before.get(view, []), keys)
        a = _sum_by_key(rows_after, keys)
        rows = []
        for k, row in a.items():
            base = b.get(k, {})
            d = {}
            for name, v in row.items():
                if name in keys or not numeric(v):
                    d[name] = v
                else:
                    prev = base.get(name)
                    d[name] = v - prev if numeric(prev) else v
            rows.append(d)
        out[view] = rows
    return out


def total(rows: list[Row], column: str, **where: Any) -> float | None:
    """Sum of a column over rows matching where; None when no row has the column."""
    values = [r[column] for r in rows if column in r and numeric(r[column])
              and all(r.get(k) == v for k, v in where.items())]
    return float(sum(values)) if values else None


