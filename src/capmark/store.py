"""The results store: one folder per run holding results.sqlite (and report.html).

Every step is committed as soon as it ends, so an interrupted run keeps its completed steps.
Raw material is kept as JSON documents beside the derived KPMs so that later analyses can
recompute anything without the database.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

from capmark.errors import CapmarkError
from capmark.results import RunResult, StepResult, TestResult

DB_NAME = "results.sqlite"
SCHEMA = """
create table if not exists run (
  run_id text primary key, created_at text, status text, spec text, environment text, target text,
  setup_notes text, setup_s real);
create table if not exists test (
  run_id text, ordinal int, workload text, status text, header text, primary key (run_id, ordinal));
create table if not exists derived (
  run_id text, test_ordinal int, kind text, doc text, primary key (run_id, test_ordinal, kind));
create table if not exists step (
  run_id text, test_ordinal int, ordinal int, jobs int, status text, kpm text, raw text,
  primary key (run_id, test_ordinal, ordinal));
"""


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


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
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.db = sqlite3.connect(folder / DB_NAME)
        self.db.executescript(SCHEMA)

    @classmethod
    def create(cls, results_dir: Path, run_id: str) -> RunStore:
        folder = results_dir / run_id
        try:
            folder.mkdir(parents=True, exist_ok=False)
            probe = folder / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as err:
            raise CapmarkError(f"Cannot write results to {results_dir} ({err.strerror}); choose a writable folder "
                               "with --results-dir.") from None
        return cls(folder)

    def save_run(self, run: RunResult) -> None:
        self.db.execute("insert or replace into run values (?,?,?,?,?,?,?,?)",
                        (run.run_id, run.created_at, run.status, _dumps(run.spec), _dumps(run.environment),
                         _dumps(run.target), _dumps(run.setup_notes), run.setup_s))
        self.db.commit()

    def set_status(self, run_id: str, status: str) -> None:
        self.db.execute("update run set status = ? where run_id = ?", (status, run_id))
        self.db.commit()

    def save_test(self, run_id: str, test: TestResult) -> None:
        header = {k: v for k, v in test.to_dict().items() if k != "steps"}
        self.db.execute("insert or replace into test values (?,?,?,?,?)",
                        (run_id, test.ordinal, test.workload, test.status, _dumps(header)))
        self.db.commit()

    def save_step(self, run_id: str, test: TestResult, step: StepResult) -> None:
        raw = step.to_dict()
        kpm = raw.pop("kpm")
        self.db.execute("insert or replace into step values (?,?,?,?,?,?,?)",
                        (run_id, test.ordinal, step.ordinal, step.jobs, step.status, _dumps(kpm), _dumps(raw)))
        self.db.commit()

    def save_derived(self, run_id: str, test_ordinal: int, kind: str, doc: Any) -> None:
        """Derived analyses (e.g. service demands) beside the raw material they were computed from."""
        self.db.execute("insert or replace into derived values (?,?,?,?)", (run_id, test_ordinal, kind, _dumps(doc)))
        self.db.commit()

    def has_run(self) -> bool:
        return self.db.execute("select count(*) from run").fetchone()[0] > 0

    def close(self) -> None:
        self.db.close()



def load_run(folder: Path) -> RunResult:
    path = folder / DB_NAME
    if not path.exists():
        raise CapmarkError(f"{folder} holds no capmark run (no {DB_NAME}); name a run folder or run id.")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = db.execute("select run_id, created_at, status, spec, environment, target, setup_notes, setup_s "
                         "from run").fetchone()
        if row is None:
            raise CapmarkError(f"{path} holds no run record; the run was stopped before it began.")
        run = RunResult(run_id=row[0], created_at=row[1], status=row[2], spec=json.loads(row[3]),
                        environment=json.loads(row[4]), target=json.loads(row[5]), folder=str(folder),
                        setup_notes=json.loads(row[6] or "[]"), setup_s=row[7] or 0.0)
        for ordinal, header in db.execute("select ordinal, header from test order by ordinal"):
            test = TestResult.from_dict(json.loads(header))
            for kpm, raw in db.execute("select kpm, raw from step where test_ordinal = ? order by ordinal",
                                       (ordinal,)):
                step = StepResult.from_dict({**json.loads(raw), "kpm": json.loads(kpm)})
                test.steps.append(step)
            run.tests.append(test)
    finally:
        db.close()
    return run


def load_derived(folder: Path, kind: str) -> dict[int, Any]:
    """Saved analyses of one kind (e.g. whatif) by test ordinal; empty when there are none."""
    path = folder / DB_NAME
    if not path.exists():
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("select test_ordinal, doc from derived where kind = ?", (kind,)).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()
    return {ordinal: json.loads(doc) for ordinal, doc in rows}


def resolve_run(ref: str | None, results_dir: Path) -> Path:
    """A run folder from a run id, a folder path, or (None) the latest run under results_dir."""
    if ref:
        as_path = Path(ref)
        if (as_path / DB_NAME).exists():
            return as_path
        if (results_dir / ref / DB_NAME).exists():
            return results_dir / ref
        raise CapmarkError(f"No capmark run '{ref}' found (neither a folder with {DB_NAME} nor a run id under "
                           f"{results_dir}); `ls {results_dir}` lists the runs.")
    runs = sorted((p for p in results_dir.glob(f"*/{DB_NAME}")), key=lambda p: p.parent.name)
    if not runs:
        raise CapmarkError(f"There is no run under {results_dir}; run `capmark run` first or pass a run folder.")
    return runs[-1].parent
