"""The shared data model every workload runs on: its size at a --scale, and the engine that builds it.

Each engine lays the same tables out in its own SQL (PostgreSQL: schema capmark; MySQL/MariaDB: database capmark),
so that the catalogue's units find the same rows, keys and sizes on every engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capmark.config import ROWS_PER_SCALE
from capmark.engines.base import DataSize, Engine, procedures_of
from capmark.engines.postgres.datamodel import PGBENCH_BIGINT_SCALE
from capmark.engines.postgres.engine import POSTGRESQL

__all__ = ["PGBENCH_BIGINT_SCALE", "DataSize", "install_procedures", "setup", "size_for", "warm_cache"]


def size_for(scale: int) -> DataSize:
    return DataSize(items=ROWS_PER_SCALE * scale, accounts=ROWS_PER_SCALE * scale,
                    booking_accounts=10_000 * scale, call_customers=2_000 * scale, ring_rows=1_000,
                    sto_rows=200_000 * scale, pgbench_scale=scale)



def setup(conn: Any, size: DataSize, say: Callable[[str], None] = print, engine: Engine = POSTGRESQL) -> float:
    """Create or rebuild the data model; returns the seconds it took (0 when reused)."""
    return engine.setup_datamodel(conn, size, say)


def warm_cache(conn: Any, tables: list[str], say: Callable[[str], None] = print, engine: Engine = POSTGRESQL) -> None:
    """Load tables and their indexes into the buffer cache so that cached workloads start warm."""
    engine.warm_cache(conn, tables, say)


def install_procedures(conn: Any, ddl: list[str], engine: Engine = POSTGRESQL) -> None:
    """Create the server-side procedures of the workloads about to run (engines without them get none)."""
    if ddl:
        procedures_of(engine).install_procedures(conn, ddl)
