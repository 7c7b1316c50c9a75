"""MySQL and MariaDB text of the client-side statements the catalogue names, for server-side prepared statements
(`PREPARE s FROM '...'`, then `EXECUTE s USING ...`): `?` placeholders, each used once, taking the catalogue's
arguments in the catalogue's order unless a statement's note below says otherwise.

Each statement reads or writes the same rows and bytes as its PostgreSQL text; the notes say how a translation
gets there where it is not word for word.
"""

from __future__ import annotations

from capmark.engines.mysql.connection import DATABASE

# MySQL's default cap on a recursive CTE's iterations (cte_max_recursion_depth; MariaDB's max_recursive_iterations
# may be set as low, as on Debian's packages): dl_insert makes at most this many rows per statement unless the
# session raises the limit. The catalogue's largest is 100.
DL_INSERT_MAX_ROWS = 1000

D = f"`{DATABASE}`"

SRV_QUERY1 = f"select id, grp, qty, price, name from {D}.item where id = ?"
SRV_QUERY25 = f"select seq, amount, booked_at, memo from {D}.booking where account_id = ?"
SRV_REPORT = f"select seq, started_at, duration_s, cost, callee from {D}.callrec where customer_id = ?"

SRV_SCAN = f"select count(*), sum(qty) from {D}.item use index ()"
"""srv-scan, which the catalogue runs only on the server: one full scan of the cached item table. `use index ()`
keeps InnoDB from answering the count from the smaller grp index, so the scan reads the whole clustered index (the
rows), as PostgreSQL's sequential scan reads the heap; sum(qty) makes it look at every row's values too."""

WAL_UPDATE = (f"update {D}.wal_ring set payload = repeat(md5(rand()), 30) "
              "where job = ? and id > ? order by id limit ?")
"""wal_update takes (job, pos, rows): PostgreSQL's text writes the row count into the statement (one text per WAL
workload) and uses pos twice (id > pos and id <= pos + rows), which `?` cannot. `id > pos order by id limit rows`
picks the same rows, ids pos+1..pos+rows of the slot (the ring's ids are 1..ring_rows without gaps and pos + rows
stays below ring_rows), walking the primary key from pos. Each payload becomes 30 copies of an md5 hex digest,
960 bytes, as on PostgreSQL. wal_update_for() gives the two-argument form the catalogue calls with."""

DL_INSERT = (f"insert into {D}.dl_row (k1, k2, payload) "
             "with recursive g (n) as (select 1 union all select n + 1 from g where n < ?) "
             "select round(rand() * 1000000), round(rand() * 1000), repeat('d', 100) from g")
"""dl_insert inserts its argument's number of generated rows in one statement; AUTO_INCREMENT numbers them as
nextval did (PostgreSQL's int cast rounds, hence round()). A recursive CTE makes the rows: no table is read, so
nothing is locked but the rows inserted. At most DL_INSERT_MAX_ROWS rows unless the session raises the recursion
limit. Note: with innodb_autoinc_lock_mode 1 (MariaDB's default, MySQL 5.7's) an INSERT ... SELECT holds the table's
AUTO-INC lock to its end, so concurrent loaders take turns where PostgreSQL's cached sequence lets them run side by
side; mode 2 (MySQL 8.0's default) does not."""

ACCOUNT_READ = f"select balance from {D}.account where id = ?"
ACCOUNT_LOCK = f"select balance from {D}.account where id = ? for update"
ACCOUNT_UPDATE = f"update {D}.account set balance = balance + 1, updated = now(6) where id = ?"
"""now(6): microseconds, as PostgreSQL's now() has (now() alone is whole seconds)."""

BOOKING_READ = f"select seq, amount from {D}.booking where account_id = ?"
BOOKING_LOCK = f"select seq, amount from {D}.booking where account_id = ? for update"
BOOKING_UPDATE = f"update {D}.booking set amount = amount + 1 where account_id = ?"
CALLREC_READ = f"select seq, cost from {D}.callrec where customer_id = ?"
CALLREC_LOCK = f"select seq, cost from {D}.callrec where customer_id = ? for update"
CALLREC_UPDATE = f"update {D}.callrec set cost = cost + 0.0001 where customer_id = ?"

STRESS_QUERY = f"select id, val, payload from {D}.stress_item where id = ?"
STRESS_INSERT = f"insert into {D}.stress_item (val, payload) values (?, repeat('s', 60))"
"""insert: AUTO_INCREMENT gives the id stress_seq gave; it starts after the loaded rows."""
STRESS_UPDATE = f"update {D}.stress_item set val = val + 1 where id = ?"
STRESS_DELETE = f"delete from {D}.stress_item where id = ?"

STATEMENTS: dict[str, str] = {
    "srv-query1": SRV_QUERY1,
    "srv-query25": SRV_QUERY25,
    "srv-report": SRV_REPORT,
    "srv-scan": SRV_SCAN,
    "wal_update": WAL_UPDATE,
    "dl_insert": DL_INSERT,
    "account_read": ACCOUNT_READ,
    "account_lock": ACCOUNT_LOCK,
    "account_update": ACCOUNT_UPDATE,
    "booking_read": BOOKING_READ,
    "booking_lock": BOOKING_LOCK,
    "booking_update": BOOKING_UPDATE,
    "callrec_read": CALLREC_READ,
    "callrec_lock": CALLREC_LOCK,
    "callrec_update": CALLREC_UPDATE,
    "query": STRESS_QUERY,
    "insert": STRESS_INSERT,
    "update": STRESS_UPDATE,
    "delete": STRESS_DELETE,
}

# Left out: the dl-direct workload's per-job unlogged tables. It runs only on the server (no client statement), and
# InnoDB has no unlogged tables: every insert is redo-logged, so "a load that bypasses the log" cannot mean the
# same on MySQL.


def wal_update_for(rows: int) -> str:
    """wal_update with the row count written in, taking (job, pos) as the catalogue's WAL workloads pass them."""
    return WAL_UPDATE.removesuffix("limit ?") + f"limit {int(rows)}"
