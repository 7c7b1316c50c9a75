"""Every untyped dict in src/ says why it is open-ended.

A stage passes typed records (dataclasses, TypedDicts) to the next; a `dict[str, Any]` is kept only where the keys
are truly not known in advance (an engine's raw counters, user-defined parameters, JSON passed through), and a
comment starting with `# open-ended:` on the same line or the line above says which. A new untyped dict without
that comment fails here, so a shape that is really fixed gets a type instead of a key everybody must remember.
"""

from __future__ import annotations

import re
from pathlib import Path

import capmark

SRC = Path(capmark.__file__).parent
UNTYPED = re.compile(r"dict\[str,\s*Any\]")
MARK = "# open-ended:"


def unexplained(text: str) -> list[int]:
    """Line numbers (1-based) of untyped dicts with no `# open-ended:` comment on their line or the one above."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        code = line.split("#", 1)[0]
        if not UNTYPED.search(code):
            continue
        above = lines[number - 2] if number > 1 else ""
        if MARK in line or above.strip().startswith(MARK):
            continue
        found.append(number)
    return found


def test_the_check_finds_an_unexplained_dict_and_accepts_an_explained_one() -> None:
    assert unexplained("x: dict[str, Any] = {}\n") == [1]
    assert unexplained("x: dict[str,Any] | None = None\n") == [1]
    assert unexplained("# open-ended: the engine's raw counters\nx: dict[str, Any] = {}\n") == []
    assert unexplained("x: dict[str, Any] = {}  # open-ended: user parameters\n") == []
    assert unexplained("# a comment about dict[str, Any] is not code\n") == []
    assert unexplained("y = 1  # open-ended: misplaced\n\nx: dict[str, Any] = {}\n") == [3]


def test_every_untyped_dict_in_src_says_why_it_is_open_ended() -> None:
    offenders = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py"))
                 for n in unexplained(path.read_text(encoding="utf-8"))]
    assert not offenders, (f"{len(offenders)} untyped dicts without an '{MARK}' comment (give them a type, or say "
                           f"why their keys are open): " + ", ".join(offenders))
