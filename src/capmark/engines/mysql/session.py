"""Client-side execution on MySQL/MariaDB: server-side prepared statements run with as little Python as possible.

Each named statement is prepared once per connection (PREPARE ... FROM) and run with EXECUTE ... USING its
parameters as literals. That keeps the server's plan (no parse per call) while the client stays on mysqlclient's
C text-protocol path, whose cost per call measured lowest among the drivers tried (MySQLdb's cursor adds a Python
layer; the binary-protocol drivers cost more client CPU per call). MySQL (not MariaDB) takes only user variables in
EXECUTE ... USING, so there each parameter is set first in the same round trip.
"""

from __future__ import annotations

from typing import Any

STATEMENT_PREFIX = "capmark_"  # prepared statements are per connection; the prefix keeps them apart from a user's


def _literal(value: int | str, escape: Any) -> bytes:
    """A parameter as SQL text: integers as digits, strings quoted and escaped by the connection's character set."""
    if isinstance(value, int):
        return b"%d" % value
    return b"'" + escape(value.encode()) + b"'"


class MysqlSession:
    """Runs named prepared statements on one connection and counts the round trips."""

    def __init__(self, conn: Any, statements: dict[str, str], *, literal_using: bool) -> None:
        self.conn = conn
        self.round_trips = 0
        self._in_transaction = False
        self._query = conn.query
        self._store = conn.store_result
        self._execute: dict[str, bytes] = {}
        self._literal_using = literal_using
        self._escape = conn.escape_string
        for name, sql in statements.items():
            handle = f"{STATEMENT_PREFIX}{name.replace('-', '_')}"
            conn.query(f"PREPARE {handle} FROM '{sql.replace(chr(39), chr(39) * 2)}'".encode())
            self._execute[name] = f"EXECUTE {handle}".encode()

    def run(self, name: str, *params: int | str) -> Any:
        """Execute a prepared statement; its rows are read into the client (as libmysqlclient buffers them)."""
        self.round_trips += 1
        head = self._execute[name]
        if not params:
            self._query(head)
        elif self._literal_using:
            self._query(head + b" USING " + b", ".join(_literal(p, self._escape) for p in params))
        else:
            sets = b", ".join(b"@capmark_p%d = %s" % (i, _literal(p, self._escape)) for i, p in enumerate(params))
            self._query(b"SET " + sets)
            self._query(head + b" USING " + b", ".join(b"@capmark_p%d" % i for i in range(len(params))))
        return self._store()

    def _exec(self, sql: bytes) -> None:
        self.round_trips += 1
        self._query(sql)

    def begin(self) -> None:
        self._exec(b"BEGIN")
        self._in_transaction = True

    def commit(self) -> None:
        self._in_transaction = False
        self._exec(b"COMMIT")

    def rollback(self) -> None:
        self._in_transaction = False
        self._exec(b"ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction
