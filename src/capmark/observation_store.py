"""Observations in the results folder: one folder per observation holding results.sqlite, beside the runs.

The observation record (settings, target, host, status with the collector's pid) is one row; each finished interval
is one row committed as it ends, its deltas as zlib-compressed JSON (a day of 60 s intervals with 200 statements
stays in tens of megabytes); events are rows of their own. A killed collector leaves every finished interval
readable; loading it says `killed` instead of `running` once its process is gone.

The file is told from a run's by its `observation` table (store.load_run refuses it with one sentence).
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import socket
import sqlite3
import zlib
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import psutil

from capmark.errors import CapmarkError
from capmark.observations import (
    OBSERVATION_FORMAT,
    OBSERVATION_KIND,
    ActivityCell,
    DeviceDelta,
    HostDelta,
    Interval,
    IntervalStatus,
    Observation,
    ObservationEvent,
    ObservationSettings,
    RoundTrips,
    SessionKey,
    SessionUse,
    StatementDelta,
)
from capmark.store import DB_NAME, HEARTBEAT_MARGIN_S, check_writable, now, process_alive, read_only

TABLE = "observation"  # the table that makes a results file an observation's
SCHEMA = """
create table if not exists observation (
  observation_id text primary key, kind text, format int, created_at text, status text, reason text, settings text,
  target text, host text, block_size int, host_cores int, statements_available int, pid int, pid_started real,
  hostname text, heartbeat_at text);
create table if not exists interval (
  ordinal int primary key, start real, end_ real, status text, reason text, data blob);
create table if not exists event (at real, kind text, text text);
"""
# zlib's level: 6 (its default) packs the repetitive JSON of an interval about 8 to 1 at a millisecond or two
COMPRESSION_LEVEL = 6
# A collector on another host writes its heartbeat with every interval; silent for this long (store's margin for a
# run) past one interval, it is taken for gone.


def new_observation_id() -> str:
    return "obs-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


def is_observation(folder: Path) -> bool:
    """Whether the folder's results file is an observation's (False for a run's, a missing or unreadable file)."""
    path = folder / DB_NAME
    if not path.is_file():
        return False
    try:
        db = read_only(path)
        try:
            return db.execute("select count(*) from sqlite_master where type = 'table' and name = ?",
                              (TABLE,)).fetchone()[0] > 0
        finally:
            db.close()
    except sqlite3.Error:
        return False


class ObservationStore:
    """Writes one observation folder; the folder appears with the observation record (begin), never before."""

    def __init__(self, results_dir: Path, observation_id: str | None = None) -> None:
        self.observation_id = observation_id or new_observation_id()
        self.folder = results_dir / self.observation_id
        self._db: sqlite3.Connection | None = None
        check_writable(results_dir, self.observation_id)

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise CapmarkError("The observation was not begun; nothing is stored.")
        return self._db

    def begin(self, observation: Observation) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.folder / DB_NAME)
        self._db.executescript(SCHEMA)
        self._db.execute(f"pragma user_version = {OBSERVATION_FORMAT}")
        me = psutil.Process()
        observation.observation_id = self.observation_id
        self._db.execute(
            "insert or replace into observation values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (self.observation_id, OBSERVATION_KIND, observation.format, observation.created_at, observation.status,
             observation.reason, _json(asdict(observation.settings)), _json(observation.target),
             _json(observation.host), observation.block_size, observation.host_cores,
             int(observation.statements_available), me.pid, me.create_time(), socket.gethostname(), now()))
        self._db.commit()

    def save_interval(self, interval: Interval) -> None:
        data = zlib.compress(_json(asdict(interval)).encode(), COMPRESSION_LEVEL)
        self.db.execute("insert or replace into interval values (?,?,?,?,?,?)",
                        (interval.ordinal, interval.start, interval.end, interval.status.value, interval.reason, data))
        self.db.execute("update observation set heartbeat_at = ?", (now(),))
        self.db.commit()

    def save_event(self, event: ObservationEvent) -> None:
        self.db.execute("insert into event values (?,?,?)", (event.at, event.kind, event.text))
        self.db.commit()

    def finish(self, status: str, reason: str) -> None:
        self.db.execute("update observation set status = ?, reason = ?, heartbeat_at = ?", (status, reason, now()))
        self.db.commit()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


# --- reading ---------------------------------------------------------------------------------------------------

def _key(d: dict[str, Any]) -> SessionKey:  # open-ended: a stored record's JSON
    return SessionKey(**d)


