"""pgbench's values and their evaluation: NULL, boolean, int64 and double, with pgbench's coercions and errors.

A value is None, a bool, an int (always within int64) or a float. A variable set from text (`-D`, `\\gset`)
holds a TextValue: pgbench keeps such a variable's text for SQL and converts it to a value only when an
expression reads it. `compile_expr` turns a parsed tree into one closure per node, so that evaluation in the
driver's loop costs a few Python calls per operator; constant subtrees are folded once.

Semantics follow pgbench.c: an operator or function with a NULL argument is NULL (except IS and debug); if
either operand is a double the arithmetic and comparisons are done in double, else in int64 with overflow
errors; integer / and % truncate toward zero; a double becomes an int by rounding half to even (rint) with an
overflow error; booleans are never coerced to numbers, nor numbers to booleans (AND, OR, NOT accept only
booleans); CASE and \\if take 0, 0.0 and NULL as false.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from capmark.workloads.pgscript import randoms
from capmark.workloads.pgscript.errors import ExprError
from capmark.workloads.pgscript.expr import INT64_MAX, INT64_MIN, Call, Const, Node, Var

Value = None | bool | int | float
M64 = (1 << 64) - 1
SHIFT_MASK = 63  # C's << and >> past 63 bits are undefined; x86-64 (pgbench's usual host) takes the count mod 64
DOUBLE_DIGITS = 15  # DBL_DIG: pgbench prints a double with %.15g when it becomes text (SQL, \sleep, debug)
TWO63 = float(1 << 63)


class EvalContext:
    """What an expression reads while it runs: the client's variables and its random generator."""

    __slots__ = ("vars", "rng")

    def __init__(self, variables: Variables, rng: randoms.RandomSource) -> None:
        self.vars = variables
        self.rng = rng


Fn = Callable[[EvalContext], Value]


class TextValue:
    """A variable set from text: the text is what SQL receives, the value is parsed when an expression needs it."""

    __slots__ = ("text", "_value", "_parsed")

    def __init__(self, text: str) -> None:
        self.text = text
        self._value: Value = None
        self._parsed = False

    def value(self, name: str) -> Value:
        if not self._parsed:
            self._value = parse_text(self.text, name)
            self._parsed = True
        return self._value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextValue) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"TextValue({self.text!r})"


def parse_text(text: str, name: str) -> Value:
    """pgbench's reading of a variable's text: null, a boolean word (or its prefix), an int64, else a double."""
    if text == "":
        raise ExprError(f'variable "{name}" is an empty string, which is no value')
    low = text.lower()
    n = len(low)
    if low == "null":
        return None
    if low in ("true"[:n], "yes"[:n], "on"):
        return True
    if low in ("false"[:n], "no"[:n], "off", "of"):
        return False
    stripped = text.lstrip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    if digits.isascii() and digits.isdigit():
        value = int(stripped)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ExprError(f'value "{text}" of variable "{name}" is out of range for type bigint')
        return value
    try:
        if "_" in text or text != text.rstrip():
            raise ValueError(text)  # Python accepts 1_000 and trailing spaces, C's strtod does not
        return float(text)
    except ValueError:
        raise ExprError(f'malformed variable "{name}" value: "{text}"') from None


Variables = dict[str, Value | TextValue]  # a client's variables by name: set by expressions, or from text


def to_text(value: Any) -> str:
    """A value as pgbench writes it into SQL: NULL, true/false, the integer, or the double with %.15g (and
    NaN, Infinity, -Infinity, as PostgreSQL's own printf writes them)."""
    t = type(value)
    if t is int:
        return str(value)
    if t is TextValue:
        return value.text
    if t is float:
        if math.isfinite(value):
            return f"{value:.{DOUBLE_DIGITS}g}"
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")  # PostgreSQL's printf
    if value is None:
        return "NULL"
    return "true" if value else "false"


def truth(value: Value) -> bool:
    """The truth of a CASE branch or an \\if: NULL, false, 0 and 0.0 are false."""
    return bool(value)


def type_name(value: Value) -> str:
    return {type(None): "null", bool: "boolean", int: "int", float: "double"}[type(value)]


# --- coercions ------------------------------------------------------------------------------------------------


