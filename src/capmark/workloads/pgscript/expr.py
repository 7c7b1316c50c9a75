"""The `\\set` / `\\if` expression language of pgbench 18: tokens, grammar and the tree it parses to.

Precedence, lowest first, as pgbench takes it from PostgreSQL's SQL grammar: OR; AND; NOT; the postfix tests
IS [NOT] NULL|TRUE|FALSE, ISNULL, NOTNULL; comparisons (non-associative: `a < b < c` is an error); the bit
operators | # & << >> (and prefix ~); + -; * / %; unary + and -. `a > b` is parsed as `b < a`, `-x` as
`0 - x` and `~x` as `-1 # x`, as pgbench does, so that arguments are evaluated (and random values drawn) in
pgbench's order. A function given one argument too few for its seed (hash*, permute) gets the variable
`:default_seed`.

The tree is made of frozen dataclasses, so a parsed script pickles to worker processes; `values.py` compiles
it to closures for evaluation.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_FUNCTION_ARGS = 16  # pgbench evaluates at most this many arguments of a function (least, greatest)

# how many arguments each function takes; VARIADIC (least, greatest) means one or more; SEEDED (hash*,
# permute) means the last one, the seed, may be left out
VARIADIC = -1
SEEDED = -2
FUNCTIONS: dict[str, tuple[str, int, int]] = {  # name -> (canonical name, required arguments, kind)
    "abs": ("abs", 1, 0), "debug": ("debug", 1, 0), "double": ("double", 1, 0), "exp": ("exp", 1, 0),
    "greatest": ("greatest", 1, VARIADIC), "least": ("least", 1, VARIADIC),
    "hash": ("hash_murmur2", 1, SEEDED), "hash_murmur2": ("hash_murmur2", 1, SEEDED),
    "hash_fnv1a": ("hash_fnv1a", 1, SEEDED), "permute": ("permute", 2, SEEDED),
    "int": ("int", 1, 0), "ln": ("ln", 1, 0), "mod": ("%", 2, 0), "pi": ("pi", 0, 0),
    "pow": ("pow", 2, 0), "power": ("pow", 2, 0), "random": ("random", 2, 0),
    "random_exponential": ("random_exponential", 3, 0), "random_gaussian": ("random_gaussian", 3, 0),
    "random_zipfian": ("random_zipfian", 3, 0), "sqrt": ("sqrt", 1, 0),
}
DEFAULT_SEED_VARIABLE = "default_seed"

KEYWORDS = frozenset({"and", "or", "not", "is", "isnull", "notnull", "case", "when", "then", "else", "end",
                      "null", "true", "false"})

# binary and postfix operators: (precedence, non-associative?)
_BINARY: dict[str, tuple[int, bool]] = {
    "or": (1, False), "and": (2, False),
    "is": (4, True), "isnull": (4, True), "notnull": (4, True),
    "=": (5, True), "<>": (5, True), "!=": (5, True), "<": (5, True), "<=": (5, True), ">": (5, True),
    ">=": (5, True),
    "|": (6, False), "#": (6, False), "&": (6, False), "<<": (6, False), ">>": (6, False),
    "+": (7, False), "-": (7, False), "*": (8, False), "/": (8, False), "%": (8, False),
}
NOT_OPERAND = 4  # NOT binds looser than IS and comparisons: `NOT a = b` is NOT (a = b)
TILDE_OPERAND = 7  # prefix ~ sits with the bit operators: `~ a + b` is ~(a + b), `~ a | b` is (~a) | b
UNARY_OPERAND = 9  # unary + and - bind tightest

_OPERATORS = ("<>", "!=", "<=", ">=", "<<", ">>", "+", "-", "*", "/", "%", "=", "<", ">", "|", "&", "#", "~",
              "(", ")", ",")
_NON_ASCII = "\u0080-\U0010ffff"  # pgbench takes every byte >= 0x80 as a letter
_IDENT = re.compile(f"[A-Za-z_{_NON_ASCII}][A-Za-z0-9_{_NON_ASCII}]*")
_VARIABLE = re.compile(f":([A-Za-z0-9_{_NON_ASCII}]+)")
_NUMBER = re.compile(r"(\d+)(\.\d*)?([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?")
_SPACE = " \t\r\f\v"
_CONTINUATION = re.compile(r"\\\r?\n")  # a backslash at the end of a line continues the command
_MAXINT_PLUS_ONE = "9223372036854775808"  # only valid right after a unary minus: -9223372036854775808


class ExprSyntaxError(Exception):
    """A syntax error at `offset` in the script text; the script parser turns it into a ScriptError."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Const:
    value: None | bool | int | float


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Call:
    """A function or operator applied to its arguments (operators use their symbol: '+', '<', '!and' ...)."""

    func: str
    args: tuple[Node, ...]


Node = Const | Var | Call


