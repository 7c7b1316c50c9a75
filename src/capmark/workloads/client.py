"""Client-side units of work: the same transactions as the PL/pgSQL units, issued from the driver.

Each function runs one unit on a ClientSession (prepared statements) and returns its transaction
type index. Builders return the statements to prepare together with the function.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from capmark.workloads.base import DataSize
from capmark.workloads.units import TABLES

ClientFn = Callable[[Any, random.Random, dict, DataSize], int]
Statements = dict[str, str]

@dataclass(frozen=True)
class KeyLookup:
    """A unit that is one statement with a key drawn uniformly over a table's rows, in autocommit. Being only that,
    it may run in an engine's compiled loop of many lookups (MySQL/MariaDB's) instead of one Python call each."""

    statement: str  # the name of the prepared statement
    size_of: str  # the DataSize field that holds the table's rows
    kind: int = 0  # the transaction type it reports

    def __call__(self, session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        session.run(self.statement, int(rng.random() * getattr(size, self.size_of)) + 1)
        return self.kind


def read_only(table: str, kind: int = 0) -> tuple[Statements, ClientFn]:
    t = TABLES[table]
    name = f"{table}_read"
    return {name: f"select {t.cols} from capmark.{table} where {t.key} = $1"}, KeyLookup(name, t.size_of, kind)


def read_update(table: str, read_kind: int = 0, update_kind: int = 1) -> tuple[Statements, ClientFn]:
    """update_pct % of transactions lock the rows (FOR UPDATE) and update them; one commit each."""
    t = TABLES[table]
    names = (f"{table}_read", f"{table}_lock", f"{table}_update")

    def run(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        k = int(rng.random() * getattr(size, t.size_of)) + 1
        if rng.random() * 100 < params["update_pct"]:
            session.begin()
            session.run(names[1], k)
            session.run(names[2], k)
            session.commit()
            return update_kind
        session.run(names[0], k)
        return read_kind

    return {names[0]: f"select {t.cols} from capmark.{table} where {t.key} = $1",
            names[1]: f"select {t.cols} from capmark.{table} where {t.key} = $1 for update",
            names[2]: f"update capmark.{table} set {t.update} where {t.key} = $1"}, run


def load(rows_param: str | int, kind: int = 0) -> tuple[Statements, ClientFn]:
    """One INSERT of generated rows into the load table (autocommit: one commit)."""
    def run(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        session.run("dl_insert", params[rows_param] if isinstance(rows_param, str) else rows_param)
        return kind

    return {"dl_insert": "insert into capmark.dl_row select nextval('capmark.dl_row_seq'), "
                         "(random() * 1000000)::int, (random() * 1000)::int, repeat('d', 100) "
                         "from generate_series(1, $1::int)"}, run


def wal_update(rows: int) -> tuple[Statements, ClientFn]:
    """Update `rows` rows of ~1 kB in the job's slot of the WAL ring; one synchronous commit."""
    def run(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        pos = getattr(session, "ring_pos", 0)
        pos = (pos + rows) % max(size.ring_rows - rows, 1)
        session.ring_pos = pos
        session.run("wal_update", params["job"] % 32, pos)
        return 0

    return {"wal_update": "update capmark.wal_ring set payload = repeat(md5(random()::text), 30) "
                          f"where job = $1 and id > $2 and id <= $2 + {rows}"}, run


def weighted(branches: list[tuple[float, tuple[Statements, ClientFn]]]) -> tuple[Statements, ClientFn]:
    """Pick one branch per unit by weight; branch i reports transaction type i."""
    statements: Statements = {}
    for _, (stmts, _fn) in branches:
        statements.update(stmts)
    weights = [w for w, _ in branches]
    fns = [fn for _, (_s, fn) in branches]
    total = sum(weights)

    def run(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
        x = rng.random() * total
        for i, w in enumerate(weights):
            if x < w or i == len(weights) - 1:
                fns[i](session, rng, params, size)
                return i
            x -= w
        return 0

    return statements, run


class ClientFields(TypedDict):
    """The Workload fields of a client-side unit, given as keyword arguments (**fields(...))."""

    client_statements: Statements
    client_unit: ClientFn


def fields(pair: tuple[Statements, ClientFn]) -> ClientFields:
    """Workload keyword arguments for a client-side unit."""
    return ClientFields(client_statements=pair[0], client_unit=pair[1])
