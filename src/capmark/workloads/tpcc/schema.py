"""The nine TPC-C tables in schema capmark (prefixed tpcc_, beside the shared model's own item table), their keys
and indexes, and the bookkeeping row that says which warehouse count is loaded."""

from __future__ import annotations

# Bumped when the tables or their contents change: a model of another version is reloaded
TPCC_MODEL_VERSION = 1

# table -> columns, in the spec's order (clause 1.3); the loader's COPY rows follow the same order
TABLES: dict[str, str] = {
    "tpcc_item": "i_id int not null, i_im_id int not null, i_name varchar(24) not null, i_price numeric(5,2) not null, "
                 "i_data varchar(50) not null",
    "tpcc_warehouse": "w_id int not null, w_name varchar(10) not null, w_street_1 varchar(20) not null, "
                      "w_street_2 varchar(20) not null, w_city varchar(20) not null, w_state char(2) not null, "
                      "w_zip char(9) not null, w_tax numeric(4,4) not null, w_ytd numeric(12,2) not null",
    "tpcc_district": "d_id int not null, d_w_id int not null, d_name varchar(10) not null, "
                     "d_street_1 varchar(20) not null, d_street_2 varchar(20) not null, d_city varchar(20) not null, "
                     "d_state char(2) not null, d_zip char(9) not null, d_tax numeric(4,4) not null, "
                     "d_ytd numeric(12,2) not null, d_next_o_id int not null",
    "tpcc_customer": "c_id int not null, c_d_id int not null, c_w_id int not null, c_first varchar(16) not null, "
                     "c_middle char(2) not null, c_last varchar(16) not null, c_street_1 varchar(20) not null, "
                     "c_street_2 varchar(20) not null, c_city varchar(20) not null, c_state char(2) not null, "
                     "c_zip char(9) not null, c_phone char(16) not null, c_since timestamp not null, "
                     "c_credit char(2) not null, c_credit_lim numeric(12,2) not null, c_discount numeric(4,4) not null, "
                     "c_balance numeric(12,2) not null, c_ytd_payment numeric(12,2) not null, "
                     "c_payment_cnt int not null, c_delivery_cnt int not null, c_data varchar(500) not null",
    "tpcc_history": "h_c_id int not null, h_c_d_id int not null, h_c_w_id int not null, h_d_id int not null, "
                    "h_w_id int not null, h_date timestamp not null, h_amount numeric(6,2) not null, "
                    "h_data varchar(24) not null",
    "tpcc_order": "o_id int not null, o_d_id int not null, o_w_id int not null, o_c_id int not null, "
                  "o_entry_d timestamp not null, o_carrier_id int, o_ol_cnt int not null, o_all_local int not null",
    "tpcc_new_order": "no_o_id int not null, no_d_id int not null, no_w_id int not null",
    "tpcc_order_line": "ol_o_id int not null, ol_d_id int not null, ol_w_id int not null, ol_number int not null, "
                       "ol_i_id int not null, ol_supply_w_id int not null, ol_delivery_d timestamp, "
                       "ol_quantity int not null, ol_amount numeric(6,2) not null, ol_dist_info char(24) not null",
    "tpcc_stock": "s_i_id int not null, s_w_id int not null, s_quantity int not null, "
                  + ", ".join(f"s_dist_{d:02d} char(24) not null" for d in range(1, 11))
                  + ", s_ytd int not null, s_order_cnt int not null, s_remote_cnt int not null, "
                    "s_data varchar(50) not null",
}

# Made after the load, in this order per table (an index is cheaper to build once than to keep up row by row)
KEYS: dict[str, tuple[str, ...]] = {
    "tpcc_item": ("alter table capmark.tpcc_item add primary key (i_id)",),
    "tpcc_warehouse": ("alter table capmark.tpcc_warehouse add primary key (w_id)",),
    "tpcc_district": ("alter table capmark.tpcc_district add primary key (d_w_id, d_id)",),
    "tpcc_customer": ("alter table capmark.tpcc_customer add primary key (c_w_id, c_d_id, c_id)",
                      # payment and order status by last name (clause 2.5.2.2)
                      "create index tpcc_customer_name_idx on capmark.tpcc_customer (c_w_id, c_d_id, c_last, c_first)"),
    "tpcc_history": (),
    "tpcc_order": ("alter table capmark.tpcc_order add primary key (o_w_id, o_d_id, o_id)",
                   # order status: a customer's last order
                   "create index tpcc_order_customer_idx on capmark.tpcc_order (o_w_id, o_d_id, o_c_id, o_id)"),
    "tpcc_new_order": ("alter table capmark.tpcc_new_order add primary key (no_w_id, no_d_id, no_o_id)",),
    "tpcc_order_line": ("alter table capmark.tpcc_order_line add primary key (ol_w_id, ol_d_id, ol_o_id, ol_number)",),
    "tpcc_stock": ("alter table capmark.tpcc_stock add primary key (s_w_id, s_i_id)",),
}
# Tables that take updates in place leave room for them on their pages, as HammerDB's PostgreSQL schema does
FILLFACTOR = {"tpcc_warehouse": 10, "tpcc_district": 10, "tpcc_customer": 80, "tpcc_stock": 80, "tpcc_order": 90}

META_DDL = "create table capmark.tpcc_meta (model_version int not null, warehouses int not null)"


def create_sql(table: str) -> str:
    ff = FILLFACTOR.get(table)
    return f"create table capmark.{table} ({TABLES[table]})" + (f" with (fillfactor = {ff})" if ff else "")
