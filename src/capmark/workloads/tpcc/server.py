"""Server-side mode: each transaction is a PL/pgSQL function (HammerDB's way on PostgreSQL), and the slice procedure
draws the terminal's inputs, calls one per unit by the standard mix and commits, or rolls back the new orders that
name an unused item. The functions embed the statements of client-side mode (statements.py)."""

from __future__ import annotations

from capmark.workloads.base import procedure_sql
from capmark.workloads.tpcc import spec
from capmark.workloads.tpcc.statements import inline

PROCEDURE = "slice_tpcc"

_RANDOM_SQL = f"""
create or replace function capmark.tpcc_rand(p_low int, p_high int) returns int
language sql volatile parallel restricted as $f$ select p_low + floor(random() * (p_high - p_low + 1))::int $f$;

create or replace function capmark.tpcc_nurand(p_a int, p_low int, p_high int, p_c int) returns int
language sql volatile parallel restricted as $f$
  select (((capmark.tpcc_rand(0, p_a) | capmark.tpcc_rand(p_low, p_high)) + p_c) % (p_high - p_low + 1)) + p_low
$f$;

create or replace function capmark.tpcc_last_name(p_n int) returns text
language sql immutable parallel safe as $f$
  select (array{list(spec.SYLLABLES)!r})[p_n / 100 + 1] || (array{list(spec.SYLLABLES)!r})[p_n / 10 % 10 + 1]
      || (array{list(spec.SYLLABLES)!r})[p_n % 10 + 1]
$f$;

create or replace function capmark.tpcc_other_warehouse(p_home int, p_count int) returns int
language sql volatile parallel restricted as $f$
  select case when p_count = 1 then p_home
              else (select case when o >= p_home then o + 1 else o end from capmark.tpcc_rand(1, p_count - 1) o) end
$f$;
"""

_NEW_ORDER_SQL = f"""
create or replace function capmark.tpcc_new_order(p_w int, p_d int, p_c int, p_items int[], p_supply int[],
                                                  p_qty int[]) returns numeric
language plpgsql as $f$
declare
  v_n int := array_length(p_items, 1);
  v_prices numeric[]; v_found int; v_w_tax numeric; v_d_tax numeric; v_o_id int; v_discount numeric; v_last text;
  v_credit text; v_dists text[] := array_fill(''::text, array[v_n]);
  v_amounts numeric[] := array_fill(0::numeric, array[v_n]); v_line int; v_dist text; v_data text;
begin
  select array_agg(q.i_price order by q.ord), count(*) into v_prices, v_found
    from ({inline("no_items", "p_items")}) q;
  if v_found < v_n then
    return null;  -- an unused item: the caller rolls the order back
  end if;
  {inline("no_warehouse", "p_w")} into v_w_tax;
  {inline("no_district", "p_w", "p_d")} into v_d_tax, v_o_id;
  {inline("no_customer", "p_w", "p_d", "p_c")} into v_discount, v_last, v_credit;
  {inline("no_order", "v_o_id", "p_d", "p_w", "p_c", "v_n",
          "case when p_supply = array_fill(p_w, array[v_n]) then 1 else 0 end")};
  {inline("no_new_order", "v_o_id", "p_d", "p_w")};
  for v_line in select u.ord from unnest(p_supply, p_items) with ordinality u(w, i, ord) order by u.w, u.i loop
    {inline("no_stock", "p_qty[v_line]", "(p_supply[v_line] <> p_w)::int", "p_supply[v_line]", "p_items[v_line]",
            "p_d")} into v_dist, v_data;
    v_dists[v_line] := v_dist;
    v_amounts[v_line] := p_qty[v_line] * v_prices[v_line];
  end loop;
  {inline("no_lines", "v_o_id", "p_d", "p_w", "p_items", "p_supply", "p_qty", "v_amounts", "v_dists")};
  return (select sum(a) from unnest(v_amounts) a) * (1 - v_discount) * (1 + v_w_tax + v_d_tax);
end $f$;
"""

