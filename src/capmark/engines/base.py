"""What the rest of capmark needs from a database target, independent of the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Capability:
    """One optional instrument: available or not, and why not."""

    available: bool
    reason: str = ""


@dataclass
class TargetInfo:
    """Plain description of a connected target, stored with every run."""

    engine: str
    version: str
    version_num: int
    dsn_redacted: str
    embedded: bool
    local: bool
    local_reason: str = ""
    data_directory: str | None = None
    postmaster_pid: int | None = None
    settings: dict[str, str] = field(default_factory=dict)
    capabilities: dict[str, Capability] = field(default_factory=dict)
    # pg_stat_statements qualified by the schema its extension lives in (capmark's own on the embedded server)
    statements_view: str = "pg_stat_statements"
    host_metrics: str = ""  # which source measured the database host: local, sql, node-exporter or none

    def has(self, name: str) -> bool:
        cap = self.capabilities.get(name)
        return bool(cap and cap.available)

    def why_not(self, name: str) -> str:
        cap = self.capabilities.get(name)
        return cap.reason if cap else f"{name} is not known to capmark for this engine"


class Target(Protocol):
    """An engine adapter: connections, capabilities, statistics snapshots."""

    info: TargetInfo

    def connect(self, *, application_name: str = "capmark") -> Any: ...

    def snapshot(self, conn: Any) -> dict[str, Any]: ...

    def close(self) -> None: ...
