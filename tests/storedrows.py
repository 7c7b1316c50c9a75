"""Rows of the one run under a results folder, read while capmark may still be writing it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def stored(results: Path, sql: str) -> list[tuple]:
    """Rows from the one run under results; [] while there is none (or it is being written)."""
    dbs = list(results.glob("*/results.sqlite"))
    if not dbs:
        return []
    try:
        con = sqlite3.connect(f"file:{dbs[0]}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []
