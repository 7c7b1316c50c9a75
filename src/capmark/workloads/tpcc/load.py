"""Build the TPC-C tables at a warehouse count: create them empty, fill them with COPY from worker processes in
parallel (one connection each), then add keys and indexes, analyze, and only then record the warehouse count, so
that a load that stops half-way is never taken for a complete one."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psycopg

from capmark.engines.postgres import connect
from capmark.engines.postgres.datamodel import refuse_if_others_depend
from capmark.engines.postgres.rows import one_row
from capmark.workloads.tpcc import rows, schema, spec

COPY_CHUNK_ROWS = 5_000  # rows joined per write: large enough that the Python per write is noise
SEED = 20_261_124  # loads are repeatable: the same warehouse count gives the same rows
ITEM_TABLE_MB = 20  # the 100,000 items with their key, whatever the warehouse count


@dataclass(frozen=True)
class LoadReport:
    warehouses: int
    seconds: float  # wall time of the whole load, keys and analyze included
    copy_s: float  # wall time of the parallel COPY phase
    workers: int
    rows: dict[str, int]

    def sentence(self) -> str:
        return (f"TPC-C-like data for {self.warehouses} warehouse{'s' if self.warehouses != 1 else ''} loaded in "
                f"{self.seconds:.1f} s ({self.seconds / self.warehouses:.1f} s per warehouse; COPY by {self.workers} "
                f"parallel worker{'s' if self.workers != 1 else ''} {self.copy_s:.1f} s, then keys, indexes and "
                "statistics)")


def loaded_warehouses(conn: psycopg.Connection) -> int | None:
    """The warehouse count of a complete load of this model version, else None."""
    if not one_row(conn.execute("select to_regclass('capmark.tpcc_meta') is not null"))[0]:
        return None
    row = conn.execute("select warehouses from capmark.tpcc_meta where model_version = %s",
                       (schema.TPCC_MODEL_VERSION,)).fetchone()
    return int(row[0]) if row else None


# table -> the key column whose largest value is the warehouse count (the item table's: the item count), read from
# the end of the table's primary key; no transaction adds or removes items, stock, customers, warehouses or
# districts, and orders and their lines only grow. New orders (deliveries remove them) and history (no key) are
# only checked to exist.
def _key_probes(warehouses: int) -> dict[str, tuple[str, int]]:
    return {"tpcc_item": ("i_id", spec.ITEMS), "tpcc_warehouse": ("w_id", warehouses),
            "tpcc_district": ("d_w_id", warehouses), "tpcc_customer": ("c_w_id", warehouses),
            "tpcc_stock": ("s_w_id", warehouses), "tpcc_order": ("o_w_id", warehouses),
            "tpcc_order_line": ("ol_w_id", warehouses)}


def damage(conn: psycopg.Connection, warehouses: int) -> list[str]:
    """What a complete load of `warehouses` lacks now (tables dropped or emptied since), in words; empty when
    every table is in place. Cheap: a catalogue lookup and one index probe per table."""
    out = []
    probes = _key_probes(warehouses)
    for table in schema.TABLES:
        if not one_row(conn.execute("select to_regclass(%s) is not null", (f"capmark.{table}",)))[0]:
            out.append(f"capmark.{table} is missing")
        elif table in probes:
            column, expected = probes[table]
            found = one_row(conn.execute(f"select max({column}) from capmark.{table}"))[0]
            if found is None:
                out.append(f"capmark.{table} is empty")
            elif found != expected:
                out.append(f"capmark.{table} holds {column} up to {found:,} instead of {expected:,}")
    return out


def _copy(conn: psycopg.Connection, table: str, lines: Iterable[str]) -> int:
    n = 0
    with conn.cursor().copy(f"copy capmark.{table} from stdin") as copy:
        chunk: list[str] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) >= COPY_CHUNK_ROWS:
                copy.write("".join(chunk))
                n += len(chunk)
                chunk.clear()
        if chunk:
            copy.write("".join(chunk))
            n += len(chunk)
    return n


def _task(dsn: str, part: str, warehouse: int, now: str) -> dict[str, int]:
    """One part of the load on its own connection and transaction: the items, or one warehouse's stock,
    customers or orders."""
    gen = rows.Generator(SEED + warehouse * len(PARTS) + PARTS.index(part))
    counts: dict[str, int] = {}
    with connect(dsn, autocommit=False, application_name="capmark tpcc load") as conn:
        if part == "items":
            counts["tpcc_item"] = _copy(conn, "tpcc_item", rows.items(gen))
        elif part == "stock":
            counts["tpcc_warehouse"] = _copy(conn, "tpcc_warehouse", rows.warehouse(gen, warehouse))
            counts["tpcc_district"] = _copy(conn, "tpcc_district", rows.districts(gen, warehouse))
            counts["tpcc_stock"] = _copy(conn, "tpcc_stock", rows.stock(gen, warehouse))
        elif part == "customers":
            counts["tpcc_customer"] = _copy(conn, "tpcc_customer", rows.customers(gen, warehouse, now))
            counts["tpcc_history"] = _copy(conn, "tpcc_history", rows.history(gen, warehouse, now))
        else:
            order_rows, new_rows, line_rows = rows.orders(gen, warehouse, now)
            counts["tpcc_order"] = _copy(conn, "tpcc_order", order_rows)
            counts["tpcc_new_order"] = _copy(conn, "tpcc_new_order", new_rows)
            counts["tpcc_order_line"] = _copy(conn, "tpcc_order_line", line_rows)
        conn.commit()
    return counts


PARTS = ("items", "stock", "customers", "orders")


def _task_of(args: tuple[str, str, int, str]) -> dict[str, int]:
    return _task(*args)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def load(control: psycopg.Connection, dsn: str, warehouses: int, say: Callable[[str], None],
         workers: int | None = None) -> LoadReport | None:
    """Load the tables for `warehouses` unless a complete load of that size is in place (then None). A load whose
    tables were dropped or emptied since is loaded anew as a whole (its tables hold each other's keys), saying why."""
    why = ""
    if loaded_warehouses(control) == warehouses:
        damaged = damage(control, warehouses)
        if not damaged:
            return None
        why = f"The TPC-C-like data is incomplete ({'; '.join(damaged)}), so capmark loads it anew. "
    tables = list(schema.TABLES)
    refuse_if_others_depend(control, [*tables, "tpcc_meta"], [])
    what = (f"the nine TPC-C-like tables ({', '.join(tables)}) and capmark.tpcc_meta, for {warehouses} "
            f"warehouse{'s' if warehouses != 1 else ''} (about {warehouses * spec.APPROX_MB_PER_WAREHOUSE + ITEM_TABLE_MB} "
            "MB)")
    say(f"{why}capmark will create in schema capmark: {what}.")
    started = time.monotonic()
    with control.transaction():
        for table in [*tables, "tpcc_meta"]:
            control.execute(f"drop table if exists capmark.{table}")
        for table in tables:
            control.execute(schema.create_sql(table))
        control.execute(schema.META_DDL)
    tasks = [("items", 0)] + [(part, w) for w in range(1, warehouses + 1) for part in PARTS[1:]]
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    # the server's clock, as the transactions' localtimestamp: rows loaded are older than any a run writes
    now = one_row(control.execute("select to_char(localtimestamp, 'YYYY-MM-DD HH24:MI:SS')"))[0]
    counts: dict[str, int] = dict.fromkeys(tables, 0)
    copy_started = time.monotonic()
    # spawn: the loader may run in a process that has threads (a sampler), which fork would copy mid-state. The
    # workers ignore Ctrl-C; this process stops them instead, so that an interrupted load leaves no traceback
    pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_ignore_interrupts)
    try:
        for done in pool.imap_unordered(_task_of, [(dsn, part, w, now) for part, w in tasks]):
            for table, n in done.items():
                counts[table] += n
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()
    copy_s = time.monotonic() - copy_started
    _keys(dsn, tables, workers)
    for table in tables:
        control.execute(f"vacuum analyze capmark.{table}")
    control.execute("insert into capmark.tpcc_meta values (%s, %s)", (schema.TPCC_MODEL_VERSION, warehouses))
    return LoadReport(warehouses, time.monotonic() - started, copy_s, workers, counts)


def _keys(dsn: str, tables: list[str], workers: int) -> None:
    """Primary keys and indexes, a table per connection in parallel (the server does the work)."""
    def build(table: str) -> None:
        with connect(dsn, application_name="capmark tpcc load") as conn:
            for statement in schema.KEYS[table]:
                conn.execute(statement)

    with cf.ThreadPoolExecutor(workers) as pool:
        list(pool.map(build, sorted(tables, key=lambda t: -len(schema.KEYS[t]))))
