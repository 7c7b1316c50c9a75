"""Read a pgbench script into a typed list of commands, checking it as pgbench 18 does before the run starts.

SQL commands end at a `;` outside quotes, comments and parentheses (and outside the BEGIN ... END body of a
CREATE FUNCTION/PROCEDURE), at a backslash command, or at the end of the file; `--` comments are dropped as
pgbench drops them; `\\;` joins queries into one compound command and `\\:` writes a literal colon. `:name`
outside quotes and comments is a variable (`::` is a cast, `:=` an assignment). A backslash starts a
meta-command that runs to the end of its line (a backslash at the end of a line continues it).

Where capmark differs from pgbench it avoids sending a broken statement: `:name` inside a quoted string or a
comment stays text (pgbench would put a parameter there), `\\:` keeps its colon out of variables, the psql
forms `:'name'` and `:"name"` (which pgbench sends unreplaced, to a syntax error) are refused, and an
unterminated quote, comment or parenthesis is an error here rather than at the server. pgbench's limit of
255 variable references in one statement is not imposed.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from capmark.config import read_input_file
from capmark.workloads.pgscript.errors import ScriptError, sentence, where
from capmark.workloads.pgscript.expr import ExprSyntaxError, Node, parse_expression

_WORD = "A-Za-z0-9_\u0080-\U0010ffff"
_VAR_NAME = re.compile(f"[A-Za-z_\u0080-\U0010ffff][{_WORD}]*")
_VALID_NAME = re.compile(f"[A-Za-z_\u0080-\U0010ffff][{_WORD}]*\\Z")
_PSQL_QUOTED_VAR = re.compile(f":(['\"])[{_WORD}]+\\1")
_IDENT = re.compile(f"[A-Za-z_\u0080-\U0010ffff][{_WORD}$]*")
_DOLLAR_DELIM = re.compile(f"\\$([A-Za-z_\u0080-\U0010ffff][{_WORD}]*)?\\$")
_CONTINUATION = re.compile(r"\\\r?\n")
_COMMENT_MARK = re.compile(r"/\*|\*/")  # /* comments nest in PostgreSQL
# after a closing quote, whitespace with a newline and another quote continues the same string literal
_QUOTE_CONTINUES = re.compile(r"(?:[ \t\f]|--[^\n\r]*)*[\n\r](?:[ \t\n\r\f]+|--[^\n\r]*[\n\r])*'")
_META_SPACE = " \t\r\f\v"
_SQL_SPACE = " \t\n\r\f"
_FUNCTION_WORDS = {"create": "c", "function": "f", "procedure": "p", "or": "o", "replace": "r"}
_FUNCTION_HEADS = ("cf", "cp", "corf", "corp")  # CREATE [OR REPLACE] FUNCTION|PROCEDURE
SLEEP_UNITS_US = {"us": 1, "ms": 1000, "s": 1_000_000}
META_COMMANDS = ("set", "sleep", "if", "elif", "else", "endif", "gset", "aset", "startpipeline",
                 "syncpipeline", "endpipeline", "shell", "setshell")


@dataclass(frozen=True)
class Command:
    """One command of a script: its position and its first line (what a per-command report shows)."""

    index: int
    line: int
    column: int
    text: str


@dataclass(frozen=True)
class SqlCommand(Command):
    """SQL text split around its variable references: chunks[0] var[0] chunks[1] ... chunks[-1]."""

    chunks: tuple[str, ...]
    variables: tuple[str, ...]
    variable_lines: tuple[int, ...]
    compound: bool  # holds several queries joined with \; (simple query mode only)
    assign: str | None = None  # "gset" or "aset": store the result's columns as variables
    prefix: str = ""  # of those variables' names

    @property
    def parameterized(self) -> str:
        """The SQL with $1, $2 ... in place of the variables, one parameter per reference (as pgbench)."""
        out = [self.chunks[0]]
        for i, chunk in enumerate(self.chunks[1:], start=1):
            out.append(f"${i}")
            out.append(chunk)
        return "".join(out)


@dataclass(frozen=True)
class SetCommand(Command):
    name: str
    expr: Node


@dataclass(frozen=True)
class SleepCommand(Command):
    amount: int  # when variable is None
    variable: str | None
    unit_us: int


@dataclass(frozen=True)
class IfCommand(Command):
    """\\if or \\elif; when false, execution continues at `next_branch` (the next \\elif, \\else or \\endif)."""

    kind: str
    expr: Node
    next_branch: int = -1
    endif: int = -1


@dataclass(frozen=True)
class ElseCommand(Command):
    endif: int = -1


@dataclass(frozen=True)
class EndifCommand(Command):
    pass


@dataclass(frozen=True)
class PipelineCommand(Command):
    kind: str  # start, sync, end


@dataclass(frozen=True)
class ShellCommand(Command):
    """\\shell (target None) or \\setshell target: runs a shell command; refused unless the caller allows it."""

    args: tuple[str, ...]
    target: str | None


@dataclass(frozen=True)
class Script:
    name: str
    commands: tuple[Command, ...]

    @property
    def uses_shell(self) -> bool:
        return any(isinstance(c, ShellCommand) for c in self.commands)

    @property
    def uses_pipeline(self) -> bool:
        return any(isinstance(c, PipelineCommand) for c in self.commands)

    @property
    def compound_commands(self) -> tuple[SqlCommand, ...]:
        return tuple(c for c in self.commands if isinstance(c, SqlCommand) and c.compound)


def read_script(path: str | Path) -> Script:
    """Parse a script file; the error names the file as given."""
    p = Path(path)
    try:
        text = read_input_file(p, "pgbench script").decode("utf-8")
    except OSError as exc:
        raise ScriptError(f"cannot read the pgbench script {p}: {exc.strerror or exc}.", source=str(p)) from None
    except UnicodeDecodeError:
        raise ScriptError(f"the pgbench script {p} is not UTF-8 text.", source=str(p)) from None
    return parse_script(text, str(path))


def parse_script(text: str, name: str = "script") -> Script:
    """Parse a pgbench script; every error is one ScriptError naming `name`, the line and the column."""
    return _Parser(text, name).run()


def parse_define(definition: str) -> tuple[str, str]:
    """A `-D name=value` definition, as pgbench accepts it (a non-empty name and value)."""
    name, eq, value = definition.partition("=")
    if not eq or not name or not value:
        raise ScriptError(f"invalid variable definition {definition!r}; write NAME=VALUE.")
    if not valid_variable_name(name):
        raise ScriptError(f"invalid variable name {name!r} in {definition!r}; a name is letters, digits and _, "
                          "not starting with a digit.")
    return name, value


def valid_variable_name(name: str) -> bool:
    """pgbench's rule: letters (any non-ASCII character counts as one), digits and _, not starting with a digit."""
    return bool(_VALID_NAME.match(name))


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.pos = 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.commands: list[Command] = []
        self._reset_sql()

    # -- positions and errors --

    def loc(self, offset: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.line_starts, offset) - 1
        return i + 1, offset - self.line_starts[i] + 1

    def error(self, offset: int, message: str) -> ScriptError:
        line, col = self.loc(offset)
        return ScriptError(f"{where(self.name, line, col)}: {sentence(message)}", source=self.name, line=line,
                           column=col)

    # -- driver --

    def run(self) -> Script:
        while True:
            ended = self._scan_sql()
            self._flush_sql()
            if ended == "eof":
                break
            if ended == "backslash":
                self._meta()
        if not self.commands:
            raise ScriptError(f"{self.name} line 1: the script has no command.", source=self.name, line=1)
        self._link_conditionals()
        if not any(isinstance(c, IfCommand) for c in self.commands):
            self._check_pipelines()  # with \if a pipeline may open in one branch and close in another
        return Script(self.name, tuple(self.commands))

    # -- SQL --

    def _reset_sql(self) -> None:
        self.sql_start: int | None = None
        self.parts: list[str] = []
        self.chunks: list[str] = []
        self.variables: list[str] = []
        self.variable_lines: list[int] = []
        self.compound = False
        self.paren_offsets: list[int] = []
        self.begin_depth = 0
        self.heads: list[str] = []

    def _emit(self, s: str, offset: int) -> None:
        if self.sql_start is None:
            self.sql_start = offset
        self.parts.append(s)

    def _scan_sql(self) -> str:  # noqa: C901 - one lexer over SQL's token kinds, as psql's
        text, n = self.text, len(self.text)
        while self.pos < n:
            pos = self.pos
            c = text[pos]
            nxt = text[pos + 1] if pos + 1 < n else ""
            if c in _SQL_SPACE:
                if self.sql_start is not None:
                    self.parts.append(c)
                self.pos += 1
            elif c == "-" and nxt == "-":
                end = text.find("\n", pos)
                self.pos = n if end < 0 else end  # dropped, as pgbench drops -- comments
            elif c == "/" and nxt == "*":
                self._emit(text[pos:self._comment_end(pos)], pos)
            elif c == "'":
                self._emit(text[pos:self._string_end(pos + 1, escapes=False)], pos)
            elif c in "eE" and nxt == "'" and self._token_start(pos):
                self._emit(text[pos:self._string_end(pos + 2, escapes=True)], pos)
            elif c in "bBxXnN" and nxt == "'" and self._token_start(pos):
                self._emit(text[pos:self._string_end(pos + 2, escapes=False)], pos)
            elif c in "uU" and nxt == "&" and text[pos + 2:pos + 3] in ("'", '"') and self._token_start(pos):
                if text[pos + 2] == "'":
                    self._emit(text[pos:self._string_end(pos + 3, escapes=False)], pos)
                else:
                    self._emit(text[pos:self._ident_end(pos + 3)], pos)
            elif c == '"':
                self._emit(text[pos:self._ident_end(pos + 1)], pos)
            elif c == "$" and self._token_start(pos) and (m := _DOLLAR_DELIM.match(text, pos)):
                end = text.find(m.group(0), m.end())
                if end < 0:
                    raise self.error(pos, f"unterminated dollar-quoted string {m.group(0)}")
                self._emit(text[pos:end + len(m.group(0))], pos)
                self.pos = end + len(m.group(0))
            elif c == "(":
                self.paren_offsets.append(pos)
                self._emit(c, pos)
                self.pos += 1
            elif c == ")":
                if self.paren_offsets:
                    self.paren_offsets.pop()
                self._emit(c, pos)
                self.pos += 1
            elif c == ";":
                self._emit(c, pos)
                self.pos += 1
                if not self.paren_offsets and self.begin_depth == 0:
                    return "semicolon"
            elif c == "\\":
                if nxt in (";", ":"):
                    self._emit(nxt, pos)
                    self.pos += 2
                    if nxt == ";":
                        self.compound = True
                        self.heads = []
                else:
                    self.pos += 1
                    return "backslash"
            elif c == ":":
                self._colon(pos, nxt)
            elif m := _IDENT.match(text, pos):
                self._identifier(m.group(0))
                self._emit(m.group(0), pos)
                self.pos = m.end()
            else:
                self._emit(c, pos)
                self.pos += 1
        return "eof"

    def _token_start(self, pos: int) -> bool:
        return pos == 0 or not (self.text[pos - 1].isalnum() or self.text[pos - 1] in "_$")

    def _colon(self, pos: int, nxt: str) -> None:
        text = self.text
        if nxt in (":", "="):
            self._emit(text[pos:pos + 2], pos)  # a cast or :=
            self.pos += 2
            return
        m = _VAR_NAME.match(text, pos + 1)
        if m:
            if self.sql_start is None:
                self.sql_start = pos
            self.chunks.append("".join(self.parts))
            self.parts = []
            self.variables.append(m.group(0))
            self.variable_lines.append(self.loc(pos)[0])
            self.pos = m.end()
            return
        q = _PSQL_QUOTED_VAR.match(text, pos)
        if q:
            raise self.error(pos, f"pgbench does not replace {q.group(0)} (a psql form); write :{q.group(0)[2:-1]}, "
                                  "which is sent as a query parameter")
        self._emit(":", pos)
        self.pos += 1

    def _identifier(self, word: str) -> None:
        """psql's heuristic for CREATE FUNCTION ... BEGIN ATOMIC ... END, whose semicolons do not end the command."""
        low = word.lower()
        if len(self.heads) < 4:
            self.heads.append(_FUNCTION_WORDS.get(low, "-"))
        head = "".join(self.heads)
        if not self.paren_offsets and any(head.startswith(h) for h in _FUNCTION_HEADS):
            if low == "begin" or (low == "case" and self.begin_depth >= 1):
                self.begin_depth += 1
            elif low == "end" and self.begin_depth > 0:
                self.begin_depth -= 1

    def _comment_end(self, start: int) -> int:
        depth, pos, text = 0, start + 2, self.text
        while True:
            m = _COMMENT_MARK.search(text, pos)
            if not m:
                raise self.error(start, "unterminated /* comment")
            if m.group(0) == "/*":
                depth += 1
            elif depth == 0:
                self.pos = m.end()
                return m.end()
            else:
                depth -= 1
            pos = m.end()

    def _string_end(self, pos: int, escapes: bool) -> int:
        """The offset past the closing quote of a string whose content starts at `pos`."""
        text, n, start = self.text, len(self.text), pos - 1
        while True:
            while pos < n and text[pos] != "'":
                pos += 2 if (escapes and text[pos] == "\\") else 1
            if pos >= n:
                raise self.error(start, "unterminated quoted string")
            if text.startswith("''", pos):
                pos += 2
                continue
            m = _QUOTE_CONTINUES.match(text, pos + 1)
            if m:
                pos = m.end()
                continue
            self.pos = pos + 1
            return pos + 1

    def _ident_end(self, pos: int) -> int:
        text, start = self.text, pos - 1
        while True:
            end = text.find('"', pos)
            if end < 0:
                raise self.error(start, "unterminated quoted identifier")
            if text.startswith('""', end):
                pos = end + 2
                continue
            self.pos = end + 1
            return end + 1

    def _flush_sql(self) -> None:
        if self.sql_start is None:
            self._reset_sql()
            return
        if self.paren_offsets:
            raise self.error(self.paren_offsets[-1], "unbalanced parenthesis: this ( is never closed")
        chunks = self.chunks + ["".join(self.parts).rstrip()]
        shown = chunks[0] + "".join(f":{v}{c}" for v, c in zip(self.variables, chunks[1:], strict=True))
        line, col = self.loc(self.sql_start)
        self.commands.append(SqlCommand(len(self.commands), line, col, shown.split("\n")[0], tuple(chunks),
                                        tuple(self.variables), tuple(self.variable_lines), self.compound))
        self._reset_sql()

    # -- meta-commands --

    def _words(self) -> list[tuple[str, int]]:
        """Whitespace-separated words to the end of the line; a backslash-newline continues the line."""
        text, n = self.text, len(self.text)
        words: list[tuple[str, int]] = []
        while self.pos < n:
            c = text[self.pos]
            if c == "\n":
                self.pos += 1
                break
            if c in _META_SPACE:
                self.pos += 1
                continue
            if m := _CONTINUATION.match(text, self.pos):
                self.pos = m.end()
                continue
            start = self.pos
            while self.pos < n and text[self.pos] not in _META_SPACE and text[self.pos] != "\n":
                if _CONTINUATION.match(text, self.pos):
                    break
                self.pos += 1
            words.append((text[start:self.pos], start))
        return words

    def _one_word(self) -> tuple[str, int] | None:
        """The next word of the current line, without passing its end."""
        text, n = self.text, len(self.text)
        while self.pos < n:
            if text[self.pos] in _META_SPACE:
                self.pos += 1
            elif m := _CONTINUATION.match(text, self.pos):
                self.pos = m.end()
            else:
                break
        if self.pos >= n or text[self.pos] == "\n":
            return None
        start = self.pos
        while self.pos < n and text[self.pos] not in _META_SPACE and text[self.pos] != "\n":
            if _CONTINUATION.match(text, self.pos):
                break
            self.pos += 1
        return text[start:self.pos], start

    def _meta(self) -> None:
        slash = self.pos - 1
        line, col = self.loc(slash)
        first = self._one_word()
        if first is None:
            raise self.error(slash, "a backslash must start a meta-command such as \\set")
        word = first[0]
        name = word.lower()
        index = len(self.commands)
        if name in ("set", "if", "elif"):
            target = ""
            if name == "set":
                target_word = self._one_word()
                if target_word is None:
                    raise self.error(slash, "\\set needs a variable name and an expression")
                target = target_word[0]
                if not valid_variable_name(target):
                    raise self.error(target_word[1], f"invalid variable name {target!r}; a name is letters, digits "
                                                     "and _, not starting with a digit")
            try:
                node, self.pos = parse_expression(self.text, self.pos)
            except ExprSyntaxError as exc:
                raise self.error(exc.offset, f"\\{name}: {exc}") from None
            shown = self.text[slash:self.pos].rstrip("\n").split("\n")[0]
            if name == "set":
                self.commands.append(SetCommand(index, line, col, shown, target, node))
            else:
                self.commands.append(IfCommand(index, line, col, shown, name, node))
            return
        words = [first] + self._words()
        shown = " ".join(["\\" + w for w, _ in words[:1]] + [w for w, _ in words[1:]])
        args = [w for w, _ in words[1:]]
        if name == "sleep":
            self.commands.append(self._sleep(index, line, col, shown, slash, words))
        elif name in ("else", "endif", "startpipeline", "syncpipeline", "endpipeline"):
            if args:
                raise self.error(words[1][1], f"\\{name} takes no argument")
            if name == "else":
                self.commands.append(ElseCommand(index, line, col, shown))
            elif name == "endif":
                self.commands.append(EndifCommand(index, line, col, shown))
            else:
                self.commands.append(PipelineCommand(index, line, col, shown, name[:-len("pipeline")]))
        elif name in ("gset", "aset"):
            if len(args) > 1:
                raise self.error(words[2][1], f"\\{name} takes at most one argument, a prefix for the variables")
            self._assign(name, args[0] if args else "", slash)
        elif name in ("shell", "setshell"):
            if name == "setshell":
                if len(args) < 2:
                    raise self.error(slash, "\\setshell needs a variable name and a command")
                if not valid_variable_name(args[0]):
                    raise self.error(words[1][1], f"invalid variable name {args[0]!r}")
                self.commands.append(ShellCommand(index, line, col, shown, tuple(args[1:]), args[0]))
            else:
                if not args:
                    raise self.error(slash, "\\shell needs a command")
                self.commands.append(ShellCommand(index, line, col, shown, tuple(args), None))
        else:
            known = ", ".join("\\" + m for m in META_COMMANDS)
            raise self.error(slash, f"unknown meta-command \\{word}; the meta-commands are {known}")

    def _sleep(self, index: int, line: int, col: int, shown: str, slash: int,
               words: list[tuple[str, int]]) -> SleepCommand:
        if len(words) < 2:
            raise self.error(slash, "\\sleep needs a duration, such as \\sleep 10 ms")
        if len(words) > 3:
            raise self.error(words[3][1], "\\sleep takes a number or :variable and an optional unit (us, ms, s)")
        arg, arg_at = words[1]
        unit = words[2][0] if len(words) == 3 else None
        unit_at = words[2][1] if len(words) == 3 else arg_at
        variable = None
        amount = 0
        if arg.startswith(":"):
            variable = arg[1:]
        else:
            m = re.match(r"[+-]?(\d*)", arg)
            assert m is not None
            rest = arg[m.end():]
            if not m.group(1) or (rest and unit is not None):
                raise self.error(arg_at, f"invalid sleep time {arg!r}; it must be an integer, maybe with a unit")
            amount = int(m.group(0))
            if rest:
                unit, unit_at = rest, arg_at + m.end()
        if unit is not None and unit.lower() not in SLEEP_UNITS_US:
            raise self.error(unit_at, f"unrecognized time unit {unit!r}; it must be us, ms or s")
        scale = SLEEP_UNITS_US[unit.lower()] if unit is not None else SLEEP_UNITS_US["s"]
        return SleepCommand(index, line, col, shown, amount, variable, scale)

    def _assign(self, kind: str, prefix: str, slash: int) -> None:
        prev = self.commands[-1] if self.commands else None
        if not isinstance(prev, SqlCommand) or prev.assign is not None:
            raise self.error(slash, f"\\{kind} must follow an SQL command")
        self.commands[-1] = dataclasses.replace(prev, assign=kind, prefix=prefix)

    # -- script-wide checks --

    def _link_conditionals(self) -> None:
        """Check \\if nesting as pgbench does before a run, and record where each branch continues."""
        stack: list[list[int]] = []  # per open \if: the indices of its \if, \elif... and \else
        for i, cmd in enumerate(self.commands):
            if isinstance(cmd, IfCommand) and cmd.kind == "if":
                stack.append([i])
            elif isinstance(cmd, IfCommand | ElseCommand):
                what = "\\elif" if isinstance(cmd, IfCommand) else "\\else"
                if not stack:
                    raise self._at(cmd, f"{what} without a matching \\if")
                if isinstance(self.commands[stack[-1][-1]], ElseCommand):
                    raise self._at(cmd, f"{what} after \\else")
                stack[-1].append(i)
            elif isinstance(cmd, EndifCommand):
                if not stack:
                    raise self._at(cmd, "\\endif without a matching \\if")
                branches = stack.pop()
                for j, b in enumerate(branches):
                    nxt = branches[j + 1] if j + 1 < len(branches) else i
                    c = self.commands[b]
                    if isinstance(c, IfCommand):
                        self.commands[b] = dataclasses.replace(c, next_branch=nxt, endif=i)
                    elif isinstance(c, ElseCommand):  # a branch index is always an \if, \elif or \else
                        self.commands[b] = dataclasses.replace(c, endif=i)
        if stack:
            raise self._at(self.commands[stack[-1][0]], "\\if without a matching \\endif")

    def _check_pipelines(self) -> None:
        open_at: Command | None = None
        for cmd in self.commands:
            if isinstance(cmd, PipelineCommand):
                if cmd.kind == "start" and open_at is not None:
                    raise self._at(cmd, "\\startpipeline inside a pipeline; end the first with \\endpipeline")
                if cmd.kind != "start" and open_at is None:
                    raise self._at(cmd, f"\\{cmd.kind}pipeline outside a pipeline; start one with \\startpipeline")
                open_at = cmd if cmd.kind != "end" else None
            elif isinstance(cmd, SqlCommand) and cmd.assign and open_at is not None:
                raise self._at(cmd, f"\\{cmd.assign} is not allowed in a pipeline")
        if open_at is not None:
            raise self._at(open_at, "the pipeline is still open at the end of the script; add \\endpipeline")

    def _at(self, cmd: Command, message: str) -> ScriptError:
        return ScriptError(f"{where(self.name, cmd.line, cmd.column)}: {sentence(message)}", source=self.name,
                           line=cmd.line, column=cmd.column)
