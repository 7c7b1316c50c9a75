"""The initial rows of each TPC-C table with the specification's distributions (clause 4.3.3.1), as COPY text.

Generation is the load's cost on the client, so strings are slices of one random pool rather than built a character
at a time; every value is plain alphanumeric text, so COPY's text format needs no escaping.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator

from capmark.workloads.tpcc import spec

NULL = r"\N"
_ALNUM = string.ascii_letters + string.digits
_POOL_CHARS = 1 << 20


class Generator:
    """Random values of the specification's kinds, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pool = "".join(self.rng.choices(_ALNUM, k=_POOL_CHARS))
        self.digits = "".join(self.rng.choices(string.digits, k=_POOL_CHARS))

    def astring(self, low: int, high: int) -> str:
        """A random alphanumeric string of low..high characters."""
        n = self.rng.randint(low, high)
        at = self.rng.randrange(_POOL_CHARS - n)
        return self.pool[at:at + n]

    def nstring(self, n: int) -> str:
        at = self.rng.randrange(_POOL_CHARS - n)
        return self.digits[at:at + n]

    def data(self) -> str:
        """I_DATA / S_DATA: 26-50 characters, 10 % of them with "ORIGINAL" somewhere inside."""
        text = self.astring(26, 50)
        if self.rng.randint(1, 100) <= spec.ORIGINAL_PCT:
            at = self.rng.randint(0, len(text) - 8)
            text = text[:at] + "ORIGINAL" + text[at + 8:]
        return text

    def address(self) -> str:
        """street 1, street 2, city, state, zip as tab-separated columns."""
        state = "".join(self.rng.choices(string.ascii_uppercase, k=2))
        return (f"{self.astring(10, 20)}\t{self.astring(10, 20)}\t{self.astring(10, 20)}\t{state}\t"
                f"{self.nstring(4)}11111")

    def money(self, low_cents: int, high_cents: int) -> str:
        cents = self.rng.randint(low_cents, high_cents)
        return f"{cents // 100}.{cents % 100:02d}"

    def fraction(self, high_ten_thousandths: int) -> str:
        return f"0.{self.rng.randint(0, high_ten_thousandths):04d}"


def items(gen: Generator) -> Iterator[str]:
    for i in range(1, spec.ITEMS + 1):
        yield f"{i}\t{gen.rng.randint(1, 10_000)}\t{gen.astring(14, 24)}\t{gen.money(100, 10_000)}\t{gen.data()}\n"


def warehouse(gen: Generator, w: int) -> Iterator[str]:
    yield f"{w}\t{gen.astring(6, 10)}\t{gen.address()}\t{gen.fraction(2000)}\t300000.00\n"


def districts(gen: Generator, w: int) -> Iterator[str]:
    for d in range(1, spec.DISTRICTS_PER_WAREHOUSE + 1):
        yield (f"{d}\t{w}\t{gen.astring(6, 10)}\t{gen.address()}\t{gen.fraction(2000)}\t30000.00\t"
               f"{spec.ORDERS_PER_DISTRICT + 1}\n")


def stock(gen: Generator, w: int) -> Iterator[str]:
    for i in range(1, spec.STOCK_PER_WAREHOUSE + 1):
        dists = "\t".join(gen.astring(24, 24) for _ in range(10))
        yield f"{i}\t{w}\t{gen.rng.randint(10, 100)}\t{dists}\t0\t0\t0\t{gen.data()}\n"


def customers(gen: Generator, w: int, now: str) -> Iterator[str]:
    """Customers 1-1,000 of a district take the last names 0-999 in order, the rest NURand's (clause 4.3.2.3)."""
    for d in range(1, spec.DISTRICTS_PER_WAREHOUSE + 1):
        for c in range(1, spec.CUSTOMERS_PER_DISTRICT + 1):
            number = c - 1 if c <= 1000 else spec.nurand(gen.rng, spec.A_LAST, 0, 999, spec.C_LAST_LOAD)
            credit = "BC" if gen.rng.randint(1, 100) <= spec.BAD_CREDIT_PCT else "GC"
            yield (f"{c}\t{d}\t{w}\t{gen.astring(8, 16)}\tOE\t{spec.last_name(number)}\t{gen.address()}\t"
                   f"{gen.nstring(16)}\t{now}\t{credit}\t50000.00\t{gen.fraction(5000)}\t-10.00\t10.00\t1\t0\t"
                   f"{gen.astring(300, 500)}\n")


def history(gen: Generator, w: int, now: str) -> Iterator[str]:
    for d in range(1, spec.DISTRICTS_PER_WAREHOUSE + 1):
        for c in range(1, spec.CUSTOMERS_PER_DISTRICT + 1):
            yield f"{c}\t{d}\t{w}\t{d}\t{w}\t{now}\t10.00\t{gen.astring(12, 24)}\n"


def orders(gen: Generator, w: int, now: str) -> tuple[list[str], list[str], list[str]]:
    """Orders, new orders and order lines of one warehouse: each district's 3,000 orders go to a permutation of its
    customers; orders from 2,101 on are undelivered (no carrier, a new-order row, lines without delivery date)."""
    order_rows: list[str] = []
    new_rows: list[str] = []
    line_rows: list[str] = []
    rng = gen.rng
    for d in range(1, spec.DISTRICTS_PER_WAREHOUSE + 1):
        customers_of = list(range(1, spec.CUSTOMERS_PER_DISTRICT + 1))
        rng.shuffle(customers_of)
        for o in range(1, spec.ORDERS_PER_DISTRICT + 1):
            lines = rng.randint(spec.MIN_ORDER_LINES, spec.MAX_ORDER_LINES)
            delivered = o < spec.FIRST_UNDELIVERED_ORDER
            carrier = str(rng.randint(1, 10)) if delivered else NULL
            order_rows.append(f"{o}\t{d}\t{w}\t{customers_of[o - 1]}\t{now}\t{carrier}\t{lines}\t1\n")
            if not delivered:
                new_rows.append(f"{o}\t{d}\t{w}\n")
            for n in range(1, lines + 1):
                amount = "0.00" if delivered else gen.money(1, 999_999)
                line_rows.append(f"{o}\t{d}\t{w}\t{n}\t{rng.randint(1, spec.ITEMS)}\t{w}\t"
                                 f"{now if delivered else NULL}\t5\t{amount}\t{gen.astring(24, 24)}\n")
    return order_rows, new_rows, line_rows
