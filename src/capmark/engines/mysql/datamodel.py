"""The shared data model on MySQL and MariaDB: the same tables, keys, row counts and values as on PostgreSQL, in
database capmark (the engine's equivalent of schema capmark: capmark creates nothing outside it), all InnoDB.

Sizes come as the plain dict DataSize.as_params() returns (this layer sits below the workloads). What differs from
PostgreSQL, and why:
- DDL commits on its own in MySQL, so setup cannot be one transaction. Instead the bookkeeping row in capmark.meta
  is written last (an interrupted setup leaves no row, so the next run rebuilds) and a named lock keeps two capmark
  runs from rebuilding at once.
- Sequences become AUTO_INCREMENT columns (dl_row.id, stress_item.id): MySQL has no sequences.
- InnoDB has no per-table fillfactor (wal_ring's 40, pgbench's 100); its pages keep 1/16 free on ordered inserts.
- InnoDB clusters a table on its primary key, or on the first unique NOT NULL index: dl_row (no primary key, as on
  PostgreSQL) is clustered on its unique id index, so an insert writes three B-trees where PostgreSQL writes a heap
  and three indexes.
- timestamptz becomes DATETIME(6) (microseconds, as on PostgreSQL; no 2038 limit as TIMESTAMP has); text columns
  become VARCHAR long enough for their values, which have the same bytes as on PostgreSQL.
Rows are generated on the server from a helper table of the numbers 1..N (built by doubling, read in key order so
every fill appends in primary-key order, dropped after the fill); it works alike on MariaDB 10.6+ and MySQL 8.0+.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from capmark.engines.mysql import queries as q
from capmark.engines.mysql.connection import DATABASE
from capmark.engines.mysql.grants import ALL, account, granted, lines
from capmark.errors import CapmarkError, LockBlocked

MODEL_VERSION = 1
RING_JOBS = 32  # jobs beyond this share WAL ring slots (job % RING_JOBS), as on PostgreSQL
SIZE_KEYS = ("items", "accounts", "booking_accounts", "call_customers", "ring_rows", "sto_rows", "pgbench_scale")
BOOKINGS_PER_ACCOUNT = 25
CALLS_PER_CUSTOMER = 125
# pgbench's rows per unit of its scale factor (pgbench.c: nbranches, ntellers, naccounts)
PGBENCH_BRANCHES = 1
PGBENCH_TELLERS = 10
PGBENCH_ACCOUNTS = 100_000
NUMBERS = "numbers"  # the helper table of 1..N rows are generated from; dropped once the model is filled
SETUP_LOCK = "capmark setup"  # GET_LOCK name: one capmark run (re)builds the model at a time, others wait
SETUP_LOCK_WAIT_S = 3600  # a rebuild at a large scale takes minutes; wait for it rather than fail
TABLE_OPTIONS = " engine=InnoDB default charset=utf8mb4"
# privileges capmark's own objects need in database capmark (setup, the workloads' writes, ANALYZE, routines)
NEEDED = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "INDEX")

Say = Callable[[str], None]


@dataclass(frozen=True)
class Table:
    """One table of the model: its DDL, the statement that fills it (None: starts empty), and what follows the fill
    (secondary indexes: built sorted after the fill, which is faster than maintaining them row by row)."""

    name: str
    ddl: str
    fill: str | None
    after: tuple[str, ...] = ()


def _q(name: str) -> str:
    return f"`{DATABASE}`.`{name}`"


def _from_numbers(count: int) -> str:
    return f"from {_q(NUMBERS)} where n <= {int(count)}"


def _pgbench_tables(scale: int) -> list[Table]:
    """pgbench's tables with the columns `pgbench -i` gives them (filler NULL but in accounts, where it is
    blank-padded; history without a key); primary keys declared up front, since InnoDB clusters on them and an
    ordered fill into the key is its fastest load (adding the key afterwards would copy the whole table)."""
    return [
        Table("pgbench_branches",
              f"create table {_q('pgbench_branches')} (bid int not null, bbalance int, filler char(88), "
              f"primary key (bid)){TABLE_OPTIONS}",
              f"insert into {_q('pgbench_branches')} (bid, bbalance) select n, 0 "
              + _from_numbers(PGBENCH_BRANCHES * scale)),
        Table("pgbench_tellers",
              f"create table {_q('pgbench_tellers')} (tid int not null, bid int, tbalance int, filler char(84), "
              f"primary key (tid)){TABLE_OPTIONS}",
              f"insert into {_q('pgbench_tellers')} (tid, bid, tbalance) "
              f"select n, (n - 1) div {PGBENCH_TELLERS} + 1, 0 " + _from_numbers(PGBENCH_TELLERS * scale)),
        Table("pgbench_accounts",
              f"create table {_q('pgbench_accounts')} (aid int not null, bid int, abalance int, filler char(84), "
              f"primary key (aid)){TABLE_OPTIONS}",
              f"insert into {_q('pgbench_accounts')} (aid, bid, abalance, filler) "
              f"select n, (n - 1) div {PGBENCH_ACCOUNTS} + 1, 0, '' " + _from_numbers(PGBENCH_ACCOUNTS * scale)),
        Table("pgbench_history",
              f"create table {_q('pgbench_history')} (tid int, bid int, aid int, delta int, mtime datetime(6), "
              f"filler char(22)){TABLE_OPTIONS}",
              None),
    ]


def tables(sizes: dict[str, int]) -> list[Table]:
    """The model's tables at these sizes, in the order setup builds them."""
    s = _sizes(sizes)
    bookings = s["booking_accounts"] * BOOKINGS_PER_ACCOUNT
    calls = s["call_customers"] * CALLS_PER_CUSTOMER
    ring = s["ring_rows"]
    return [
        Table("item",
              f"create table {_q('item')} (id int not null, grp int not null, qty int not null, "
              f"price decimal(10,2) not null, name varchar(32) not null, pad varchar(80) not null, "
              f"primary key (id)){TABLE_OPTIONS}",
              f"insert into {_q('item')} select n, n % 1000, (n * 7919) % 100, ((n * 31) % 10000) / 100.0, "
              f"concat('item ', n), repeat('x', 80) " + _from_numbers(s["items"]),
              (f"alter table {_q('item')} add index item_grp_idx (grp)",)),
        Table("account",
              f"create table {_q('account')} (id int not null, branch int not null, balance decimal(14,2) not null, "
              f"updated datetime(6) not null, pad varchar(80) not null, primary key (id)){TABLE_OPTIONS}",
              f"insert into {_q('account')} select n, n % 100, 0, now(6), repeat('y', 80) "
              + _from_numbers(s["accounts"])),
        Table("booking",  # row n is (account (n-1) div 25 + 1, seq (n-1) % 25 + 1): one ordered scan, key order
              f"create table {_q('booking')} (account_id int not null, seq int not null, "
              f"amount decimal(12,2) not null, booked_at datetime(6) not null, memo varchar(16) not null, "
              f"primary key (account_id, seq)){TABLE_OPTIONS}",
              f"insert into {_q('booking')} select a, s, ((a * 13 + s * 7) % 100000) / 100.0, "
              f"timestamp '2026-01-01 00:00:00' + interval s day, concat('booking ', s) from "
              f"(select (n - 1) div {BOOKINGS_PER_ACCOUNT} + 1 as a, (n - 1) % {BOOKINGS_PER_ACCOUNT} + 1 as s "
              f"{_from_numbers(bookings)}) g"),
        Table("callrec",
              f"create table {_q('callrec')} (customer_id int not null, seq int not null, "
              f"started_at datetime(6) not null, duration_s int not null, cost decimal(10,4) not null, "
              f"callee varchar(16) not null, primary key (customer_id, seq)){TABLE_OPTIONS}",
              f"insert into {_q('callrec')} select c, s, timestamp '2026-01-01 00:00:00' + interval s minute, "
              f"(c * s) % 3600, ((c + s) % 1000) / 1000.0, concat('+41 44 ', lpad(c * 125 + s, 7, '0')) from "
              f"(select (n - 1) div {CALLS_PER_CUSTOMER} + 1 as c, (n - 1) % {CALLS_PER_CUSTOMER} + 1 as s "
              f"{_from_numbers(calls)}) g"),
        Table("wal_ring",  # ~1 kB rows: 30 md5 hex digests of 32 characters, as on PostgreSQL
              f"create table {_q('wal_ring')} (job int not null, id int not null, payload varchar(1000) not null, "
              f"primary key (job, id)){TABLE_OPTIONS}",
              f"insert into {_q('wal_ring')} select j, i, repeat(md5(j * 100000 + i), 30) from "
              f"(select (n - 1) div {ring} as j, (n - 1) % {ring} + 1 as i {_from_numbers(RING_JOBS * ring)}) g"),
        Table("dl_row",  # empty; its indexes exist from the start, since the workloads load it row by row
              f"create table {_q('dl_row')} (id bigint not null auto_increment, k1 int not null, k2 int not null, "
              f"payload varchar(100) not null, unique key dl_row_id_idx (id), key dl_row_k1_idx (k1), "
              f"key dl_row_k2_idx (k2)){TABLE_OPTIONS}",
              None),
        Table("sto_block",  # ~900-byte rows (28 md5 digests): about 200 MB per scale unit, as on PostgreSQL
              f"create table {_q('sto_block')} (id int not null, grp int not null, payload varchar(900) not null, "
              f"primary key (id)){TABLE_OPTIONS}",
              f"insert into {_q('sto_block')} select n, n % 1000, repeat(md5(n), 28) " + _from_numbers(s["sto_rows"])),
        Table("stress_item",  # new rows continue after the loaded ones, as stress_seq did
              f"create table {_q('stress_item')} (id bigint not null auto_increment, val int not null, "
              f"payload varchar(60) not null, primary key (id)){TABLE_OPTIONS} auto_increment={s['items'] + 1}",
              f"insert into {_q('stress_item')} select n, n % 1000, repeat('s', 60) " + _from_numbers(s["items"])),
        *_pgbench_tables(s["pgbench_scale"]),
    ]


