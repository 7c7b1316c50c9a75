"""One step: N jobs on N connections, warm-up, opening snapshot, measured window, closing snapshot."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from capmark.collect import hosts, netinfo
from capmark.collect import os as oscollect
from capmark.collect.hosts import HostSource
from capmark.collect.procfs import Pressure, ProcStat
from capmark.collect.sampler import Sampler, Samples
from capmark.driver import sampling
from capmark.driver.groups import Outcome, ProcessCpu, StepJobs, driver_processes, job_group
from capmark.driver.jobs import Pacing
from capmark.driver.pgbench_engine import PgbenchGroup, client_engine_record
from capmark.engines import registry as engines
from capmark.engines.base import Engine, TargetInfo
from capmark.histogram import merge_all
from capmark.results import StepResult
from capmark.workloads import sto
from capmark.workloads.base import STEP_JOBS, DataSize, ParamValue, Workload

if TYPE_CHECKING:
    from capmark.driver.cluster import NodeLayout
    from capmark.engines.base import LockHolder

Progress = Callable[[str, float], None]  # phase, seconds left in it

# A phase (warm-up, window) whose jobs are still busy this long after its planned end overruns: the progress line
# and a message say what the jobs wait for (their wait events, and who holds the lock when they wait on one).
OVERRUN_MARGIN_S = 5.0
# Jobs that all wait on a lock this long after the phase's planned end are cancelled and the phase ends: none of
# them can complete a unit while another session holds the lock, however long its transaction lasts.
LOCK_OVERRUN_LIMIT_S = 10.0
# Jobs still busy this long after the planned end are cancelled whatever they wait for (a phase boundary that no
# job reaches within groups.BARRIER_TIMEOUT_S fails the step without storing it).
OVERRUN_LIMIT_S = 60.0
WATCH_POLL_S = 0.5


class DriverCpu(TypedDict):
    """The driver's CPU over the window, as the step stores it (StepResult.driver_cpu)."""

    user_s: float  # every driver process together
    sys_s: float
    run_delay_s: float | None  # their threads' time runnable but waiting for a CPU (None: not measured)
    sampler_backend_s: float | None  # the sampler's server process (None: not measured, or threads of one process)
    processes: list[ProcessCpu]  # each on its own, the runner's first
    database_host_s: NotRequired[float]  # jobs on a cluster: the part spent on the database host


class Overrun(TypedDict):
    """A phase that ran past its plan: what the jobs waited for and who held them (instruments.overrun)."""

    phase: str  # warm-up | window
    over_s: float  # past its planned end, when last looked at
    planned_s: float
    window_s: float
    waits: dict[str, int]  # the busy jobs' wait keys, each with how many jobs wait on it
    blockers: list[LockHolder]  # the sessions holding the lock they wait on
    cancelled: bool  # capmark cancelled the jobs' statements to end the phase
    sentence: str  # what happened, for the user


@dataclass
class StepContext:
    """The connected target as a step needs it."""

    dsn: str
    info: TargetInfo
    control: Any
    host: HostSource  # where the database host's OS counters come from
    devices: list[str] = field(default_factory=list)
    device_note: str = ""


@dataclass
class StepPlan:
    ordinal: int
    jobs: int
    warmup_s: float
    duration_s: float
    mode: str
    collectors: bool = True
    session_settings: dict[str, str] = field(default_factory=dict)  # SET on every job connection
    think_s: float = 0.0  # client side: mean think time after each unit
    rate: float = 0.0  # client side: total Poisson arrival rate (units/s) over all jobs; 0 = closed loop
    driver_procs: int | None = None  # client side: worker processes for the jobs (None: one per core, at most)
    memory_every_s: float = 60.0  # instance process memory sampling period (a soak samples at least 20 times)
    all_statements: bool = False  # keep every role's statements in the top statements, not only capmark's
    cluster: bool = False  # client side: the run joined a Ray cluster, whose nodes run the jobs
    client_engine: str = "python"  # client side: capmark's own jobs, or pgbench (a PostgreSQL script test)