@dataclass(frozen=True)
class Token:
    kind: str  # op, kw, int, maxint, double, var, ident, end
    value: object
    offset: int


def tokenize(text: str, pos: int) -> tuple[list[Token], int]:
    """The tokens from `pos` to the end of the line (a backslash-newline continues it); returns them and the
    offset just past the newline that ends the expression."""
    tokens: list[Token] = []
    n = len(text)
    while pos < n:
        c = text[pos]
        if c == "\n":
            return tokens + [Token("end", None, pos)], pos + 1
        if c in _SPACE:
            pos += 1
            continue
        if c == "\\":
            m = _CONTINUATION.match(text, pos)
            if m:
                pos = m.end()
                continue
            raise ExprSyntaxError("unexpected character '\\'", pos)
        if c.isdigit() or (c == "." and pos + 1 < n and text[pos + 1].isdigit()):
            tokens.append(_number(text, pos))
            pos += len(_NUMBER.match(text, pos).group(0))  # type: ignore[union-attr]
            continue
        if c == ":":
            m = _VARIABLE.match(text, pos)
            if not m:
                raise ExprSyntaxError("unexpected character ':' (a variable is :name)", pos)
            tokens.append(Token("var", m.group(1), pos))
            pos = m.end()
            continue
        m = _IDENT.match(text, pos)
        if m:
            word = m.group(0)
            low = word.lower()
            tokens.append(Token("kw", low, pos) if low in KEYWORDS else Token("ident", word, pos))
            pos = m.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, pos):
                tokens.append(Token("op", op, pos))
                pos += len(op)
                break
        else:
            raise ExprSyntaxError(f"unexpected character {c!r}", pos)
    return tokens + [Token("end", None, pos)], pos


def _number(text: str, pos: int) -> Token:
    m = _NUMBER.match(text, pos)
    assert m is not None
    literal = m.group(0)
    if m.group(1) is not None and m.group(2) is None and m.group(3) is None:
        if literal == _MAXINT_PLUS_ONE:
            return Token("maxint", None, pos)
        value = int(literal)
        if value > INT64_MAX:
            raise ExprSyntaxError(f"bigint constant overflow ({literal})", pos)
        return Token("int", value, pos)
    d = float(literal)
    mantissa = re.split("[eE]", literal)[0]
    if math.isinf(d) or (abs(d) < sys.float_info.min and any(ch in mantissa for ch in "123456789")):
        raise ExprSyntaxError(f"double constant overflow ({literal})", pos)
    return Token("double", d, pos)


def parse_expression(text: str, pos: int) -> tuple[Node, int]:
    """Parse the expression that runs from `pos` to the end of its line; returns the tree and the offset of the
    next line."""
    tokens, end = tokenize(text, pos)
    parser = _Parser(tokens)
    if tokens[0].kind == "end":
        raise ExprSyntaxError("missing expression", tokens[0].offset)
    node = parser.expr(0)
    tok = parser.peek()
    if tok.kind != "end":
        raise ExprSyntaxError(f"syntax error at {_describe(tok)}", tok.offset)
    return node, end


def _describe(tok: Token) -> str:
    if tok.kind == "end":
        return "end of line"
    if tok.kind == "maxint":
        return _MAXINT_PLUS_ONE
    if tok.kind == "var":
        return f":{tok.value}"
    return str(tok.value).upper() if tok.kind == "kw" else str(tok.value)