_PAYMENT_SQL = f"""
create or replace function capmark.tpcc_payment(p_w int, p_d int, p_c_w int, p_c_d int, p_c int, p_last text,
                                                p_amount numeric) returns int
language plpgsql as $f$
declare
  v_wh record; v_di record; v_cu record; v_customer int := p_c;
begin
  {inline("pay_warehouse", "p_w", "p_amount")} into v_wh;
  {inline("pay_district", "p_w", "p_d", "p_amount")} into v_di;
  if v_customer = 0 then
    {inline("customer_by_name", "p_c_w", "p_c_d", "p_last")} into v_customer;
  end if;
  {inline("pay_customer", "p_c_w", "p_c_d", "v_customer", "p_amount", "p_d", "p_w")} into v_cu;
  {inline("pay_history", "v_customer", "p_c_d", "p_c_w", "p_d", "p_w", "p_amount",
          "v_wh.w_name || '    ' || v_di.d_name")};
  return v_customer;
end $f$;
"""

_ORDER_STATUS_SQL = f"""
create or replace function capmark.tpcc_order_status(p_w int, p_d int, p_c int, p_last text) returns int
language plpgsql as $f$
declare
  v_cu record; v_order record; v_customer int := p_c; v_lines int;
begin
  if v_customer = 0 then
    {inline("customer_by_name", "p_w", "p_d", "p_last")} into v_customer;
  end if;
  {inline("os_customer", "p_w", "p_d", "v_customer")} into v_cu;
  {inline("os_order", "p_w", "p_d", "v_customer")} into v_order;
  perform * from ({inline("os_lines", "p_w", "p_d", "v_order.o_id")}) l;
  get diagnostics v_lines = row_count;
  return v_lines;
end $f$;
"""

_DELIVERY_SQL = f"""
create or replace function capmark.tpcc_delivery(p_w int, p_carrier int) returns int
language plpgsql as $f$
declare
  v_district int; v_delivered int := 0; v_order int;
begin
  for v_district in 1..{spec.DISTRICTS_PER_WAREHOUSE} loop
    v_order := null;
    {inline("delivery_district", "p_w", "v_district", "p_carrier")} into v_order;
    v_delivered := v_delivered + (v_order is not null)::int;
  end loop;
  return v_delivered;
end $f$;
"""

_STOCK_LEVEL_SQL = f"""
create or replace function capmark.tpcc_stock_level(p_w int, p_d int, p_threshold int) returns int
language plpgsql as $f$
declare
  v_next int; v_low int;
begin
  {inline("sl_district", "p_w", "p_d")} into v_next;
  {inline("sl_count", "p_w", "p_d", "v_next", "p_threshold")} into v_low;
  return v_low;
end $f$;
"""

HELPERS_SQL = (_RANDOM_SQL, _NEW_ORDER_SQL, _PAYMENT_SQL, _ORDER_STATUS_SQL, _DELIVERY_SQL, _STOCK_LEVEL_SQL)


def _pct_edges() -> list[float]:
    edges, edge = [], 0.0
    for pct in spec.MIX_PCT.values():
        edge += pct
        edges.append(edge)
    return edges


def _ends(ok: str, type_index: int) -> str:
    """Commit or roll back a transaction whose call either failed (an error, counted, the unit kept) or not."""
    return f"""
      if failed then
        rollback;
        o_errors[{type_index + 1}] := o_errors[{type_index + 1}] + 1;
      elsif {ok} then
        commit;
      else
        rollback;
      end if;"""


def _call(expression: str, into: str) -> str:
    return f"""
      failed := false;
      begin
        {into} := {expression};
      exception when others then
        failed := true;
      end;"""