@dataclass(frozen=True)
class _OsReading:
    """The database host's counters at one instant (before or after the window)."""

    stat: ProcStat
    disks: dict[str, dict[str, int]]  # by device: the kernel's counters
    mem: dict[str, int]  # /proc/meminfo's fields, in bytes
    pressure: dict[str, Pressure]  # by resource: cpu, io, memory
    procs: oscollect.ProcessSample | None  # the instance's processes (None: the source cannot see them)


def _os_reading(ctx: StepContext) -> _OsReading | None:
    stat, disks, mem, pressure = ctx.host.counters(ctx.devices)
    if stat is None:
        return None
    return _OsReading(stat, disks, mem, pressure, ctx.host.instance())


def _os_summary(before: _OsReading, after: _OsReading, elapsed_s: float, host: HostSource) -> dict[str, object]:
    """The host's counters over the window as the step stores them (StepResult.os); the memory and disk fields are
    the kernel's own."""
    b, a = before.stat, after.stat
    disks = {}
    for dev, fields in after.disks.items():
        prev = before.disks.get(dev, {})
        disks[dev] = {k: v - prev.get(k, 0) if k != "in_flight" else v for k, v in fields.items()}
    return {
        "cpu_pct": oscollect.cpu_percentages(b.cpu, a.cpu),
        "cpu_seconds": oscollect.cpu_seconds(b.cpu, a.cpu),
        "per_cpu_pct": [oscollect.cpu_percentages(x, y) for x, y in zip(b.per_cpu, a.per_cpu, strict=False)],
        "cores": len(a.per_cpu),
        "ctxt": a.ctxt - b.ctxt,
        "procs_running_end": a.procs_running,
        "procs_blocked_end": a.procs_blocked,
        "disks": disks,
        "memory_end": after.mem,
        "memory_start": before.mem,
        "pressure": _stall_shares(before.pressure, after.pressure, elapsed_s),
        "source": host.name,
        "driver_on_host": host.driver_on_host,
    }


def _stall_shares(before: dict[str, Pressure], after: dict[str, Pressure], elapsed_s: float) -> dict[str, float]:
    """Share of the window in which some task stalled on CPU, IO or memory (Linux pressure stall information)."""
    return {kind: min(1.0, max(0.0, (after[kind].total_us - before[kind].total_us) / 1e6 / elapsed_s))
            for kind in after if kind in before and elapsed_s > 0}


def _think_s(workload: Workload, params: dict[str, ParamValue], plan: StepPlan) -> float:
    """The mean time a job spends between units: --think, or the keying and think times of the workload's users."""
    users = workload.user_model(params, plan.mode)
    return users.mean_pause_s if users is not None else plan.think_s


