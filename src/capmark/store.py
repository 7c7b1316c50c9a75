"""The results store: one folder per run holding results.sqlite (and report.html).

Every step is committed as soon as it ends, so an interrupted run keeps its completed steps.
Raw material is kept as JSON documents beside the derived KPMs so that later analyses can
recompute anything without the database.

The file carries its format in SQLite's user_version (FORMAT_VERSION). Format 0 is every run written before the
format had a number: the reader fills in what those lack (columns and fields added since default), so they open
as they are. A file of a newer format than this capmark knows is refused with one sentence, never misread.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import shutil
import socket
import sqlite3
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

import psutil

from capmark.errors import CapmarkError
from capmark.measure import record
from capmark.measure.kpm import Stored, stored_form
from capmark.results import MEASURES_VERSION, Measures, RunResult, StepResult, TestResult

DB_NAME = "results.sqlite"
# 2: each step carries its Measures record (key figures, latency, validity, decided once when it ended);
# 1: the format of November 2026 (runs with repetitions, stepping and per-step instruments); 0: unnumbered, older.
# A run of format 0 or 1 gets its steps' records built on loading, from the key figures it stored.
FORMAT_VERSION = 2
SCHEMA = """
create table if not exists run (
  run_id text primary key, created_at text, status text, spec text, environment text, target text,
  setup_notes text, setup_s real, reason text, pid int, pid_started real, host text, heartbeat_at text);
create table if not exists test (
  run_id text, ordinal int, workload text, status text, header text, primary key (run_id, ordinal));
create table if not exists derived (
  run_id text, test_ordinal int, kind text, doc text, primary key (run_id, test_ordinal, kind));
create table if not exists step (
  run_id text, test_ordinal int, ordinal int, jobs int, status text, kpm text, raw text,
  primary key (run_id, test_ordinal, ordinal));
