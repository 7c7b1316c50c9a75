"""Running a statement on a mysqlclient connection and reading its rows, with the cursor always closed."""

from __future__ import annotations

from typing import Any

from capmark.errors import CapmarkError


def rows(conn: Any, sql: str, args: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    cur = conn.cursor()
    try:
        cur.execute(sql, args)
        return list(cur.fetchall())
    finally:
        cur.close()


def run(conn: Any, sql: str, args: tuple[Any, ...] | None = None) -> None:
    cur = conn.cursor()
    try:
        cur.execute(sql, args)
    finally:
        cur.close()


def scalar(conn: Any, sql: str, args: tuple[Any, ...] | None = None) -> Any:
    """The first column of the one row a query always returns (a variable, an aggregate)."""
    got = rows(conn, sql, args)
    if not got:
        raise CapmarkError("The database returned no row for a query that always returns one; point capmark at a "
                           "MySQL (8.0 or later) or MariaDB (10.6 or later) server.")
    return got[0][0]