def run_step(ctx: StepContext, workload: Workload, params: dict[str, ParamValue], size: DataSize, plan: StepPlan,
             progress: Progress | None = None, say: Callable[[str], None] | None = None) -> StepResult:
    """Run one step; on KeyboardInterrupt every job is cancelled and closed before re-raising. A phase that
    overruns its plan says what the jobs wait for, and ends (jobs cancelled) within a bounded time."""
    progress = progress or (lambda phase, left: None)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    sampler: Sampler | None = None
    sampler_conn: Any = None
    engine = engines.named(ctx.info.engine)
    pacing = Pacing(plan.think_s, plan.rate / plan.jobs if plan.rate else 0.0)
    procs = driver_processes(plan.driver_procs, plan.jobs, plan.mode, workload, plan.cluster)
    spec = StepJobs(ctx.dsn, workload, {**params, STEP_JOBS: plan.jobs}, size, plan.mode, ctx.info, pacing, plan.jobs,
                    plan.session_settings)
    group = (PgbenchGroup(spec, plan.warmup_s, plan.duration_s, plan.rate) if plan.client_engine == "pgbench"
             else job_group(spec, procs, plan.cluster))
    stopping = threading.Event()
    try:
        eviction = sto.eviction_status(ctx.control, workload) if sto.evicts(workload) else None
        pids = group.start()
        watch = OverrunWatch(ctx, engine, group, pids, plan, progress, say or (lambda message: None))
        group.schedule.warmup_end = time.time() + plan.warmup_s
        group.wait()
        _countdown("warm-up", group.schedule.warmup_end, progress, stopping, group.failed)
        watch.end_if_failed()
        with watch.phase("warm-up", group.schedule.warmup_end):
            group.wait()  # warm-up over, statistics flushed

        if not ctx.info.has("force_flush"):
            time.sleep(0.6)  # PostgreSQL 14: the collector publishes every 500 ms
        os_local = not isinstance(ctx.host, hosts.NoHost)  # some source sees the database host
        engine.flush_own_stats(ctx.control, ctx.info)  # the control session's earlier work stays out of the window
        ctx.host.publish_statistics(ctx.info)  # and so does the host source's (quiescing, the previous step)
        db_before = engine.snapshot(ctx.control, ctx.info, pids, plan.all_statements)
        host_statements0 = ctx.host.transactions()
        host_before = ctx.host.host_processes() if os_local else None
        os_before = _os_reading(ctx) if os_local else None
        group.mark_window()  # the jobs wait at the barrier: their sockets are quiet
        drv_before = oscollect.own_cpu_seconds()
        delay_before = oscollect.own_run_delay()
        sampler_conn = engine.connect(ctx.dsn, application_name="capmark sampler") if plan.collectors else None
        sampler_pid = engine.backend_pid(sampler_conn) if sampler_conn is not None else None
        sampler = Sampler(sampler_conn, pids, ctx.host if os_local and plan.collectors else None,
                          engine=engine, info=ctx.info, memory_every_s=plan.memory_every_s,
                          own_pids=[engine.backend_pid(ctx.control), *ctx.host.own_pids()])
        sampler_cpu0 = _backend_cpu(ctx.host, engine, sampler_conn) if os_local else None
        group.schedule.measure_start = time.time()
        group.schedule.measure_end = group.schedule.measure_start + plan.duration_s
        sampler.start()
        group.wait()  # go
        _countdown("measure", group.schedule.measure_end, progress, stopping, group.failed)
        watch.end_if_failed()
        with watch.phase("window", group.schedule.measure_end):
            group.wait()  # jobs done and flushed
        elapsed = time.time() - group.schedule.measure_start
        samples = sampler.stop()
        sampler_cpu = ((_backend_cpu(ctx.host, engine, sampler_conn) or 0.0) - sampler_cpu0
                       if sampler_cpu0 is not None else None)
        sampler.publish_statistics(ctx.info)
        if not ctx.info.has("force_flush"):
            time.sleep(0.6)
        drv_after = oscollect.own_cpu_seconds()
        group.mark_window()
        delay_after = oscollect.own_run_delay()
        os_after = _os_reading(ctx) if os_local else None
        host_after = ctx.host.host_processes() if os_local else None
        ctx.host.publish_statistics(ctx.info)
        host_statements = ctx.host.transactions() - host_statements0
        db_after = engine.snapshot(ctx.control, ctx.info, pids, plan.all_statements)
        outcome = group.finish()
    except BaseException:
        stopping.set()
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        group.stop()
        if sampler_conn is not None:
            sampler_conn.close()
        raise
    if sampler_conn is not None:
        sampler_conn.close()

    tallies = outcome.tallies
    notes = list(outcome.failures)
    names = list(workload.txn_types)
    hists = {names[t]: merge_all([tally.histograms[t] for tally in tallies]) for t in range(len(names))}
    errors = {names[t]: sum(tally.errors[t] for tally in tallies) for t in range(len(names))}
    seconds = max(1, int(round(plan.duration_s)))
    series_units = _per_second([tally.series_units for tally in tallies], seconds)
    series_errors = _per_second([tally.series_errors for tally in tallies], seconds)
    driver_cpu = _driver_cpu(drv_before, drv_after, delay_before, delay_after, sampler_cpu, outcome, ctx.host)
    result = StepResult(
        ordinal=plan.ordinal, jobs=plan.jobs, status="ok" if not notes else "failed", started_at=started,
        elapsed_s=elapsed, txn_types=names, histograms=hists, errors=errors,
        series_units=series_units, series_errors=series_errors,
        db_before=db_before, db_after=db_after, db_delta=engine.delta(db_before, db_after),
        driver_cpu=dict(driver_cpu),
        waits=dict(samples.waits), wait_samples=samples.wait_samples, os_series=samples.os_series,
        round_trips=sum(tally.round_trips for tally in tallies), notes=notes + samples.errors,
        network=dict(netinfo.summed_delta(outcome.net_before, outcome.net_after).to_dict()),
        pacing={"think_s": _think_s(workload, params, plan), "rate": plan.rate},
        schedule_lag=merge_all([tally.lag for tally in tallies]) if plan.rate else None,
        background_series=samples.background_series(), memory_series=[dict(m) for m in samples.memory_series],
        interference={"sessions": samples.others.to_dict() if sampler_conn is not None else None},
        instruments={"capmark_transactions": {**_capmark_transactions(ctx, plan, samples, sampler_conn is not None),
                                              "host_metrics": host_statements},
                     "statements": engine.statements_rule(plan.all_statements)},
    )
    if plan.client_engine == "pgbench":
        result.instruments["client_engine"] = client_engine_record()
        result.notes.append(result.instruments["client_engine"]["not_measured"])
    if watch.record is not None:
        result.instruments["overrun"] = watch.record
        result.notes.append(watch.record["sentence"])
    vacuum = autovacuum_note(result.background_series)
    if vacuum:
        result.notes.append(vacuum)
    unit_stats = [tally.unit_stats for tally in tallies if tally.unit_stats is not None]
    if unit_stats:
        result.instruments["unit_stats"] = functools.reduce(lambda a, b: a.plus(b), unit_stats).to_dict()
    if outcome.cluster is not None:
        result.instruments["cluster"] = {"nodes": outcome.cluster}
        result.notes.append(_spread_note(outcome.cluster, driver_cpu["processes"], elapsed))
    result.notes += sampling.record(result.instruments, [tally.sampling for tally in tallies], names)
    if eviction is not None:
        result.instruments["eviction"] = eviction
        if eviction["note"]:
            result.notes.append(eviction["note"])
    if os_before and os_after:
        result.os = _os_summary(os_before, os_after, elapsed, ctx.host)
        if os_before.procs and os_after.procs:
            for pid in (sampler_pid, *ctx.host.own_pids()):  # capmark's own backends: its cost, not the workload's
                oscollect.relabel(os_after.procs, pid, oscollect.SAMPLER_ROLE)
            result.process_cpu = oscollect.cpu_by_role(os_before.procs, os_after.procs)
            result.os["rss_by_role_end"] = _rss_by_role(os_after.procs)
    if host_before is not None and host_after is not None:
        workers = {p["pid"] for p in outcome.processes}
        result.interference["processes"] = _other_processes(host_before, host_after, os_before, os_after, workers)
    return result


