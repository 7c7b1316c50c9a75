"""Client-side execution: one connection, prepared statements, as little Python per call as possible."""

from __future__ import annotations

import psycopg
from psycopg import pq

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK


def _error_class(res: pq.abc.PGresult) -> type[psycopg.Error]:
    """The psycopg exception for the result's SQLSTATE, so that callers can tell a cancel from a failure."""
    code = res.error_field(pq.DiagnosticField.SQLSTATE)
    try:
        return psycopg.errors.lookup(code.decode()) if code else psycopg.DatabaseError
    except KeyError:
        return psycopg.DatabaseError


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
            message = res.error_message.decode(errors="replace").strip()
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

    def begin(self) -> None:
        self._exec(b"begin")

    def commit(self) -> None:
        self._exec(b"commit")

    def rollback(self) -> None:
        self._exec(b"rollback")

    @property
    def in_transaction(self) -> bool:
        return self.pgconn.transaction_status != pq.TransactionStatus.IDLE