def _sizes(sizes: dict[str, int]) -> dict[str, int]:
    missing = [k for k in SIZE_KEYS if k not in sizes]
    if missing:
        raise ValueError(f"sizes lack {', '.join(missing)}")
    return {k: int(sizes[k]) for k in SIZE_KEYS}


def _numbers_needed(s: dict[str, int]) -> int:
    return max(s["items"], s["accounts"], s["booking_accounts"] * BOOKINGS_PER_ACCOUNT,
               s["call_customers"] * CALLS_PER_CUSTOMER, RING_JOBS * s["ring_rows"], s["sto_rows"],
               PGBENCH_ACCOUNTS * s["pgbench_scale"], 1)


# ---------------------------------------------------------------------------------------------------------------
# reading the server








def _names(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


def _meta(conn: Any) -> dict[str, int] | None:
    """The model's bookkeeping row, or None when there is none (no model, an interrupted setup, another layout)."""
    present = q.scalar(conn, "select count(*) from information_schema.tables where table_schema = %s "
                            "and table_name = 'meta'", (DATABASE,))
    if not present:
        return None
    try:
        rows = q.rows(conn, f"select model_version, {', '.join(SIZE_KEYS)} from {_q('meta')}")
    except Exception:  # the driver's error for a meta table of another layout (the driver is optional): rebuild
        return None
    if len(rows) != 1:
        return None
    return dict(zip(("model_version", *SIZE_KEYS), (int(v) for v in rows[0]), strict=True))


def _key_probes(s: dict[str, int]) -> dict[str, tuple[str, int]]:
    """table -> (column, its expected maximum): the largest key of a filled table no workload inserts into or deletes
    from, read from the end of its primary key (one index probe). dl_row, stress_item and pgbench_history, which the
    workloads grow or shrink, are only checked to exist."""
    return {"item": ("id", s["items"]), "account": ("id", s["accounts"]),
            "booking": ("account_id", s["booking_accounts"]), "callrec": ("customer_id", s["call_customers"]),
            "wal_ring": ("job", RING_JOBS - 1), "sto_block": ("id", s["sto_rows"]),
            "pgbench_branches": ("bid", PGBENCH_BRANCHES * s["pgbench_scale"]),
            "pgbench_tellers": ("tid", PGBENCH_TELLERS * s["pgbench_scale"]),
            "pgbench_accounts": ("aid", PGBENCH_ACCOUNTS * s["pgbench_scale"])}


def damage(conn: Any, sizes: dict[str, int]) -> dict[str, str]:
    """What the bookkeeping row promises but database capmark lacks: table -> what is wrong with it, in words (empty
    when everything is in place)."""
    s = _sizes(sizes)
    present = {str(row[0]) for row in q.rows(
        conn, "select table_name from information_schema.tables where table_schema = %s "
              "and table_type = 'BASE TABLE'", (DATABASE,))}
    probes = _key_probes(s)
    out: dict[str, str] = {}
    for t in tables(s):
        if t.name not in present:
            out[t.name] = f"{DATABASE}.{t.name} is missing"
        elif t.name in probes:
            column, expected = probes[t.name]
            found = q.scalar(conn, f"select max({column}) from {_q(t.name)}")
            if found is None:
                out[t.name] = f"{DATABASE}.{t.name} is empty"
            elif int(found) != expected:
                out[t.name] = f"{DATABASE}.{t.name} holds {column} up to {int(found):,} instead of {expected:,}"
    return out


def plan(conn: Any, sizes: dict[str, int]) -> list[str]:
    """What setup would create, as sentences; empty when the model is in place at these sizes and MODEL_VERSION."""
    s = _sizes(sizes)
    if _meta(conn) == {"model_version": MODEL_VERSION, **s}:
        return []
    out = [f"database {DATABASE} (if missing) and table {DATABASE}.meta (model bookkeeping)",
           f"helper table {DATABASE}.{NUMBERS} of {_numbers_needed(s):,} numbers to generate rows from "
           "(dropped after the fill)"]
    for t in tables(s):
        out.append(f"table {DATABASE}.{t.name}" + (" (filled)" if t.fill else " (empty)")
                   + (f" with {len(t.after)} index(es) added after the fill" if t.after else ""))
    return out


# ---------------------------------------------------------------------------------------------------------------
# privileges


def missing_privileges(grants: list[str], database_exists: bool) -> str | None:
    """One sentence when the grants do not let capmark build its model in `capmark`, else None."""
    have = granted(grants, DATABASE)
    lacking = [p for p in NEEDED if ALL not in have and p not in have]
    if lacking:
        return (f"may not {'create database ' + DATABASE + ' and ' if not database_exists else ''}create or change "
                f"tables in database {DATABASE} (it lacks {', '.join(lacking)})")
    return None


def check_privileges(conn: Any) -> None:
    """capmark needs to create and change tables in database capmark (and to create it when it is missing); say so
    in one sentence before touching anything."""
    user = q.scalar(conn, "select current_user()")
    grants = lines(conn)
    exists = bool(q.scalar(conn, "select count(*) from information_schema.schemata where schema_name = %s",
                          (DATABASE,)))
    problem = missing_privileges(grants, exists)
    # MySQL's SHOW GRANTS leaves out what an active role grants: then let the server judge (setup's statements fail
    # with access denied, which setup turns into a sentence of its own)
    role = q.scalar(conn, "select coalesce(current_role(), 'NONE')")
    if problem and str(role).upper() == "NONE":
        raise CapmarkError(f"The user {user} {problem}; run GRANT ALL ON {DATABASE}.* TO {account(user)}, or "
                           "connect as a user that may.")


# ---------------------------------------------------------------------------------------------------------------
# others' objects


def others_depending(conn: Any, names: list[str]) -> list[str]:
    """Objects capmark did not make that rebuilding these tables of database capmark would drop or break: views on
    them (in any database), triggers on them, foreign keys of other tables that reference them, and views or other
    non-table objects that carry one of their names. Routines are not among them: DROP TABLE leaves routines alone
    and they find the rebuilt tables by name."""
    ours = set(names)
    found: list[str] = []
    for schema, name, table_type in q.rows(
            conn, "select table_schema, table_name, table_type from information_schema.tables "
                  "where table_schema = %s and table_type <> 'BASE TABLE'", (DATABASE,)):
        if name in ours:
            found.append(f"{'view' if 'VIEW' in table_type else table_type.lower()} {schema}.{name}")
    for schema, name, definition in q.rows(
            conn, "select table_schema, table_name, view_definition from information_schema.views "
                  "where view_definition like %s", (f"%`{DATABASE}`.%",)):
        # the server stores a view's query with every table written out as `database`.`table`
        if any(f"`{DATABASE}`.`{t}`" in (definition or "") for t in ours) and f"view {schema}.{name}" not in found:
            found.append(f"view {schema}.{name}")
    for schema, name, table in q.rows(
            conn, "select trigger_schema, trigger_name, event_object_table from information_schema.triggers "
                  "where event_object_schema = %s", (DATABASE,)):
        if table in ours:
            found.append(f"trigger {schema}.{name} on {DATABASE}.{table}")
    for schema, table, constraint, target in q.rows(
            conn, "select constraint_schema, table_name, constraint_name, referenced_table_name "
                  "from information_schema.referential_constraints where unique_constraint_schema = %s",
            (DATABASE,)):
        if target in ours and not (schema == DATABASE and table in ours):
            found.append(f"foreign key {constraint} of {schema}.{table}")
    return sorted(found)


def refuse_if_others_depend(conn: Any, names: list[str]) -> None:
    found = others_depending(conn, names)
    if found:
        one = len(found) == 1
        raise CapmarkError(f"capmark must rebuild its tables in database {DATABASE}, but {_names(found)} "
                           f"depend{'s' if one else ''} on them; drop or move {'it' if one else 'them'} (capmark "
                           "drops nothing of yours), then run again.")


# ---------------------------------------------------------------------------------------------------------------
# setup


# The longest capmark's control session waits for a table's metadata lock or a row lock another session holds
# (setup, warming the cache): the run then names the sessions with an open transaction instead of waiting on.
LOCK_WAIT_LIMIT_S = 10
ER_LOCK_WAIT_TIMEOUT = 1205  # both InnoDB's row lock wait and a metadata lock wait that ran out
_OPEN_TRANSACTIONS = ("select t.trx_mysql_thread_id, coalesce(p.user, ''), coalesce(p.command, ''), t.trx_started, "
                      "coalesce(left(p.info, 80), '') from information_schema.innodb_trx t left join "
                      "information_schema.processlist p on p.id = t.trx_mysql_thread_id "
                      "where t.trx_mysql_thread_id <> connection_id() order by t.trx_started")


@contextmanager
def _bounded(conn: Any, what: str) -> Iterator[None]:
    """Lock waits of this session end after LOCK_WAIT_LIMIT_S; one that ran out names the open transactions."""
    q.run(conn, f"set session lock_wait_timeout = {LOCK_WAIT_LIMIT_S}, "
                f"innodb_lock_wait_timeout = {LOCK_WAIT_LIMIT_S}")
    try:
        yield
    except Exception as err:
        if not (getattr(err, "args", ()) and err.args[0] == ER_LOCK_WAIT_TIMEOUT):
            raise
        try:
            open_trx = q.rows(conn, _OPEN_TRANSACTIONS)
        except Exception:  # noqa: BLE001 - no PROCESS privilege: say what capmark waited for all the same
            open_trx = []
        held = "; ".join(f"connection {tid} (user {user or '?'}, {command or 'idle'}, its transaction started at "
                         f"{started}{f': {info!r}' if info else ''})" for tid, user, command, started, info in open_trx)
        raise LockBlocked(f"Waited {LOCK_WAIT_LIMIT_S} s for a lock {what} and gave up"
                          + (f"; open transactions: {held}; end the one holding it (KILL <connection>) or wait "
                             "until it commits, then run again." if held else "; run again when the session "
                             "holding it has committed.")) from None


def setup(conn: Any, sizes: dict[str, int], say: Say = print) -> float:
    """Create or rebuild the data model, or only the tables of a model in place that were dropped or emptied since;
    returns the seconds it took (0 when everything was in place).

    The connection must be in autocommit mode (DDL commits anyway). One capmark run builds at a time: the others
    wait on the named lock, then find the model in place."""
    with _bounded(conn, f"on a table of database {DATABASE} to set up its data model"):
        return _setup(conn, sizes, say)


def _setup(conn: Any, sizes: dict[str, int], say: Say) -> float:
    s = _sizes(sizes)
    check_privileges(conn)
    if not plan(conn, s) and not damage(conn, s):
        return 0.0
    if not q.scalar(conn, "select get_lock(%s, 0)", (SETUP_LOCK,)):
        say("Another capmark run is building the data model; waiting for it.")
        if not q.scalar(conn, "select get_lock(%s, %s)", (SETUP_LOCK, SETUP_LOCK_WAIT_S)):
            raise CapmarkError(f"Another capmark run held the data model's setup lock for {SETUP_LOCK_WAIT_S} s; "
                               "wait for it to finish, then run again.")
    try:
        model = _to_build(conn, s, say)  # the run we waited for may have built it
        if not model:
            return 0.0
        started = time.monotonic()
        _build(conn, s, model)
        return time.monotonic() - started
    finally:
        q.run(conn, "do release_lock(%s)", (SETUP_LOCK,))


def _to_build(conn: Any, s: dict[str, int], say: Say) -> list[Table]:
    """The tables setup must (re)build, said first: all of them for a missing model or one of other sizes, else
    those dropped or emptied since it was built (the rest is kept as it is); none when all is in place."""
    todo = plan(conn, s)
    model = tables(s)
    if todo:
        refuse_if_others_depend(conn, ["meta", NUMBERS, *(t.name for t in model)])
        say(f"capmark will create in database {DATABASE}: " + "; ".join(todo) + ".")
        return model
    damaged = damage(conn, s)
    model = [t for t in model if t.name in damaged]
    if model:
        refuse_if_others_depend(conn, ["meta", NUMBERS, *(t.name for t in model)])
        say(f"capmark's data model is incomplete ({'; '.join(damaged.values())}): capmark rebuilds "
            f"{', '.join(f'{DATABASE}.{t.name}' for t in model)}.")
    return model


def _build(conn: Any, s: dict[str, int], model: list[Table]) -> None:
    """(Re)build these tables with the bookkeeping row removed first and written last: DDL commits statement by
    statement, so a build cut short (Ctrl-C, a lost connection) leaves the model marked unbuilt."""
    try:
        if not q.scalar(conn, "select count(*) from information_schema.schemata where schema_name = %s", (DATABASE,)):
            q.run(conn, f"create database if not exists `{DATABASE}` character set utf8mb4")
        q.run(conn, f"drop table if exists {_q('meta')}")  # first: a setup cut short leaves no bookkeeping row
        _fill_numbers(conn, _numbers_needed(s))
        for t in model:
            q.run(conn, f"drop table if exists {_q(t.name)}")
            q.run(conn, t.ddl)
            if t.fill:
                q.run(conn, t.fill)
            for statement in t.after:
                q.run(conn, statement)
        q.run(conn, f"drop table {_q(NUMBERS)}")
        q.run(conn, "analyze table " + ", ".join(_q(t.name) for t in model))
        q.run(conn, f"create table {_q('meta')} (model_version int not null, "
                   + ", ".join(f"{k} int not null" for k in SIZE_KEYS) + f"){TABLE_OPTIONS}")
        q.run(conn, f"insert into {_q('meta')} values ({', '.join(['%s'] * (1 + len(SIZE_KEYS)))})",
             (MODEL_VERSION, *(s[k] for k in SIZE_KEYS)))
    except CapmarkError:
        raise
    except Exception as err:
        if _is_access_denied(err):
            user = q.scalar(conn, "select current_user()")
            raise CapmarkError(f"The user {user} may not rebuild capmark's data model ({_first_line(err)}); connect "
                               f"as a user with all privileges on database {DATABASE}.") from None
        raise


def _fill_numbers(conn: Any, count: int) -> None:
    """The numbers 1..count in key order, by doubling: log2(count) INSERT ... SELECT statements, each appending in
    key order (the server reads the source into a temporary table first, as it must for a table read and written in
    one statement)."""
    q.run(conn, f"drop table if exists {_q(NUMBERS)}")
    q.run(conn, f"create table {_q(NUMBERS)} (n int not null, primary key (n)){TABLE_OPTIONS}")
    q.run(conn, f"insert into {_q(NUMBERS)} values (1)")
    have = 1
    while have < count:
        q.run(conn, f"insert into {_q(NUMBERS)} select n + {have} from {_q(NUMBERS)} where n + {have} <= {count}")
        have = min(have * 2, count)


# MySQL's and MariaDB's "access denied" errors: 1044 (database), 1142 (table), 1227 (a privilege such as SUPER)
_ACCESS_DENIED = (1044, 1142, 1227)


def _is_access_denied(err: Exception) -> bool:
    args: tuple[Any, ...] = getattr(err, "args", ())
    return bool(args) and args[0] in _ACCESS_DENIED


def _first_line(err: Exception) -> str:
    args: tuple[Any, ...] = getattr(err, "args", ())
    text = str(args[1]) if len(args) > 1 else str(err)
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


# ---------------------------------------------------------------------------------------------------------------
# warming


def warm_cache(conn: Any, names: list[str], say: Say = print) -> None:
    """Read tables and every index of theirs into the InnoDB buffer pool so SRV workloads start from a warm cache:
    the clustered index by a scan that may use no secondary index, then each secondary index by a count forced
    through it."""
    with _bounded(conn, f"on {', '.join(f'{DATABASE}.{t}' for t in names)} to warm the buffer pool"):
        _warm(conn, names, say)


def _warm(conn: Any, names: list[str], say: Say) -> None:
    for table in names:
        indexes = [row[0] for row in q.rows(
            conn, "select distinct index_name from information_schema.statistics where table_schema = %s "
                  "and table_name = %s and index_name <> 'PRIMARY'", (DATABASE, table))]
        q.rows(conn, f"select count(*) from {_q(table)} use index ()")
        for index in indexes:
            q.rows(conn, f"select count(*) from {_q(table)} force index (`{index}`)")
    pool = q.scalar(conn, "select @@innodb_buffer_pool_size")
    data = q.scalar(conn, "select coalesce(sum(data_length + index_length), 0) from information_schema.tables "
                         f"where table_schema = %s and table_name in ({', '.join(['%s'] * len(names))})",
                   (DATABASE, *names)) if names else 0
    if int(data) > int(pool):
        say(f"The tables warmed ({int(data) / 2**20:,.0f} MB) are larger than the InnoDB buffer pool "
            f"({int(pool) / 2**20:,.0f} MB); part of them will be read from disk during the test.")
