"""The public Python API; the command line only parses arguments and calls these functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capmark.config import DEFAULT_RESULTS_DIR
from capmark.engines import embedded
from capmark.errors import CapmarkError
from capmark.results import RunResult, TestResult

# the measuring run is part of the public API; it lives in capmark.runner
from capmark.runner import RunObserver, plan_tests, run, sigterm_as_interrupt, write_run_report  # noqa: F401
from capmark.store import DB_NAME, RunStore, load_run, resolve_run
from capmark.workloads import registry
from capmark.workloads.base import Workload


def list_workloads() -> list[Workload]:
    return list(registry.WORKLOADS.values())


# --- stored runs -------------------------------------------------------------------------------------

def open_run(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> RunResult:
    return load_run(resolve_run(ref, results_dir))


@dataclass
class ReportFile:
    """What `capmark report` did with report.html: written, left as it was, or not writable (and why)."""

    path: Path
    written: bool
    problem: str = ""


def report(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR,
           rerender: bool = False) -> tuple[RunResult, ReportFile]:
    """A stored run, from storage alone, and its report.html brought up to date when it is missing or older than
    the results (or when asked). Reading a run never fails on the report: storage may be read-only."""
    run_result = load_run(resolve_run(ref, results_dir))
    return run_result, _refresh_report(run_result, rerender)


def _refresh_report(run_result: RunResult, force: bool) -> ReportFile:
    folder = Path(run_result.folder)
    path = folder / "report.html"
    if not force and _newer_than(path, folder / DB_NAME):
        return ReportFile(path, written=False)
    from capmark.report.html import write_report

    try:
        return ReportFile(write_report(run_result), written=True)
    except OSError as err:
        return ReportFile(path, written=False, problem=f"could not write {path} ({err.strerror or err})")


def _newer_than(path: Path, source: Path) -> bool:
    try:
        return path.stat().st_mtime >= source.stat().st_mtime
    except OSError:
        return False


def tests_of(ref: str | None, results_dir: Path = DEFAULT_RESULTS_DIR) -> tuple[RunResult, list[TestResult]]:
    """A stored run and its tests, from RUN or RUN:TEST (a workload name or test ordinal)."""
    test_ref = None
    if ref and ":" in ref:
        head, _, tail = ref.rpartition(":")
        if tail and "/" not in tail:
            ref, test_ref = head or None, tail  # ':wal-lat1' = that test of the latest run
    run_result = open_run(ref, results_dir)
    if test_ref is None:
        return run_result, run_result.tests
    chosen = [t for t in run_result.tests if t.workload == test_ref or str(t.ordinal) == test_ref]
    if not chosen:
        names = ", ".join(t.workload for t in run_result.tests)
        raise CapmarkError(f"Run {run_result.run_id} has no test '{test_ref}'; its tests are: {names}.")
    return run_result, chosen


def demands(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> dict:
    """Service demands and reconciliation of a stored run (or one test), as the capmark.demands/1 document."""
    from capmark.report.demands import run_document

    run_result, tests = tests_of(ref, results_dir)
    return run_document(run_result, tests)


Progress = Callable[[str], None]


def _answers(run_result: RunResult, tests: list[TestResult], what: str,
             answer: Callable[[TestResult], dict]) -> list[tuple[TestResult, dict]]:
    """Every test's answer, or for a test that cannot be answered {"answered": false, "reason": ...}: one test
    without a valid step must not cost the others theirs. A run (or test choice) with nothing to answer
    at all is an error, so that a script does not take an empty document for a result."""
    if not any(t.steps for t in tests):
        raise CapmarkError(f"Run {run_result.run_id} has no measured step to {what} (its tests failed or were "
                           "interrupted before a step completed); measure a run with `capmark run` first.")
    out = []
    for t in tests:
        if not t.steps:
            doc = {"answered": False, "reason": f"Test {t.workload} has no measured step (status {t.status})."}
        else:
            try:
                doc = {"answered": True, **answer(t)}
            except CapmarkError as err:
                doc = {"answered": False, "reason": str(err)}
        out.append((t, {"workload": t.workload, "ordinal": t.ordinal, **doc}))
    if not any(doc["answered"] for _, doc in out):
        reasons = "; ".join(doc["reason"].rstrip(".") for _, doc in out)
        raise CapmarkError(f"No test of run {run_result.run_id} can be used to {what}: {reasons}.")
    return out


def _check_jobs_bound(jobs: int | None, option: str) -> None:
    from capmark.plan.dbmodel import MAX_JOBS_SOLVED

    if jobs is not None and not 1 <= jobs <= MAX_JOBS_SOLVED:
        raise CapmarkError(f"{option} must be between 1 and {MAX_JOBS_SOLVED:,} jobs (beyond, the predicted "
                           f"throughput no longer changes); got {jobs}.")


def _check_cores(cores: int | None) -> None:
    from capmark.plan.dbmodel import MAX_CORES

    if cores is not None and not 1 <= cores <= MAX_CORES:
        raise CapmarkError(f"--cores must be between 1 and {MAX_CORES:,} (the largest hosts sold); got {cores}.")


def _database_host(ref: str | None, results_dir: Path, cores: int | None) -> tuple[RunResult, list[TestResult], Any]:
    """The run, its chosen tests and its database host as stored (with the cores the user stated); refused in one
    sentence where the database host's CPU was never measured and no cores were stated."""
    from capmark.plan.dbhost import database_host, require_host_cpu

    _check_cores(cores)
    run_result, tests = tests_of(ref, results_dir)
    host = database_host(run_result, cores)
    require_host_cpu(run_result, tests, host)
    return run_result, tests, host


