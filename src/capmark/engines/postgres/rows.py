"""Reading the one row a query always returns (an aggregate, a setting, a function call without FROM)."""

from __future__ import annotations

import psycopg
from psycopg.rows import Row

from capmark.errors import CapmarkError


def one_row(cursor: psycopg.Cursor[Row]) -> Row:
    """The cursor's first row; a server that answers such a query with no row is not a PostgreSQL capmark knows."""
    row = cursor.fetchone()
    if row is None:
        raise CapmarkError("The database returned no row for a query that always returns one; point capmark at a "
                           "PostgreSQL server (versions 14 to 18).")
    return row
