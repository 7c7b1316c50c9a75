"""What the results folder holds: each stored run and observation in one line, newest first, so that a user can find
the one to report, compare or plan from by its id, without opening the folders. A file that cannot be read is
listed with the sentence that says why, never skipped and never the end of the listing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from capmark.analysis.document import Document
from capmark.errors import CapmarkError
from capmark.observation_store import is_observation, load_observation
from capmark.observations import Observation
from capmark.results import RunResult
from capmark.store import DB_NAME, load_run


@dataclass(frozen=True, kw_only=True)
class StoredEntry:
    """One run or observation: what it is, when, how it ended, what it holds and what it measured or observed."""

    id: str  # its folder's name, which every command takes
    kind: str  # "run" or "observation"
    folder: str
    created_at: str
    status: str  # as its own loader says: complete or ended; failed, interrupted, killed, running, ...
    reason: str  # how it ended, as stored
    contents: str  # what it holds, in words: its tests and steps, or its intervals
    target: str  # the database, as its engine names itself, and where (the password masked as it was stored)


@dataclass(frozen=True, kw_only=True)
class UnreadableEntry:
    folder: str
    problem: str  # capmark's sentence for it


@dataclass(kw_only=True)
class StoredList(Document):
    """capmark results: the runs and observations under one results folder, newest first."""

    SCHEMA = "capmark.results/1"

    results_dir: str
    entries: list[StoredEntry] = field(default_factory=list)
    unreadable: list[UnreadableEntry] = field(default_factory=list)


def list_stored(results_dir: Path) -> StoredList:
    """Every folder under results_dir that holds a results file, read by the loader of its kind (which also tells a
    run or collector that was killed from one still running)."""
    listing = StoredList(results_dir=str(results_dir))
    for folder in sorted(p.parent for p in results_dir.glob(f"*/{DB_NAME}")):
        try:
            if is_observation(folder):
                listing.entries.append(_observation_entry(folder, load_observation(folder)))
            else:
                listing.entries.append(_run_entry(folder, load_run(folder)))
        except CapmarkError as err:
            listing.unreadable.append(UnreadableEntry(folder=str(folder), problem=str(err)))
    listing.entries.sort(key=lambda e: e.created_at, reverse=True)
    return listing


def _target(target: dict[str, object]) -> str:  # open-ended: a stored target, as its capmark wrote it
    version = str(target.get("version") or target.get("engine") or "unknown database")
    name = " ".join(version.split()[:2]).rstrip(",")  # "PostgreSQL 18.6", "MariaDB 11.4.2-MariaDB" ...
    if target.get("embedded"):
        return f"embedded {name}"
    where = str(target.get("dsn_redacted") or "")
    return f"{name} at {where}" if where else name


def _run_entry(folder: Path, run: RunResult) -> StoredEntry:
    steps = sum(len(t.steps) for t in run.tests)
    tests = ", ".join(t.workload for t in run.tests) or "no test"
    return StoredEntry(id=folder.name, kind="run", folder=str(folder), created_at=run.created_at, status=run.status,
                       reason=run.reason, contents=f"{tests}; {steps} step{'s' * (steps != 1)}",
                       target=_target(run.target))


def _observation_entry(folder: Path, obs: Observation) -> StoredEntry:
    intervals = len(obs.intervals)
    broken = intervals - len(obs.usable())
    length_s = sum(i.length_s for i in obs.intervals)
    contents = (f"{intervals} interval{'s' * (intervals != 1)} of {obs.settings.interval_s:g} s, "
                f"{_duration(length_s)} observed")
    if broken:
        contents += f", {broken} broken"
    return StoredEntry(id=folder.name, kind="observation", folder=str(folder), created_at=obs.created_at,
                       status=obs.status, reason=obs.reason, contents=contents, target=_target(obs.target))


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    if hours:
        return f"{hours} h {m:02d} min"
    return f"{m} min {s:02d} s" if m else f"{s} s"
