"""Measure a planned run: start or reach the target, set up, run every test's steps, store each step as it
ends, and end the run with a status that says how it ended (complete, failed with the reason, interrupted)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import os
import signal
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

from capmark import suite
from capmark.collect import hosts
from capmark.collect.environment import fingerprint
from capmark.config import RunSpec, env_dsn, redact_dsn, redact_url
from capmark.driver import cluster, platform, probe
from capmark.driver.groups import StepFailed
from capmark.driver.quiesce import quiesce
from capmark.driver.step import StepContext, StepPlan, run_step
from capmark.engines import registry as engines
from capmark.engines.base import Capability, Engine, TargetInfo
from capmark.engines.postgres import embedded
from capmark.errors import CapmarkError, LockBlocked, RunFailed, RunInterrupted
from capmark.measure import record, stepping
from capmark.results import RunResult, StepResult, TestResult
from capmark.store import DB_NAME, RunStore, load_run, new_run_id
from capmark.suite import TestPlan
from capmark.workloads import datamodel
from capmark.workloads import registry as workloads

# Enough for a local or LAN server to accept a connection; used only to tell why a run failed.
SERVER_PROBE_TIMEOUT_S = 3

class RunObserver:
    """Hooks a front end implements to show progress; the defaults do nothing."""

    def say(self, message: str) -> None: ...

    def test_started(self, test: TestResult, plan: list[int]) -> None: ...

    def step_progress(self, test: TestResult, jobs: int, phase: str, seconds_left: float) -> None: ...

    def step_done(self, test: TestResult, step: StepResult) -> None: ...

    def test_done(self, test: TestResult) -> None: ...


# What the caller does with a run once its final status is stored, however it ended: called with the run folder,
# returns what it could not do, in words for the user ('' when it did everything). The runner measures and
# stores; rendering (report.html) belongs to the layers above it (tests/code/test_layers.py), so it comes in here.
OnStored = Callable[[Path], str]


def _nothing_to_do(folder: Path) -> str:
    return ""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C wherever it arrives: the same cleanup (cancel the server's statements, keep
    completed steps) and the same exit code, 130."""
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
    platform.refuse_unless_possible(spec.platform)  # before the server is touched
    cleared = clear_stale_limits()
    if cleared:
        observer.say("Removed the limits that a run which ended without cleaning up had left on the server: "
                     f"{', '.join(cleared)}.")
    observer.say(f"Starting the embedded PostgreSQL in {spec.data_dir or embedded.default_data_dir()} ...")
    return embedded.start(spec.data_dir, say=observer.say), True


def plan_tests(spec: RunSpec, cores: int | None = None) -> list[TestPlan]:
    """Every test the run will measure, validated before anything touches a database, on the engine that runs it.
    Job counts not given follow the database host's cores: `cores` when given, else this machine's until the
    run knows the database host's (TestPlan.on_host)."""
    plans = _on_engine(suite.plan(spec), spec.dsn or env_dsn())
    return [p.on_host(cores) for p in plans] if cores else plans


def _on_engine(plans: list[TestPlan], dsn: str | None) -> list[TestPlan]:
    """The plans as the DSN's engine runs them: the catalogue's statements in its SQL, client-side where it has no
    server-side procedures (the embedded default and every PostgreSQL run the plans unchanged)."""
    if not dsn:
        return plans
    engine = engines.for_dsn(dsn)
    if engine.server_side:
        return plans
    return [dataclasses.replace(p, workload=workloads.for_engine(p.workload, engine, p.params),
                                settings=dataclasses.replace(p.settings, mode="client")) for p in plans]


def run(spec: RunSpec, observer: RunObserver | None = None, on_stored: OnStored = _nothing_to_do) -> RunResult:
    """Measure the planned tests at every step of their plans, store everything, then hand the stored run to
    `on_stored` (e.g. to write its report)."""
    observer = observer or RunObserver()
    plans = plan_tests(spec)
    store = RunStore.create(spec.results_dir, new_run_id())
    try:
        with sigterm_as_interrupt(), _embedded_run_lock(spec, store.folder.name):
            return _run(spec, plans, store, observer, on_stored)
    except KeyboardInterrupt:  # before the run record, or a second interrupt during the first one's cleanup
        if store.has_run() and not store.has_steps():  # a run folder with no step would look like a run
            store.discard()
        if store.has_run():
            with contextlib.suppress(sqlite3.Error):
                store.set_status(store.folder.name, "interrupted", "interrupted", only_if_running=True)
            raise RunInterrupted(f"Interrupted; the completed steps are stored in {store.folder}.") from None
        raise RunInterrupted("Interrupted before anything was measured; nothing was stored.") from None
    finally:
        if not store.has_run():  # stopped before anything was measured: leave no empty run folder behind
            store.discard()
        store.close()