def as_int(v: Value) -> int:
    t = type(v)
    if t is int:
        return v  # type: ignore[return-value]
    if t is float:
        if math.isfinite(v):  # type: ignore[arg-type]
            r = round(v)  # type: ignore[arg-type]  # half to even, as rint
            if INT64_MIN <= r <= INT64_MAX:
                return r
        raise ExprError(f"double to int overflow for {v:f}")
    raise ExprError(f"cannot coerce {type_name(v)} to int")


def as_double(v: Value) -> float:
    t = type(v)
    if t is float:
        return v  # type: ignore[return-value]
    if t is int:
        return float(v)  # type: ignore[arg-type]
    raise ExprError(f"cannot coerce {type_name(v)} to double")


def as_bool(v: Value) -> bool:
    if type(v) is bool:
        return v  # type: ignore[return-value]
    raise ExprError(f"cannot coerce {type_name(v)} to boolean")


def _checked(r: int, what: str) -> int:
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise ExprError(f"bigint {what} out of range")


def _wrap(r: int) -> int:
    r &= M64
    return r - (1 << 64) if r >> 63 else r


# --- operators (NULL arguments are handled by the caller) ------------------------------------------------------


def op_add(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return _checked(a + b, "add")
    if type(a) is float or type(b) is float:
        return as_double(a) + as_double(b)
    return _checked(as_int(a) + as_int(b), "add")


def op_sub(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        return _checked(a - b, "sub")
    if type(a) is float or type(b) is float:
        return as_double(a) - as_double(b)
    return _checked(as_int(a) - as_int(b), "sub")


def op_mul(a: Value, b: Value) -> Value:
    if type(a) is float or type(b) is float:
        return as_double(a) * as_double(b)
    return _checked(as_int(a) * as_int(b), "mul")


def c_divide(x: float, y: float) -> float:
    """IEEE division, where dividing by zero gives an infinity or NaN instead of a Python exception."""
    if y == 0.0:
        if x == 0.0 or x != x:
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def op_div(a: Value, b: Value) -> Value:
    if type(a) is float or type(b) is float:
        return c_divide(as_double(a), as_double(b))
    li, ri = as_int(a), as_int(b)
    if ri == 0:
        raise ExprError("division by zero")
    if ri == -1:
        return _checked(-li, "div")
    q = abs(li) // abs(ri)
    return q if (li < 0) == (ri < 0) else -q  # C truncates toward zero


def op_mod(a: Value, b: Value) -> Value:
    li, ri = as_int(a), as_int(b)  # % is an integer operation even on doubles
    if ri == 0:
        raise ExprError("division by zero")
    r = abs(li) % abs(ri)
    return -r if li < 0 else r  # C's remainder takes the sign of the dividend


def _comparison(int_cmp: Callable[[int, int], bool], dbl_cmp: Callable[[float, float], bool]):
    def op(a: Value, b: Value) -> bool:
        if type(a) is float or type(b) is float:
            return dbl_cmp(as_double(a), as_double(b))
        return int_cmp(as_int(a), as_int(b))
    return op


op_eq = _comparison(lambda x, y: x == y, lambda x, y: x == y)
op_ne = _comparison(lambda x, y: x != y, lambda x, y: x != y)
op_lt = _comparison(lambda x, y: x < y, lambda x, y: x < y)
op_le = _comparison(lambda x, y: x <= y, lambda x, y: x <= y)


def op_bitand(a: Value, b: Value) -> int:
    return as_int(a) & as_int(b)


def op_bitor(a: Value, b: Value) -> int:
    return as_int(a) | as_int(b)


def op_bitxor(a: Value, b: Value) -> int:
    return as_int(a) ^ as_int(b)


def op_lshift(a: Value, b: Value) -> int:
    return _wrap(as_int(a) << (as_int(b) & SHIFT_MASK))


def op_rshift(a: Value, b: Value) -> int:
    return as_int(a) >> (as_int(b) & SHIFT_MASK)


def fn_abs(v: Value) -> Value:
    if type(v) is int:
        return _wrap(-v) if v < 0 else v  # abs(INT64_MIN) wraps to itself, as in pgbench
    d = as_double(v)
    return -d if d < 0.0 else d


def fn_sqrt(v: Value) -> float:
    d = as_double(v)
    return math.sqrt(d) if d >= 0.0 or d != d else math.nan


def fn_ln(v: Value) -> float:
    d = as_double(v)
    if d > 0.0 or d != d:
        return math.log(d)
    return -math.inf if d == 0.0 else math.nan


def fn_exp(v: Value) -> float:
    d = as_double(v)
    try:
        return math.exp(d)
    except OverflowError:
        return math.inf


def c_pow(x: float, y: float) -> float:
    """C's pow: infinities and NaN where Python raises."""
    try:
        return math.pow(x, y)
    except OverflowError:
        odd = y.is_integer() and y % 2 == 1
        return -math.inf if (x < 0 and odd) else math.inf
    except ValueError:
        if x == 0.0:  # pow(±0, negative)
            odd = y.is_integer() and y % 2 == 1
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan  # negative base, non-integer exponent


def fn_pow(a: Value, b: Value) -> float:
    return c_pow(as_double(a), as_double(b))


def _extremum(values: list[Value], least: bool) -> Value:
    if any(type(v) is float for v in values):
        acc: Any = as_double(values[0])
        for v in values[1:]:
            d = as_double(v)
            acc = (acc if acc < d else d) if least else (acc if acc > d else d)  # C's Min/Max macros
        return acc
    acc = as_int(values[0])
    for v in values[1:]:
        i = as_int(v)
        acc = (acc if acc < i else i) if least else (acc if acc > i else i)
    return acc


def fn_random(rng: randoms.RandomSource, a: Value, b: Value) -> int:
    return randoms.random_uniform(rng, as_int(a), as_int(b))


def _random3(draw: Callable[[randoms.RandomSource, int, int, float], int]):
    def fn(rng: randoms.RandomSource, a: Value, b: Value, p: Value) -> int:
        lb, ub = as_int(a), as_int(b)
        randoms.check_range(lb, ub)  # pgbench checks the range before it reads the parameter
        return draw(rng, lb, ub, as_double(p))
    return fn


_BINARY_OPS: dict[str, Callable[[Value, Value], Value]] = {
    "+": op_add, "-": op_sub, "*": op_mul, "/": op_div, "%": op_mod,
    "=": op_eq, "<>": op_ne, "<": op_lt, "<=": op_le,
    "&": op_bitand, "|": op_bitor, "#": op_bitxor, "<<": op_lshift, ">>": op_rshift,
    "pow": fn_pow,
    "hash_murmur2": lambda v, s: randoms.hash_murmur2(as_int(v), as_int(s)),
    "hash_fnv1a": lambda v, s: randoms.hash_fnv1a(as_int(v), as_int(s)),
}
_UNARY_OPS: dict[str, Callable[[Value], Value]] = {
    "abs": fn_abs, "sqrt": fn_sqrt, "ln": fn_ln, "exp": fn_exp, "double": as_double, "int": as_int,
    "!not": lambda v: not as_bool(v),
}
_RANDOM_OPS: dict[str, Callable[..., int]] = {
    "random": fn_random,
    "random_exponential": _random3(randoms.random_exponential),
    "random_gaussian": _random3(randoms.random_gaussian),
    "random_zipfian": _random3(randoms.random_zipfian),
}
_PURE = frozenset(_BINARY_OPS) | frozenset(_UNARY_OPS) | {"pi", "least", "greatest", "permute", "!is", "!and",
                                                           "!or", "!case"}


# --- compilation -----------------------------------------------------------------------------------------------


def compile_expr(node: Node, label: str = "") -> Fn:
    """A closure that evaluates `node` against an EvalContext; `label` names the command for debug()."""
    fn, _ = _compile(node, label)
    return fn


def evaluate(node: Node, variables: Variables, rng: randoms.RandomSource | None = None) -> Value:
    """Evaluate once (tests, one-off use); the driver compiles once and calls the closure instead."""
    return compile_expr(node)(EvalContext(variables, rng or randoms.PgPrng(0)))


def _constant(value: Value) -> tuple[Fn, bool]:
    return (lambda ctx: value), True


def _compile(node: Node, label: str) -> tuple[Fn, bool]:
    """(closure, whether it is a constant)."""
    if isinstance(node, Const):
        return _constant(node.value)
    if isinstance(node, Var):
        return _variable(node.name), False
    assert isinstance(node, Call)
    parts = [_compile(arg, label) for arg in node.args]
    fn = _call(node.func, [f for f, _ in parts], label)
    if node.func in _PURE and all(const for _, const in parts):
        try:
            return _constant(fn(None))  # type: ignore[arg-type]  # pure functions never read the context
        except ExprError:
            pass  # leave the error to run time, where pgbench raises it (maybe in a branch never taken)
    return fn, False


def _variable(name: str) -> Fn:
    def var(ctx: EvalContext) -> Value:
        try:
            v = ctx.vars[name]
        except KeyError:
            raise ExprError(f'undefined variable "{name}"') from None
        if isinstance(v, TextValue):
            return v.value(name)
        return v
    return var


def _call(func: str, args: list[Fn], label: str) -> Fn:  # noqa: C901 - one dispatch over pgbench's functions
    if func == "!and" or func == "!or":
        return _logical(func == "!and", args[0], args[1])
    if func == "!case":
        return _case(args)
    if func == "!is":
        fa, fb = args

        def is_(ctx: EvalContext) -> bool:
            a, b = fa(ctx), fb(ctx)
            return type(a) is type(b) and (a is None or a == b)
        return is_
    if func == "pi":
        return lambda ctx: math.pi
    if func == "debug":
        return _debug(args[0], label)
    if func in _UNARY_OPS:
        return _strict1(_UNARY_OPS[func], args[0])
    if func in _BINARY_OPS:
        return _strict2(_BINARY_OPS[func], args[0], args[1])
    if func in ("least", "greatest"):
        least = func == "least"

        def extremum(ctx: EvalContext) -> Value:
            values = [f(ctx) for f in args]
            return None if None in values else _extremum(values, least)
        return extremum
    if func == "permute":
        fv, fs, fseed = args

        def permute(ctx: EvalContext) -> Value:
            v, s, seed = fv(ctx), fs(ctx), fseed(ctx)
            if v is None or s is None or seed is None:
                return None
            return randoms.permute(as_int(v), as_int(s), as_int(seed))
        return permute
    if func in _RANDOM_OPS:
        return _random(_RANDOM_OPS[func], args)
    raise AssertionError(f"no evaluation for {func}")


def _strict1(op: Callable[[Value], Value], fa: Fn) -> Fn:
    def run(ctx: EvalContext) -> Value:
        a = fa(ctx)
        return None if a is None else op(a)
    return run


def _strict2(op: Callable[[Value, Value], Value], fa: Fn, fb: Fn) -> Fn:
    def run(ctx: EvalContext) -> Value:
        a = fa(ctx)
        b = fb(ctx)
        if a is None or b is None:
            return None
        return op(a, b)
    return run


def _random(op: Callable[..., int], args: list[Fn]) -> Fn:
    def run(ctx: EvalContext) -> Value:
        values = [f(ctx) for f in args]  # every argument first, as pgbench, even when one is NULL
        if None in values:
            return None
        return op(ctx.rng, *values)
    return run


def _logical(is_and: bool, fa: Fn, fb: Fn) -> Fn:
    def run(ctx: EvalContext) -> Value:
        a = fa(ctx)
        if a is None:
            return None  # pgbench's AND/OR: a NULL left side is NULL, the right side is not evaluated
        if as_bool(a) != is_and:
            return a  # false AND ..., true OR ...
        b = fb(ctx)
        return None if b is None else as_bool(b)
    return run


def _case(args: list[Fn]) -> Fn:
    pairs = [(args[i], args[i + 1]) for i in range(0, len(args) - 1, 2)]
    otherwise = args[-1]

    def run(ctx: EvalContext) -> Value:
        for when, then in pairs:
            if when(ctx):  # NULL, false, 0 and 0.0 are false
                return then(ctx)
        return otherwise(ctx)
    return run


def _debug(fa: Fn, label: str) -> Fn:
    def run(ctx: EvalContext) -> Value:
        v = fa(ctx)
        shown = "null" if v is None else f"{type_name(v)} {to_text(v)}"
        print(f"debug({label}): {shown}", file=sys.stderr)
        return v
    return run
