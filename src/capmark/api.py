"""The public Python API; the command line only parses arguments and calls these functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capmark import runner
from capmark.analysis.catalogue import Catalogue, catalogue
from capmark.analysis.compare import Comparison, compare_runs
from capmark.analysis.demands import DemandsDocument, demands_document
from capmark.analysis.diagnosis import DiagnosisDocument, diagnosis_document
from capmark.analysis.document import TestAnswer
from capmark.analysis.export import RunExport, run_export
from capmark.analysis.observation import (
    BaselineDocument,
    BaselineOptions,
    ComparisonDocument,
    ObservationReport,
    WhatIfOptions,
    observation_baseline,
    observation_compare,
    observation_report,
    observation_size,
    observation_whatif,
    parse_baseline_options,
    parse_whatif_options,
)
from capmark.analysis.observation import (
    SizingDocument as ObservationSizing,
)
from capmark.analysis.observation import (
    WhatIfDocument as ObservationWhatIf,
)
from capmark.analysis.planning import (
    AnticipationDocument,
    CalibrationDocument,
    Progress,
    SizingDocument,
    WhatIfDocument,
    anticipation_document,
    calibration_document,
    scenarios_of,
    sizing_document,
    whatif_document,
)
from capmark.analysis.stored import StoredList, list_stored
from capmark.config import DEFAULT_RESULTS_DIR, RunSpec, check_data_dir_is_capmarks
from capmark.engines import registry as engines
from capmark.engines.postgres import embedded
from capmark.errors import CapmarkError
from capmark.observation_store import ObservationStore, is_observation, load_observation, resolve_observation
from capmark.observations import Observation
from capmark.observe.collector import Observed, ProgressState  # noqa: F401  (ProgressState: what progress is shown)
from capmark.observe.collector import Progress as ObserveProgress
from capmark.observe.collector import observe as collect_observation
from capmark.observe.spec import ObserveSpec
from capmark.results import RunResult, TestResult

# the measuring run is part of the public API; it lives in capmark.runner
from capmark.runner import RunObserver, plan_tests, sigterm_as_interrupt  # noqa: F401
from capmark.store import DB_NAME, RunStore, load_run, resolve_run

if TYPE_CHECKING:
    from capmark.analysis.report import ReportDocuments


def list_workloads() -> Catalogue:
    return catalogue()


def list_results(results_dir: Path) -> StoredList:
    """The runs and observations stored under results_dir, newest first; nothing when the folder does not exist yet,
    one sentence when it names something else."""
    if results_dir.exists() and not results_dir.is_dir():
        raise CapmarkError(f"--results-dir {results_dir} is not a folder; name the folder capmark run and capmark "
                           "observe store their results in.")
    return list_stored(results_dir)


def engine_labels() -> dict[str, str]:
    """Each engine's name for users ("mysql" -> "MySQL/MariaDB"), as the catalogue's per-engine map is keyed."""
    return {engine.name: engine.label for engine in engines.all_engines()}


def solve_cases(file: Path) -> Any:
    """Solve the queueing models of a JSON case file (closed, multi-class, open, USL fit, quick formula)."""
    from capmark.model.cases import solve_file

    return solve_file(file)


def run(spec: RunSpec, observer: RunObserver | None = None) -> RunResult:
    """Measure and store a run, and write its report.html however it ends (the runner stays below rendering)."""
    return runner.run(spec, observer, on_stored=_report_of_stored_run)


def _report_of_stored_run(folder: Path) -> str:
    try:
        write_run_report(folder)
    except Exception as err:  # a full disk, or a rendering failure: never hide the run's own outcome behind it
        lines = str(err).strip().splitlines()
        return f"report.html could not be written ({lines[0] if lines else type(err).__name__})"
    return ""


def report_documents(folder: Path) -> ReportDocuments:
    """What report.html shows of the run stored in `folder` (the console's at-a-glance table is its headlines)."""
    from capmark.analysis.report import stored_report_documents

    return stored_report_documents(folder)


def write_run_report(folder: Path) -> Path:
    from capmark.analysis.report import stored_report_documents
    from capmark.report.html import write_report

    return write_report(stored_report_documents(folder))


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
    try:
        return ReportFile(write_run_report(folder), written=True)
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


def demands(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> DemandsDocument:
    """Service demands and reconciliation of a stored run (or one test)."""
    run_result, tests = tests_of(ref, results_dir)
    return demands_document(run_result, tests)


def calibrate(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR,
              from_jobs: list[int] | None = None, up_to: int | None = None, progress: Progress | None = None,
              cores: int | None = None, solver: str = "mva") -> CalibrationDocument:
    """Calibrate a queueing model per test of a stored run, validate it against every step and predict the
    curve beyond the measured range (default: up to twice the most jobs measured). `cores` states the database
    host's cores (--cores); `solver` 'sim' validates the steps by simulation beside MVA."""
    run_result, tests = tests_of(ref, results_dir)
    return calibration_document(run_result, tests, from_jobs=from_jobs, up_to=up_to, progress=progress, cores=cores,
                                solver=solver)


def _save(run_result: RunResult, kind: str, answers: list[TestAnswer[Any]]) -> None:
    """Keep a plan with the run (for its report) and bring report.html up to date."""
    store = RunStore(Path(run_result.folder))
    try:
        for a in answers:
            if a.answered:
                store.save_derived(run_result.run_id, a.ordinal, kind, a.to_json())
    finally:
        store.close()
    write_run_report(Path(run_result.folder))


def whatif(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, from_jobs: list[int] | None = None,
           at_jobs: int | None = None, changes: dict[str, str | int | float | None] | None = None,
           scenario_file: Path | None = None, save: bool = False, progress: Progress | None = None,
           cores: int | None = None, solver: str = "mva") -> WhatIfDocument:
    """Baseline and scenarios (command-line changes and/or a TOML file) per test; save puts them in the report.
    changes: the command line's, by a scenario file's key (growth, jobs, think, cpus, cpu_speed, disk_speed, disks),
    None where not given."""
    scenarios = scenarios_of(changes, scenario_file)
    run_result, tests = tests_of(ref, results_dir)
    doc = whatif_document(run_result, tests, scenarios, from_jobs=from_jobs, at_jobs=at_jobs, progress=progress,
                          cores=cores, solver=solver)
    if save:
        _save(run_result, "whatif", doc.tests)
    return doc


def size(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, sla_text: str = "p95<5ms",
         from_jobs: list[int] | None = None, target_tps: float | None = None, save: bool = False,
         progress: Progress | None = None, cores: int | None = None) -> SizingDocument:
    """Per test: the most jobs and the highest arrival rate within the SLA on the measured platform, and for a
    target rate the smallest single change that meets it."""
    run_result, tests = tests_of(ref, results_dir)
    doc = sizing_document(run_result, tests, sla_text, from_jobs=from_jobs, target_tps=target_tps, progress=progress,
                          cores=cores)
    if save:
        _save(run_result, "size", doc.tests)
    return doc


def diagnose(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> DiagnosisDocument:
    """Bottleneck signatures and self-checks of a stored run (or one test)."""
    run_result, tests = tests_of(ref, results_dir)
    return diagnosis_document(run_result, tests)


def anticipate(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, at_jobs: int | None = None,
               service_factor: float = 1.0, rate_factor: float = 1.0, servers: float | None = None
               ) -> AnticipationDocument:
    """The quick response-time curve through a measured step (Shallahamer's formula), before and after a change."""
    run_result, tests = tests_of(ref, results_dir)
    return anticipation_document(run_result, tests, at_jobs=at_jobs, service_factor=service_factor,
                                 rate_factor=rate_factor, servers=servers)


def export(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> RunExport:
    """A stored run as one JSON document (capmark.run/1)."""
    return run_export(open_run(ref, results_dir))


# --- observations of a live server -------------------------------------------------------------------

def observe(spec: ObserveSpec, progress: ObserveProgress | None = None) -> Observed:
    """Observe a PostgreSQL server read-only until spec.planned_s elapses or Ctrl-C / SIGTERM, committing each
    interval as it ends; how it ended, where it is stored. Nothing is stored when the server cannot be read."""
    spec.check()
    store = ObservationStore(spec.results_dir)
    try:
        observed = collect_observation(spec, store, progress, observation_id=store.observation_id)
    finally:
        store.close()
    observed.folder = str(store.folder)
    return observed


def open_observation(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> Observation:
    """A stored observation by id or folder (the latest by default), from storage alone."""
    return load_observation(resolve_observation(ref, results_dir))


def is_observation_ref(ref: str | None, results_dir: Path = DEFAULT_RESULTS_DIR) -> bool:
    """Whether RUN names a stored observation (by folder or id); None (the latest) means a run, as before."""
    return bool(ref) and any(is_observation(folder) for folder in (Path(ref or ""), results_dir / (ref or "")))


def _observation(ref: str | None, results_dir: Path, command: str) -> tuple[Observation, Path]:
    """The observation RUN names (the latest by default); a run named instead is refused in one sentence."""
    if ref and not is_observation_ref(ref, results_dir):
        for folder in (Path(ref), results_dir / ref):
            if (folder / DB_NAME).is_file():
                raise CapmarkError(f"{folder} holds a measured run, not an observation; {command} plans from an "
                                   "observation of a live server (capmark observe makes one), so name an "
                                   "observation folder or id.")
    folder = resolve_observation(ref, results_dir)
    return load_observation(folder), folder


def baseline(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR,
             options: BaselineOptions | None = None) -> BaselineDocument:
    """The baseline of a stored observation (the latest by default): workloads, peak, demands, model, validation."""
    parsed = parse_baseline_options(options or BaselineOptions())
    return observation_baseline(_observation(ref, results_dir, "capmark baseline")[0], parsed)


def observation_whatif_of(ref: str | None, results_dir: Path = DEFAULT_RESULTS_DIR,
                          options: BaselineOptions | None = None,
                          changes: WhatIfOptions | None = None) -> ObservationWhatIf:
    """What-if growth and changes on an observation's baseline (the case study's 20 % x 3 without any change)."""
    parsed, request = parse_baseline_options(options or BaselineOptions()), parse_whatif_options(changes or
                                                                                                 WhatIfOptions())
    return observation_whatif(observation_baseline(_observation(ref, results_dir, "capmark whatif")[0], parsed),
                              request)


def observation_size_of(ref: str | None, results_dir: Path = DEFAULT_RESULTS_DIR,
                        options: BaselineOptions | None = None,
                        changes: WhatIfOptions | None = None) -> ObservationSizing:
    """When growth runs an observed host out of capacity, and the least single change that carries it."""
    parsed = parse_baseline_options(options or BaselineOptions())
    request = parse_whatif_options(changes or WhatIfOptions(), default_growth=False)
    return observation_size(observation_baseline(_observation(ref, results_dir, "capmark size")[0], parsed), request)


def observation_report_of(ref: str | None, results_dir: Path = DEFAULT_RESULTS_DIR,
                          options: BaselineOptions | None = None,
                          changes: WhatIfOptions | None = None) -> tuple[ObservationReport, ReportFile]:
    """An observation's report documents, and its report.html written into the observation's folder."""
    from capmark.report.observation_html import write_observation_report

    parsed, request = parse_baseline_options(options or BaselineOptions()), parse_whatif_options(changes or
                                                                                                 WhatIfOptions())
    observation, folder = _observation(ref, results_dir, "capmark report")
    doc = observation_report(observation, folder, parsed, request)
    try:
        return doc, ReportFile(write_observation_report(doc, folder / "report.html"), written=True)
    except OSError as err:
        path = folder / "report.html"
        return doc, ReportFile(path, written=False, problem=f"could not write {path} ({err.strerror or err})")


def compare_observations(before_ref: str, after_ref: str, results_dir: Path = DEFAULT_RESULTS_DIR,
                         options: BaselineOptions | None = None) -> ComparisonDocument:
    """Two observations' peaks per workload (each baseline with the same options)."""
    parsed = parse_baseline_options(options or BaselineOptions())
    before = observation_baseline(_observation(before_ref, results_dir, "capmark compare")[0], parsed)
    return observation_compare(before, observation_baseline(_observation(after_ref, results_dir,
                                                                         "capmark compare")[0], parsed))


# --- the embedded server -----------------------------------------------------------------------------

def db_start(data_dir: Path | None = None, say: Callable[[str], None] = print) -> str:
    """Start (or reuse) the embedded server in a folder capmark may take (config.check_data_dir); its URL. Limits a
    killed run left on the server (--server-cpus and the like) are removed first."""
    cleared = runner.clear_stale_limits()
    if cleared:
        say(f"Removed the limits that a run which ended without cleaning up had left on the server: "
            f"{', '.join(cleared)}.")
    return embedded.start(data_dir, say=say)


def db_stop(data_dir: Path | None = None) -> bool:
    """Stop the embedded server; a folder that is not the embedded server's is refused before anything is stopped."""
    if data_dir is not None:
        check_data_dir_is_capmarks(data_dir)
    return embedded.stop(data_dir)


def db_status(data_dir: Path | None = None) -> embedded.EmbeddedStatus:
    """Whether the embedded server is initialised and running; a file or another program's folder is refused."""
    if data_dir is not None:
        check_data_dir_is_capmarks(data_dir)
    return embedded.status(data_dir)


def compare(baseline_ref: str | None, candidate_refs: list[str], results_dir: Path = DEFAULT_RESULTS_DIR,
            progress: Progress | None = None) -> Comparison:
    """A baseline run against one or more candidates, from storage alone (capmark.compare/1)."""
    if not candidate_refs:
        raise CapmarkError("Name at least one candidate run to compare with the baseline, e.g. "
                           "`capmark compare BASELINE CANDIDATE`.")
    baseline = open_run(baseline_ref, results_dir)
    return compare_runs(baseline, [open_run(ref, results_dir) for ref in candidate_refs], progress)