def _embedded_run_lock(spec: RunSpec, run_id: str) -> AbstractContextManager:
    """One run at a time on the embedded server; a server named by DSN is the user's to share."""
    return nullcontext() if spec.dsn or env_dsn() else embedded.exclusive_run(spec.data_dir, run_id)


def _run(spec: RunSpec, plans: list[TestPlan], store: RunStore, observer: RunObserver,
         on_stored: OnStored) -> RunResult:
    dsn, is_embedded = _resolve_target(spec, observer)
    joined = _join_cluster(spec, plans, observer)  # before the target is touched: a wrong address changes nothing
    try:
        return _run_joined(spec, plans, store, observer, on_stored, dsn, is_embedded, joined)
    finally:
        if spec.cluster:
            cluster.leave()


def _run_joined(spec: RunSpec, plans: list[TestPlan], store: RunStore, observer: RunObserver, on_stored: OnStored,
                dsn: str, is_embedded: bool, joined: cluster.Cluster | None) -> RunResult:
    engine = engines.for_dsn(dsn)
    control = engine.connect(dsn, application_name="capmark control")
    host: hosts.HostSource | None = None
    try:
        engine.prepare_control(control)
        info = engine.describe(control, dsn, embedded=is_embedded)
        host = hosts.choose(spec.host_metrics, dsn, control, info.data_directory, engine.connect, spec.node_exporter,
                            hosts.ThreadedServer.of(engine, info), spec.node_exporter_token())
        _describe_host(info, host)
        cores = spec.platform.cpus or host.facts.cores or os.cpu_count() or 1
        plans = [p.on_host(cores) for p in plans]
        if cores != (os.cpu_count() or 1) and any(p.follows_cores for p in plans):
            observer.say(f"The database host has {cores} cores: the default plan runs up to "
                         f"{max(max(p.jobs) for p in plans)} jobs.")
        _check_connections(engine, control, max(max(p.jobs) for p in plans))
        scaling = probe.host_scaling(engine, dsn, host.facts.cores, _host_key(host), observer.say)  # unconfined
        size = datamodel.size_for(spec.scale)
        notes: list[str] = []

        def say_and_note(message: str) -> None:
            notes.append(message)
            observer.say(message)

        if not engine.server_side:
            notes.append(f"{engine.label} workloads run client-side: capmark has no server-side procedures for "
                         "this engine, so every latency includes the round trip to the server.")
        setup_s = datamodel.setup(control, size, say=say_and_note, engine=engine)
        if setup_s:
            notes.append(f"data model set up in {setup_s:.1f} s (not part of any measurement)")
        workloads = list({p.workload.name: p.workload for p in plans}.values())
        if any(p.mode == "server" for p in plans):
            datamodel.install_procedures(control, [sql for w in workloads for sql in (*w.helpers_sql, w.procedure_sql)],
                                         engine=engine)
        device, device_note = host.data_device(info.data_directory)
        devices = [device] if device else []
        notes.extend(f"n/a: {cap.reason}" for cap in info.capabilities.values() if not cap.available)
        if device_note:
            notes.append(f"n/a: disk counters: {device_note}")
        notes.extend(f"n/a on the database host: {what}" for what in host.facts.cannot_see)
        if engine.tracks_statements(info):
            notes.append(engine.statements_rule(spec.all_statements))
        steps = sum(p.steps for p in plans)
        expected = sum(p.expected_s for p in plans)
        auto = [p for p in plans if p.auto_max]
        if auto:
            observer.say(f"Stepping until the knee, up to {auto[0].auto_max} jobs: at most {steps} step(s), at most "
                         f"{expected / 60:.1f} minutes.")
        else:
            observer.say(f"Measuring {len(plans)} test(s) in {steps} step(s): about {expected / 60:.1f} minutes.")
        spec_stored = {**asdict(spec), "mode": spec.mode if engine.server_side else "client",  # as the tests ran
                       "dsn": redact_dsn(dsn) if spec.dsn or env_dsn() else None,
                       "node_exporter": redact_url(spec.node_exporter) if spec.node_exporter else None,
                       "jobs": sorted({j for p in plans for j in p.jobs}),
                       "data_dir": str(spec.data_dir) if spec.data_dir else None,
                       "results_dir": str(spec.results_dir),
                       "suite_file": str(spec.suite_file) if spec.suite_file else None,
                       "expected_s": expected}
        with _confined(spec, info, store.folder.name, observer) as limits:
            run_result = RunResult(
                run_id=store.folder.name, created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                folder=str(store.folder), status="running", spec=spec_stored,
                environment={**fingerprint(info, host), **({"cluster": joined} if joined else {}),
                             **({"platform": limits} if limits else {}),
                             **({"platform_scaling": scaling.record()} if scaling else {})},
                target={**asdict(info), "devices": devices, "started_at": engine.server_started(control)},
                setup_notes=notes + ([f"The server was confined to {limits['words']}."] if limits else []),
                setup_s=setup_s)
            store.save_run(run_result)
            ctx = StepContext(dsn=dsn, info=info, control=control, host=host, devices=devices,
                              device_note=device_note)
            return _measure(ctx, store, run_result, plans, size, spec, observer, on_stored)
    finally:
        with contextlib.suppress(Exception):  # the connection may be gone with the server
            control.close()
        if host is not None:
            with contextlib.suppress(Exception):
                host.close()


