"""The SQL of the five transactions, written once: the driver prepares these statements in client-side mode and
the PL/pgSQL procedures of server-side mode embed the very same text (with their variables for $1, $2, ...), so
that the two modes differ by where the transaction's logic runs, by the round trips, and by the subtransaction
in which server-side mode calls each transaction (so that an error ends one transaction, not the whole slice).

Writes follow one lock order everywhere (warehouse, district, customer; stock rows by warehouse and item), so that
the transactions queue on each other's rows instead of deadlocking.
"""

from __future__ import annotations

import re

STATEMENTS: dict[str, str] = {
    # new order: every item first, so that an order with an unused item rolls back before it writes anything
    "no_items": "select u.ord, i_price, i_name, i_data from unnest($1::int[]) with ordinality u(id, ord) "
                "join capmark.tpcc_item on i_id = u.id order by u.ord",
    "no_warehouse": "select w_tax from capmark.tpcc_warehouse where w_id = $1",
    "no_district": "update capmark.tpcc_district set d_next_o_id = d_next_o_id + 1 where d_w_id = $1 and d_id = $2 "
                   "returning d_tax, d_next_o_id - 1",
    "no_customer": "select c_discount, c_last, c_credit from capmark.tpcc_customer "
                   "where c_w_id = $1 and c_d_id = $2 and c_id = $3",
    "no_order": "insert into capmark.tpcc_order (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, "
                "o_all_local) values ($1, $2, $3, $4, localtimestamp, null, $5, $6)",
    "no_new_order": "insert into capmark.tpcc_new_order (no_o_id, no_d_id, no_w_id) values ($1, $2, $3)",
    # the stock row of one line: quantity down by the order's (back up by 91 below 10), and its district's info
    "no_stock": "update capmark.tpcc_stock set s_quantity = case when s_quantity - $1 >= 10 then s_quantity - $1 "
                "else s_quantity - $1 + 91 end, s_ytd = s_ytd + $1, s_order_cnt = s_order_cnt + 1, "
                "s_remote_cnt = s_remote_cnt + $2 where s_w_id = $3 and s_i_id = $4 returning (array["
                + ", ".join(f"s_dist_{d:02d}" for d in range(1, 11)) + "])[$5], s_data",
    "no_lines": "insert into capmark.tpcc_order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, "
                "ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) "
                "select $1::int, $2::int, $3::int, n, i, s, null, q, a, t from unnest($4::int[], $5::int[], $6::int[], "
                "$7::numeric[], $8::text[]) with ordinality u(i, s, q, a, t, n)",
    # payment
    "pay_warehouse": "update capmark.tpcc_warehouse set w_ytd = w_ytd + $2 where w_id = $1 "
                     "returning w_name, w_street_1, w_street_2, w_city, w_state, w_zip",
    "pay_district": "update capmark.tpcc_district set d_ytd = d_ytd + $3 where d_w_id = $1 and d_id = $2 "
                    "returning d_name, d_street_1, d_street_2, d_city, d_state, d_zip",
    # a customer by last name: the one at position ceil(n / 2) in first-name order (clause 2.5.2.2)
    "customer_by_name": "select c_id from (select c_id, row_number() over (order by c_first) as pos, "
                        "count(*) over () as n from capmark.tpcc_customer "
                        "where c_w_id = $1 and c_d_id = $2 and c_last = $3) s where pos = (n + 1) / 2",
    "pay_customer": "update capmark.tpcc_customer set c_balance = c_balance - $4, c_ytd_payment = c_ytd_payment + $4, "
                    "c_payment_cnt = c_payment_cnt + 1, c_data = case when c_credit = 'BC' then "
                    "left(c_id || ' ' || c_d_id || ' ' || c_w_id || ' ' || $5 || ' ' || $6 || ' ' || $4 || ' | ' "
                    "|| c_data, 500) else c_data end where c_w_id = $1 and c_d_id = $2 and c_id = $3 "
                    "returning c_first, c_middle, c_last, c_street_1, c_city, c_phone, c_since, c_credit, "
                    "c_credit_lim, c_discount, c_balance",
    "pay_history": "insert into capmark.tpcc_history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, "
                   "h_data) values ($1, $2, $3, $4, $5, localtimestamp, $6, $7)",
    # order status
    "os_customer": "select c_balance, c_first, c_middle, c_last from capmark.tpcc_customer "
                   "where c_w_id = $1 and c_d_id = $2 and c_id = $3",
    "os_order": "select o_id, o_entry_d, o_carrier_id from capmark.tpcc_order "
                "where o_w_id = $1 and o_d_id = $2 and o_c_id = $3 order by o_id desc limit 1",
    "os_lines": "select ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d from capmark.tpcc_order_line "
                "where ol_w_id = $1 and ol_d_id = $2 and ol_o_id = $3",
    # delivery, one district: its oldest undelivered order (a delivery that finds it locked waits, then takes the
    # next: the lock is taken below the LIMIT), the carrier, the lines' delivery date, and the customer's balance;
    # returns the delivered order's id
    "delivery_district": "with oldest as (select no_o_id from capmark.tpcc_new_order where no_w_id = $1 "
                         "and no_d_id = $2 order by no_o_id limit 1 for update), "
                         "gone as (delete from capmark.tpcc_new_order n using oldest where n.no_w_id = $1 "
                         "and n.no_d_id = $2 and n.no_o_id = oldest.no_o_id returning n.no_o_id), "
                         "ord as (update capmark.tpcc_order o set o_carrier_id = $3 from gone where o.o_w_id = $1 "
                         "and o.o_d_id = $2 and o.o_id = gone.no_o_id returning o.o_id, o.o_c_id), "
                         "lines as (update capmark.tpcc_order_line l set ol_delivery_d = localtimestamp from ord "
                         "where l.ol_w_id = $1 and l.ol_d_id = $2 and l.ol_o_id = ord.o_id returning l.ol_amount), "
                         "paid as (update capmark.tpcc_customer c set c_balance = c_balance + "
                         "(select coalesce(sum(ol_amount), 0) from lines), c_delivery_cnt = c_delivery_cnt + 1 "
                         "from ord where c.c_w_id = $1 and c.c_d_id = $2 and c.c_id = ord.o_c_id returning c.c_id) "
                         "select ord.o_id from ord, paid",
    # stock level
    "sl_district": "select d_next_o_id from capmark.tpcc_district where d_w_id = $1 and d_id = $2",
    "sl_count": "select count(distinct s_i_id) from capmark.tpcc_order_line join capmark.tpcc_stock "
                "on s_w_id = $1 and s_i_id = ol_i_id where ol_w_id = $1 and ol_d_id = $2 and ol_o_id >= $3 - 20 "
                "and ol_o_id < $3 and s_quantity < $4",
}

_PARAM = re.compile(r"\$(\d+)")


def inline(name: str, *args: str) -> str:
    """The statement with its parameters replaced by PL/pgSQL expressions (for the server-side procedures)."""
    return _PARAM.sub(lambda m: f"({args[int(m.group(1)) - 1]})", STATEMENTS[name])
