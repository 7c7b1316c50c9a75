"""The PL/pgSQL units of work that the families compose into slice procedures.

Each unit ends with {rec}, where the slice procedure records its latency. Sizes come from
p_params (set by the driver from the data model) and are read once per slice in the declarations.
Updating units catch their own errors so that one failed transaction does not end the slice.
"""

from __future__ import annotations

from dataclasses import dataclass

from capmark.workloads.base import Unit

ITEMS = "n_items int := (p_params->>'items')::int;"
ACCOUNTS = "n_acc int := (p_params->>'accounts')::int;"
BOOKING_ACCOUNTS = "n_bacc int := (p_params->>'booking_accounts')::int;"
CALL_CUSTOMERS = "n_cust int := (p_params->>'call_customers')::int;"


def _pct(name: str, default: int) -> str:
    return f"{name} int := coalesce((p_params->>'{name}')::int, {default});"


# --- SRV: everything in the buffer cache ------------------------------------------------------------
QUERY1 = Unit(f"k int; r record; {ITEMS}", """
      k := 1 + floor(random() * n_items)::int;
      select id, grp, qty, price, name into r from capmark.item where id = k;
      {rec}""")

QUERY25 = Unit(f"k int; {BOOKING_ACCOUNTS}", """
      k := 1 + floor(random() * n_bacc)::int;
      perform seq, amount, booked_at, memo from capmark.booking where account_id = k;
      {rec}""")

REPORT = Unit(f"k int; {CALL_CUSTOMERS}", """
      k := 1 + floor(random() * n_cust)::int;
      perform seq, started_at, duration_s, cost, callee from capmark.callrec where customer_id = k;
      {rec}""")

SCAN = Unit("c bigint; s bigint;", """
      select count(*), sum(qty) into c, s from capmark.item;
      {rec}""")

# --- TP: one commit per transaction --------------------------------------------------------------------
LOOKUP = Unit(f"k int; bal numeric; {ACCOUNTS}", """
      k := 1 + floor(random() * n_acc)::int;
      select balance into bal from capmark.account where id = k;
      commit;
      {rec}""")

TP_REPORT = Unit(f"k int; {BOOKING_ACCOUNTS}", """
      k := 1 + floor(random() * n_bacc)::int;
      perform seq, amount, booked_at, memo from capmark.booking where account_id = k;
      commit;
      {rec}""")


@dataclass(frozen=True)
class TxnTable:
    """How the TP transactions read and update one table; shared by the server- and client-side units."""

    key: str  # column selected by the random key
    size_of: str  # DataSize attribute (and p_params key) giving the key range
    n_var: str  # PL/pgSQL variable holding that range
    declare: str  # its declaration
    cols: str  # columns read
    update: str  # SET clause of the update


TABLES = {
    "account": TxnTable("id", "accounts", "n_acc", ACCOUNTS, "balance", "balance = balance + 1, updated = now()"),
    "booking": TxnTable("account_id", "booking_accounts", "n_bacc", BOOKING_ACCOUNTS, "seq, amount",
                        "amount = amount + 1"),
    "callrec": TxnTable("customer_id", "call_customers", "n_cust", CALL_CUSTOMERS, "seq, cost",
                        "cost = cost + 0.0001"),
}


def read_update(table: str) -> Unit:
    """Read rows of one key; update_pct % of the time lock them, update them; one commit."""
    t = TABLES[table]
    return Unit(f"k int; {t.declare} {_pct('update_pct', 20)}", f"""
      k := 1 + floor(random() * {t.n_var})::int;
      if random() * 100 < update_pct then
        begin
          perform {t.cols} from capmark.{table} where {t.key} = k for update;
          update capmark.{table} set {t.update} where {t.key} = k;
        exception when others then
          o_errors[{{err}}] := o_errors[{{err}}] + 1;
        end;
        commit;
        {{rec_update}}
      else
        perform {t.cols} from capmark.{table} where {t.key} = k;
        commit;
        {{rec_read}}
      end if;""")


LIGHT = read_update("account")
MEDIUM = read_update("booking")
HEAVY = read_update("callrec")


def as_one_type(unit: Unit) -> Unit:
    """A read/update unit recorded as one transaction type (inside a mix)."""
    return Unit(unit.declare, unit.body.replace("{rec_update}", "{rec}").replace("{rec_read}", "{rec}"))


def as_two_types(unit: Unit) -> str:
    """A read/update unit recorded as types read (0) and update (1)."""
    return unit.body.replace("{rec_read}", "{rec0}").replace("{rec_update}", "{rec1}").replace("{err}", "2")


def load(rows: str) -> Unit:
    """DL buffer load: one INSERT of `rows` generated rows (1 unique, 2 non-unique indexes); one commit."""
    return Unit("", f"""
      insert into capmark.dl_row
        select nextval('capmark.dl_row_seq'), (random() * 1000000)::int, (random() * 1000)::int, repeat('d', 100)
        from generate_series(1, {rows});
      commit;
      {{rec}}""")


# --- WAL: rows of ~1 kB updated in place in the job's own slice of the ring -----------------------------
def wal_update(rows: int) -> Unit:
    return Unit("ring int := (p_params->>'ring_rows')::int; j int := (p_params->>'job')::int % 32; pos int := 0;",
                f"""
      pos := (pos + {rows}) % greatest(ring - {rows}, 1);
      update capmark.wal_ring set payload = repeat(md5(random()::text), 30)
        where job = j and id > pos and id <= pos + {rows};
      commit;
      {{rec}}""")


# --- Stress: one or two statements per request, one commit each -------------------------------------------
STRESS_QUERY = Unit(f"k int; r record; {ITEMS}", """
      k := 1 + floor(random() * n_items)::int;
      select id, val, payload into r from capmark.stress_item where id = k;
      commit;
      {rec}""")

STRESS_INSERT = Unit("", """
      insert into capmark.stress_item values (nextval('capmark.stress_seq'), (random() * 1000)::int, repeat('s', 60));
      commit;
      {rec}""")

STRESS_UPDATE = Unit(f"k int; {ITEMS}", """
      k := 1 + floor(random() * n_items)::int;
      update capmark.stress_item set val = val + 1 where id = k;
      commit;
      {rec}""")

STRESS_DELETE = Unit(f"k int; {ITEMS}", """
      k := 1 + floor(random() * n_items)::int;
      delete from capmark.stress_item where id = k;
      commit;
      {rec}""")