"""
RUN_COLUMNS = ("run_id", "created_at", "status", "spec", "environment", "target", "setup_notes", "setup_s",
               "reason", "pid", "pid_started", "host", "heartbeat_at")
# A process start time read twice differs by clock rounding only; a pid reused by another program differs by more.
SAME_PROCESS_START_S = 1.0
# The heartbeat is written between steps, never inside one; a run on another host is only called abandoned
# when it has been silent for longer than one whole step plus this margin.
HEARTBEAT_MARGIN_S = 600.0


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=_default, separators=(",", ":"))


def _default(obj: Any) -> Any:
    if hasattr(obj, "__dataclass_fields__"):
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    if isinstance(obj, set | tuple):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


class RunStore:
    """Writes one run folder. A new run's folder appears with its run record, never empty before it."""

    def __init__(self, folder: Path, *, deferred: bool = False) -> None:
        self.folder = folder
        self._db: sqlite3.Connection | None = None if deferred else self._open()

    def _open(self) -> sqlite3.Connection:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / DB_NAME
        fresh = not path.exists()
        db = sqlite3.connect(path)
        if not fresh:
            _check_format(db, path)
        db.executescript(SCHEMA)
        if fresh:  # an existing run keeps the format it was measured in; derived documents do not change it
            db.execute(f"pragma user_version = {FORMAT_VERSION}")
        return db

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open()
        return self._db

    @classmethod
    def create(cls, results_dir: Path, run_id: str) -> RunStore:
        """Check now that results_dir is writable; the run folder itself is made when the run record is saved."""
        check_writable(results_dir, run_id)
        return cls(results_dir / run_id, deferred=True)

    def save_run(self, run: RunResult) -> None:
        """The run record, with the measuring process's pid and start time so a later reader can tell it died."""
        me = psutil.Process()
        run.pid, run.host, run.heartbeat_at = me.pid, socket.gethostname(), now()
        values = (run.run_id, run.created_at, run.status, _dumps(run.spec), _dumps(run.environment),
                  _dumps(run.target), _dumps(run.setup_notes), run.setup_s, run.reason, run.pid, me.create_time(),
                  run.host, run.heartbeat_at)
        self.db.execute(f"insert or replace into run ({', '.join(RUN_COLUMNS)}) values "
                        f"({', '.join('?' * len(RUN_COLUMNS))})", values)
        self.db.commit()

    def set_status(self, run_id: str, status: str, reason: str = "", *, only_if_running: bool = False) -> None:
        self.db.execute("update run set status = ?, reason = ?, heartbeat_at = ? where run_id = ?"
                        + (" and status = 'running'" if only_if_running else ""), (status, reason, now(), run_id))
        self.db.commit()

    def heartbeat(self, run_id: str) -> None:
        self.db.execute("update run set heartbeat_at = ? where run_id = ?", (now(), run_id))
        self.db.commit()

    def save_test(self, run_id: str, test: TestResult) -> None:
        header = test.header_dict()
        self.db.execute("insert or replace into test values (?,?,?,?,?)",
                        (run_id, test.ordinal, test.workload, test.status, _dumps(header)))
        self.db.commit()

    def save_step(self, run_id: str, test: TestResult, step: StepResult) -> None:
        kpm = stored_form(record.of(step, test.per_unit))  # the record's key figures, also in their own column
        self.db.execute("insert or replace into step values (?,?,?,?,?,?,?)",
                        (run_id, test.ordinal, step.ordinal, step.jobs, step.status, _dumps(kpm),
                         _dumps(step.to_dict())))
        self.db.commit()

    def save_derived(self, run_id: str, test_ordinal: int, kind: str, doc: Any) -> None:
        """Derived analyses (e.g. service demands) beside the raw material they were computed from."""
        try:
            self.db.execute("insert or replace into derived values (?,?,?,?)",
                            (run_id, test_ordinal, kind, _dumps(doc)))
            self.db.commit()
        except sqlite3.Error as err:
            raise _damaged(self.folder / DB_NAME, err) from None

    def has_run(self) -> bool:
        return self._holds("run")

    def has_steps(self) -> bool:
        """Whether any step is stored: a run without one has measured nothing."""
        return self._holds("step")

    def _holds(self, table: str) -> bool:
        """Whether the open file holds a row of `table` (False when it is not open or cannot be read)."""
        if self._db is None:
            return False
        try:
            return self._db.execute(f"select count(*) from {table}").fetchone()[0] > 0
        except sqlite3.Error:
            return False

    def discard(self) -> None:
        """Remove a run folder that never got its run record (the run stopped before it began)."""
        self.close()
        if self.folder.exists():
            shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def check_writable(results_dir: Path, name: str) -> None:
    """Check now that results_dir is writable (made if missing), before anything is measured or collected into it;
    `name` keeps the probe file apart from another writer's."""
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        probe = results_dir / f".write-test-{name}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise CapmarkError(f"Cannot write results to {results_dir} ({err.strerror}); choose a writable folder "
                           "with --results-dir.") from None


def format_of(db: sqlite3.Connection) -> int:
    return int(db.execute("pragma user_version").fetchone()[0])


def _check_format(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a results file written by a newer capmark: its records may mean what this one cannot know."""
    version = format_of(db)
    if version > FORMAT_VERSION:
        db.close()
        raise CapmarkError(f"{path} was written by a newer capmark (results format {version}; this capmark reads up "
                           f"to format {FORMAT_VERSION}); upgrade capmark (pip install -U capmark) to read it.")


# How long a reader waits for a writer's lock (SQLite's busy timeout) before it says the file is busy.
BUSY_TIMEOUT_S = 5.0
CHANGED = "the file was changed by something other than capmark; restore it from a copy, or remove the run folder"


def read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection; the path as a file: URI, so that a folder name with '?' or '#' stays a name."""
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)


