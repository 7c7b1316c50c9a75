"""Command line: parses, calls capmark.api, prints. Errors become one sentence and exit code 2."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Protocol, runtime_checkable

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from capmark import api
from capmark.config import (
    AUTO_JOBS,
    DEFAULT_RESULTS_DIR,
    MAX_SCALE,
    RunSpec,
    check_data_dir,
    check_host_metrics,
    check_output_file,
    node_exporter_token,
    parse_data_dir,
    parse_duration,
    parse_jobs,
    parse_params,
    parse_rate,
    platform_limits,
    redact_text,
)
from capmark.errors import CapmarkError, RunFailed, RunInterrupted
from capmark.report.console import knee_line, print_glance, print_run, print_test
from capmark.results import StepResult, TestResult

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="capmark: measure a database platform, decompose, model, plan, diagnose, report.")
db_app = typer.Typer(no_args_is_help=True, help="Manage the embedded PostgreSQL server capmark uses by default.")
app.add_typer(db_app, name="db")
err_console = Console(stderr=True, soft_wrap=True, emoji=False)  # an error is one line, never wrapped at the terminal width


class Format(StrEnum):
    table = "table"
    json = "json"


def _finite(value: Any) -> Any:
    """The document with every NaN or infinity as null: JSON has no such numbers, and a script must be able to
    parse what capmark prints (an unbounded figure, e.g. the USL peak of an Amdahl fit, becomes null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_text(doc: Any) -> str:
    """Strict JSON for scripts (allow_nan=False guards the output even if a non-finite number slips through)."""
    return json.dumps(_finite(doc), indent=1, allow_nan=False)


def _show_tests(doc: Any, fmt: Format, print_test: Callable[[Any, Console], None]) -> None:
    """A per-test document: as JSON for scripts, or each test's console view."""
    if fmt == Format.json:
        print(json_text(doc.to_json()))
        return
    console = Console(emoji=False)
    for test_doc in doc.tests:
        print_test(test_doc, console)


DataDir = Annotated[Path | None, typer.Option("--data-dir", envvar="CAPMARK_DATA_DIR", parser=parse_data_dir,
                                              help="Data directory of the embedded server (default: user cache).")]
ResultsDir = Annotated[Path, typer.Option("--results-dir", help="Folder holding one sub-folder per run.")]
FormatOpt = Annotated[Format, typer.Option("--format", help="table for people, json for scripts.")]


class Solver(StrEnum):
    mva = "mva"
    sim = "sim"


SolverOpt = Annotated[Solver, typer.Option("--solver", help="mva: mean-value analysis (fast, averages synchronisation "
                                           "away); sim: discrete-event simulation with 95 % intervals (plays out "
                                           "group-commit batches; a second or two per load).")]


class LiveObserver(api.RunObserver):
    """Shows which test and step runs and the time left; prints each test's tables when it ends (with `verbose`,
    every table; what ± means once, under the first repeatability table)."""

    def __init__(self, console: Console, show_tables: bool, verbose: bool = False) -> None:
        self.console = console
        self.show_tables = show_tables
        self.verbose = verbose
        self.explained = False  # what ± means has been printed
        self.live = Live(Text(""), console=console, refresh_per_second=4, transient=True)
        self.plan: list[int] = []
        self.done = 0

    def say(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)  # messages carry paths and server text

    def test_started(self, test: TestResult, plan: list[int]) -> None:
        self.plan, self.done = plan, 0
        self.live.start()

    def step_progress(self, test: TestResult, jobs: int, phase: str, seconds_left: float) -> None:
        of = "" if test.stepping.get("auto") else f"/{len(self.plan)}"
        self.live.update(Text(f"{test.workload} ({test.mode}-side): step {self.done + 1}{of}, {jobs} jobs, "
                              f"{phase}: {seconds_left:4.0f} s left"))

    def step_done(self, test: TestResult, step: StepResult) -> None:
        self.done += 1
        k = step.measured.kpm
        rep = f", repetition {step.repeat}" if test.stepping.get("repeat", 1) > 1 else ""
        self.console.print(f"  {test.workload} step {step.ordinal} ({step.jobs} jobs{rep}): "
                           f"{k.get('throughput', 0):,.0f} {test.throughput_label}, "
                           f"p95 {k.get('rt_p95_ms') or 0:.3f} ms")

    def test_done(self, test: TestResult) -> None:
        self.live.stop()
        if self.show_tables:
            self.explained |= print_test(test, self.console, verbose=self.verbose, explain=not self.explained)
        elif knee_line(test):
            self.console.print(knee_line(test), markup=False, highlight=False)


def print_ending(folder: Path, console: Console, verbose: bool = False) -> None:
    """What a run prints once it is stored: where it is, and last, so that the screen it leaves answers, the
    at-a-glance table (with `verbose`, each test's diagnosis summary before it)."""
    docs = api.report_documents(folder)
    if verbose:
        for t in docs.diagnosis.tests:
            console.print(f"Diagnosis of {t.workload}: {t.summary}", highlight=False, markup=False)
    report = Path(folder) / "report.html"
    where = f"Stored with its report: {report}" if report.exists() else f"Stored in {folder}"
    console.print(f"{where} (capmark report prints every table, capmark diagnose the evidence)", markup=False,
                  highlight=False)
    print_glance(docs.headlines, console)


@app.command()
def run(
    workloads: Annotated[list[str] | None, typer.Argument(help="Workloads or suites (quick, full) by name; "
                                                               "default: quick. `capmark list` shows all.")] = None,
    jobs: Annotated[str | None, typer.Option("--jobs", help="Step plan, e.g. 1,2,4,8 (default: 1, 2, 4 ... "
                                                             "up to 2 x the host's cores), or auto: step 1, 2, 4 "
                                                             "... until the throughput stops rising.")] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Run the step plan this many times (1-10), every other "
                                        "pass in reverse order, for confidence intervals across "
                                        "repetitions.")] = 1,
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", help="With --jobs auto: the most jobs to step to "
                                                 "(default: 4 x the database host's cores).")] = None,
    warmup: Annotated[str, typer.Option("--warmup", help="Warm-up per step: 30, 30s, 2m.")] = "5s",
    duration: Annotated[str, typer.Option("--duration", help="Measured time per step: 30, 30s, 2m.")] = "15s",
    mode: Annotated[str, typer.Option("--mode", help="server: PL/pgSQL loops in the database (default); "
                                                      "client: the driver issues every unit.")] = "server",
    scale: Annotated[int, typer.Option("--scale", help="Data model size: 100,000 rows per table per unit "
                                                                  f"(at most {MAX_SCALE:,}).")] = 1,
    param: Annotated[list[str] | None, typer.Option("--param", help="Workload parameter name=value, e.g. "
                                                                     "update_pct=20; repeatable.")] = None,
    dsn: Annotated[str | None, typer.Option("--dsn", envvar="CAPMARK_DSN", show_envvar=True,
                                            help="Measure this PostgreSQL 14-18 instead of the embedded one.")] = None,
    data_dir: DataDir = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    no_collectors: Annotated[bool, typer.Option("--no-collectors", help="Turn off the 10 Hz wait and 1 Hz OS "
                                                                         "sampling (overhead checks).")] = False,
    think: Annotated[str | None, typer.Option("--think", help="Client side: mean think time after each unit "
                                                               "(exponential), e.g. 10ms.")] = None,
    rate: Annotated[str | None, typer.Option("--rate", help="Client side: open loop, total Poisson arrivals per "
                                                             "second; latency counts from the intended start.")] = None,
    nested_statements: Annotated[bool, typer.Option("--nested-statements", help="Track the statements inside "
                                                    "the server-side procedures in pg_stat_statements (costs "
                                                    "~10 % on the tiniest units).")] = False,
    suite_file: Annotated[Path | None, typer.Option("--suite", help="TOML file naming tests, parameters, modes "
                                                                    "and step plans (see docs/suites.md).")] = None,
    soak: Annotated[str | None, typer.Option("--soak", help="Soak: one workload, one job count, one long step "
                                             "(e.g. 2h), with every process's memory sampled each minute.")] = None,
    all_statements: Annotated[bool, typer.Option("--all-statements", help="Store every role's statements in the "
                                                 "top statements, not only capmark's own.")] = False,
    host_metrics: Annotated[str, typer.Option("--host-metrics", help="Where the database host's CPU, disk and "
                                              "memory counters come from: auto (default), local (this machine), "
                                              "sql (the host's /proc through the database connection), "
                                              "node-exporter, none.")] = "auto",
    node_exporter: Annotated[str | None, typer.Option("--node-exporter", help="A Prometheus node_exporter on "
                                                      "the database host, e.g. http://dbhost:9100/metrics; "
                                                      "http://USER:PASSWORD@dbhost:9100/metrics logs in with basic "
                                                      "authentication.")] = None,
    node_exporter_token_file: Annotated[str | None, typer.Option(
        "--node-exporter-token-file", help="A file holding the node_exporter's bearer token (default: the "
        "environment variable CAPMARK_NODE_EXPORTER_TOKEN).")] = None,
    driver_procs: Annotated[int | None, typer.Option("--driver-procs", help="Client side: worker processes that run "
                                                     "the jobs (default: one per core of this machine, at most "
                                                     "one per job; on a cluster, one per CPU it offers).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Client side: run the jobs on a Ray cluster's "
                                                "nodes, e.g. ray://HEAD:10001, or auto on a node of the cluster "
                                                "(needs capmark[cluster] on every node).")] = None,
    script: Annotated[list[str] | None, typer.Option("--script", help="Your own transaction: a pgbench script "
                                                     "file, FILE or FILE@WEIGHT; repeatable (a weighted mix), run "
                                                     "client-side as one test.")] = None,
    define: Annotated[list[str] | None, typer.Option("--define", "-D", help="A script variable NAME=VALUE "
                                                     "(pgbench -D); repeatable.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="The scripts' random seed (pgbench --random-seed): "
                                             "the same seed draws the same values (default: chosen and "
                                             "recorded).")] = None,
    query_mode: Annotated[str | None, typer.Option("--query-mode", help="How the scripts' statements are sent: "
                                                   "simple, extended or prepared (default, as pgbench -M)."
                                                   )] = None,
    max_tries: Annotated[int | None, typer.Option("--max-tries", help="Tries of a script transaction that hits a "
                                                  "serialization failure or deadlock (pgbench --max-tries; "
                                                  "default 1).")] = None,
    allow_shell: Annotated[bool, typer.Option("--allow-shell", help="Let scripts run \\shell and \\setshell "
                                              "commands.")] = False,
    client_engine: Annotated[str, typer.Option("--client-engine", help="What runs the client side of a "
                                               "PostgreSQL pgbench script (--script; with --mode client "
                                               "pgbench-tpcb, pgbench-simple-update, pgbench-select-only and the "
                                               "SRV lookups): "
                                               "python (capmark's own driver, default) or pgbench (the pgbench "
                                               "program, at its own cost per transaction).")] = "python",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print every table as each test ends (per "
                                          "transaction type, per command) and each diagnosis summary; capmark "
                                          "report prints them for a stored run.")] = False,
    server_cpus: Annotated[int | None, typer.Option("--server-cpus", help="Confine the embedded server to this many "
                                                    "of the host's cores (a smaller platform; needs root and cgroup "
                                                    "v1).")] = None,
    server_cpu_quota: Annotated[float | None, typer.Option("--server-cpu-quota", help="Limit the embedded server to "
                                                           "this many cores' worth of CPU time, e.g. 0.5.")] = None,
    server_iops: Annotated[str | None, typer.Option("--server-iops", help="Throttle the embedded server's disk to R "
                                                    "read and W write requests per second: R or R,W.")] = None,
    server_mbps: Annotated[str | None, typer.Option("--server-mbps", help="Throttle the embedded server's disk to R "
                                                    "read and W write MB per second: R or R,W.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Measure workloads (or suites: quick, full) at stepped concurrency and store the run; it ends with one line
    per workload: the peak, the knee, the bottleneck, the headroom and the diagnosis.

    With --repeat, ± is the 95 % confidence half-width across the repetitions of each job count."""
    auto = jobs is not None and jobs.strip().lower() == AUTO_JOBS
    spec = RunSpec(workloads=list(workloads or []), jobs=parse_jobs(jobs) if jobs is not None and not auto else None,
                   warmup_s=parse_duration(warmup, "warm-up"), duration_s=parse_duration(duration, "duration"),
                   mode=mode, scale=scale, params=parse_params(param), dsn=dsn, data_dir=data_dir,
                   results_dir=results_dir, collectors=not no_collectors, suite_file=suite_file,
                   think_s=parse_duration(think, "think time") if think is not None else 0.0,
                   rate=parse_rate(rate), nested_statements=nested_statements,
                   soak_s=parse_duration(soak, "soak") if soak is not None else None, all_statements=all_statements,
                   host_metrics=host_metrics, node_exporter=node_exporter,
                   node_exporter_token_file=node_exporter_token_file, driver_procs=driver_procs,
                   cluster=cluster, scripts=list(script or []), defines=list(define or []), seed=seed,
                   query_mode=query_mode, max_tries=max_tries, allow_shell=allow_shell, repeat=repeat,
                   jobs_auto=auto, max_jobs=max_jobs, client_engine=client_engine,
                   platform=platform_limits(server_cpus, server_cpu_quota, server_iops, server_mbps))
    console = err_console if fmt == Format.json else Console(emoji=False)
    result = api.run(spec, LiveObserver(console, show_tables=fmt == Format.table, verbose=verbose))
    if fmt == Format.json:
        print(json_text(api.export(result.folder).to_json()))
    else:
        print_ending(Path(result.folder), console, verbose)
    if result.status != "complete":
        _say(f"the run is stored but {result.status}: {result.reason}.")
        raise typer.Exit(RunFailed.exit_code)


class ObserveLine:
    """The observation's progress: one live line on a terminal, else a plain line per stored interval or notice."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = Live(Text(""), console=console, refresh_per_second=2, transient=True) \
            if console.is_terminal else None
        self.shown = (-1, "")

    def say(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)

    def update(self, state: api.ProgressState) -> None:
        busy = f"{state.host_busy_pct:.0f} %" if state.host_busy_pct is not None else "n/a"
        broken = f" ({state.broken} broken)" if state.broken else ""
        line = (f"observing {state.elapsed_s / 60:.1f} min: {state.intervals} intervals stored{broken}, host CPU busy "
                f"{busy}, busiest application: {state.busiest or '-'}" + (f"; {state.notice}" if state.notice else ""))
        if self.live is not None:
            if not self.live.is_started:
                self.live.start()
            self.live.update(Text(line))
        elif (state.intervals, state.notice) != self.shown:
            self.shown = (state.intervals, state.notice)
            self.console.print(line, markup=False, highlight=False)

    def stop(self) -> None:
        if self.live is not None and self.live.is_started:
            self.live.stop()


@app.command()
def observe(
    dsn: Annotated[str | None, typer.Option("--dsn", envvar="CAPMARK_DSN", show_envvar=True,
                                            help="Observe this PostgreSQL 14-18, MySQL 8.0+ or MariaDB 10.6+ "
                                                 "(default: the embedded PostgreSQL).")] = None,
    data_dir: DataDir = None,
    interval: Annotated[str, typer.Option("--interval", help="Length of each stored interval: 5s, 60s, 10m.")] = "60s",
    for_: Annotated[str | None, typer.Option("--for", help="How long to observe, e.g. 8h (default: until Ctrl-C "
                                             "or SIGTERM, which keep everything collected).")] = None,
    sample_hz: Annotated[float, typer.Option("--sample-hz", help="Activity samples per second (the server's "
                                             "sessions and each server process's or thread's CPU and IO).")] = 1.0,
    top_statements: Annotated[int, typer.Option("--top-statements", help="Statements stored per interval, by "
                                                "execution time; the rest are summed as one.")] = 200,
    store_query_text: Annotated[bool, typer.Option("--store-query-text", help="Store the first 300 characters of "
                                                   "each stored statement's text (other applications' SQL).")] = False,
    host_metrics: Annotated[str, typer.Option("--host-metrics", help="Where the database host's CPU, disk and "
                                              "memory counters come from: auto (default), local (this machine), "
                                              "sql (the host's /proc through the database connection), "
                                              "node-exporter, none.")] = "auto",
    node_exporter: Annotated[str | None, typer.Option("--node-exporter", help="A Prometheus node_exporter on "
                                                      "the database host, e.g. http://dbhost:9100/metrics.")] = None,
    node_exporter_token_file: Annotated[str | None, typer.Option(
        "--node-exporter-token-file", help="A file holding the node_exporter's bearer token (default: the "
        "environment variable CAPMARK_NODE_EXPORTER_TOKEN).")] = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
) -> None:
    """Observe a live PostgreSQL, MySQL or MariaDB server read-only (it creates nothing there): per interval, the
    statements', database views' and host's deltas, and which application used the CPU and IO (sampled activity);
    stored like a run."""
    if data_dir is not None:
        check_data_dir(data_dir)
    check_host_metrics(host_metrics, node_exporter, node_exporter_token_file)
    spec = api.ObserveSpec(dsn=dsn, data_dir=data_dir, interval_s=parse_duration(interval, "interval"),
                           planned_s=parse_duration(for_, "observation length") if for_ is not None else None,
                           sample_hz=sample_hz, top_statements=top_statements, store_query_text=store_query_text,
                           host_metrics=host_metrics, node_exporter=node_exporter,
                           node_exporter_token=node_exporter_token(node_exporter_token_file) if node_exporter else None,
                           results_dir=results_dir)
    console = Console(emoji=False, soft_wrap=True)  # a line per interval, never wrapped at the terminal width
    line = ObserveLine(console)
    try:
        observed = api.observe(spec, line)
    finally:
        line.stop()
    ended = observed.observation
    console.print(f"Stored {observed.intervals} intervals ({observed.broken} broken) in {observed.folder}: "
                  f"{ended.status}, {ended.reason}.", markup=False, highlight=False)


# --- planning from an observation: options shared by baseline, whatif, size, report and compare -------------------
WorkloadsOpt = Annotated[Path | None, typer.Option("--workloads", help="Observation: a TOML file of [[workload]] "
                                                   "rules (default: sessions grouped by --group-by).")]
GroupByOpt = Annotated[str | None, typer.Option("--group-by", help="Observation: group sessions by application "
                                                "(default), user or database.")]
PeakOpt = Annotated[str | None, typer.Option("--peak", help="Observation: the peak window in local time, e.g. "
                                             "2026-11-24T10:00/11:00 (default: the busiest window).")]
PeakByOpt = Annotated[str | None, typer.Option("--peak-by", help="Observation: find the peak by cpu (default), "
                                               "disk or commits.")]
PeakLengthOpt = Annotated[str | None, typer.Option("--peak-length", help="Observation: the peak window's length, "
                                                   "e.g. 1h (default; at least 10 intervals).")]
EstimatorOpt = Annotated[str | None, typer.Option("--estimator", help="Observation: the demands the model uses: "
                                                  "measured (default), statements (or share) or regression.")]
UnattributedOpt = Annotated[str | None, typer.Option("--unattributed", help="Observation: CPU no database process "
                                                    "explains stays constant background (default), or grows with "
                                                    "the load (load: e.g. the clients run on the database host; "
                                                    "its part that the observation shows fixed stays fixed).")]
GrowthOpt = Annotated[list[str] | None, typer.Option("--growth", help="Load growth per period and periods, e.g. "
                                                     "20%x3; on an observation also per workload, orders=30%x3 "
                                                     "(repeatable).")]
ObsSlaOpt = Annotated[list[str] | None, typer.Option("--sla", help="Observation: a workload's service level, e.g. "
                                                     "\"orders:p95<50ms\" (p95 from the mean; repeatable).")]
MoveOpt = Annotated[list[str] | None, typer.Option("--move", help="Observation: a workload moved off the host "
                                                   "(repeatable).")]
RunOrObsArg = Annotated[str | None, typer.Argument(metavar="RUN[:TEST]|OBS", help="Run id or folder, optionally "
                                                   ":workload (default: latest run), or an observation id or "
                                                   "folder.")]


def _baseline_options(workloads: Path | None, group_by: str | None, peak: str | None, peak_by: str | None,
                      peak_length: str | None, estimator: str | None,
                      unattributed: str | None) -> api.BaselineOptions:
    return api.BaselineOptions(workloads=workloads, group_by=group_by, peak=peak, peak_by=peak_by,
                               peak_length=peak_length, estimator=estimator, unattributed=unattributed)


def _given(options: dict[str, object]) -> list[str]:
    return [name for name, value in options.items() if value not in (None, False, [], ())]


def _refuse_for_observation(command: str, options: dict[str, object]) -> None:
    """Options that only a run's command takes, given with an observation: one sentence naming the first."""
    given = _given(options)
    if given:
        raise CapmarkError(f"{given[0]} applies to a measured run; capmark {command} on an observation takes the "
                           "observation options (see `capmark " + command + " --help`).")


def _refuse_for_run(command: str, options: dict[str, object]) -> None:
    """Options that only an observation takes, given with a run: one sentence naming the first."""
    given = _given(options)
    if given:
        raise CapmarkError(f"{given[0]} applies to an observation of a live server; name an observation id or folder "
                           f"to capmark {command}, or leave {given[0]} out for a run.")


def _obs_options(**named: object) -> dict[str, object]:
    """The observation options by their command-line names, for the refusals above."""
    return {f"--{k.replace('_', '-')}": v for k, v in named.items()}


@app.command()
def baseline(
    obs_ref: Annotated[str | None, typer.Argument(metavar="OBS", help="Observation id or folder (default: the "
                                                  "latest observation).")] = None,
    workloads: WorkloadsOpt = None,
    group_by: GroupByOpt = None,
    peak: PeakOpt = None,
    peak_by: PeakByOpt = None,
    peak_length: PeakLengthOpt = None,
    estimator: EstimatorOpt = None,
    unattributed: UnattributedOpt = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
) -> None:
    """The baseline of an observation: workloads and their shares, the peak window, demands by three estimators,
    the open queueing model of the database host at the peak and its validation."""
    from capmark.report.observation import print_baseline

    doc = api.baseline(obs_ref, results_dir, _baseline_options(workloads, group_by, peak, peak_by, peak_length,
                                                               estimator, unattributed))
    if fmt == Format.json:
        print(json_text(doc.to_json()))
        return
    print_baseline(doc, Console(emoji=False))


@app.command("list")
def list_cmd(fmt: FormatOpt = Format.table) -> None:
    """List the workloads (family, unit of work, key metrics, parameters) and the suites."""
    doc = api.list_workloads()
    if fmt == Format.json:
        print(json_text(doc.to_json()))
        return
    labels = api.engine_labels()
    table = Table(title="capmark workloads", title_justify="left")
    for col in ("name", "family", "unit", "key metrics", "parameters (default, allowed)", "description"):
        table.add_column(col)
    for w in doc.workloads:
        params = "\n".join(f"{p['name']}={p['default']} {p['allowed']}" for p in w.params) or "-"
        modes = "" if w.client_side else " (server-side only)"
        elsewhere = [name for name, why in w.engines.items() if why]
        if elsewhere:
            modes += " Not on " + ", ".join(labels.get(e, e) for e in elsewhere) + "."
        table.add_row(w.name, w.family, w.unit, ", ".join(w.key_metrics), params, w.description + modes)
    console = Console(emoji=False)
    console.print(table)
    for name, members in doc.suites.items():
        console.print(f"suite {name}: {', '.join(members)}")


@app.command("results")
def results_cmd(results_dir: ResultsDir = DEFAULT_RESULTS_DIR, fmt: FormatOpt = Format.table) -> None:
    """List the runs and observations stored in the results folder, newest first: id, when, how each ended, what it
    holds and which database it measured or observed."""
    from capmark.report.stored import print_stored

    listing = api.list_results(results_dir)
    if fmt == Format.json:
        print(json_text(listing.to_json()))
        return
    print_stored(listing, Console(emoji=False))


@app.command()
def report(
    run_ref: Annotated[str | None, typer.Argument(metavar="RUN|OBS", help="Run id or folder (default: latest run), "
                                                  "or an observation id or folder.")] = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
    rerender: Annotated[bool, typer.Option("--rerender", help="Write report.html even when it is up to date "
                                           "(it is written anyway when missing or older than the results).")] = False,
    workloads: WorkloadsOpt = None,
    group_by: GroupByOpt = None,
    peak: PeakOpt = None,
    peak_by: PeakByOpt = None,
    peak_length: PeakLengthOpt = None,
    estimator: EstimatorOpt = None,
    unattributed: UnattributedOpt = None,
    growth: GrowthOpt = None,
    sla: ObsSlaOpt = None,
) -> None:
    """Print a stored run's or observation's tables, without any database, and bring its report.html up to date
    (an observation's: the timeline, the peak, the baseline, its validation and the what-if of its growth)."""
    observation = _obs_options(workloads=workloads, group_by=group_by, peak=peak, peak_by=peak_by,
                               peak_length=peak_length, estimator=estimator, unattributed=unattributed,
                               growth=growth, sla=sla)
    if api.is_observation_ref(run_ref, results_dir):
        from capmark.report.observation import print_observation_report

        doc, written = api.observation_report_of(
            run_ref, results_dir,
            _baseline_options(workloads, group_by, peak, peak_by, peak_length, estimator, unattributed),
            api.WhatIfOptions(growth=tuple(growth or ()), sla=tuple(sla or ())))
        if written.problem:
            _say(f"{written.problem}; the stored observation itself is unaffected.")
        if fmt == Format.json:
            print(json_text(doc.to_json()))
            return
        console = Console(emoji=False)
        print_observation_report(doc, console)
        if not written.problem:
            console.print(f"Report: {written.path}", markup=False, highlight=False)
        return
    _refuse_for_run("report", observation)
    result, report_file = api.report(run_ref, results_dir, rerender)
    if report_file.problem:
        _say(f"{report_file.problem}; the stored run itself is unaffected.")
    if fmt == Format.json:
        print(json_text(api.export(result.folder).to_json()))
        return
    console = Console(emoji=False)
    docs = api.report_documents(Path(result.folder))
    print_run(docs, console)
    if not report_file.problem:
        console.print(f"Report: {report_file.path}", markup=False, highlight=False)
    print_glance(docs.headlines, console)


@app.command()
def demands(
    run_ref: Annotated[str | None, typer.Argument(metavar="RUN[:TEST]", help="Run id or folder, optionally :workload "
                                                  "or :test number (default: latest run, every test).")] = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
) -> None:
    """Service demands per unit of work, how they vary with load, and whether the instruments agree."""
    from capmark.report.demands import print_demands

    doc = api.demands(run_ref, results_dir)
    _show_tests(doc, fmt, print_demands)


@app.command()
def solve(file: Annotated[Path, typer.Argument(help="A JSON case (kind, method, model) as in "
                                                 "shared/validation/queueing_cases.json, a list of them, or "
                                                 "{\"cases\": [...]}.")]) -> None:
    """Solve queueing models (closed, multi-class, open M/M/m, USL fit, quick formula) and print JSON."""
    print(json_text(api.solve_cases(file)))


RunTestArg = Annotated[str | None, typer.Argument(metavar="RUN[:TEST]", help="Run id or folder, optionally "
                                                 ":workload (default: latest run, every test).")]
FromStepsOpt = Annotated[str | None, typer.Option("--from-steps", help="Job counts of the steps to calibrate from, "
                                                  "e.g. 1,2 (default: the lowest valid step).")]


CoresOpt = Annotated[int | None, typer.Option("--cores", help="CPU cores of the database host, overriding what the "
                                              "run recorded; where the run did not measure the host's CPU, the model "
                                              "then estimates it from the wait samples.")]


def _from(from_steps: str | None) -> list[int] | None:
    return parse_jobs(from_steps) if from_steps is not None else None


def _positive_number(value: float | None, option: str, example: str) -> None:
    """A factor or rate from the command line: click's float type lets nan and inf through."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise CapmarkError(f"{option} must be a positive, finite number; got {value:g}, e.g. {option} {example}.")


def _positive_count(value: int | None, option: str, example: str) -> None:
    """A number of jobs, cores or devices: at least 1 (0 would otherwise read as 'not given')."""
    if value is not None and value < 1:
        raise CapmarkError(f"{option} must be a whole number of at least 1; got {value}, e.g. {option} {example}.")


@app.command()
def calibrate(
    run_ref: RunTestArg = None,
    from_steps: FromStepsOpt = None,
    up_to: Annotated[int | None, typer.Option("--up-to", help="Predict up to this many jobs (default: twice the "
                                              "most measured).")] = None,
    cores: CoresOpt = None,
    solver: SolverOpt = Solver.mva,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
) -> None:
    """Calibrate a queueing model from measured demands, compare it with every step, predict beyond them."""
    from capmark.report.planning import print_calibration, progress_on_stderr

    _positive_count(up_to, "--up-to", "16")
    _positive_count(cores, "--cores", "8")
    with progress_on_stderr() as progress:
        doc = api.calibrate(run_ref, results_dir, _from(from_steps), up_to, progress=progress, cores=cores,
                            solver=solver.value)
    _show_tests(doc, fmt, print_calibration)


@app.command()
def whatif(
    run_ref: RunOrObsArg = None,
    growth: GrowthOpt = None,
    jobs: Annotated[int | None, typer.Option("--jobs", help="Jobs (closed load).")] = None,
    think: Annotated[str | None, typer.Option("--think", help="Think time per unit, e.g. 10ms.")] = None,
    cpus: Annotated[int | None, typer.Option("--cpus", help="CPU cores of the database host in the scenario.")] = None,
    cpu_speed: Annotated[float | None, typer.Option("--cpu-speed", help="Relative core speed (1.5 = 50 % faster).")]
    = None,
    disk_speed: Annotated[float | None, typer.Option("--disk-speed", help="Relative device speed.")] = None,
    disks: Annotated[int | None, typer.Option("--disks", help="Spread data IO evenly over this many devices.")] = None,
    scenarios: Annotated[Path | None, typer.Option("--scenarios", help="TOML file with [[scenario]] tables.")] = None,
    at: Annotated[int | None, typer.Option("--at", help="Baseline jobs (default: the calibration step).")] = None,
    from_steps: FromStepsOpt = None,
    cores: CoresOpt = None,
    save: Annotated[bool, typer.Option("--save", help="Keep the result and show it in the run's report.")] = False,
    solver: SolverOpt = Solver.mva,
    move: MoveOpt = None,
    sla: ObsSlaOpt = None,
    workloads: WorkloadsOpt = None,
    group_by: GroupByOpt = None,
    peak: PeakOpt = None,
    peak_by: PeakByOpt = None,
    peak_length: PeakLengthOpt = None,
    estimator: EstimatorOpt = None,
    unattributed: UnattributedOpt = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
) -> None:
    """What if the load grows or the platform changes: throughput, response time, utilization per scenario (on an
    observation: per resource and workload, and the first scenario over the 80 % threshold or an SLA)."""
    from capmark.report.planning import print_whatif, progress_on_stderr

    for option, count in (("--jobs", jobs), ("--cpus", cpus), ("--disks", disks), ("--at", at), ("--cores", cores)):
        _positive_count(count, option, "4")
    _positive_number(cpu_speed, "--cpu-speed", "1.5")
    _positive_number(disk_speed, "--disk-speed", "2")
    if api.is_observation_ref(run_ref, results_dir):
        from capmark.report.observation import print_whatif as print_observation_whatif

        _refuse_for_observation("whatif", {"--jobs": jobs, "--think": think, "--disks": disks, "--scenarios": scenarios,
                                           "--at": at, "--from-steps": from_steps, "--cores": cores, "--save": save,
                                           "--solver": solver if solver is not Solver.mva else None})
        planned = api.observation_whatif_of(
            run_ref, results_dir,
            _baseline_options(workloads, group_by, peak, peak_by, peak_length, estimator, unattributed),
            api.WhatIfOptions(growth=tuple(growth or ()), cpus=cpus, cpu_speed=cpu_speed, disk_speed=disk_speed,
                              move=tuple(move or ()), sla=tuple(sla or ())))
        if fmt == Format.json:
            print(json_text(planned.to_json()))
        else:
            print_observation_whatif(planned, Console(emoji=False))
        return
    _refuse_for_run("whatif", _obs_options(move=move, sla=sla, workloads=workloads, group_by=group_by, peak=peak,
                                           peak_by=peak_by, peak_length=peak_length, estimator=estimator,
                                           unattributed=unattributed))
    if growth and len(growth) > 1:
        raise CapmarkError("A run's what-if takes one --growth, e.g. --growth 20%x3 (per-workload growth is for "
                           "observations).")
    changes = {"growth": growth[0] if growth else None, "jobs": jobs, "think": think, "cpus": cpus,
               "cpu_speed": cpu_speed, "disk_speed": disk_speed, "disks": disks}
    with progress_on_stderr() as progress:
        doc = api.whatif(run_ref, results_dir, _from(from_steps), at, changes, scenarios, save, progress=progress,
                         cores=cores, solver=solver.value)
    _show_tests(doc, fmt, print_whatif)


@app.command()
def size(
    run_ref: RunOrObsArg = None,
    sla: Annotated[list[str] | None, typer.Option("--sla", help="Service level, e.g. \"p95<5ms\" (a run's default), "
                                                  "\"mean<2ms\"; on an observation per workload, "
                                                  "\"orders:p95<50ms\" (repeatable).")] = None,
    target_tps: Annotated[float | None, typer.Option("--target-tps", help="Load to meet: find the smallest single "
                                                     "change (cores, CPU speed, disk speed).")] = None,
    from_steps: FromStepsOpt = None,
    cores: CoresOpt = None,
    save: Annotated[bool, typer.Option("--save", help="Keep the result and show it in the run's report.")] = False,
    solver: SolverOpt = Solver.mva,
    growth: GrowthOpt = None,
    workloads: WorkloadsOpt = None,
    group_by: GroupByOpt = None,
    peak: PeakOpt = None,
    peak_by: PeakByOpt = None,
    peak_length: PeakLengthOpt = None,
    estimator: EstimatorOpt = None,
    unattributed: UnattributedOpt = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
) -> None:
    """Size to a service level: the highest load within it, and what a target load needs (on an observation: the
    growth period in which capacity runs out, and the least single change that carries the growth)."""
    from capmark.report.planning import print_size, progress_on_stderr

    if api.is_observation_ref(run_ref, results_dir):
        from capmark.report.observation import print_sizing

        _refuse_for_observation("size", {"--target-tps": target_tps, "--from-steps": from_steps, "--cores": cores,
                                         "--save": save, "--solver": solver if solver is not Solver.mva else None})
        sized = api.observation_size_of(
            run_ref, results_dir,
            _baseline_options(workloads, group_by, peak, peak_by, peak_length, estimator, unattributed),
            api.WhatIfOptions(growth=tuple(growth or ()), sla=tuple(sla or ())))
        if fmt == Format.json:
            print(json_text(sized.to_json()))
        else:
            print_sizing(sized, Console(emoji=False))
        return
    _refuse_for_run("size", _obs_options(growth=growth, workloads=workloads, group_by=group_by, peak=peak,
                                         peak_by=peak_by, peak_length=peak_length, estimator=estimator,
                                         unattributed=unattributed))
    if sla and len(sla) > 1:
        raise CapmarkError("A run is sized to one --sla, e.g. --sla \"p95<5ms\" (several, per workload, are for "
                           "observations).")
    if solver is Solver.sim:
        raise CapmarkError("size works with the MVA solver only: it searches arrival rates with the open model, which "
                           "the simulation (a closed load of jobs) cannot give; check a load it finds with "
                           "`capmark whatif --solver sim --jobs N`.")

    _positive_number(target_tps, "--target-tps", "5000")
    _positive_count(cores, "--cores", "8")
    with progress_on_stderr() as progress:
        doc = api.size(run_ref, results_dir, sla[0] if sla else "p95<5ms", _from(from_steps), target_tps, save,
                       progress=progress, cores=cores)
    _show_tests(doc, fmt, print_size)


@app.command()
def diagnose(run_ref: RunTestArg = None, results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
             fmt: FormatOpt = Format.table) -> None:
    """Name what limits the system (bottleneck signatures) and check every step's own validity."""
    from capmark.report.diagnosis import print_diagnosis

    doc = api.diagnose(run_ref, results_dir)
    _show_tests(doc, fmt, print_diagnosis)


@app.command()
def anticipate(
    run_ref: RunTestArg = None,
    at: Annotated[int | None, typer.Option("--at", help="Measured step (jobs) to fit (default: the highest valid).")]
    = None,
    service: Annotated[float, typer.Option("--service", help="Factor on the service time S (0.8 = 20 % faster).")]
    = 1.0,
    rate: Annotated[float, typer.Option("--rate", help="Factor on the arrival rate.")] = 1.0,
    servers: Annotated[float | None, typer.Option("--servers", help="Effective servers M after the change.")] = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
    fmt: FormatOpt = Format.table,
) -> None:
    """Quick anticipation (Shallahamer, OraPub): the response-time curve through a measured step, before and after
    a change."""
    from capmark.report.planning import print_anticipation

    _positive_number(service, "--service", "0.8")
    _positive_number(rate, "--rate", "1.5")
    _positive_number(servers, "--servers", "4")
    _positive_count(at, "--at", "4")
    doc = api.anticipate(run_ref, results_dir, at, service, rate, servers)
    _show_tests(doc, fmt, print_anticipation)


class CompareFormat(StrEnum):
    console = "console"
    json = "json"
    html = "html"


@app.command()
def compare(
    baseline: Annotated[str, typer.Argument(metavar="BASELINE", help="Run id or folder of the baseline run.")],
    candidates: Annotated[list[str], typer.Argument(metavar="CANDIDATE", help="Run ids or folders to compare "
                                                    "with it.")],
    fmt: Annotated[CompareFormat, typer.Option("--format", help="console for people, json for scripts, html for "
                                               "a self-contained page with plots.")] = CompareFormat.console,
    output: Annotated[Path | None, typer.Option("--output", help="With --format html: the file to write "
                                                "(default: compare-BASELINE.html in the current folder).")] = None,
    fail_on_regression: Annotated[float | None, typer.Option("--fail-on-regression", metavar="PCT",
                                                            help="Exit 1 when a figure got significantly worse by "
                                                            "at least PCT %.")] = None,
    workloads: WorkloadsOpt = None,
    group_by: GroupByOpt = None,
    peak_by: PeakByOpt = None,
    peak_length: PeakLengthOpt = None,
    estimator: EstimatorOpt = None,
    unattributed: UnattributedOpt = None,
    results_dir: ResultsDir = DEFAULT_RESULTS_DIR,
) -> None:
    """Compare stored runs: which figures changed beyond noise (Welch's t-test), and the environment, service
    demands, models and diagnosis beside them; or two observations' peaks per workload (rates, demands, response
    times)."""
    from capmark.report.planning import progress_on_stderr

    observations = [api.is_observation_ref(ref, results_dir) for ref in [baseline, *candidates]]
    if any(observations):
        _compare_observations(baseline, candidates, observations, fmt, output, fail_on_regression,
                              _baseline_options(workloads, group_by, None, peak_by, peak_length, estimator,
                                                unattributed),
                              results_dir)
        return
    _refuse_for_run("compare", _obs_options(workloads=workloads, group_by=group_by, peak_by=peak_by,
                                            peak_length=peak_length, estimator=estimator,
                                            unattributed=unattributed))
    if fail_on_regression is not None and not (math.isfinite(fail_on_regression) and fail_on_regression >= 0):
        raise CapmarkError(f"--fail-on-regression must be a finite percentage of 0 or more; got {fail_on_regression:g}"
                           ", e.g. --fail-on-regression 5.")
    if output is not None and fmt != CompareFormat.html:
        raise CapmarkError("--output names the HTML file; add --format html (console and json print to stdout).")
    if output is not None:
        check_output_file(output, "--output")
    with progress_on_stderr() as progress:
        doc = api.compare(baseline, candidates, results_dir, progress)
    if fail_on_regression is not None and doc.incomplete():  # refused before anything is printed or written
        raise CapmarkError(doc.incomplete_sentence())
    if fmt == CompareFormat.json:
        print(json_text(doc.to_json()))
    elif fmt == CompareFormat.html:
        from capmark.report.compare_html import write_comparison

        path = write_comparison(doc, output or Path(f"compare-{doc.baseline}.html"))
        err_console.print(f"Comparison written to {path}", markup=False, highlight=False)
    else:
        from capmark.report.compare_console import print_comparison

        print_comparison(doc, Console(emoji=False))
    if fail_on_regression is not None:
        found = doc.regressions(fail_on_regression)
        if doc.unjudged_sentence(fail_on_regression):
            _say(doc.unjudged_sentence(fail_on_regression))
        if found:
            listed = "; ".join(r.sentence() for r in found)
            _say(f"significant slow-down of at least {fail_on_regression:g} %: {listed}.")
            raise typer.Exit(1)


def _compare_observations(baseline: str, candidates: list[str], observations: list[bool], fmt: CompareFormat,
                          output: Path | None, fail_on_regression: float | None, options: api.BaselineOptions,
                          results_dir: Path) -> None:
    """capmark compare OBS1 OBS2: the two observations' peaks per workload, on the console or as JSON."""
    from capmark.report.observation import print_observation_comparison

    if not all(observations):
        raise CapmarkError("capmark compare takes runs or observations, not one of each; name two observations "
                           "(before, after) or runs only.")
    if len(candidates) != 1:
        raise CapmarkError("Two observations are compared at a time: name the earlier one, then the later one, e.g. "
                           "`capmark compare OBS1 OBS2`.")
    _refuse_for_observation("compare", {"--output": output, "--fail-on-regression": fail_on_regression,
                                        "--format html": fmt if fmt == CompareFormat.html else None})
    doc = api.compare_observations(baseline, candidates[0], results_dir, options)
    if fmt == CompareFormat.json:
        print(json_text(doc.to_json()))
    else:
        print_observation_comparison(doc, Console(emoji=False))


@db_app.command("start")
def db_start(data_dir: DataDir = None) -> None:
    """Start (and on first use initialise and configure) the embedded PostgreSQL."""
    if data_dir is not None:
        check_data_dir(data_dir)
    print(api.db_start(data_dir, say=lambda message: err_console.print(message, highlight=False, markup=False)))


@db_app.command("stop")
def db_stop(data_dir: DataDir = None) -> None:
    """Stop the embedded PostgreSQL."""
    print("stopped" if api.db_stop(data_dir) else "not running")


@db_app.command("status")
def db_status(data_dir: DataDir = None, fmt: FormatOpt = Format.table) -> None:
    """Say whether the embedded PostgreSQL is initialised and running."""
    st = api.db_status(data_dir)
    data = {"data_dir": str(st.data_dir), "initialized": st.initialized, "running": st.running, "pid": st.pid,
            "url": st.url}
    if fmt == Format.json:
        print(json.dumps(data, indent=1))
    else:
        for k, v in data.items():
            print(f"{k}: {v}")


@db_app.command("url")
def db_url(data_dir: DataDir = None) -> None:
    """Print the connection URL of the running embedded PostgreSQL."""
    st = api.db_status(data_dir)
    if not st.running:
        raise CapmarkError("The embedded PostgreSQL is not running; start it with `capmark db start`.")
    print(st.url)


@runtime_checkable
class UsageProblem(Protocol):
    """What the option parser raises for a bad option value, an unknown option or a missing argument."""

    exit_code: int

    def format_message(self) -> str: ...

    def show(self) -> None: ...


def usage_sentence(err: UsageProblem) -> str:
    """A parser error (bad option value, unknown option, missing argument) as one line naming the help to read."""
    message = " ".join(err.format_message().split()).rstrip(".")
    message = re.sub(r"Got unexpected extra arguments?(\(s\))?", "Too many arguments", message)
    # the parser's own words for a value that is not a number at all (inf, nan, 1e400 or text for a count)
    message = re.sub(r"Invalid value for '([^']+)': Input should be a valid integer.*",
                     r"\1 takes a whole number, such as 4; the value given is not one", message)
    message = re.sub(r"Invalid value for '([^']+)': Input should be a valid number.*",
                     r"\1 takes a finite number, such as 1.5; the value given is not one", message)
    ctx = getattr(err, "ctx", None)
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.insert(0, ctx.info_name)
        ctx = ctx.parent
    return f"capmark: {message}; see `{' '.join(['capmark', *names])} --help`."


def _quiet_library_cleanup() -> None:
    """psycopg logs what it ignores while cleaning up (a rollback that found the query an interrupt cut short:
    'error ignored in rollback ... another command is already in progress'); with no logging configured Python
    prints that to stderr beside capmark's one line. capmark says what happened itself."""
    logger = logging.getLogger("psycopg")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


def main() -> None:
    """Run one command. Every way it ends maps to one exit code and at most one line (see capmark.errors): an
    interrupt (Ctrl-C or SIGTERM, at any moment, even during the first one's cleanup) exits 130."""
    _quiet_library_cleanup()
    with api.sigterm_as_interrupt():
        try:
            code = _dispatch()
        except KeyboardInterrupt:
            code = _interrupted()
    sys.exit(code)


def _say(message: str) -> None:
    err_console.print(f"capmark: {message}", highlight=False, markup=False)


def _interrupted() -> int:
    _say("interrupted.")
    return RunInterrupted.exit_code


@functools.cache
def _command() -> Any:
    """The command line as click runs it, built from `app` once per process: typer rebuilds it on every call of
    app() by inspecting every command's signature, 0.1 s each time, and the tests call main() hundreds of times."""
    return typer.main.get_command(app)


def _dispatch() -> int:
    try:
        code = _command()(standalone_mode=False)  # returns the exit code of typer.Exit, and 130 for a KeyboardInterrupt
    except (CapmarkError, RunFailed, RunInterrupted) as err:
        _say(str(err))
        return err.exit_code
    except typer.Exit as err:
        return err.exit_code
    except typer.Abort:
        return _interrupted()
    except Exception as err:
        if isinstance(err, UsageProblem):  # usage errors from the option parser
            if type(err).__name__ == "NoArgsIsHelpError":  # `capmark` or `capmark db` alone: the help is the answer
                err.show()
            else:
                err_console.print(usage_sentence(err), highlight=False, markup=False)
            return 2
        if os.environ.get("CAPMARK_DEBUG"):
            raise
        _say(f"unexpected {type(err).__name__}: {redact_text(str(err))} (set CAPMARK_DEBUG=1 for the traceback and "
             "report it).")
        return 1
    if code == RunInterrupted.exit_code:
        return _interrupted()
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    main()
