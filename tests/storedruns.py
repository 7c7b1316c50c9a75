"""Stored runs from tests/fixtures unpacked into a results folder, as capmark leaves them (shared by the compare
tests; how each was recorded: tests/fixtures/README.md)."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

from capmark.store import DB_NAME

FIXTURES = Path(__file__).parent / "fixtures"


def unpack(results: Path, *names: str) -> list[str]:
    """Each fixture <name>.sqlite.gz (a name may hold a folder under tests/fixtures) as a run folder under results;
    the run ids, in the order given."""
    ids = []
    for name in names:
        data = gzip.decompress((FIXTURES / f"{name}.sqlite.gz").read_bytes())
        staged = results / f".{Path(name).name}.sqlite"
        results.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(data)
        db = sqlite3.connect(staged)
        (run_id,) = db.execute("select run_id from run").fetchone()
        db.close()
        (results / run_id).mkdir()
        staged.rename(results / run_id / DB_NAME)
        ids.append(run_id)
    return ids
