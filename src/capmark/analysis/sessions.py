"""Server settings that a test's workload set for its own sessions, where the run's server had another value.

A workload may set a setting on every job connection (wal-lat1: synchronous_commit = on; the SRV family: no
parallel workers). For that test the server's own value did not apply, so a change of it between two runs is no
change for the test, and a report that lists the server's value must say that the test ran with another. What a
workload sets is part of its definition in the catalogue (`Workload.session`, from the test's parameters), mapped
by the engine that measured the run, so this works on stored runs, without a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capmark.engines import registry as engines
from capmark.errors import CapmarkError
from capmark.results import RunResult, TestResult
from capmark.workloads import registry as workloads

# The words PostgreSQL accepts for a boolean setting, as SHOW prints them.
BOOLEAN = {"true": "on", "yes": "on", "false": "off", "no": "off"}


@dataclass(frozen=True)
class Overridden:
    """One setting a test's sessions set to another value than the run's server had."""

    setting: str
    session: str  # the value the workload set on its sessions
    server: str  # the server's value, which did not apply to the test


def same_value(a: str, b: str) -> bool:
    """Two values of one setting as the server and a workload spell them ("on" and "true" are the same)."""
    norm = [BOOLEAN.get(v.strip().lower(), v.strip().lower()) for v in (a, b)]
    return norm[0] == norm[1]


def session_settings(run: RunResult, test: TestResult) -> dict[str, str]:
    """What the test's workload set on every job session, as the run's engine applied it; {} for a workload that
    sets nothing or is not in the catalogue (a user's scripts)."""
    workload = workloads.WORKLOADS.get(test.workload)
    if workload is None or workload.session is None:
        return {}
    try:
        params = workload.resolve_params({k: str(v) for k, v in test.params.items()})
        engine = engines.named(str((run.environment.get("database") or {}).get("engine") or
                                   run.target.get("engine") or "") or None)
    except CapmarkError:  # a parameter or engine this capmark no longer knows: nothing can be said
        return {}
    applied = engine.session_settings(workload.session(params))
    return applied if isinstance(applied, dict) else {}


def server_settings(run: RunResult) -> dict[str, str]:
    """The server's settings the run recorded (a few key ones, not all)."""
    found: Any = (run.environment.get("database") or {}).get("settings") or {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def overridden(run: RunResult, test: TestResult) -> list[Overridden]:
    """The settings the test's sessions set to another value than the one the run recorded for its server."""
    server = server_settings(run)
    return [Overridden(name, value, server[name]) for name, value in session_settings(run, test).items()
            if name in server and not same_value(value, server[name])]


def overridden_sentence(workload: str, setting: Overridden) -> str:
    """What the report says of a setting the workload's sessions overrode, so that a reader does not credit the
    server's value with the figures."""
    return (f"{workload} ran its sessions with {setting.setting} = {setting.session}; "
            f"the server's {setting.server} did not apply.")
