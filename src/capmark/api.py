"""The public Python API; the command line only parses arguments and calls these functions."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from capmark import suite
from capmark.collect import os as oscollect
from capmark.collect.environment import fingerprint
from capmark.config import DEFAULT_RESULTS_DIR, RunSpec, default_jobs, env_dsn, redact_dsn
from capmark.driver.step import StepContext, StepFailed, StepPlan, run_step
from capmark.engines import embedded
from capmark.engines.postgres import connect, describe
from capmark.errors import CapmarkError, RunInterrupted
from capmark.measure import kpm
from capmark.results import RunResult, StepResult, TestResult
from capmark.store import RunStore, load_run, new_run_id, resolve_run
from capmark.suite import TestPlan
from capmark.workloads import datamodel, registry
from capmark.workloads.base import Workload


class RunObserver:
    """Hooks a front end implements to show progress; the defaults do nothing."""

    def say(self, message: str) -> None: ...

    def test_started(self, test: TestResult, plan: list[int]) -> None: ...

    def step_progress(self, test: TestResult, jobs: int, phase: str, seconds_left: float) -> None: ...

    def step_done(self, test: TestResult, step: StepResult) -> None: ...

    def test_done(self, test: TestResult) -> None: ...


def list_workloads() -> list[Workload]:
    return list(registry.WORKLOADS.values())


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C: stop the jobs, keep completed steps, exit non-zero."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _resolve_target(spec: RunSpec, observer: RunObserver) -> tuple[str, bool]:
    dsn = spec.dsn or env_dsn()
    if dsn:
        return dsn, False
    observer.say(f"Starting the embedded PostgreSQL in {spec.data_dir or embedded.default_data_dir()} ...")
    return embedded.start(spec.data_dir), True


def plan_tests(spec: RunSpec) -> list[TestPlan]:
    """Every test the run will measure, validated before anything touches a database."""
    spec.validate()
    jobs = spec.jobs or default_jobs(os.cpu_count() or 1)
    if spec.soak_s is not None:
        plans = suite.from_command_line(spec.workloads, spec.params, spec.mode, spec.jobs or [os.cpu_count() or 1],
                                        spec.warmup_s, spec.soak_s, spec.think_s, spec.rate)
        if len(plans) != 1:
            raise CapmarkError(f"A soak runs one workload; '{spec.workloads[0]}' is a suite of {len(plans)}. Name one "
                               "workload, e.g. tp-light.")
        return plans
    if spec.suite_file:
        return suite.from_file(spec.suite_file, jobs, spec.warmup_s, spec.duration_s, spec.mode, spec.think_s,
                               spec.rate)
    return suite.from_command_line(spec.workloads, spec.params, spec.mode, jobs, spec.warmup_s, spec.duration_s,
                                   spec.think_s, spec.rate)


def run(spec: RunSpec, observer: RunObserver | None = None) -> RunResult:
    """Measure the planned tests at every step of their plans and store everything."""
    observer = observer or RunObserver()
    plans = plan_tests(spec)
    store = RunStore.create(spec.results_dir, new_run_id())
    try:
        return _run(spec, plans, store, observer)
    except BaseException:
        if not store.has_run():  # failed before anything was measured: leave no empty run behind
            store.close()
            shutil.rmtree(store.folder, ignore_errors=True)
        raise
    finally:
        store.close()


def _run(spec: RunSpec, plans: list[TestPlan], store: RunStore, observer: RunObserver) -> RunResult:
    dsn, is_embedded = _resolve_target(spec, observer)
    control = connect(dsn, application_name="capmark control")
    try:
        info = describe(control, dsn, embedded=is_embedded)
        _check_connections(control, max(max(p.jobs) for p in plans))
        size = datamodel.size_for(spec.scale)
        notes: list[str] = []
        setup_s = datamodel.setup(control, size, say=lambda m: (notes.append(m), observer.say(m)))
        if setup_s:
            notes.append(f"data model set up in {setup_s:.1f} s (not part of any measurement)")
        workloads = list({p.workload.name: p.workload for p in plans}.values())
        datamodel.install_procedures(control, [sql for w in workloads for sql in (*w.helpers_sql, w.procedure_sql)])
        devices, device_note = _devices(info)
        for name, cap in info.capabilities.items():
            if not cap.available:
                notes.append(f"n/a: {name}: {cap.reason}")
        if device_note:
            notes.append(f"n/a: disk counters: {device_note}")
        steps = sum(len(p.jobs) for p in plans)
        expected = sum(p.expected_s for p in plans)
        observer.say(f"Measuring {len(plans)} test(s) in {steps} step(s): about {expected / 60:.1f} minutes.")
        spec_stored = {**asdict(spec), "dsn": redact_dsn(dsn) if spec.dsn or env_dsn() else None,
                       "jobs": sorted({j for p in plans for j in p.jobs}),
                       "data_dir": str(spec.data_dir) if spec.data_dir else None,
                       "results_dir": str(spec.results_dir),
                       "suite_file": str(spec.suite_file) if spec.suite_file else None,
                       "expected_s": expected}
        run_result = RunResult(
            run_id=store.folder.name, created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            folder=str(store.folder), status="running", spec=spec_stored, environment=fingerprint(info),
            target={**asdict(info), "devices": devices}, setup_notes=notes, setup_s=setup_s)
        store.save_run(run_result)
        ctx = StepContext(dsn=dsn, info=info, control=control, devices=devices, device_note=device_note)
        with _sigterm_as_interrupt():
            try:
                for ordinal, plan in enumerate(plans, start=1):
                    run_result.tests.append(_run_test(ctx, store, run_result, ordinal, plan, size, spec, observer))
            except KeyboardInterrupt:
                run_result.status = "interrupted"
                store.set_status(run_result.run_id, "interrupted")
                _write_report(store.folder)
                raise RunInterrupted(f"Interrupted; the completed steps are stored in {store.folder}.") from None
        run_result.status = "complete"
        store.set_status(run_result.run_id, "complete")
        _write_report(store.folder)
        return load_run(store.folder)
    finally:
        control.close()


def _run_test(ctx: StepContext, store: RunStore, run_result: RunResult, ordinal: int, plan: TestPlan,
              size: datamodel.DataSize, spec: RunSpec, observer: RunObserver) -> TestResult:
    workload, params = plan.workload, plan.params
    test = TestResult(ordinal=ordinal, workload=workload.name, family=workload.family,
                      description=workload.description, unit=workload.unit,
                      throughput_label=workload.throughput_label, mode=plan.mode, params=params,
                      kpms=list(workload.kpms) + (["lag_p99_ms", "lag_max_ms"] if plan.rate else []),
                      per_unit=workload.per_unit(params, size) if workload.per_unit else {})
    store.save_test(run_result.run_id, test)
    for statement in workload.prepare_sql:
        ctx.control.execute(statement)
    if workload.warm:
        datamodel.warm_cache(ctx.control, list(workload.warm), say=observer.say)
    settings = workload.session(params) if workload.session else {}
    if spec.nested_statements:
        if ctx.info.has("pg_stat_statements") and _is_superuser(ctx.control):
            settings = {**settings, "pg_stat_statements.track": "all"}
        else:
            observer.say("Nested statements are not tracked: needs pg_stat_statements and a superuser.")
    observer.test_started(test, plan.jobs)
    for step_no, jobs in enumerate(plan.jobs, start=1):
        step_plan = StepPlan(step_no, jobs, plan.warmup_s, plan.duration_s, plan.mode, spec.collectors, settings,
                             plan.think_s, plan.rate, memory_every_s=_memory_period(spec))
        try:
            step = run_step(ctx, workload, params, size, step_plan,
                            lambda phase, left, j=jobs: observer.step_progress(test, j, phase, left))
        except StepFailed as err:
            test.status = "failed"
            store.save_test(run_result.run_id, test)
            observer.say(f"{workload.name} step {step_no} ({jobs} jobs) failed: {err}; skipping the rest of "
                         "this test.")
            break
        if workload.family == "STO" and "data" not in ctx.info.settings.get("debug_io_direct", ""):
            step.notes.append("The OS page cache is not bypassed on this server (debug_io_direct is not 'data'): "
                              "'OS cache served' estimates how many database reads never reached the device.")
        values, reasons = kpm.compute(step, test.per_unit)
        step.kpm = {**values, "na_reasons": reasons}
        test.steps.append(step)
        store.save_step(run_result.run_id, test, step)
        observer.step_done(test, step)
    store.save_test(run_result.run_id, test)
    if test.steps:
        from capmark.report.demands import test_document

        store.save_derived(run_result.run_id, test.ordinal, "demands", test_document(test))
    observer.test_done(test)
    return test


def _is_superuser(control: Any) -> bool:
    return control.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()[0]


def _check_connections(control: Any, jobs: int) -> None:
    max_conn = int(control.execute("select current_setting('max_connections')").fetchone()[0])
    used = int(control.execute("select count(*) from pg_stat_activity where backend_type = 'client backend'"
                               ).fetchone()[0])
    if jobs + used + 2 > max_conn:
        raise CapmarkError(f"The plan needs {jobs} job connections but the server allows {max_conn} with {used} in "
                           "use; lower --jobs or raise max_connections.")


def _devices(info: Any) -> tuple[list[str], str]:
    if not info.has("os"):
        return [], info.why_not("os")
    if not info.data_directory:
        return [], "the role may not read data_directory, so the data device is unknown"
    dev, why = oscollect.device_for_path(info.data_directory)
    return ([dev], "") if dev else ([], why)


# --- stored runs -------------------------------------------------------------------------------------

def open_run(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> RunResult:
    return load_run(resolve_run(ref, results_dir))


def _write_report(folder: Path) -> Path:
    from capmark.report.html import write_report

    return write_report(load_run(folder))


def report(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR) -> tuple[RunResult, Path]:
    """Re-render a stored run's report.html from storage alone."""
    folder = resolve_run(ref, results_dir)
    run_result = load_run(folder)
    from capmark.report.html import write_report

    return run_result, write_report(run_result)