def calibrate(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR,
              from_jobs: list[int] | None = None, up_to: int | None = None, progress: Progress | None = None,
              cores: int | None = None, solver: str = "mva") -> dict:
    """Calibrate a queueing model per test of a stored run, validate it against every step and predict the
    curve beyond the measured range (default: up to twice the most jobs measured). A test that cannot be
    calibrated gets {"answered": false, "reason": ...}. `cores` states the database host's cores (--cores);
    `solver` 'sim' validates the steps by simulation beside MVA."""
    from capmark.plan.calibrate import validate

    _check_jobs_bound(up_to, "--up-to")
    run_result, tests, host = _database_host(ref, results_dir, cores)
    docs = _answers(run_result, tests, "calibrate a model", lambda t: validate(t, from_jobs, up_to, progress, host,
                                                                                      solver))
    return {"schema": "capmark.calibrate/2", "run": run_result.run_id, "tests": [d for _, d in docs]}


def _planned(ref: str | None, results_dir: Path, from_jobs: list[int] | None, what: str,
             plan: Callable[[TestResult, Any], dict], cores: int | None = None
             ) -> tuple[RunResult, list[tuple[TestResult, dict]]]:
    """Calibrate each test's model and answer `plan(test, model)` with it, per test (see _answers)."""
    from capmark.plan.calibrate import calibrate as calibrate_test

    run_result, tests, host = _database_host(ref, results_dir, cores)
    return run_result, _answers(run_result, tests, what, lambda t: plan(t, calibrate_test(t, from_jobs, host)))


def _platform(model: Any) -> dict:
    """The platform a plan was solved for, and how each part of it is known: measured, recorded, stated or
    estimated, with the model's notes (an estimated CPU says so wherever it is used)."""
    return {"cores": model.cores, "cores_from": model.cores_from, "cpu_from": model.cpu_from, "notes": model.notes}


def _base_jobs(model: Any, at_jobs: int | None) -> int:
    if at_jobs is None:
        return model.calibrated_from[0]
    _check_jobs_bound(at_jobs, "--at")
    return at_jobs


def _save(run_result: RunResult, kind: str, docs: list[tuple[int, dict]]) -> None:
    store = RunStore(Path(run_result.folder))
    try:
        for ordinal, doc in docs:
            store.save_derived(run_result.run_id, ordinal, kind, doc)
    finally:
        store.close()
    write_run_report(Path(run_result.folder))