def _host_key(host: hosts.HostSource) -> dict[str, Any]:  # open-ended: the facts that name a host, as JSON
    """What tells one database host from another for the CPU probe's cache: the machine and this boot of it (a
    virtual machine may be placed on other hardware when it boots again)."""
    f = host.facts
    return {"cpu_model": f.cpu_model, "cores": f.cores, "memory_bytes": f.memory_bytes, "kernel": f.kernel,
            "boot_id": f.boot_id}


def clear_stale_limits() -> list[str]:
    """Remove the limits of confined runs that ended without cleaning up (killed); what was removed."""
    return platform.clear_stale()


@contextmanager
def _confined(spec: RunSpec, info: TargetInfo, run_id: str,
              observer: RunObserver) -> Iterator[platform.PlatformRecord | None]:
    """The embedded server confined to the platform the user asked for while the tests run (nothing without
    limits), and capmark's own process kept off the server's cores where the host has others, so that the load
    does not take the smaller platform's CPU. However the run ends, both are undone."""
    if not spec.platform.limited:
        yield None
        return
    if info.postmaster_pid is None:
        raise CapmarkError("The embedded server's processes could not be found on this host, so it cannot be "
                           "confined; drop the --server-* options.")
    folders = [Path(info.data_directory)] if info.data_directory else []
    with platform.confined(spec.platform, info.postmaster_pid, folders, run_id) as applied, \
            platform.driver_elsewhere(applied):
        assert applied is not None
        record = platform.record_of(applied)
        observer.say(f"The embedded server is confined to {record['words']} for this run.")
        yield record


def _join_cluster(spec: RunSpec, plans: list[TestPlan], observer: RunObserver) -> cluster.Cluster | None:
    """Join the Ray cluster before anything is created, and say where the client-side jobs will run."""
    if not spec.cluster:
        return None
    joined = cluster.join(spec.cluster)
    nodes = joined["nodes"]
    cpus = sum(n["cpus"] for n in nodes)
    observer.say(f"Client-side jobs run on the Ray cluster at {spec.cluster}: {len(nodes)} node"
                 f"{'s' if len(nodes) != 1 else ''}, {cpus} CPUs for job processes.")
    if any(p.mode != "client" for p in plans):
        observer.say("Server-side tests run their jobs from this host: they only wait for the server.")
    return joined


def _describe_host(info: TargetInfo, host: hosts.HostSource) -> None:
    """Record in the target which source measured the database host, and what it cannot see."""
    info.host_metrics = host.name
    if isinstance(host, hosts.NoHost):
        info.capabilities["os"] = Capability(False, host.reason)
    else:
        info.capabilities["os"] = Capability(True)
        info.postmaster_pid = getattr(host, "postmaster_pid", None)