def _memory_period(spec: RunSpec) -> float:
    """Every minute; a soak shorter than 20 minutes samples every twentieth of it (at least each second), so
    that even a short soak has a memory curve. Ordinary steps keep the per-second sampling path light."""
    return min(60.0, max(1.0, spec.soak_s / 20)) if spec.soak_s else 60.0


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


def calibrate(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR,
              from_jobs: list[int] | None = None, up_to: int | None = None) -> dict:
    """Calibrate a queueing model per test of a stored run, validate it against every step and predict the
    curve beyond the measured range (default: up to twice the most jobs measured)."""
    from capmark.plan.calibrate import validate

    run_result, tests = tests_of(ref, results_dir)
    docs = [validate(t, from_jobs, up_to) for t in tests if t.steps]
    return {"schema": "capmark.calibrate/2", "run": run_result.run_id, "tests": docs}


def _planned(ref: str | None, results_dir: Path,
             from_jobs: list[int] | None) -> tuple[RunResult, list[tuple[TestResult, Any]]]:
    from capmark.plan.calibrate import calibrate as calibrate_test

    run_result, tests = tests_of(ref, results_dir)
    return run_result, [(t, calibrate_test(t, from_jobs)) for t in tests if t.steps]


def _base_jobs(model: Any, at_jobs: int | None) -> int:
    if at_jobs is None:
        return model.calibrated_from[0]
    if at_jobs < 1:
        raise CapmarkError(f"--at needs a positive number of jobs, got {at_jobs}.")
    return at_jobs


