"""What the TPC-C specification (revision 5.11) fixes, shared by the loader and both execution modes: the
cardinalities per warehouse, the transaction mix, keying and think times, and its random functions.

capmark's tpcc is TPC-C-like: it follows the specification's data, transactions and mix, but it is not an audited
TPC result and its figures must not be presented as one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Cardinalities (clause 1.2 and 4.3.3.1): the item table is fixed, the rest grows with the warehouses
ITEMS = 100_000
DISTRICTS_PER_WAREHOUSE = 10
CUSTOMERS_PER_DISTRICT = 3_000
ORDERS_PER_DISTRICT = 3_000
# orders 2,101-3,000 of each district are still undelivered: they have a new-order row and no carrier yet
FIRST_UNDELIVERED_ORDER = 2_101
NEW_ORDERS_PER_DISTRICT = ORDERS_PER_DISTRICT - FIRST_UNDELIVERED_ORDER + 1
STOCK_PER_WAREHOUSE = ITEMS
MIN_ORDER_LINES, MAX_ORDER_LINES = 5, 15
# Rows per warehouse as loaded; order lines vary with each order's 5-15 lines (10 on average)
ROWS_PER_WAREHOUSE = {
    "tpcc_warehouse": 1,
    "tpcc_district": DISTRICTS_PER_WAREHOUSE,
    "tpcc_customer": DISTRICTS_PER_WAREHOUSE * CUSTOMERS_PER_DISTRICT,
    "tpcc_history": DISTRICTS_PER_WAREHOUSE * CUSTOMERS_PER_DISTRICT,
    "tpcc_order": DISTRICTS_PER_WAREHOUSE * ORDERS_PER_DISTRICT,
    "tpcc_new_order": DISTRICTS_PER_WAREHOUSE * NEW_ORDERS_PER_DISTRICT,
    "tpcc_stock": STOCK_PER_WAREHOUSE,
}
ORDER_LINES_PER_WAREHOUSE_MEAN = DISTRICTS_PER_WAREHOUSE * ORDERS_PER_DISTRICT * (MIN_ORDER_LINES + MAX_ORDER_LINES) // 2
# what one warehouse takes on PostgreSQL with its indexes, measured after a load (the item table not counted)
APPROX_MB_PER_WAREHOUSE = 110

# The transaction types in capmark's order (the mix's branches and the result tables); a new order whose last item
# is unused rolls back (clause 2.4.1.4) and is counted as its own type, so that NOPM counts committed new orders only
TYPES = ("new_order", "payment", "order_status", "delivery", "stock_level", "new_order_rollback")
NEW_ORDER, PAYMENT, ORDER_STATUS, DELIVERY, STOCK_LEVEL, ROLLBACK = range(len(TYPES))
# The minimum mix of clause 5.2.3 with new order taking the rest, as HammerDB, BenchBase and go-tpc run it
MIX_PCT = {"new_order": 45, "payment": 43, "order_status": 4, "delivery": 4, "stock_level": 4}
ROLLBACK_PCT = 1  # of new orders (clause 2.4.1.4)
REMOTE_ORDER_LINE_PCT = 1  # order lines supplied by another warehouse (clause 2.4.1.5)
REMOTE_PAYMENT_PCT = 15  # payments by a customer of another warehouse (clause 2.5.1.2)
BY_LAST_NAME_PCT = 60  # payments and order-status lookups by last name (clauses 2.5.1.2, 2.6.1.2)
ORIGINAL_PCT = 10  # items and stock whose data carries "ORIGINAL" (clause 4.3.3.1)
BAD_CREDIT_PCT = 10

# Keying and mean think times in seconds (clause 5.2.5.7): with them each terminal is one user at a screen
KEYING_S = {"new_order": 18.0, "payment": 3.0, "order_status": 2.0, "delivery": 2.0, "stock_level": 2.0}
THINK_MEAN_S = {"new_order": 12.0, "payment": 12.0, "order_status": 10.0, "delivery": 5.0, "stock_level": 5.0}
THINK_CAP_FACTOR = 10  # a think time is at most 10 times its mean (clause 5.2.5.4)
TERMINALS_PER_WAREHOUSE = 10  # clause 4.2.2
# The specification's ceiling with keying and think times: 12.86 new orders per minute per warehouse (clause 4.2.2
# bounds the reported tpmC at 12.86 x warehouses), so efficiency = NOPM / (12.86 x warehouses)
MAX_NOPM_PER_WAREHOUSE = 12.86

# NURand (clause 2.1.6): A per field, and C constants; C for last names differs between load and run by a delta
# within [65, 119], not 96 nor 112 (clause 2.1.6.1)
A_LAST, A_CUSTOMER, A_ITEM = 255, 1023, 8191
C_LAST_LOAD, C_LAST_RUN = 157, 223
C_CUSTOMER, C_ITEM = 259, 7911
SYLLABLES = ("BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING")
UNUSED_ITEM = ITEMS + 1  # the rolled-back new order's last item id: no such item (clause 2.4.1.5)


def nurand(rng: random.Random, a: int, x: int, y: int, c: int) -> int:
    """NURand(A, x, y): non-uniform random over [x, y], skewed towards the values the OR of two draws favours."""
    return (((rng.randint(0, a) | rng.randint(x, y)) + c) % (y - x + 1)) + x


def last_name(number: int) -> str:
    """The customer last name of a number 0-999: three syllables, one per decimal digit."""
    return SYLLABLES[number // 100] + SYLLABLES[number // 10 % 10] + SYLLABLES[number % 10]


def run_last_name(rng: random.Random) -> str:
    """A last name as the terminals choose it while running (the run's C constant)."""
    return last_name(nurand(rng, A_LAST, 0, 999, C_LAST_RUN))


def run_customer_id(rng: random.Random) -> int:
    return nurand(rng, A_CUSTOMER, 1, CUSTOMERS_PER_DISTRICT, C_CUSTOMER)


def run_item_id(rng: random.Random) -> int:
    return nurand(rng, A_ITEM, 1, ITEMS, C_ITEM)


def home_warehouse(job: int, warehouses: int) -> int:
    """Each job is a terminal bound to one warehouse, dealt round-robin, so that jobs per warehouse (and with them
    the contention on its warehouse and district rows) grow evenly."""
    return job % warehouses + 1


def home_district(job: int, warehouses: int) -> int:
    """The terminal's own district, which its stock-level transactions query (clause 2.8.1.1): the terminals of a
    warehouse take its districts in turn."""
    return job // warehouses % DISTRICTS_PER_WAREHOUSE + 1


def other_warehouse(rng: random.Random, home: int, warehouses: int) -> int:
    """A warehouse other than home, uniformly (home itself when there is only one)."""
    if warehouses == 1:
        return home
    other = rng.randint(1, warehouses - 1)
    return other + 1 if other >= home else other


@dataclass(frozen=True)
class NewOrderInput:
    home: int
    district: int
    customer: int
    items: list[int]
    supply_warehouses: list[int]
    quantities: list[int]

    @property
    def all_local(self) -> int:
        """1 when the home warehouse supplies every line (O_ALL_LOCAL)."""
        return int(all(w == self.home for w in self.supply_warehouses))


def new_order_input(rng: random.Random, home: int, warehouses: int) -> NewOrderInput:
    """A new order's terminal input (clause 2.4.1): 1 % of them end with an unused item and must roll back."""
    count = rng.randint(MIN_ORDER_LINES, MAX_ORDER_LINES)
    items = [run_item_id(rng) for _ in range(count)]
    if rng.randint(1, 100) <= ROLLBACK_PCT:
        items[-1] = UNUSED_ITEM
    supply = [home if rng.randint(1, 100) > REMOTE_ORDER_LINE_PCT else other_warehouse(rng, home, warehouses)
              for _ in range(count)]
    return NewOrderInput(home, rng.randint(1, DISTRICTS_PER_WAREHOUSE), run_customer_id(rng), items, supply,
                         [rng.randint(1, 10) for _ in range(count)])


def pick_type(rng: random.Random) -> int:
    """A transaction type index by the standard mix (MIX_PCT)."""
    x = rng.random() * 100
    for i, pct in enumerate(MIX_PCT.values()):
        if x < pct:
            return i
        x -= pct
    return len(MIX_PCT) - 1


def think_time(rng: random.Random, kind: str) -> float:
    """A think time: negative exponential with the type's mean, cut at ten times the mean (clause 5.2.5.4)."""
    mean = THINK_MEAN_S[kind]
    return min(rng.expovariate(1.0 / mean), THINK_CAP_FACTOR * mean)