class _TestAborted(Exception):
    """The server, the connection or the results store gave way in a test; the reason is in words for the user."""


def _measure(ctx: StepContext, store: RunStore, run_result: RunResult, plans: list[TestPlan],
             size: datamodel.DataSize, spec: RunSpec, observer: RunObserver, on_stored: OnStored) -> RunResult:
    """Every test in turn. However the run ends, its record ends with a status and a reason, and on_stored
    follows (the report)."""
    try:
        for ordinal, plan in enumerate(plans, start=1):
            _run_test(ctx, store, run_result, ordinal, plan, size, spec, observer)
    except KeyboardInterrupt:
        # a test that ended has no reason: the interrupt came while its results were shown
        where = (run_result.tests[-1].reason if run_result.tests else "") or "interrupted"
        if not any(test.steps for test in run_result.tests):  # a run folder with no step would look like a run
            store.discard()
            raise RunInterrupted(f"{where[0].upper()}{where[1:]}, before anything was measured; nothing was "
                                 "stored.") from None
        problem = _finish(store, run_result, "interrupted", where, on_stored)
        raise RunInterrupted(f"{where[0].upper()}{where[1:]}; the completed steps are stored in {store.folder}"
                             f"{'; ' + problem if problem else ''}.") from None
    except _TestAborted as aborted:
        if isinstance(aborted.__cause__, LockBlocked) and not any(test.steps for test in run_result.tests):
            store.discard()  # nothing measured: an environment problem in one sentence (exit 2), like a setup's
            raise LockBlocked(f"{str(aborted)[0].upper()}{str(aborted)[1:]}; nothing was measured.") from None
        problem = _finish(store, run_result, "failed", str(aborted), on_stored)
        raise RunFailed(f"The run failed: {aborted}. The completed steps are stored in {store.folder}"
                        f"{'; ' + problem if problem else ''}.") from aborted.__cause__
    failed = [t for t in run_result.tests if t.status == "failed"]
    reason = "; ".join(f"{t.workload}: {t.reason}" for t in failed)
    problem = _finish(store, run_result, "failed" if failed else "complete", reason, on_stored)
    if problem:
        observer.say(f"The run is stored in {store.folder}, but {problem}.")
    return load_run(store.folder)


def _finish(store: RunStore, run_result: RunResult, status: str, reason: str, on_stored: OnStored) -> str:
    """Store the final status and hand the stored run to on_stored (the report); returns what could not be done
    ('' when all was)."""
    run_result.status, run_result.reason = status, reason
    try:
        store.set_status(run_result.run_id, status, reason)
    except sqlite3.Error as err:
        return f"its final status could not be stored ({err}), so it will show as crashed"
    try:
        return on_stored(store.folder)
    except Exception as err:  # on_stored reports what it could not do; a bug in it must not hide the run either
        return f"the work after storing it failed ({_first_line(err)})"