def _save(run_result: RunResult, kind: str, docs: list[tuple[int, dict]]) -> None:
    store = RunStore(Path(run_result.folder))
    try:
        for ordinal, doc in docs:
            store.save_derived(run_result.run_id, ordinal, kind, doc)
    finally:
        store.close()
    _write_report(Path(run_result.folder))


def whatif(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, from_jobs: list[int] | None = None,
           at_jobs: int | None = None, changes: dict[str, Any] | None = None, scenario_file: Path | None = None,
           save: bool = False) -> dict:
    """Baseline and scenarios (command-line changes and/or a TOML file) per test; save puts them in the report."""
    from capmark.plan.whatif import evaluate, expand, load_scenarios

    changes = {k: v for k, v in (changes or {}).items() if v is not None}
    scenarios = load_scenarios(scenario_file) if scenario_file else []
    if changes:
        scenarios = expand("", changes) + scenarios
    if not scenarios:
        raise CapmarkError("Give at least one change (e.g. --growth 20%x3, --cpus 4, --disk-speed 2) or "
                           "--scenarios FILE.toml.")
    run_result, planned = _planned(ref, results_dir, from_jobs)
    docs = []
    for t, model in planned:
        base = _base_jobs(model, at_jobs)
        doc = {"workload": t.workload, "unit": t.unit, **evaluate(model, base, model.think_s, scenarios)}
        docs.append((t.ordinal, doc))
    if save:
        _save(run_result, "whatif", docs)
    return {"schema": "capmark.whatif/1", "run": run_result.run_id, "tests": [d for _, d in docs]}


