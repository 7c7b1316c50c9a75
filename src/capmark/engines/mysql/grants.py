"""What a MySQL/MariaDB user may do, read from SHOW GRANTS, and how a GRANT names the user."""

from __future__ import annotations

import re
from typing import Any

from capmark.engines.mysql import queries as q

ALL = "ALL"  # ALL [PRIVILEGES]: every privilege at the level it is granted on
_GRANT = re.compile(r"^GRANT (?P<privs>.+?) ON (?P<target>\S+) TO ", re.IGNORECASE)


def lines(conn: Any) -> list[str]:
    """The current user's SHOW GRANTS lines."""
    return [str(row[0]) for row in q.rows(conn, "SHOW GRANTS")]


def granted(grants: list[str], database: str | None = None) -> set[str]:
    """The privileges the SHOW GRANTS lines give: on every table of `database` (global grants, grants on the database
    and on database patterns that match it; table-level grants do not let capmark create tables), or the global
    ones alone when database is None. ALL [PRIVILEGES] is the one entry ALL."""
    have: set[str] = set()
    for line in grants:
        m = _GRANT.match(line.strip())
        if not m:
            continue
        db, _, table = m["target"].rpartition(".")
        if table != "*":
            continue
        if db != "*" and (database is None or not _db_matches(db.strip("`"), database)):
            continue
        privs = m["privs"]
        if re.match(r"ALL( PRIVILEGES)?$", privs.strip(), re.IGNORECASE):
            have.add(ALL)
            continue
        for p in privs.split(","):
            have.add(re.sub(r"\s*\(.*\)", "", p).strip().upper())
    return have


def has_global(grants: list[str], privilege: str) -> bool:
    """The user holds the privilege on *.* (itself, or by ALL)."""
    have = granted(grants)
    return ALL in have or privilege in have


def _db_matches(pattern: str, database: str) -> bool:
    """A database name in a GRANT may be a LIKE pattern (`_` and `%`, `\\_` a literal underscore)."""
    out = ""
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
            continue
        out += ".*" if ch == "%" else "." if ch == "_" else re.escape(ch)
        i += 1
    return re.fullmatch(out, database, re.IGNORECASE) is not None


def account(user: Any) -> str:
    """CURRENT_USER()'s user@host as a GRANT names it: 'user'@'host'."""
    name, _, host = str(user).rpartition("@")
    return f"'{name}'@'{host}'" if name else f"'{user}'"
