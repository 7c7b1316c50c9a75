"""What the observe tests share: a sink that lets a test act between stored intervals and stop the collector when it
has what it checks, and a progress that keeps every sentence the collector says."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capmark.observation_store import ObservationStore, load_observation
from capmark.observations import Interval, Observation, ObservationEvent
from capmark.observe.collector import observe
from capmark.observe.spec import ObserveSpec


@dataclass
class Recorder:
    """The store, and each interval as it is stored, so that the test can act between intervals."""

    store: ObservationStore
    stored: list[Interval] = field(default_factory=list)
    on_interval: Callable[[int], None] = lambda n: None
    enough: Callable[[int], bool] = lambda n: False  # the test has what it checks once n intervals are stored
    stop: threading.Event = field(default_factory=threading.Event)

    def begin(self, observation: Observation) -> None:
        self.store.begin(observation)

    def save_interval(self, interval: Interval) -> None:
        self.store.save_interval(interval)
        self.stored.append(interval)
        self.on_interval(len(self.stored))
        if self.enough(len(self.stored)):
            self.stop.set()  # as Ctrl-C does: the collector ends at its next wait, keeping every stored interval

    def save_event(self, event: ObservationEvent) -> None:
        self.store.save_event(event)

    def finish(self, status: str, reason: str) -> None:
        self.store.finish(status, reason)


def observe_for(dsn: str, results: Path, seconds: float, on_interval: Callable[[int], None] = lambda n: None,
                enough: Callable[[int], bool] = lambda n: False) -> Observation:
    """Observed at 1 s intervals for `seconds` at most, or until `enough` says the test has what it checks."""
    recorder = Recorder(ObservationStore(results), on_interval=on_interval, enough=enough)
    try:
        observe(ObserveSpec(dsn=dsn, interval_s=1.0, planned_s=seconds, results_dir=results), recorder,
                stop=recorder.stop)
    finally:
        recorder.store.close()
    return load_observation(recorder.store.folder)


@dataclass
class Said:
    """A progress that keeps every sentence the collector says (and ignores its progress line)."""

    sentences: list[str] = field(default_factory=list)

    def say(self, message: str) -> None:
        self.sentences.append(message)

    def update(self, state: Any) -> None:
        pass
