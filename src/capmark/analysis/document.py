"""What every analysis document shares: a schema name, typed fields, and one way to JSON.

An analysis turns a stored run into one document per question (demands, diagnosis, calibration, what-if,
sizing, anticipation, run export, comparison). Renderers (console, HTML, JSON) read these documents and
nothing else, so a figure is computed once per command and shown the same way everywhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Generic, TypeVar

# open-ended: a document's JSON text as Python values; the document's own type is the record, this only its output
JsonObject = dict[str, Any]


def to_jsonable(value: Any) -> Any:
    """Plain JSON values from a document's fields: nested documents by their own to_json, other
    dataclasses field by field, containers element by element."""
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


@dataclass(kw_only=True)
class Document:
    """A top-level analysis document: `schema` names its format and version (documented in docs/json.md)."""

    SCHEMA: ClassVar[str] = ""

    def to_json(self) -> JsonObject:
        return {"schema": self.SCHEMA, **{f.name: to_jsonable(getattr(self, f.name)) for f in fields(self)}}


@dataclass(kw_only=True)
class Payload:
    """One test's answer to a question; its fields appear at the top level of the test's JSON object."""

    def to_json(self) -> JsonObject:
        return {f.name: to_jsonable(getattr(self, f.name)) for f in fields(self)}


P = TypeVar("P", bound=Payload)


@dataclass(kw_only=True)
class TestAnswer(Generic[P]):
    """A test's answer, or why it has none: one test without a valid step must not cost the others theirs."""

    __test__ = False  # a document, not a test class (pytest collects names starting with Test)

    workload: str
    ordinal: int
    answer: P | None = None
    reason: str = ""

    @property
    def answered(self) -> bool:
        return self.answer is not None

    def to_json(self) -> JsonObject:
        head: JsonObject = {"workload": self.workload, "ordinal": self.ordinal, "answered": self.answered}
        return {**head, **self.answer.to_json()} if self.answer is not None else {**head, "reason": self.reason}


def field_names(cls: type) -> list[str]:
    """The JSON keys a document or payload type writes (docs/json.md is tested against these)."""
    names = [f.name for f in fields(cls)]
    return ["schema", *names] if issubclass(cls, Document) else names

