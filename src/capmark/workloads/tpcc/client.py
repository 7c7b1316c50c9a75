"""Client-side mode: the driver runs each transaction as the prepared statements of statements.py, one round trip
each, inside BEGIN ... COMMIT, so that the client and the network show in the latency beside the server's work."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from capmark.workloads.base import DataSize
from capmark.workloads.tpcc import spec


def _ints(values: list[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _texts(values: list[str]) -> str:
    return "{" + ",".join(f'"{v}"' for v in values) + "}"


def _home(params: dict) -> tuple[int, int]:
    warehouses = int(params["warehouses"])
    return spec.home_warehouse(int(params["job"]), warehouses), warehouses


def _value(res: Any, row: int = 0, col: int = 0) -> str:
    return res.get_value(row, col).decode()


def new_order(session: Any, rng: random.Random, params: dict) -> int:
    w, warehouses = _home(params)
    order = spec.new_order_input(rng, w, warehouses)
    n = len(order.items)
    session.begin()
    items = session.run("no_items", _ints(order.items))
    if items.ntuples < n:  # an unused item: nothing was written
        session.rollback()
        return spec.ROLLBACK
    prices = [float(_value(items, r, 1)) for r in range(n)]
    w_tax = float(_value(session.run("no_warehouse", w)))
    district = session.run("no_district", w, order.district)
    d_tax, o_id = float(_value(district, 0, 0)), int(_value(district, 0, 1))
    discount = float(_value(session.run("no_customer", w, order.district, order.customer)))
    session.run("no_order", o_id, order.district, w, order.customer, n, order.all_local)
    session.run("no_new_order", o_id, order.district, w)
    dists = [""] * n
    amounts = [0.0] * n
    for line in sorted(range(n), key=lambda i: (order.supply_warehouses[i], order.items[i])):  # the lock order
        supply = order.supply_warehouses[line]
        stock = session.run("no_stock", order.quantities[line], int(supply != w), supply, order.items[line],
                            order.district)
        dists[line] = _value(stock)
        amounts[line] = order.quantities[line] * prices[line]
    session.run("no_lines", o_id, order.district, w, _ints(order.items), _ints(order.supply_warehouses),
                _ints(order.quantities), "{" + ",".join(f"{a:.2f}" for a in amounts) + "}", _texts(dists))
    session.commit()
    _total = sum(amounts) * (1 - discount) * (1 + w_tax + d_tax)  # what the terminal shows
    return spec.NEW_ORDER


def _customer(session: Any, rng: random.Random, w: int, d: int) -> int:
    """A customer by last name 60 % of the time, else by NURand id."""
    if rng.randint(1, 100) <= spec.BY_LAST_NAME_PCT:
        return int(_value(session.run("customer_by_name", w, d, spec.run_last_name(rng))))
    return spec.run_customer_id(rng)


def payment(session: Any, rng: random.Random, params: dict) -> int:
    w, warehouses = _home(params)
    d = rng.randint(1, spec.DISTRICTS_PER_WAREHOUSE)
    if rng.randint(1, 100) <= 100 - spec.REMOTE_PAYMENT_PCT:
        c_w, c_d = w, d
    else:
        c_w, c_d = spec.other_warehouse(rng, w, warehouses), rng.randint(1, spec.DISTRICTS_PER_WAREHOUSE)
    amount = f"{rng.randint(100, 500_000) / 100:.2f}"
    session.begin()
    w_name = _value(session.run("pay_warehouse", w, amount))
    d_name = _value(session.run("pay_district", w, d, amount))
    c = _customer(session, rng, c_w, c_d)
    session.run("pay_customer", c_w, c_d, c, amount, d, w)
    session.run("pay_history", c, c_d, c_w, d, w, amount, f"{w_name}    {d_name}")
    session.commit()
    return spec.PAYMENT


def order_status(session: Any, rng: random.Random, params: dict) -> int:
    w, _ = _home(params)
    d = rng.randint(1, spec.DISTRICTS_PER_WAREHOUSE)
    session.begin()
    c = _customer(session, rng, w, d)
    session.run("os_customer", w, d, c)
    last = session.run("os_order", w, d, c)
    session.run("os_lines", w, d, int(_value(last)))
    session.commit()
    return spec.ORDER_STATUS


def delivery(session: Any, rng: random.Random, params: dict) -> int:
    w, _ = _home(params)
    carrier = rng.randint(1, 10)
    session.begin()
    for d in range(1, spec.DISTRICTS_PER_WAREHOUSE + 1):
        session.run("delivery_district", w, d, carrier)
    session.commit()
    return spec.DELIVERY


def stock_level(session: Any, rng: random.Random, params: dict) -> int:
    w, warehouses = _home(params)
    d = spec.home_district(int(params["job"]), warehouses)
    session.begin()
    next_order = int(_value(session.run("sl_district", w, d)))
    session.run("sl_count", w, d, next_order, rng.randint(10, 20))
    session.commit()
    return spec.STOCK_LEVEL


TRANSACTIONS: tuple[Callable[[Any, random.Random, dict], int], ...] = (
    new_order, payment, order_status, delivery, stock_level)


def run_type(session: Any, rng: random.Random, params: dict, kind: int) -> int:
    """One transaction of the given type; returns the type it counts as (a rolled-back new order's own)."""
    try:
        return TRANSACTIONS[kind](session, rng, params)
    except BaseException as err:
        # the driver counts the failure against its type; a new order that failed was rolled back, as the
        # server-side mode counts it
        err.unit_kind = spec.ROLLBACK if kind == spec.NEW_ORDER else kind  # type: ignore[attr-defined]
        raise


def unit(session: Any, rng: random.Random, params: dict, size: DataSize) -> int:
    """One transaction picked by the standard mix."""
    return run_type(session, rng, params, spec.pick_type(rng))