def size(ref: str | None = None, results_dir: Path = DEFAULT_RESULTS_DIR, sla_text: str = "p95<5ms",
         from_jobs: list[int] | None = None, target_tps: float | None = None, save: bool = False) -> dict:
    """Per test: the most jobs and the highest arrival rate within the SLA on the measured platform, and for a
    target rate the smallest single change that meets it."""
    from capmark.plan.sizing import MAX_JOBS, max_jobs, max_rate, parse_sla, smallest_change

    sla = parse_sla(sla_text)
    if target_tps is not None and target_tps <= 0:
        raise CapmarkError(f"--target-tps must be positive, got {target_tps:g}.")
    run_result, planned = _planned(ref, results_dir, from_jobs)
    docs = []
    for t, model in planned:
        jobs, at, beyond = max_jobs(model, sla, model.think_s)
        rate, at_rate = max_rate(model, sla)
        doc = {"workload": t.workload, "unit": t.unit, "sla": {"metric": sla.metric, "limit_s": sla.limit_s,
                                                                "text": sla.text},
               "calibrated_from": model.calibrated_from, "think_s": model.think_s,
               "max_jobs": jobs, "at_max_jobs": at.to_dict() if at else None, "one_more_job": beyond.to_dict(),
               "search_limit_reached": jobs >= MAX_JOBS,
               "max_rate": rate, "at_max_rate": at_rate.to_dict() if at_rate else None,
               "target": smallest_change(model, sla, target_tps) if target_tps else None}
        docs.append((t.ordinal, doc))
    if save:
        _save(run_result, "size", docs)
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

    run_result, tests = tests_of(ref, results_dir)
    return {"schema": "capmark.anticipate/1", "run": run_result.run_id,
            "tests": [anticipate_test(t, at_jobs, service_factor, rate_factor, servers) for t in tests if t.steps]}


# --- the embedded server -----------------------------------------------------------------------------

def db_start(data_dir: Path | None = None) -> str:
    return embedded.start(data_dir)


def db_stop(data_dir: Path | None = None) -> bool:
    return embedded.stop(data_dir)


def db_status(data_dir: Path | None = None) -> embedded.EmbeddedStatus:
    return embedded.status(data_dir)


