"""The JSON outline of every analysis document, generated from its types (docs/json-schemas.md is this
module's output, and a test keeps the two equal): `python -m capmark.analysis.schemas > docs/json-schemas.md`."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from capmark.analysis.compare import Comparison
from capmark.analysis.demands import DemandsDocument
from capmark.analysis.diagnosis import DiagnosisDocument
from capmark.analysis.document import Document, TestAnswer
from capmark.analysis.export import RunExport
from capmark.analysis.headline import Headline
from capmark.analysis.planning import AnticipationDocument, CalibrationDocument, SizingDocument, WhatIfDocument

DOCUMENTS: list[type[Document]] = [RunExport, DemandsDocument, CalibrationDocument, WhatIfDocument, SizingDocument,
                                   AnticipationDocument, DiagnosisDocument, Comparison]
PARTS: list[type] = [Headline]  # typed parts of the HTML report, listed for reference

_INDENT = "  "


def _type_text(hint: Any, depth: int) -> str:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(_type_text(a, depth) for a in args)
    if origin is list:
        return f"[{_type_text(args[0], depth)}]"
    if origin is tuple:  # a fixed pair, e.g. an interval's (low, high): a JSON list
        return "[" + ", ".join(_type_text(a, depth) for a in args) + "]"
    if origin is dict:
        return "{" + f"{_type_text(args[0], depth)}: {_type_text(args[1], depth)}" + "}"
    if origin is TestAnswer or hint is TestAnswer:
        return _answer_text(args[0] if args else None, depth)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _fields_text(hint, depth)
    if typing.is_typeddict(hint):  # a JSON-shaped record: its keys, those it may leave out marked
        return _lines([(name, _type_text(h, depth + 1) + (" (not always present)" if optional else ""))
                       for name, (h, optional) in _keys(hint).items()], depth)
    if hint is type(None):
        return "null"
    if hint is Any:
        return "any"
    return {str: "str", int: "int", float: "number", bool: "bool"}.get(hint, getattr(hint, "__name__", str(hint)))


def _keys(typed: Any) -> dict[str, tuple[Any, bool]]:
    """A TypedDict's keys: each one's type and whether it may be left out. NotRequired is read from the annotation
    too: under `from __future__ import annotations` Python 3.11 does not count it in __optional_keys__."""
    out = {}
    for name, hint in typing.get_type_hints(typed, include_extras=True).items():
        optional = name in typed.__optional_keys__
        if typing.get_origin(hint) in (typing.NotRequired, typing.Required):
            optional = typing.get_origin(hint) is typing.NotRequired
            hint = typing.get_args(hint)[0]
        out[name] = (hint, optional)
    return out


def _lines(pairs: list[tuple[str, str]], depth: int) -> str:
    pad = _INDENT * (depth + 1)
    body = ",\n".join(f'{pad}"{name}": {text}' for name, text in pairs)
    return "{\n" + body + "\n" + _INDENT * depth + "}"


def _pairs(cls: type, depth: int) -> list[tuple[str, str]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, _type_text(hints[f.name], depth + 1)) for f in dataclasses.fields(cls)]


def _fields_text(cls: type, depth: int) -> str:
    return _lines(_pairs(cls, depth), depth)


def _answer_text(payload: type | None, depth: int) -> str:
    head = [("workload", "str"), ("ordinal", "int"), ("answered", "bool"),
            ("reason", "str (only where answered is false: why this test has no answer)")]
    taken = {name for name, _ in head}
    return _lines(head + [p for p in (_pairs(payload, depth) if payload else []) if p[0] not in taken], depth)


def outline(cls: type[Document]) -> str:
    return _lines([("schema", f'"{cls.SCHEMA}"'), *_pairs(cls, 0)], 0)


def _doc(cls: type) -> str:
    """The class's own docstring (not the signature dataclasses write in its place)."""
    text = (cls.__doc__ or "").strip()
    return "" if text.startswith(f"{cls.__name__}(") else text


def markdown() -> str:
    parts = ["# JSON documents: generated outlines\n",
             "Generated from capmark's document types by `python -m capmark.analysis.schemas`; a test fails when "
             "this file and the types disagree. What each field means is in json.md.\n"]
    for cls in DOCUMENTS:
        parts.append(f"## `{cls.SCHEMA}`\n\n{_doc(cls)}\n\n```text\n{outline(cls)}\n```\n")
    for part in PARTS:
        parts.append(f"## Part: `{part.__name__}`\n\n{_doc(part)}\n\n```text\n"
                     f"{_fields_text(part, 0)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(markdown(), end="")