def _only(cls: type, d: dict[str, Any]) -> dict[str, Any]:  # open-ended: a stored record's JSON
    """The fields the dataclass has (a record written by a newer capmark may hold more)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def interval_of(d: dict[str, Any]) -> Interval:  # open-ended: a stored interval's JSON
    host = d.get("host")
    return Interval(
        ordinal=d["ordinal"], start=d["start"], end=d["end"], status=IntervalStatus(d["status"]),
        reason=d.get("reason", ""),
        statements=[StatementDelta(**_only(StatementDelta, s)) for s in d.get("statements", [])],
        statements_total=d.get("statements_total", 0),
        activity=[ActivityCell(**{**_only(ActivityCell, a), "session": _key(a["session"])})
                  for a in d.get("activity", [])],
        sessions=[SessionUse(**{**_only(SessionUse, s), "session": _key(s["session"])}) for s in d.get("sessions", [])],
        activity_samples=d.get("activity_samples", 0),
        collector_transactions=d.get("collector_transactions"),
        host=HostDelta(cpu_s=host["cpu_s"], devices=[DeviceDelta(**_only(DeviceDelta, x)) for x in host["devices"]],
                       memory=host["memory"], run_queue=host["run_queue"], pressure=host["pressure"])
        if host else None,
        round_trips=RoundTrips(**_only(RoundTrips, d["round_trips"])) if d.get("round_trips") else None,
        database=d.get("database", {}))


def load_observation(folder: Path) -> Observation:
    """The observation stored in `folder`, with every finished interval; `killed` when it says running but its
    collector is gone."""
    path = folder / DB_NAME
    if not path.is_file():
        raise CapmarkError(f"{folder} holds no capmark observation (no {DB_NAME}); name an observation folder or id.")
    try:
        db = read_only(path)
        try:
            return _read(db, folder)
        finally:
            db.close()
    except sqlite3.Error as err:
        if "no such table" in str(err):
            raise CapmarkError(f"{folder} holds a capmark run, not an observation; name a folder that capmark observe "
                               "wrote.") from None
        raise CapmarkError(f"{path} cannot be read as an observation ({err}); restore it from a copy, or remove the "
                           f"folder {folder}.") from None


def _read(db: sqlite3.Connection, folder: Path) -> Observation:
    version = int(db.execute("pragma user_version").fetchone()[0])
    if version > OBSERVATION_FORMAT:
        raise CapmarkError(f"{folder / DB_NAME} was written by a newer capmark (observation format {version}; this "
                           f"capmark reads up to {OBSERVATION_FORMAT}); upgrade capmark to read it.")
    row = db.execute("select observation_id, format, created_at, status, reason, settings, target, host, block_size, "
                     "host_cores, statements_available, pid, pid_started, hostname, heartbeat_at "
                     "from observation").fetchone()
    if row is None:
        raise CapmarkError(f"{folder / DB_NAME} holds no observation record; the observation stopped before it began.")
    (oid, fmt, created, status, reason, settings, target, host, block, cores, statements, pid, started, hostname,
     heartbeat) = row
    obs = Observation(observation_id=oid, created_at=created, status=status, reason=reason or "",
                      settings=ObservationSettings(**_only(ObservationSettings, json.loads(settings))),
                      target=json.loads(target), host=json.loads(host), block_size=block, host_cores=cores,
                      statements_available=bool(statements), format=fmt)
    for (data,) in db.execute("select data from interval order by ordinal"):
        obs.intervals.append(interval_of(json.loads(zlib.decompress(data))))
    for at, kind, text in db.execute("select at, kind, text from event order by rowid"):
        obs.events.append(ObservationEvent(at=at, kind=kind, text=text))
    _mark_dead(obs, pid, started, hostname, heartbeat)
    return obs


def _mark_dead(obs: Observation, pid: int | None, started: float | None, hostname: str | None,
               heartbeat: str | None) -> None:
    if obs.status != "running" or pid is None:
        return
    if hostname == socket.gethostname():
        if process_alive(pid, started):
            return
        obs.status = "killed"
        obs.reason = (f"the collector's process (pid {pid}) is gone: it was killed or crashed; every finished "
                      "interval is kept")
        return
    try:
        silent = (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(heartbeat or "")).total_seconds()
    except ValueError:
        return
    if silent > obs.settings.interval_s + HEARTBEAT_MARGIN_S:
        obs.status = "killed"
        obs.reason = (f"the collector (pid {pid} on host {hostname}) has not written since {heartbeat}: it was "
                      "probably killed or crashed")


def resolve_observation(ref: str | None, results_dir: Path) -> Path:
    """An observation folder from its id, a folder path, or (None) the latest observation under results_dir."""
    if ref:
        for folder in (Path(ref), results_dir / ref):
            if is_observation(folder):
                return folder
        raise CapmarkError(f"No capmark observation '{ref}' found (neither an observation folder nor an observation "
                           f"id under {results_dir}); capmark results --results-dir {results_dir} lists the stored ones.")
    found = sorted((p.parent for p in results_dir.glob(f"*/{DB_NAME}") if is_observation(p.parent)),
                   key=lambda p: p.name, reverse=True)
    if not found:
        raise CapmarkError(f"There is no observation under {results_dir}; run `capmark observe` first or pass an "
                           "observation folder.")
    return found[0]
