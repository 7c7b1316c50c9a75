"""How a capacity document becomes JSON: every document is a dataclass; `to_json` writes its fields (nested
documents, dataclasses, lists and dicts element by element) under a `schema` name and version.

The analysis layer above has the same convention for run documents; capacity sits below it, so it keeps its own
few lines instead of importing upwards."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar

# open-ended: a document's JSON text as Python values; the document's own type is the record, this only its output
JsonObject = dict[str, Any]


def to_jsonable(value: Any) -> Any:
    """Plain JSON values: dataclasses field by field, containers element by element, NaN and infinity as None
    (JSON has neither), enums by value."""
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(kw_only=True)
class CapacityDocument:
    """A top-level capacity document: `schema` names its format and version."""

    SCHEMA: ClassVar[str] = ""

    def to_json(self) -> JsonObject:
        return {"schema": self.SCHEMA, **{f.name: to_jsonable(getattr(self, f.name)) for f in fields(self)}}