def _check_file(path: Path) -> None:
    """A results file must be a regular file: SQLite reports a folder as a disk I/O error and blocks on a pipe."""
    if path.is_dir():
        raise CapmarkError(f"{path} is a folder, not a capmark results file; move it out of {path.parent} (or remove "
                           "that folder) and name a run folder that capmark wrote.")
    if not path.is_file():
        raise CapmarkError(f"{path} is not a regular file, so not a capmark results file; remove it, or name a run "
                           "folder that capmark wrote.")


def is_busy(err: sqlite3.Error) -> bool:
    """SQLite's answer when another connection holds the lock it needs (SQLITE_BUSY / SQLITE_LOCKED)."""
    return "database is locked" in str(err) or "database table is locked" in str(err)


def _holders(path: Path) -> list[str]:
    """The other processes that have the file open ("capmark, pid 123"), as far as this user may see them. Only the
    program's name, never its command line: that may hold a password."""
    try:
        target = path.resolve()
        me = psutil.Process().pid
        found = []
        for proc in psutil.process_iter(["pid", "name"]):
            if proc.pid == me:
                continue
            try:
                if not any(Path(f.path) == target for f in proc.open_files()):
                    continue
                args = proc.cmdline()[:3]
                name = "capmark" if any(Path(a).name in ("capmark", "capmark.cli") or a == "capmark.cli"
                                        for a in args) else proc.info["name"] or "a program"
            except (psutil.Error, OSError):
                continue
            found.append(f"{name}, pid {proc.pid}")
        return found
    except (psutil.Error, OSError):
        return []


def _busy(path: Path) -> CapmarkError:
    holders = _holders(path)
    who = f" ({'; '.join(holders[:3])})" if holders else ""
    return CapmarkError(f"{path} is being written by another process{who}, which holds its lock; try again when it "
                        "has finished.")


def _damaged(path: Path, err: sqlite3.Error) -> CapmarkError:
    if is_busy(err):
        return _busy(path)
    if "no such table" in str(err) or "no such column" in str(err):
        return CapmarkError(f"{path} is not a capmark results file ({err}); name a run folder that capmark wrote, "
                            "or remove this one.")
    if "readonly" in str(err):
        return CapmarkError(f"{path} cannot be written ({err}); make it writable, or leave out --save.")
    if "unable to open" in str(err):
        return CapmarkError(f"{path} cannot be opened ({err}); check that this user may read it and the folder "
                            f"{path.parent}.")
    return CapmarkError(f"{path} is damaged ({err}); restore it from a copy, or remove the folder "
                        f"{path.parent} if the run is not needed.")


def load_run(folder: Path) -> RunResult:
    path = folder / DB_NAME
    if not path.exists():
        raise CapmarkError(f"{folder} holds no capmark run (no {DB_NAME}); name a run folder or run id.")
    _check_file(path)
    try:
        db = read_only(path)
    except sqlite3.Error as err:
        raise _damaged(path, err) from None
    try:
        _refuse_observation(db, folder)
        _check_format(db, path)
        run, pid_started = _read_run(db, path, folder)
    except sqlite3.Error as err:
        raise _damaged(path, err) from None
    finally:
        db.close()
    _mark_dead(run, pid_started)
    return run


# The table that makes a results file an observation's (observation_store.TABLE; the store layer's units do not
# import each other), and the commands that read one.
OBSERVATION_TABLE = "observation"
OBSERVATION_COMMANDS = "capmark baseline, report, whatif, size and compare take it"


def _refuse_observation(db: sqlite3.Connection, folder: Path) -> None:
    """An observation of a live server in the results folder is no run: one sentence saying so."""
    if db.execute("select count(*) from sqlite_master where type = 'table' and name = ?",
                  (OBSERVATION_TABLE,)).fetchone()[0]:
        db.close()
        raise CapmarkError(f"{folder} holds an observation of a live server (capmark observe), not a measured run; "
                           f"{OBSERVATION_COMMANDS}, so name a run folder or id to this command.")