def _driver_cpu(before: tuple[float, float], after: tuple[float, float], delay_before: dict[int, float],
                delay_after: dict[int, float], sampler_cpu: float | None, outcome: Outcome,
                host: HostSource) -> DriverCpu:
    """The driver's CPU over the window: this process (the runner, the sampler, threaded jobs) plus every worker
    process, each also kept on its own (one process can drive at most one core). With jobs on a cluster's nodes,
    database_host_s is the part spent on the database host (nodes that run its kernel), the rest being elsewhere."""
    own = ProcessCpu(pid=os.getpid(), jobs=[], user_s=after[0] - before[0], sys_s=after[1] - before[1],
                     run_delay_s=oscollect.run_delay_between(delay_before, delay_after))
    processes = [own, *outcome.processes]
    delays = [d for p in processes if (d := p["run_delay_s"]) is not None]
    out = DriverCpu(user_s=sum(p["user_s"] for p in processes), sys_s=sum(p["sys_s"] for p in processes),
                    run_delay_s=sum(delays) if len(delays) == len(processes) else None,
                    sampler_backend_s=sampler_cpu, processes=processes)
    if outcome.cluster is not None:
        boot_id = host.facts.boot_id
        here = {n["node_id"] for n in outcome.cluster if boot_id and n.get("boot_id") == boot_id}
        out["database_host_s"] = sum(p["user_s"] + p["sys_s"] for p in processes
                                     if p.get("node", "") in here or (not p["jobs"] and host.driver_on_host))
    return out