def _run_test(ctx: StepContext, store: RunStore, run_result: RunResult, ordinal: int, plan: TestPlan,
              size: datamodel.DataSize, spec: RunSpec, observer: RunObserver) -> TestResult:
    workload, params = plan.workload, plan.params
    test = TestResult(ordinal=ordinal, workload=workload.name, family=workload.family,
                      description=workload.description, unit=workload.unit,
                      throughput_label=workload.throughput_label, mode=plan.mode, params=params,
                      kpms=list(workload.kpms) + (["lag_p99_ms", "lag_max_ms"] if plan.rate else []),
                      per_unit=workload.per_unit(params, size) if workload.per_unit else {}, status="running")
    run_result.tests.append(test)
    where = f"while preparing {workload.name}"
    try:
        store.save_test(run_result.run_id, test)
        engine = engines.named(ctx.info.engine)
        if workload.own_data is not None:
            where = f"while building the tables of {workload.name}"
            test.notes.extend(workload.own_data(ctx.control, ctx.dsn, params, observer.say))
            store.save_test(run_result.run_id, test)
            where = f"while preparing {workload.name}"
        for statement in workload.prepare_sql:
            engine.execute(ctx.control, statement)
        if workload.warm:
            datamodel.warm_cache(ctx.control, list(workload.warm), say=observer.say, engine=engine)
        settings = workload.session(params) if workload.session else {}
        if spec.nested_statements:
            nested = engine.nested_statements(ctx.control, ctx.info)
            if isinstance(nested, str):
                observer.say(nested)
            else:
                settings = {**settings, **nested}
        quiesced = quiesce(ctx.control, engine, ctx.devices, ctx.host)
        test.quiesce_s = quiesced.seconds
        if quiesced.note():
            observer.say(quiesced.note())
        test.stepping = {"repeat": plan.repeat, "auto": bool(plan.auto_max), "max_jobs": plan.auto_max}
        observer.test_started(test, [j for _, j in plan.order()])
        for step_no, (repeat, jobs) in enumerate(_schedule(plan, test), start=1):
            where = f"during step {step_no} ({_jobs(jobs)}) of {workload.name}"
            store.heartbeat(run_result.run_id)
            step_plan = StepPlan(step_no, jobs, plan.warmup_s, plan.duration_s, plan.mode, spec.collectors,
                                 settings, plan.think_s, plan.rate, driver_procs=spec.driver_procs,
                                 cluster=bool(spec.cluster) and plan.mode == "client",
                                 memory_every_s=_memory_period(spec),
                                 all_statements=spec.all_statements, client_engine=spec.client_engine)
            try:
                step = run_step(ctx, workload, params, size, step_plan,
                                functools.partial(observer.step_progress, test, jobs), observer.say)
            except StepFailed as err:
                engine.execute(ctx.control, "select 1")  # the server or the connection gone: the run cannot go on
                test.status, test.reason = "failed", f"step {step_no} ({_jobs(jobs)}) failed: {err}"
                store.save_test(run_result.run_id, test)
                observer.say(f"{workload.name} step {step_no} ({_jobs(jobs)}) failed: {err}; skipping the rest of "
                             "this test.")
                break
            if workload.family == "STO" and "data" not in ctx.info.settings.get("debug_io_direct", ""):
                step.notes.append("The OS page cache is not bypassed on this server (debug_io_direct is not "
                                  "'data'): 'OS cache served' estimates how many database reads never reached the "
                                  "device.")
            if step_no == 1 and quiesced.note():
                step.notes.append(quiesced.note())
            step.repeat = repeat
            step.measures = record.build(step, test.per_unit)  # decided once, stored with the step
            test.steps.append(step)
            where = f"while storing step {step_no} ({_jobs(jobs)}) of {workload.name}"
            store.save_step(run_result.run_id, test, step)
            if step.status != "ok" and test.status == "running":
                test.status, test.reason = "failed", f"step {step_no} ({_jobs(jobs)}) failed: {'; '.join(step.notes)}"
            observer.step_done(test, step)
            if (step.instruments.get("overrun") or {}).get("cancelled") and test.status == "running":
                # its jobs were cancelled past the plan (e.g. a lock another session holds): so would the next steps'
                why = list(step.measures.problems) or [step.instruments["overrun"]["sentence"]]
                test.status, test.reason = "failed", f"step {step_no} ({_jobs(jobs)}) was cut short: {why[0]}"
                observer.say(f"{workload.name}: {test.reason}; skipping the rest of this test.")
                break
        if workload.verify is not None and test.steps:
            where = f"while checking the database after {workload.name}"
            failures = workload.verify(ctx.control, params)
            if failures is not None:
                checked = failures or ["checks of the database after the test: all hold"]
                test.notes.extend(checked)
                for note in checked:
                    observer.say(f"{workload.name}: {note}.")
            if failures and test.status == "running":
                test.status, test.reason = "failed", "; ".join(failures)
        where = f"while storing {workload.name}"
        if test.status == "running":
            test.status = "ok"
        store.save_test(run_result.run_id, test)
    except KeyboardInterrupt:
        _stop_test(store, run_result, test, "interrupted", f"interrupted {where}", observer)
        raise
    except Exception as err:
        reason = _what_happened(err, ctx.dsn, where, run_result.target.get("started_at"), store.folder)
        _stop_test(store, run_result, test, "failed", reason, observer)
        raise _TestAborted(reason) from err
    observer.test_done(test)
    return test