# --- records as stored: each JSON value must have the shape its field declares --------------------------------

def _kind(value: Any) -> str:
    """A JSON value's kind in words."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


class _Unreadable(Exception):
    """A stored record that is not what capmark wrote, in words ("the run's spec is a number where ...")."""


def _misfit(what: str, found: str, belongs: str) -> _Unreadable:
    return _Unreadable(f"{what} is {found} where {belongs} belongs")


def _json_column(value: Any, what: str, shape: type, belongs: str) -> Any:
    """A JSON column's value, checked against the shape it must have. A column SQLite holds as a number or NULL
    (not JSON text) is taken as that value."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise _Unreadable(f"{what} is not JSON ({err.msg} at character {err.pos})") from None
    if not _is(value, shape):
        raise _misfit(what, _kind(value), belongs)
    return value


def _is(value: Any, shape: Any) -> bool:
    """Whether a JSON value fits a type hint (dataclass fields' hints: containers one level deep)."""
    if shape is Any:
        return True
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if origin in (types.UnionType, typing.Union):
        return any(_is(value, a) for a in args)
    if shape is type(None) or shape is None:
        return value is None
    if origin is dict or shape is dict:
        return isinstance(value, dict) and (not args or all(_is(v, args[1]) for v in value.values()))
    if origin is list or shape is list:
        return isinstance(value, list) and (not args or all(_is(v, args[0]) for v in value))
    if shape is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(shape, type) and is_dataclass(shape) or typing.is_typeddict(shape):
        return isinstance(value, dict)  # a dataclass's own from_dict reads it; a TypedDict's readers use .get
    return isinstance(value, shape) if isinstance(shape, type) else True


_BELONGS = {dict: "a table", list: "a list", str: "text", int: "a whole number", float: "a number", bool: "a flag"}


def _belongs(shape: Any) -> str:
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_belongs(a) for a in args if a is not type(None))
    if isinstance(shape, type) and is_dataclass(shape) or typing.is_typeddict(shape):
        return "a table"
    return _BELONGS.get(origin or shape, "another value")


def _element_misfit(value: Any, shape: Any) -> tuple[str, Any, Any]:
    """Where in a container that does not fit its hint the first element that does not fit is: (' entry "x"', the
    element, its hint), or ('', the value, the hint) for the container itself."""
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if origin is dict and isinstance(value, dict) and args:
        key, item = next((k, v) for k, v in value.items() if not _is(v, args[1]))
        return f" entry '{key}'", item, args[1]
    if origin is list and isinstance(value, list) and args:
        index, item = next((i, v) for i, v in enumerate(value) if not _is(v, args[0]))
        return f" item {index + 1}", item, args[0]
    return "", value, shape