def autovacuum_note(background: list[dict[str, float]]) -> str:
    """Autovacuum's workers commit transactions, use CPU and do IO of their own in the database, which the step's
    figures then include (a vacuum of a hot table added 7-11 commits to a 2 s window of 2)."""
    seconds = [b["t"] for b in background if b.get("autovacuum")]
    if not seconds:
        return ""
    share = sum(b["autovacuum"] for b in background) / len(background)
    return (f"autovacuum worked during {share:.0%} of the window's samples (in second{'s' if len(seconds) > 1 else ''} "
            f"{', '.join(map(str, seconds))}): its transactions, CPU and IO are in this step's figures")


def _spread_note(nodes: list[NodeLayout], processes: list[ProcessCpu], elapsed_s: float) -> str:
    """How the jobs were spread over the cluster's nodes, and what each node's job processes used."""
    parts = []
    for node in nodes:
        cpu = sum(p["user_s"] + p["sys_s"] for p in processes if p.get("node") == node["node_id"])
        jobs, procs = node["jobs"], node["processes"]
        parts.append(f"{node['hostname']} ({node['address']}, node {node['node_id'][:8]}): "
                     f"job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs))} in {procs} "
                     f"process{'es' if procs > 1 else ''}, "
                     f"CPU {cpu / elapsed_s:.2f} of {node['cores']} cores, clock offset "
                     f"{node['offset_s'] * 1000:+.2f} ms ± {node['uncertainty_s'] * 1000:.2f} ms")
    return f"jobs on {len(nodes)} Ray node{'s' if len(nodes) > 1 else ''}: " + "; ".join(parts)


def _capmark_transactions(ctx: StepContext, plan: StepPlan, samples: Samples, sampled: bool) -> dict[str, int]:
    """Transactions capmark's own sessions committed in the window, which are not the workload's: the
    sampler's (its login, every sample, its closing statistics flush), the control session's opening
    snapshot, and each job's closing statistics flush. kpm and the demands take them out of xact_commit."""
    if not engines.named(ctx.info.engine).reads_commit:  # MySQL: statistics reads count as no transaction
        return {"sampler": samples.transactions if sampled else 0, "control": 0, "jobs": 0}
    flushes = ctx.info.has("force_flush")
    return {"sampler": (1 + samples.transactions) if sampled else 0, "control": 1,
            "jobs": plan.jobs if flushes and plan.client_engine == "python" else 0}


def _other_processes(before: oscollect.HostProcesses, after: oscollect.HostProcesses, os_before: _OsReading | None,
                     os_after: _OsReading | None, workers: set[int]) -> oscollect.OtherPrograms:
    """CPU of the host's other programs in the window: everything but the instance and the driver's processes."""
    exclude = {os.getpid(), *workers}
    for reading in (os_before, os_after):
        if reading and reading.procs:
            exclude.update(reading.procs.procs)
    return oscollect.other_processes_cpu(before, after, exclude)


def _per_second(per_job: list[dict[int, int]], seconds: int) -> list[int]:
    """Sum the jobs' per-second counts; a unit that ends just after the window counts in its last second."""
    out = [0] * seconds
    for counts in per_job:
        for second, n in counts.items():
            out[min(max(second, 0), seconds - 1)] += n
    return out


def _backend_cpu(host: HostSource, engine: Engine, conn: Any) -> float | None:
    """CPU seconds used so far by the server process behind conn (the sampler's own cost); None where the server
    serves connections with threads of one process (MySQL), whose CPU the host source does not split."""
    if conn is None or not engine.backend_is_process:
        return None
    return host.process_cpu_s(engine.backend_pid(conn))


def _rss_by_role(sample: oscollect.ProcessSample) -> dict[str, int]:
    out: dict[str, int] = {}
    for role, _u, _s, rss, _shared in sample.procs.values():
        out[role] = out.get(role, 0) + rss
    return out


