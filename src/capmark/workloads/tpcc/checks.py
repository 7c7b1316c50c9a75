"""The specification's consistency conditions 1-4 (clause 3.3.2), checked on the database after a test: each is a
query that lists the warehouses or districts that break it, so that a pass is an empty result, not a count."""

from __future__ import annotations

from typing import Any

CONDITIONS: dict[int, tuple[str, str]] = {
    1: ("a warehouse's year-to-date amount equals the sum of its districts'",
        "select w_id::text from capmark.tpcc_warehouse w "
        "join (select d_w_id, sum(d_ytd) as ytd from capmark.tpcc_district group by d_w_id) d on d.d_w_id = w.w_id "
        "where w.w_ytd <> d.ytd"),
    2: ("a district's next order id less one equals its highest order id and its highest new-order id",
        "select d_w_id || '/' || d_id from capmark.tpcc_district d "
        "left join (select o_w_id, o_d_id, max(o_id) as mo from capmark.tpcc_order group by o_w_id, o_d_id) o "
        "on o.o_w_id = d.d_w_id and o.o_d_id = d.d_id "
        "left join (select no_w_id, no_d_id, max(no_o_id) as mn from capmark.tpcc_new_order group by no_w_id, no_d_id) n "
        "on n.no_w_id = d.d_w_id and n.no_d_id = d.d_id "
        "where d.d_next_o_id - 1 is distinct from o.mo or (n.mn is not null and d.d_next_o_id - 1 <> n.mn)"),
    3: ("a district's new-order ids are consecutive: highest less lowest plus one equals their count",
        "select no_w_id || '/' || no_d_id from capmark.tpcc_new_order group by no_w_id, no_d_id "
        "having max(no_o_id) - min(no_o_id) + 1 <> count(*)"),
    4: ("a district's order-line count of its orders equals its order lines",
        "select o.w || '/' || o.d from (select o_w_id as w, o_d_id as d, sum(o_ol_cnt) as lines "
        "from capmark.tpcc_order group by o_w_id, o_d_id) o "
        "left join (select ol_w_id as w, ol_d_id as d, count(*) as lines from capmark.tpcc_order_line "
        "group by ol_w_id, ol_d_id) l using (w, d) where o.lines is distinct from l.lines"),
}
SHOWN = 5  # warehouses or districts named per broken condition


def violations(conn: Any) -> list[str]:
    """One sentence per broken condition, naming where it breaks; empty when all four hold."""
    out = []
    for number, (meaning, sql) in CONDITIONS.items():
        where = [row[0] for row in conn.execute(sql).fetchall()]
        if where:
            more = f" and {len(where) - SHOWN} more" if len(where) > SHOWN else ""
            out.append(f"consistency condition {number} ({meaning}) fails at {', '.join(where[:SHOWN])}{more}")
    return out