_DECLARE = ("tw int := (p_params->>'warehouses')::int; hw int := (p_params->>'job')::int % tw + 1; "
            f"hd int := (p_params->>'job')::int / tw % {spec.DISTRICTS_PER_WAREHOUSE} + 1; "
            "x float8; nl int; items int[]; supply int[]; qty int[]; total numeric; got int; failed boolean; "
            "d int; cw int; cd int; cid int; clast text;")

_C = f"capmark.tpcc_nurand({spec.A_CUSTOMER}, 1, {spec.CUSTOMERS_PER_DISTRICT}, {spec.C_CUSTOMER})"
_LAST = f"capmark.tpcc_last_name(capmark.tpcc_nurand({spec.A_LAST}, 0, 999, {spec.C_LAST_RUN}))"
_D = f"capmark.tpcc_rand(1, {spec.DISTRICTS_PER_WAREHOUSE})"


def _unit() -> str:
    e = _pct_edges()
    no, roll = spec.NEW_ORDER, spec.ROLLBACK
    return f"""
      x := random() * 100;
      if x < {e[0]} then
        nl := capmark.tpcc_rand({spec.MIN_ORDER_LINES}, {spec.MAX_ORDER_LINES});
        items := array(select capmark.tpcc_nurand({spec.A_ITEM}, 1, {spec.ITEMS}, {spec.C_ITEM})
                       from generate_series(1, nl));
        if capmark.tpcc_rand(1, 100) <= {spec.ROLLBACK_PCT} then
          items[nl] := {spec.UNUSED_ITEM};
        end if;
        supply := array(select case when capmark.tpcc_rand(1, 100) <= {spec.REMOTE_ORDER_LINE_PCT}
                                    then capmark.tpcc_other_warehouse(hw, tw) else hw end from generate_series(1, nl));
        qty := array(select capmark.tpcc_rand(1, 10) from generate_series(1, nl));
        total := null;
        {_call(f"capmark.tpcc_new_order(hw, {_D}, {_C}, items, supply, qty)", "total")}
        {_ends("total is not null", roll)}
        if total is not null then
          {{rec{no}}}
        else  -- rolled back: an unused item, or an error (counted as the rolled-back type's error)
          {{rec{roll}}}
        end if;
      elsif x < {e[1]} then
        d := {_D};
        if capmark.tpcc_rand(1, 100) <= {100 - spec.REMOTE_PAYMENT_PCT} then
          cw := hw; cd := d;
        else
          cw := capmark.tpcc_other_warehouse(hw, tw); cd := {_D};
        end if;
        if capmark.tpcc_rand(1, 100) <= {spec.BY_LAST_NAME_PCT} then
          cid := 0; clast := {_LAST};
        else
          cid := {_C}; clast := null;
        end if;
        {_call("capmark.tpcc_payment(hw, d, cw, cd, cid, clast, capmark.tpcc_rand(100, 500000) / 100.0)", "got")}
        {_ends("true", spec.PAYMENT)}
        {{rec{spec.PAYMENT}}}
      elsif x < {e[2]} then
        if capmark.tpcc_rand(1, 100) <= {spec.BY_LAST_NAME_PCT} then
          cid := 0; clast := {_LAST};
        else
          cid := {_C}; clast := null;
        end if;
        {_call(f"capmark.tpcc_order_status(hw, {_D}, cid, clast)", "got")}
        {_ends("true", spec.ORDER_STATUS)}
        {{rec{spec.ORDER_STATUS}}}
      elsif x < {e[3]} then
        {_call("capmark.tpcc_delivery(hw, capmark.tpcc_rand(1, 10))", "got")}
        {_ends("true", spec.DELIVERY)}
        {{rec{spec.DELIVERY}}}
      else
        {_call("capmark.tpcc_stock_level(hw, hd, capmark.tpcc_rand(10, 20))", "got")}
        {_ends("true", spec.STOCK_LEVEL)}
        {{rec{spec.STOCK_LEVEL}}}
      end if;"""


SLICE_SQL = procedure_sql(PROCEDURE, _DECLARE, _unit(), ntypes=len(spec.TYPES))
