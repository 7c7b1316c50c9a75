"""Client-side execution on MySQL/MariaDB: server-side prepared statements run with as little Python as possible.

Each named statement is prepared once per connection (PREPARE ... FROM) and run with EXECUTE ... USING its
parameters as literals. That keeps the server's plan (no parse per call) while the client stays on mysqlclient's
C text-protocol path, whose cost per call measured lowest among the drivers tried (MySQLdb's cursor adds a Python
layer; the binary-protocol drivers cost more client CPU per call). MySQL (not MariaDB) takes only user variables in
EXECUTE ... USING, so there the parameters are set first by a SET of their own: a second round trip, counted.

A unit that is one statement with a key drawn uniformly over a table's rows (the SRV lookups) runs in batches in C
where the compiled loop was built (_lookups.c): binary-protocol executions, as sysbench sends them, timed in C.
"""

from __future__ import annotations

import functools
from typing import Any

from capmark.engines.base import CompiledKeyLookups, python_lookups_asked

_CompiledLookup: Any
_lookups: Any
try:  # the compiled lookup loop: optional, built at install time where libmariadb's headers and a compiler are
    from capmark.engines.mysql import _lookups
    from capmark.engines.mysql._lookups import Lookup as _CompiledLookup
except ImportError:  # pragma: no cover - an install without it runs every unit through the Python path
    _CompiledLookup = _lookups = None
CLIENT_ERRORS = 2000  # error numbers from 2000 are the client library's own (errmsg.h): a lost connection, ...


@functools.cache
def _same_client_library() -> bool:
    """The loop uses mysqlclient's connection handle with the client library it was built against: the two must be
    one library (libmariadb's handle given to Oracle's libmysqlclient, or another version, would corrupt memory)."""
    import MySQLdb._mysql as driver

    return bool(_CompiledLookup is not None and _lookups.client_info() == driver.get_client_info())


def compiled_lookups() -> bool:
    """Whether lookup units run in the compiled loop in this process."""
    return not python_lookups_asked() and _same_client_library()


def _driver_error(code: int, message: str) -> Exception:
    """The driver's exception for a server's or the client library's error, as mysqlclient would raise it (only its
    class's family and its code are read downstream)."""
    import MySQLdb  # loaded: this session runs on one of its connections

    return (MySQLdb.OperationalError if code >= CLIENT_ERRORS else MySQLdb.DatabaseError)(code, message)


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
        self._discard = conn.discard_result
        self._execute: dict[str, bytes] = {}
        self._using: dict[str, bytes] = {}  # "EXECUTE name USING ": the one-integer fast path
        self._literal_using = literal_using
        self._escape = conn.escape_string
        self._statements = statements
        for name, sql in statements.items():
            handle = f"{STATEMENT_PREFIX}{name.replace('-', '_')}"
            conn.query(f"PREPARE {handle} FROM '{sql.replace(chr(39), chr(39) * 2)}'".encode())
            self._execute[name] = f"EXECUTE {handle}".encode()
            self._using[name] = f"EXECUTE {handle} USING ".encode()

    def run(self, name: str, *params: int | str) -> None:
        """Execute a prepared statement and read its rows off the connection (every row crosses the wire and is
        consumed; none is turned into Python objects, as libpq's result stays in C on PostgreSQL)."""
        self.round_trips += 1
        if self._literal_using and len(params) == 1 and type(params[0]) is int:  # most units: one key
            self._query(self._using[name] + b"%d" % params[0])
            self._discard()
            return
        head = self._execute[name]
        if not params:
            self._query(head)
        elif self._literal_using:
            self._query(head + b" USING " + b", ".join(_literal(p, self._escape) for p in params))
        else:
            sets = b", ".join(b"@capmark_p%d = %s" % (i, _literal(p, self._escape)) for i, p in enumerate(params))
            self.round_trips += 1  # the SET is a statement of its own: the client waits for it as for the EXECUTE
            self._query(b"SET " + sets)
            self._discard()
            self._query(head + b" USING " + b", ".join(b"@capmark_p%d" % i for i in range(len(params))))
        self._discard()

    def key_lookups(self, name: str, seed: int) -> CompiledKeyLookups | None:
        """The named one-parameter statement as a compiled loop of lookups on this connection, or None where the
        loop was not built (then the unit runs through run())."""
        if not compiled_lookups():
            return None
        try:
            compiled = _CompiledLookup(self.conn, self._statements[name].encode(), seed)
        except RuntimeError as err:  # the server refused to prepare it: RuntimeError(code, message)
            raise _driver_error(*err.args) from None
        return CompiledKeyLookups(self, compiled, _driver_error)

    def _exec(self, sql: bytes) -> None:
        self.round_trips += 1
        self._query(sql)
        self._discard()

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