# open-ended: a record as parsed JSON, before (and after) it is checked here against the fields of `cls`
def _record(cls: type, value: dict[str, Any], what: str) -> dict[str, Any]:
    """A stored record (a test's header, a step; `what` names it) checked field by field against the dataclass it
    becomes."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    for key, item in value.items():
        if key not in known:
            raise _Unreadable(f"{what} holds a field '{key}' that capmark does not write")
        if not _is(item, hints[key]):
            where, found, shape = _element_misfit(item, hints[key])
            raise _misfit(f"the field '{key}'{where} of {what}", _kind(found), _belongs(shape))
    missing = [name for name, f in known.items() if name not in value and f.default is MISSING
               and f.default_factory is MISSING and name != "steps"]
    if missing:
        raise _Unreadable(f"{what} lacks its field '{missing[0]}'")
    return value


RUN_SCALARS: dict[str, object] = {"run_id": str, "created_at": str | None, "status": str, "setup_s": float | None,
                               "reason": str | None, "pid": int | None, "pid_started": float | None,
                               "host": str | None, "heartbeat_at": str | None}


def _read_run(db: sqlite3.Connection, path: Path, folder: Path) -> tuple[RunResult, float | None]:
    """The run, its tests and steps; and the start time of the process that measured it."""
    try:
        return _read_records(db, path, folder)
    except _Unreadable as err:
        raise CapmarkError(f"{path}: {err}; {CHANGED} {folder} if the run is not needed.") from None


def _read_records(db: sqlite3.Connection, path: Path, folder: Path) -> tuple[RunResult, float | None]:
    present = {r[1] for r in db.execute("pragma table_info(run)")}
    if not present:
        raise sqlite3.OperationalError("no such table: run")
    columns = [c for c in RUN_COLUMNS if c in present]  # runs stored before a column existed lack it
    row = db.execute(f"select {', '.join(columns)} from run").fetchone()
    if row is None:
        raise CapmarkError(f"{path} holds no run record; the run was stopped before it began.")
    rec = {**dict.fromkeys(RUN_COLUMNS), **dict(zip(columns, row, strict=True))}
    for name, shape in RUN_SCALARS.items():
        if name in columns and not _is(rec[name], shape):
            raise _misfit(f"the run's {name}", _kind(rec[name]), _belongs(shape))
    run = RunResult(run_id=rec["run_id"], created_at=rec["created_at"] or "", status=rec["status"],
                    spec=_json_column(rec["spec"], "the run's spec", dict, "a table of settings"),
                    environment=_json_column(rec["environment"], "the run's environment", dict,
                                             "a table of facts about the platform"),
                    target=_json_column(rec["target"], "the run's target", dict, "a table"), folder=str(folder),
                    setup_notes=_json_column(rec["setup_notes"] or "[]", "the run's setup notes", list[str],
                                             "a list of notes"),
                    setup_s=rec["setup_s"] or 0.0, reason=rec["reason"] or "", pid=rec["pid"], host=rec["host"] or "",
                    heartbeat_at=rec["heartbeat_at"] or "")
    for ordinal, header in db.execute("select ordinal, header from test order by ordinal"):
        what = f"the record of test {ordinal}"
        test = _from_record(TestResult, _record(TestResult, _json_column(header, what, dict, "a table"), what), what)
        for step_no, kpm, raw in db.execute("select ordinal, kpm, raw from step where test_ordinal = ? "
                                            "order by ordinal", (ordinal,)):
            where = f"step {step_no} of test {ordinal} ({test.workload})"
            values = _json_column(kpm, f"the kpm (key figures) of {where}", dict, "a table of figures")
            what = f"the record of {where}"
            step = _from_record(StepResult, _record(StepResult, _json_column(raw, what, dict, "a table"), what), what)
            # stored before steps carried their record (format < 2), or by a capmark whose record had another layout:
            # built from the raw material as it reads
            if step.measures is None or step.measures.version != MEASURES_VERSION:
                step.measures = _built(step, test.per_unit, values, what)
            test.steps.append(step)
        run.tests.append(test)
    return run, rec["pid_started"]


R = typing.TypeVar("R", TestResult, StepResult)


def _built(step: StepResult, per_unit: dict[str, float], stored: Stored, what: str) -> Measures:
    """The record of a step stored without one, with the key figures its run stored (`stored`, the kpm column);
    raw material that cannot make one is named, as damage."""
    try:
        return record.build(step, per_unit, stored)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as err:
        raise _Unreadable(f"{what} cannot be read ({type(err).__name__}: {err})") from None


# open-ended: a record as parsed JSON, checked by _record
def _from_record(cls: type[R], record: dict[str, Any], what: str) -> R:
    """The dataclass from a checked record; what its own reader still refuses (a histogram's bins) is named."""
    try:
        return cls.from_dict(record)  # type: ignore[return-value]
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise _Unreadable(f"{what} is not what capmark writes ({type(err).__name__}: {err})") from None


def _mark_dead(run: RunResult, started: float | None) -> None:
    """A run still 'running' whose process is gone was killed or crashed: say so instead of 'running'."""
    if run.status != "running" or run.pid is None:
        return
    if run.host == socket.gethostname():
        if process_alive(run.pid, started):
            return
        run.status = "killed"
        run.reason = f"the run's process (pid {run.pid}) is gone: it was killed or crashed"
    elif _silent_for(run) > _longest_step_s(run.spec) + HEARTBEAT_MARGIN_S:
        run.status = "abandoned"
        run.reason = (f"the run's process (pid {run.pid} on host {run.host}) has not reported since "
                      f"{run.heartbeat_at}: it was probably killed or crashed")
    else:
        return
    for test in run.tests:
        if test.status == "running":
            test.status, test.reason = run.status, run.reason


def process_alive(pid: int, started: float | None) -> bool:
    """Whether the process that wrote a record still runs: its pid alive, not a zombie, started when it was then."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) <= SAME_PROCESS_START_S
    except psutil.Error:
        return False


def _silent_for(run: RunResult) -> float:
    try:
        last = dt.datetime.fromisoformat(run.heartbeat_at)
    except ValueError:
        return 0.0
    return (dt.datetime.now(dt.UTC) - last).total_seconds()


def _longest_step_s(spec: dict[str, Any]) -> float:  # open-ended: RunResult.spec as stored
    try:
        return float(spec.get("warmup_s") or 0) + float(spec.get("soak_s") or spec.get("duration_s") or 0)
    except (TypeError, ValueError):  # a spec changed by hand: the margin alone
        return 0.0


def load_derived(folder: Path, kind: str) -> dict[int, Any]:
    """Saved analyses of one kind (e.g. whatif) by test ordinal; empty when there are none."""
    path = folder / DB_NAME
    if not path.exists():
        return {}
    if not path.is_file():
        return {}
    try:
        db = read_only(path)
        try:
            rows = db.execute("select test_ordinal, doc from derived where kind = ?", (kind,)).fetchall()
        finally:
            db.close()
    except sqlite3.Error as err:
        if is_busy(err):
            raise _busy(path) from None
        return {}
    out = {}
    for ordinal, doc in rows:
        try:
            out[ordinal] = _json_column(doc, f"the saved {kind} of test {ordinal}", dict, "a table")
        except _Unreadable as err:
            raise CapmarkError(f"{path}: {err}; {CHANGED} {folder} if the run is not needed.") from None
    return out


def resolve_run(ref: str | None, results_dir: Path) -> Path:
    """A run folder from a run id, a folder path, or (None) the latest run under results_dir."""
    if ref:
        as_path = Path(ref)
        if (as_path / DB_NAME).exists():
            return as_path
        if (results_dir / ref / DB_NAME).exists():
            return results_dir / ref
        raise CapmarkError(f"No capmark run '{ref}' found (neither a folder with {DB_NAME} nor a run id under "
                           f"{results_dir}); capmark results --results-dir {results_dir} lists them.")
    runs = sorted((p.parent for p in results_dir.glob(f"*/{DB_NAME}")), key=lambda p: p.name, reverse=True)
    latest = next((folder for folder in runs if _may_hold_a_run(folder / DB_NAME)), None)
    if latest is None:
        raise CapmarkError(f"There is no run under {results_dir}; run `capmark run` first or pass a run folder.")
    return latest


def _may_hold_a_run(path: Path) -> bool:
    """False for a results file with no run record (a run stopped before it began); a damaged file counts as a
    run, so that the user hears about the damage rather than silently getting an older run."""
    if not path.is_file():
        return True  # a folder or a pipe by that name: said by load_run, never opened here
    try:
        db = read_only(path)
        try:
            return db.execute("select count(*) from run").fetchone()[0] > 0
        finally:
            db.close()
    except sqlite3.OperationalError as err:
        return "no such table" not in str(err)
    except sqlite3.Error:
        return True