def whatif(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, from_jobs: list[int] | None = None,
           at_jobs: int | None = None, changes: dict[str, Any] | None = None, scenario_file: Path | None = None,
           save: bool = False, progress: Progress | None = None, cores: int | None = None,
           solver: str = "mva") -> dict:
    """Baseline and scenarios (command-line changes and/or a TOML file) per test; save puts them in the report.
    `cores` states the database host's cores (--cores); `solver` 'sim' simulates the closed loads."""
    from capmark.plan.whatif import evaluate, expand, load_scenarios

    changes = {k: v for k, v in (changes or {}).items() if v is not None}
    scenarios = load_scenarios(scenario_file) if scenario_file else []
    if changes:
        scenarios = expand("", changes) + scenarios
    if not scenarios:
        raise CapmarkError("Give at least one change (e.g. --growth 20%x3, --cpus 4, --disk-speed 2) or "
                           "--scenarios FILE.toml.")

    def plan(t: TestResult, model: Any) -> dict:
        return {"unit": t.unit, "platform": _platform(model),
                **evaluate(model, _base_jobs(model, at_jobs), model.think_s, scenarios, progress, solver)}

    run_result, docs = _planned(ref, results_dir, from_jobs, "answer what-if questions", plan, cores)
    if save:
        _save(run_result, "whatif", [(t.ordinal, d) for t, d in docs if d["answered"]])
    return {"schema": "capmark.whatif/1", "run": run_result.run_id, "tests": [d for _, d in docs]}


def size(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, sla_text: str = "p95<5ms",
         from_jobs: list[int] | None = None, target_tps: float | None = None, save: bool = False,
         progress: Progress | None = None, cores: int | None = None) -> dict:
    """Per test: the most jobs and the highest arrival rate within the SLA on the measured platform, and for a
    target rate the smallest single change that meets it. `cores` states the database host's cores (--cores)."""
    from capmark.plan.sizing import check_target_rate, max_jobs, max_rate, parse_sla, smallest_change

    sla = parse_sla(sla_text)
    if target_tps is not None:
        check_target_rate(target_tps)

    def plan(t: TestResult, model: Any) -> dict:
        most = max_jobs(model, sla, model.think_s, progress=progress)
        if progress:
            progress(f"{t.workload}: highest arrival rate within {sla.text}")
        fastest = max_rate(model, sla)
        if progress and target_tps:
            progress(f"{t.workload}: what {target_tps:g} {t.unit}s/s within {sla.text} needs")
        return {"unit": t.unit, "sla": {"metric": sla.metric, "limit_s": sla.limit_s, "text": sla.text},
                "calibrated_from": model.calibrated_from, "think_s": model.think_s, "platform": _platform(model),
                "max_jobs": most.jobs, "at_max_jobs": most.at.to_dict() if most.at else None,
                "one_more_job": most.beyond.to_dict(), "search_limit_reached": most.limit_reached,
                "converged": not most.unsettled and not fastest.unsettled,
                "unsettled": {"jobs": most.unsettled, "rate": fastest.unsettled},
                "unsettled_notes": [n for n in (most.note, fastest.note) if n],
                "max_rate": fastest.rate, "at_max_rate": fastest.at.to_dict() if fastest.at else None,
                "rate_search_limit_reached": fastest.limit_reached,
                "target": smallest_change(model, sla, target_tps) if target_tps else None}

    run_result, docs = _planned(ref, results_dir, from_jobs, "size", plan, cores)
    if save:
        _save(run_result, "size", [(t.ordinal, d) for t, d in docs if d["answered"]])
    return {"schema": "capmark.size/1", "run": run_result.run_id, "tests": [d for _, d in docs]}


def diagnose(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> dict:
    """Bottleneck signatures and self-checks of a stored run (or one test), as the capmark.diagnose/1 document."""
    from capmark.diagnose.diagnosis import diagnose_run

    run_result, tests = tests_of(ref, results_dir)
    return diagnose_run(run_result, tests)


def anticipate(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, at_jobs: int | None = None,
               service_factor: float = 1.0, rate_factor: float = 1.0, servers: float | None = None) -> dict:
    """Seed 001's quick response-time curve through a measured step, before and after a change."""
    from capmark.plan.anticipate import anticipate as anticipate_test
    from capmark.plan.anticipate import check_change

    check_change(service_factor, rate_factor, servers)
    run_result, tests = tests_of(ref, results_dir)
    docs = _answers(run_result, tests, "anticipate",
                    lambda t: anticipate_test(t, at_jobs, service_factor, rate_factor, servers))
    return {"schema": "capmark.anticipate/1", "run": run_result.run_id, "tests": [d for _, d in docs]}


# --- the embedded server -----------------------------------------------------------------------------

def db_start(data_dir: Path | None = None, say: Callable[[str], None] = print) -> str:
    return embedded.start(data_dir, say=say)


def db_stop(data_dir: Path | None = None) -> bool:
    return embedded.stop(data_dir)


def db_status(data_dir: Path | None = None) -> embedded.EmbeddedStatus:
    return embedded.status(data_dir)