class _Parser:
    """Precedence climbing with the precedences and associativity of pgbench's bison grammar."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, tok: Token, expected: str = "") -> ExprSyntaxError:
        more = f", expected {expected}" if expected else ""
        return ExprSyntaxError(f"syntax error at {_describe(tok)}{more}", tok.offset)

    def expect(self, kind: str, value: object, expected: str) -> Token:
        tok = self.next()
        if tok.kind != kind or tok.value != value:
            raise self.fail(tok, expected)
        return tok

    def expr(self, min_prec: int) -> Node:
        left = self.prefix()
        last_nonassoc = 0
        while True:
            tok = self.peek()
            key = tok.value if tok.kind in ("op", "kw") and isinstance(tok.value, str) else None
            info = _BINARY.get(key) if key is not None else None
            if info is None or info[0] < min_prec:
                return left
            prec, nonassoc = info
            if nonassoc and prec == last_nonassoc:
                raise self.fail(tok)  # a < b < c: pgbench's grammar gives it no meaning
            self.next()
            if key in ("is", "isnull", "notnull"):
                left = self.postfix_is(key, left)
                last_nonassoc = 0  # a postfix test ends its rule: `a IS NULL IS NULL` is valid
            else:
                left = _binary(key, left, self.expr(prec + 1))  # type: ignore[arg-type]
                last_nonassoc = prec if nonassoc else 0

    def postfix_is(self, key: str, operand: Node) -> Node:
        if key == "isnull":
            return Call("!is", (operand, Const(None)))
        if key == "notnull":
            return Call("!not", (Call("!is", (operand, Const(None))),))
        negate = self.peek().kind == "kw" and self.peek().value == "not"
        if negate:
            self.next()
        tok = self.next()
        if tok.kind != "kw" or not isinstance(tok.value, str) or tok.value not in ("null", "true", "false"):
            raise self.fail(tok, "NULL, TRUE or FALSE")
        test = Call("!is", (operand, Const({"null": None, "true": True, "false": False}[tok.value])))
        return Call("!not", (test,)) if negate else test

    def prefix(self) -> Node:
        tok = self.next()
        kind, value = tok.kind, tok.value
        if kind == "op":
            if value == "(":
                node = self.expr(0)
                self.expect("op", ")", "')'")
                return node
            if value == "+":
                return self.expr(UNARY_OPERAND)
            if value == "-":
                if self.peek().kind == "maxint":
                    self.next()
                    return Const(INT64_MIN)
                return Call("-", (Const(0), self.expr(UNARY_OPERAND)))
            if value == "~":
                return Call("#", (Const(-1), self.expr(TILDE_OPERAND)))
        elif kind == "kw":
            if value == "not":
                return Call("!not", (self.expr(NOT_OPERAND),))
            if isinstance(value, str) and value in ("null", "true", "false"):
                return Const({"null": None, "true": True, "false": False}[value])
            if value == "case":
                return self.case()
        elif kind in ("int", "double"):
            return Const(value)  # type: ignore[arg-type]
        elif kind == "var":
            return Var(value)  # type: ignore[arg-type]
        elif kind == "ident":
            return self.call(tok)
        raise self.fail(tok, "an operand")

    def call(self, name_tok: Token) -> Node:
        name = str(name_tok.value)
        spec = FUNCTIONS.get(name.lower())
        if spec is None:
            if self.peek().kind == "op" and self.peek().value == "(":
                known = ", ".join(sorted(FUNCTIONS))
                raise ExprSyntaxError(f"unknown function {name}(); the functions are {known}", name_tok.offset)
            raise ExprSyntaxError(f"syntax error at {name} (a variable is written :{name})", name_tok.offset)
        self.expect("op", "(", f"'(' after {name}")
        args: list[Node] = []
        if not (self.peek().kind == "op" and self.peek().value == ")"):
            args.append(self.expr(0))
            while self.peek().kind == "op" and self.peek().value == ",":
                self.next()
                args.append(self.expr(0))
        self.expect("op", ")", "',' or ')'")
        canonical, required, kind = spec
        n = len(args)
        low = name.lower()
        if kind == VARIADIC:
            if n < 1:
                raise ExprSyntaxError(f"{low}() needs at least one argument", name_tok.offset)
            if n > MAX_FUNCTION_ARGS:
                raise ExprSyntaxError(f"{low}() takes at most {MAX_FUNCTION_ARGS} arguments, not {n}",
                                      name_tok.offset)
        elif kind == SEEDED:
            if n not in (required, required + 1):
                raise ExprSyntaxError(f"{low}() takes {required} or {required + 1} arguments, not {n}",
                                      name_tok.offset)
            if n == required:
                args.append(Var(DEFAULT_SEED_VARIABLE))
        elif n != required:
            plural = "" if required == 1 else "s"
            raise ExprSyntaxError(f"{low}() takes {required} argument{plural}, not {n}", name_tok.offset)
        return Call(canonical, tuple(args))

    def case(self) -> Node:
        args: list[Node] = []
        self.expect("kw", "when", "WHEN")
        while True:
            args.append(self.expr(0))
            self.expect("kw", "then", "THEN")
            args.append(self.expr(0))
            tok = self.next()
            if tok.kind == "kw" and tok.value == "when":
                continue
            if tok.kind == "kw" and tok.value == "else":
                args.append(self.expr(0))
                self.expect("kw", "end", "END")
                break
            if tok.kind == "kw" and tok.value == "end":
                args.append(Const(None))
                break
            raise self.fail(tok, "WHEN, ELSE or END")
        return Call("!case", tuple(args))


def _binary(op: str, left: Node, right: Node) -> Node:
    if op == ">":
        return Call("<", (right, left))  # pgbench evaluates the right operand first here
    if op == ">=":
        return Call("<=", (right, left))
    if op == "!=":
        op = "<>"
    if op in ("and", "or"):
        op = "!" + op
    return Call(op, (left, right))


def variables_of(node: Node) -> set[str]:
    """Every variable an expression reads (including the implicit :default_seed)."""
    if isinstance(node, Var):
        return {node.name}
    if isinstance(node, Call):
        out: set[str] = set()
        for arg in node.args:
            out |= variables_of(arg)
        return out
    return set()