def _schedule(plan: TestPlan, test: TestResult) -> Iterator[tuple[int, int]]:
    """(repeat, jobs) of each step in running order. With auto stepping the first pass decides each next step from
    the steps measured so far (test.steps grows as the caller measures them) and records the knee in
    test.stepping; the later passes repeat the job counts it found, interleaved."""
    if not plan.auto_max:
        yield from plan.order()
        return
    while (jobs := stepping.next_jobs(_measured(test), plan.auto_max)) is not None:
        yield 1, jobs
    knee = stepping.stop(_measured(test), plan.auto_max)
    if knee is not None:
        test.stepping["knee"] = knee.record()
    found = sorted({s.jobs for s in test.steps})
    yield from stepping.interleave(found, plan.repeat)[len(found):]


def _measured(test: TestResult) -> list[stepping.Point]:
    """(jobs, throughput, mean response time) of the first pass's completed steps."""
    return [(s.jobs, s.units / s.elapsed_s, s.latency.mean_s or 0.0) for s in test.steps
            if s.repeat == 1 and s.status == "ok" and s.elapsed_s]


def _stop_test(store: RunStore, run_result: RunResult, test: TestResult, status: str, reason: str,
               observer: RunObserver) -> None:
    """Mark the test that was running when the run stopped (the store may be the very thing that failed), and
    let the front end close its progress display and show what the test measured."""
    test.status, test.reason = status, reason
    with contextlib.suppress(sqlite3.Error):
        store.save_test(run_result.run_id, test)
    with contextlib.suppress(Exception):  # the display must not hide why the run stopped
        observer.test_done(test)


def _what_happened(err: Exception, dsn: str, where: str, started_at: str | None, folder: Path) -> str:
    """What stopped the run, in the user's words: the results disk, the server, a connection, or a bug."""
    if isinstance(err, sqlite3.Error):
        return f"the results file {folder / DB_NAME} could not be written {where} ({err})"
    if isinstance(err, LockBlocked | cluster.ClusterLost):  # their own sentence says what happened and what to do
        text = str(err)
        return f"{where}, {text[:1].lower()}{text[1:]}".rstrip(".")
    if isinstance(err, engines.for_dsn(dsn).error | CapmarkError):  # CapmarkError: a job connection was refused
        return _what_the_server_did(err, dsn, where, started_at)
    return f"unexpected {type(err).__name__} {where}: {_first_line(err)}"


def _what_the_server_did(err: Exception, dsn: str, where: str, started_at: str | None) -> str:
    """Tell a stopped server from a restarted one, from a connection another session terminated, and from a
    connection the server refused (e.g. every slot taken by other clients)."""
    engine = engines.for_dsn(dsn)
    line = (engine.error_text(err) if isinstance(err, engine.error) else _first_line(err)).rstrip(".")
    now_started = _probe_server(dsn)
    if now_started is None:
        return f"the server stopped {where} ({line})"
    if started_at and now_started != started_at:
        return f"the server restarted {where} ({line})"
    if engines.for_dsn(dsn).terminated(err):
        return f"another session terminated capmark's connection to the server {where} ({line})"
    if isinstance(err, CapmarkError):
        return f"a connection failed {where}: {line[:1].lower()}{line[1:]}"
    return f"the server reported an error {where}: {line}"


def _probe_server(dsn: str) -> str | None:
    """The server's start time when it answers a fresh connection now, else None."""
    engine = engines.for_dsn(dsn)
    try:
        conn = engine.connect(dsn, application_name="capmark probe", timeout_s=SERVER_PROBE_TIMEOUT_S)
    except (engine.error, CapmarkError):
        return None
    try:
        return engine.server_started(conn)
    except engine.error:
        return None
    finally:
        conn.close()


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _check_connections(engine: Engine, control: Any, jobs: int) -> None:
    max_conn, used = engine.connection_room(control)
    if jobs + used + 2 > max_conn:
        raise CapmarkError(f"The plan needs {jobs} job connections but the server allows {max_conn} with {used} in "
                           "use; lower --jobs or raise max_connections.")


def _memory_period(spec: RunSpec) -> float:
    """Every minute; a soak shorter than 20 minutes samples every twentieth of it (at least each second), so
    that even a short soak has a memory curve. Ordinary steps keep the per-second sampling path light."""
    return min(60.0, max(1.0, spec.soak_s / 20)) if spec.soak_s else 60.0
