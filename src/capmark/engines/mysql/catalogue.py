"""How the catalogue's workloads run on MySQL and MariaDB: their statements in MySQL's SQL, the session settings
that mean something there, and the preparation a test needs; or why a workload cannot mean the same."""

from __future__ import annotations

import re

from capmark.engines.mysql.connection import DATABASE
from capmark.engines.mysql.statements import STATEMENTS, wal_update_for

# PostgreSQL session settings a workload asks for, and what each is on MySQL: None when it has no effect to keep
# (MySQL runs a query on one thread, so "no parallel workers" holds anyway), else the reason it cannot be honoured.
SESSION_SETTINGS: dict[tuple[str, str], str | None] = {
    ("max_parallel_workers_per_gather", "0"): None,
    ("synchronous_commit", "on"): None,  # a commit waits for its redo flush when innodb_flush_log_at_trx_commit = 1
    ("synchronous_commit", "off"): ("commits that do not wait for the log need innodb_flush_log_at_trx_commit = 2, "
                                    "a server-wide setting capmark does not change"),
}

# The PostgreSQL preparation statements a test runs, in MySQL's SQL. The Stress table is restored from the item
# table, which holds exactly the ids 1..items that the Stress table starts with.
_STRESS_RESTORE = (
    f"delete from `{DATABASE}`.stress_item where id > (select items from `{DATABASE}`.meta)",
    f"insert ignore into `{DATABASE}`.stress_item (id, val, payload) select id, id % 1000, repeat('s', 60) "
    f"from `{DATABASE}`.item where id <= (select items from `{DATABASE}`.meta)",
)
PREPARE = {
    "truncate capmark.dl_row": (f"truncate table `{DATABASE}`.dl_row",),
    "vacuum capmark.stress_item": (),  # InnoDB's purge reclaims deleted rows by itself
}
_WAL_ROWS = re.compile(r"id <= \$2 \+ (\d+)$")


def client_statement(name: str, postgres_sql: str) -> str | None:
    """The MySQL text of a catalogue statement, None where capmark has none."""
    if name == "wal_update":
        rows = _WAL_ROWS.search(postgres_sql.strip())
        return wal_update_for(int(rows.group(1))) if rows else None
    return STATEMENTS.get(name)


def session_settings(settings: dict[str, str]) -> dict[str, str] | str:
    """The MySQL session settings for a workload's PostgreSQL ones, or why the workload cannot mean the same."""
    for item in settings.items():
        if item not in SESSION_SETTINGS:
            return f"it needs the PostgreSQL setting {item[0]} = {item[1]}, which MySQL does not have"
        reason = SESSION_SETTINGS[item]
        if reason:
            return reason
    return {}


def preparation(statements: tuple[str, ...]) -> tuple[str, ...] | str:
    """The MySQL statements a test runs before it starts, or why capmark has none."""
    out: list[str] = []
    for sql in statements:
        if sql.startswith("do $$") and "stress_item" in sql:
            out.extend(_STRESS_RESTORE)
        elif sql in PREPARE:
            out.extend(PREPARE[sql])
        else:
            return "its preparation has no MySQL equivalent in capmark"
    return tuple(out)