class OverrunWatch:
    """Watches the jobs while the runner waits for them at the end of a phase: past OVERRUN_MARGIN_S it says what
    they wait for, and past LOCK_OVERRUN_LIMIT_S (all waiting on a lock) or OVERRUN_LIMIT_S it cancels their
    statements, so that the phase ends. What it found is stored with the step (instruments.overrun)."""

    def __init__(self, ctx: StepContext, engine: Engine, group: Any, pids: list[int], plan: StepPlan,
                 progress: Progress, say: Callable[[str], None]) -> None:
        self.ctx, self.engine, self.group, self.pids, self.plan = ctx, engine, group, pids, plan
        self.progress, self.say = progress, say
        self.record: Overrun | None = None

    def end_if_failed(self) -> None:
        """A job has failed before the phase's end: the others stop now, their statements cancelled (with the stop
        flag set first, so that they take the cancel quietly), and the step fails with the failed job's reason
        instead of waiting for the others' to end on their own."""
        if self.group.failed():
            self._cut_short()

    def _cut_short(self) -> None:
        """The jobs told to end the phase, then their statements cancelled: with the stop flag already set, they
        take the cancel as the phase's end."""
        self.group.cut_short()
        cancel = getattr(self.engine, "cancel_backends", None)
        with contextlib.suppress(Exception):
            if cancel is not None:
                cancel(self.ctx.control, self.pids)

    @contextlib.contextmanager
    def phase(self, name: str, until: float) -> Iterator[None]:
        done = threading.Event()
        thread = threading.Thread(target=self._watch, args=(name, until, done), name="capmark-overrun", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _watch(self, name: str, until: float, done: threading.Event) -> None:
        said = cancelled = False
        while not done.wait(WATCH_POLL_S):
            over = time.time() - until
            if over < OVERRUN_MARGIN_S:
                continue
            try:
                found = self._waits(name, over)
            except Exception:  # noqa: BLE001 - the control session is busy or gone: the barrier's timeout remains
                continue
            if found is None:
                continue
            all_locked = all(w.startswith("Lock") for w in found["waits"])
            limit = LOCK_OVERRUN_LIMIT_S if all_locked else OVERRUN_LIMIT_S
            if not cancelled and over >= limit:
                cancelled = True
                found["cancelled"] = True
                self._cut_short()
                self.say(f"Step {self.plan.ordinal} ({self.plan.jobs} job{'s' if self.plan.jobs != 1 else ''}): "
                         f"{found['sentence']}; capmark cancelled the jobs' statements.")
            found["cancelled"] = cancelled or found["cancelled"]
            self.record = found
            if not said:
                said = True
                self.say(f"Step {self.plan.ordinal} ({self.plan.jobs} job{'s' if self.plan.jobs != 1 else ''}): "
                         f"{found['sentence']}.")
            self.progress(f"{name} {over:.0f} s past its plan, jobs wait for "
                          f"{', '.join(found['waits'])}" + ("" if cancelled else ", cancelled in"),
                          max(0.0, limit - over))

    def _waits(self, name: str, over: float) -> Overrun | None:
        """What the jobs still busy wait for, and who keeps them waiting on a lock; None when none is busy."""
        sample = self.engine.sample_activity(self.ctx.control, self.ctx.info, self.pids, self.pids)
        busy = Counter(w for w in sample.waits if not w.startswith("Client:"))
        if not busy:
            return None
        blockers_of = getattr(self.engine, "lock_blockers", None)
        blockers = blockers_of(self.ctx.control, self.pids) if blockers_of is not None else []
        waits = ", ".join(f"{n} on {w}" for w, n in busy.most_common())
        sentence = f"the {name} ran {over:.0f} s past its plan of {self._planned(name):g} s, jobs still waiting: {waits}"
        if blockers:
            sentence += "; " + "; ".join(f"{b['describe']} holds the lock on {', '.join(b['relations']) or 'it'}"
                                         for b in blockers)
            sentence += (f" (end that session, e.g. select pg_terminate_backend({blockers[0]['pid']}), or wait until "
                         "its transaction ends)")
        return Overrun(phase=name, over_s=round(over, 1), planned_s=self._planned(name), window_s=self.plan.duration_s,
                       waits=dict(busy), blockers=blockers, cancelled=False, sentence=sentence)

    def _planned(self, name: str) -> float:
        return self.plan.warmup_s if name == "warm-up" else self.plan.duration_s


def _countdown(phase: str, until: float, progress: Progress, stop: threading.Event, failed: Callable[[], bool]
               ) -> None:
    """Tell the front end how long the phase has left, until it ends, the step is being stopped, or a job has failed
    (the step then fails now, with the job's reason, instead of at the phase's planned end)."""
    while not stop.is_set() and not failed():
        left = until - time.time()
        progress(phase, max(0.0, left))
        if left <= 0:
            return
        time.sleep(min(0.25, left))
