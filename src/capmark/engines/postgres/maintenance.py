"""What PostgreSQL does in the background that a measurement must not pay for: checkpoints, vacuum and analyze."""

from __future__ import annotations

from typing import Any

import psycopg

CHECKPOINT_REFUSED = ("The role may not run CHECKPOINT (it needs pg_checkpoint or superuser), so earlier writes may "
                      "still be flushed during the first step.")

# Vacuums and analyzes (autovacuum's or anyone's) at work on a table of schema capmark in this database.
_BUSY_TABLES_SQL = """
select distinct p.command || ' of capmark.' || c.relname
from (select 'vacuum' as command, relid, datid from pg_stat_progress_vacuum
      union all select 'analyze', relid, datid from pg_stat_progress_analyze) p
join pg_class c on c.oid = p.relid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'capmark' and p.datid = (select oid from pg_database where datname = current_database())
order by 1
"""


def checkpoint(conn: Any) -> bool:
    """Request an immediate checkpoint; False when the role may not."""
    try:
        conn.execute("checkpoint")
        return True
    except psycopg.errors.InsufficientPrivilege:
        return False


def busy_capmark_tables(conn: Any) -> list[str]:
    return [row[0] for row in conn.execute(_BUSY_TABLES_SQL).fetchall()]
