"""Running capmark's command line in this process, as the console script does, and the one-sentence rule for
what it says on bad input (shared by the bad-input, store-damage and compare tests)."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import pytest

from capmark import cli


def invoke(args: list[str], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """capmark.cli.main as the console script runs it; its exit code, stdout and stderr."""
    monkeypatch.setattr(sys, "argv", ["capmark", *args])
    capsys.readouterr()
    try:
        cli.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def completed(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """capmark.cli.main run in this process with args (and env's variables set for the call), as `python -m
    capmark.cli` runs it in another: its exit code, stdout and stderr. For commands that read stored runs, where a
    new interpreter only adds its imports (about a second a call); what a real process adds (its start, its
    signals, its exit) the subprocess tests check."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["capmark", *args])
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cli.main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return subprocess.CompletedProcess(["capmark", *args], code, out.getvalue(), err.getvalue())


def assert_one_sentence(code: int, out: str, err: str, *words: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr that is one sentence holding every word; the line."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    line = lines[0].strip()
    assert line.startswith("capmark: ") and line.endswith("."), line
    assert "Traceback" not in err and "unexpected" not in line, line
    assert not re.search(r"[a-z)]\. [A-Z]", line), f"more than one sentence: {line}"
    for word in words:
        assert word.lower() in line.lower(), f"{word!r} not in: {line}"
    assert out == "", out
    return line
