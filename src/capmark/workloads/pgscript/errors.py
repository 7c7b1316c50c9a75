"""Errors of pgbench scripts: one sentence that names the script, the line and (when known) the column."""

from __future__ import annotations

from capmark.errors import CapmarkError


class ScriptError(CapmarkError):
    """A script that cannot be read or run as written; the message names the file, line and column."""

    def __init__(self, message: str, *, source: str = "", line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.source = source
        self.line = line
        self.column = column


class ShellNotAllowed(ScriptError):
    """A script with \\shell or \\setshell, refused before it runs because shell commands are not allowed."""


class ScriptRuntimeError(ScriptError):
    """A command failed while the script ran (an expression, a variable, a server error pgbench would not retry).

    `sqlstate` is the server's code when the server raised it, so that a caller can tell a lost connection from
    a script bug."""

    def __init__(self, message: str, *, source: str = "", line: int = 0, sqlstate: str | None = None) -> None:
        super().__init__(message, source=source, line=line)
        self.sqlstate = sqlstate


class ExprError(Exception):
    """An expression failed to evaluate (division by zero, overflow, a bad argument); the interpreter adds where."""


def where(source: str, line: int, column: int = 0) -> str:
    """The place prefix of every message: 'my.sql line 4, column 12'."""
    return f"{source} line {line}, column {column}" if column else f"{source} line {line}"


def sentence(text: str) -> str:
    """End a message with exactly one full stop, so that every error reads as one sentence."""
    text = text.rstrip()
    return text if text.endswith((".", "?", "!")) else text + "."
