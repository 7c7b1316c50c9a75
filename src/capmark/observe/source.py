"""What the collector needs of an engine (ServerSource), and the parts of opening an observation every engine
shares: the observation's settings and the host's facts as the observation keeps them."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from capmark.collect.hostsource import HostSource, NoHost
from capmark.engines.base import TargetInfo
from capmark.engines.postgres.observe import ActivityRow
from capmark.observations import Observation, ObservationSettings
from capmark.observe import deltas
from capmark.observe.host import ProcessSampler, devices_of
from capmark.observe.sessions import SessionTracker
from capmark.observe.spec import ObserveSpec


class Say(Protocol):
    def say(self, message: str) -> None: ...


class ServerSource(Protocol):
    """The engine's side of an observation (observe/postgres_source.py, observe/mysql_source.py): its sessions at each
    sample, its cumulative counters at each interval's edge, and its connection."""

    errors: tuple[type[BaseException], ...]  # what a lost connection or an unreadable view raises

    @property
    def host(self) -> HostSource: ...

    @property
    def procs(self) -> ProcessSampler: ...  # each sample's processes (or threads), the run queue, the host's busy

    def wait_of(self, row: ActivityRow) -> tuple[str, str]: ...  # a sample's wait class and the engine's own wait

    def sample(self, tracker: SessionTracker) -> None: ...

    def round_trip(self) -> float: ...

    def read(self) -> Any: ...

    def counters(self, before: Any, after: Any) -> tuple[deltas.Counters | None, deltas.Break | None]: ...

    def restart(self, before: Any, after: Any) -> str | None: ...

    def lost(self) -> bool: ...

    def error_text(self, err: BaseException) -> str: ...

    def rollback(self) -> None: ...

    def reconnect(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class Opened:
    """A server made ready for observing: its source, the observation's record, the devices to read, and what it
    could not see (each one sentence, stored as an event)."""

    source: ServerSource
    observation: Observation
    devices: list[str]
    notes: list[str]


def settings_of(spec: ObserveSpec, host: HostSource) -> ObservationSettings:
    return ObservationSettings(interval_s=spec.interval_s, sample_hz=spec.sample_hz, top_statements=spec.top_statements,
                               store_query_text=spec.store_query_text, host_metrics=host.name,
                               planned_s=spec.planned_s)


HostFactsRecord = dict[str, Any]  # open-ended: HostFacts' fields and the devices, as Observation.host keeps them


def host_facts(host: HostSource, info: TargetInfo, progress: Say, notes: list[str]) -> tuple[list[str],
                                                                                           HostFactsRecord]:
    """The devices to read and the host's facts as the observation keeps them; a host without counters noted."""
    info.host_metrics = host.name
    data_device, device_note = host.data_device(info.data_directory)
    devices = devices_of(host, data_device)
    if isinstance(host, NoHost):
        notes.append(f"Host counters are not collected: {host.reason}.")
        progress.say(notes[-1])
    return devices, {**asdict(host.facts), "devices": devices, "data_device": data_device, "device_note": device_note,
                     "postmaster_pid": getattr(host, "postmaster_pid", None)}


def first_line(err: BaseException) -> str:
    """An error's first line without its closing full stop (it goes inside a sentence), or its type's name."""
    text = str(err).strip()
    return text.splitlines()[0].rstrip(".") if text else type(err).__name__


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
