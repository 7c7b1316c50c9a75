"""Client-side execution: one connection, prepared statements, as little Python per call as possible.

A unit that is one prepared statement with a key drawn uniformly over a table's rows (the SRV lookups) runs in
batches in C where the compiled loop was built (_lookups.c), on the same connection and the same libpq.
"""

from __future__ import annotations

import functools
from typing import Any

import psycopg
from psycopg import pq

from capmark.engines.base import CompiledKeyLookups, python_lookups_asked

_compiled: Any
try:  # the compiled lookup loop: optional, built at install time where a C compiler is
    from capmark.engines.postgres import _lookups as _compiled
except ImportError:  # pragma: no cover - an install without it runs every unit through the Python path
    _compiled = None

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK


def _error_class(res: pq.abc.PGresult) -> type[psycopg.Error]:
    """The psycopg exception for the result's SQLSTATE, so that callers can tell a cancel from a failure."""
    code = res.error_field(pq.DiagnosticField.SQLSTATE)
    return _sqlstate_class(code.decode() if code else "")


def _sqlstate_class(sqlstate: str) -> type[psycopg.Error]:
    try:
        return psycopg.errors.lookup(sqlstate) if sqlstate else psycopg.DatabaseError
    except KeyError:
        return psycopg.DatabaseError


def _libpq_paths() -> set[str]:
    """The files of every libpq mapped into this process."""
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "/libpq" in fields[5] and ".so" in fields[5]:
                paths.add(fields[5].strip())
    return paths


@functools.cache
def _bound() -> bool:
    """Whether the loop is bound to the libpq psycopg runs on: its own copy in psycopg-binary's wheel, else the one
    libpq of the process, and of psycopg's libpq version (a second, different libpq is never guessed at)."""
    if _compiled is None:
        return False
    paths = _libpq_paths()
    if pq.__impl__ == "binary":
        paths = {p for p in paths if "psycopg_binary" in p}
    if len(paths) != 1:
        return False
    try:
        return bool(_compiled.bind(paths.pop()) == pq.version())
    except ImportError:
        return False


def compiled_lookups() -> bool:
    """Whether lookup units run in the compiled loop in this process."""
    return not python_lookups_asked() and _bound()


def _driver_error(sqlstate: str | None, message: str) -> psycopg.Error:
    """psycopg's exception for an execution's SQLSTATE, as the Python path raises it; none: the connection failed."""
    if sqlstate is None:
        return psycopg.OperationalError(message.strip() or "the connection failed")
    return _sqlstate_class(sqlstate)(message.strip() or "statement failed")


class ClientSession:
    """Runs named prepared statements through libpq directly (psycopg's pq layer) to keep driver cost low."""

    def __init__(self, conn: psycopg.Connection, statements: dict[str, str]) -> None:
        self.conn = conn
        self.pgconn = conn.pgconn
        self.round_trips = 0
        self._names = {name: name.encode() for name in statements}
        for name, sql in statements.items():
            self._check(self.pgconn.prepare(self._names[name], sql.encode()))

    def _check(self, res: pq.abc.PGresult) -> pq.abc.PGresult:
        if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            # the primary message, as psycopg words its errors (without libpq's "ERROR:  ")
            primary = res.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
            message = (primary or res.error_message).decode(errors="replace").strip()
            raise _error_class(res)(message or "statement failed")
        return res

    def run(self, name: str, *params: int | str) -> pq.abc.PGresult:
        """Execute a prepared statement with text parameters (ints are formatted without str())."""
        self.round_trips += 1
        args = [b"%d" % p if isinstance(p, int) else p.encode() for p in params]
        res = self.pgconn.exec_prepared(self._names[name], args)
        if res.status != _TUPLES_OK and res.status != _COMMAND_OK:
            self._check(res)
        return res

    def _exec(self, sql: bytes) -> None:
        self.round_trips += 1
        self._check(self.pgconn.exec_(sql))

    def key_lookups(self, name: str, seed: int) -> CompiledKeyLookups | None:
        """The named one-parameter statement as a compiled loop of executions on this connection, or None where the
        loop was not built (then the unit runs through run())."""
        if not compiled_lookups():
            return None
        return CompiledKeyLookups(self, _compiled.Lookup(self.pgconn, self._names[name], seed), _driver_error,
                                  together=_compiled.run_together)

    def begin(self) -> None:
        self._exec(b"begin")

    def commit(self) -> None:
        self._exec(b"commit")

    def rollback(self) -> None:
        self._exec(b"rollback")

    @property
    def in_transaction(self) -> bool:
        return self.pgconn.transaction_status != pq.TransactionStatus.IDLE
