"""Signatures reproduced on the embedded PostgreSQL, and clean runs on which nothing may fire.

The runs whose bottleneck capmark only diagnoses (group commit, a global lock, hot rows, a server held on one core,
a clean workload at the default plan) were measured once and stored (tests/fixtures/diagnosis: how, and how many
tries each took): what is judged is the diagnosis of a real run, which a stored run holds still, where a live one
measured the machine's noise again in every suite run (and was measured twice when that noise fired a signature).
What depends on measuring it now stays live: a hot row on MariaDB (the engine's own wait names), random reads past
the cache (the device), an open loop past the generator, and a soak's memory samples."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from commandline import completed
from liveruns import run_without_report
from storedruns import unpack

from capmark import api
from capmark.analysis.diagnosis import DiagnosisDocument, TestDiagnosis, diagnosis_document
from capmark.config import RunSpec, default_jobs
from capmark.diagnose.signatures import BUSY_DEVICE_PCT
from capmark.errors import CapmarkError
from capmark.measure import kpm
from capmark.measure.demands import devices
from capmark.measure.validity import problems
from capmark.results import RunResult
from capmark.store import load_run

pytestmark = pytest.mark.db

CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class Measured:
    run: RunResult
    doc: DiagnosisDocument


def _run(dsn: str, folder: Path, workloads: list[str], jobs: list[int], **kw) -> Measured:
    """Measured and diagnosed, without report.html (run_without_report says why)."""
    spec = RunSpec(workloads=workloads, jobs=jobs, warmup_s=kw.pop("warmup_s", 1.0), duration_s=kw.pop("duration_s", 3.0),
                   dsn=dsn, results_dir=folder, **kw)
    run = run_without_report(spec)
    return Measured(run, diagnosis_document(run))


def _keys(test_doc: TestDiagnosis) -> set[str]:
    return {f.key for f in test_doc.findings}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("diagnose")


def _recorded_cores(out: Measured) -> int:
    return int(out.run.environment["database_host"]["cores"])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Measured]:
    """The stored runs (tests/fixtures/diagnosis), diagnosed."""
    results = tmp_path_factory.mktemp("recorded")
    names = ["default-plan", "signatures", "hot-row-postgres", "one-core"]
    ids = unpack(results, *(f"diagnosis/{n}" for n in names))
    out = {}
    for name, run_id in zip(names, ids, strict=True):
        run = load_run(results / run_id)
        out[name] = Measured(run, diagnosis_document(run))
    return out


@pytest.fixture(scope="module")
def default_plan_run(recorded) -> Measured:
    """Cached lookups and reports at the default plan's jobs. Its steps up to the cores are measured as a run of
    only those steps would measure them (each step on its own, in rising order, after the same quiesce), so the
    clean run is diagnosed from them instead of being measured a second time."""
    return recorded["default-plan"]


def test_clean_run_is_clean(default_plan_run):
    """Jobs up to the cores on cached lookups: no signature may fire, every step passes its self-checks."""
    run = default_plan_run.run
    cores = _recorded_cores(default_plan_run)
    within = [j for j in default_jobs(cores) if j <= cores]
    tests = [replace(t, steps=[s for s in t.steps if s.jobs <= cores]) for t in run.tests]
    doc = diagnosis_document(run, tests)
    assert [[s.jobs for s in t.steps] for t in tests] == [within] * 2
    for t in doc.tests:
        assert t.steps == within
        assert t.findings == [] and t.information == [] and t.clean, t
        assert t.invalid_steps == []
        assert t.summary.startswith("clean")


def test_the_default_plan_on_a_clean_workload_finds_no_problem(default_plan_run):
    """The default plan runs to 2 x the cores, where a CPU-bound workload saturates: throughput flattens and
    the response time grows with the jobs. That is what the plan sets out to show, so at most it is reported
    for information; no problem may be found."""
    out = default_plan_run
    for t in out.doc.tests:
        assert t.steps == default_jobs(_recorded_cores(out))
        assert t.findings == [] and t.clean, t
        # time-slicing beyond the cores: flat or falling throughput, and CPU per unit rising where it happens
        assert {f.key for f in t.information} <= {"oversubscription", "varying_demand"}, t.information
        assert all(f.severity == "info" for f in t.information)
        assert t.summary.startswith("clean")


@pytest.fixture(scope="module")
def signatures_run(recorded) -> Measured:
    """wal-lat1, diag-serial and diag-hot at 1, the cores and twice the cores."""
    return recorded["signatures"]


def _test(out: Measured, workload: str) -> TestDiagnosis:
    return next(t for t in out.doc.tests if t.workload == workload)


def test_group_commit_is_recognised(signatures_run):
    t = _test(signatures_run, "wal-lat1")
    assert "commit_bound" in _keys(t)
    assert "lock_contention" not in _keys(t)  # WALWrite lock waits are group commit, not a hot spot


def test_global_lock_is_software_serialization(signatures_run):
    if _recorded_cores(signatures_run) < 2:
        pytest.skip("serialization shows as a CPU plateau below the host's cores: recorded on one core")
    t = _test(signatures_run, "diag-serial")
    assert "software_serialization" in _keys(t)
    f = next(f for f in t.findings if f.key == "software_serialization")
    assert any("Lock:advisory" in e for e in f.evidence)


def test_hot_rows_are_lock_contention(signatures_run):
    t = _test(signatures_run, "diag-hot")
    assert "lock_contention" in _keys(t)
    f = next(f for f in t.findings if f.key == "lock_contention")
    assert any("Lock:transactionid" in e or "Lock:tuple" in e for e in f.evidence)


# One hot row updated by 8 client-side jobs, each update committed in a round trip of its own: 7 jobs queue for the
# row lock while the 8th holds it (measured on MariaDB 10.11, 2 cores: 64 % of the active samples wait on the lock).
# Contention depends on the jobs, not on the cores.
HOT_ROW = {"hot_rows": "1"}
HOT_JOBS = [1, 8]


def _hot_row_run(dsn: str, folder: Path) -> Measured:
    return _run(dsn, folder, ["diag-hot"], HOT_JOBS, mode="client", params=HOT_ROW, duration_s=2.0)


def _lock_share(out: Measured) -> float:
    """The lock class's share of the last step's active samples, read through the run's own engine."""
    from capmark.diagnose.features import step_view
    from capmark.engines import registry
    from capmark.results import WaitClass

    run = out.run
    engine = registry.named(run.target["engine"])
    return step_view(run.tests[0].steps[-1], classify=engine.wait_class).waits.get(WaitClass.LOCK, 0.0)


def _fires_lock_contention(out: Measured, waits: tuple[str, ...]) -> None:
    t = out.doc.tests[0]
    share = _lock_share(out)
    assert share > 0.3, (share, out.run.tests[0].steps[-1].waits)
    assert "lock_contention" in _keys(t), (t.summary, t.invalid_steps)
    f = next(f for f in t.findings if f.key == "lock_contention")
    assert any(w in f.evidence[0] for w in waits), f.evidence  # in the engine's own names


def test_a_hot_row_on_mariadb_is_lock_contention(mysql_dsn, folder):
    """Before: the detectors looked for PostgreSQL's wait names, so on MySQL/MariaDB the lock share was always zero
    (and PROCESSLIST shows a row lock wait as 'Updating', as if the statement ran)."""
    out = _hot_row_run(mysql_dsn, folder)
    assert out.run.target["engine"] == "mysql"
    _fires_lock_contention(out, ("Lock:InnoDB lock wait",))


def test_a_hot_row_on_postgres_is_lock_contention(recorded):
    out = recorded["hot-row-postgres"]
    assert out.run.target["engine"] == "postgresql"
    _fires_lock_contention(out, ("Lock:transactionid", "Lock:tuple"))


def test_server_restricted_to_one_core_is_cpu_misconfiguration(recorded):
    """The server's processes were pinned to core 0 behind capmark's back (tests/fixtures/diagnosis/record.py)."""
    out = recorded["one-core"]
    if _recorded_cores(out) < 2:
        pytest.skip("recorded on one core: no core was left idle")
    assert "cpu_misconfiguration" in _keys(out.doc.tests[0])


def test_random_reads_beyond_the_cache_are_poor_caching(embedded_dsn, folder):
    import psycopg

    with psycopg.connect(embedded_dsn) as conn:
        direct = conn.execute("select current_setting('debug_io_direct', true)").fetchone()[0] or ""
    if "data" not in direct:
        pytest.skip("without direct IO the OS cache serves the reads and the device stays idle")
    out = _run(embedded_dsn, folder, ["sto-random"], [CORES])
    step = out.run.tests[0].steps[0]
    values, _ = kpm.compute(step)
    seen = {k: values.get(k) for k in ("buffer_hit_pct", "physical_reads_per_s", "cpu_iowait_pct")}
    busiest = max((d["utilization_pct"] or 0.0 for d in devices(step).values()), default=0.0)
    if busiest < BUSY_DEVICE_PCT:  # seen once in CI: 25,700 reads/s kept the device 50 % busy, 13 % iowait
        pytest.skip(f"the data device kept up with the misses ({busiest:.0f} % busy, under the {BUSY_DEVICE_PCT:.0f} % "
                    f"that makes caching the problem): this host's device is too fast to reproduce it ({seen})")
    assert "poor_caching" in _keys(out.doc.tests[0]), (seen, problems(step), step.os.get("disks"))


def test_open_loop_beyond_the_generator_is_an_invalid_step(embedded_dsn, folder):
    out = _run(embedded_dsn, folder, ["srv-query1"], [CORES], mode="client", rate=300_000.0, warmup_s=0.5,
               duration_s=2.0)
    t = out.doc.tests[0]
    assert t.invalid_steps and any("fell behind its schedule" in p for p in t.invalid_steps[0].problems)
    with pytest.raises(CapmarkError, match="no valid step to calibrate on"):
        api.calibrate(out.run.folder)


def test_soak_samples_memory_and_a_short_clean_soak_has_no_leak(embedded_dsn, folder):
    out = _run(embedded_dsn, folder, ["tp-light"], [2], soak_s=12.0, warmup_s=1.0)
    step = out.run.tests[0].steps[0]
    assert len(step.memory_series) >= 6 and len(step.series_units) == 12
    roles = {v[0] for v in step.memory_series[-1]["rss"].values()}
    assert "client backends" in roles and "checkpointer" in roles
    assert "memory_leak" not in _keys(out.doc.tests[0])


def test_diagnose_command_and_report_section(signatures_run):
    folder = signatures_run.run.folder
    out = completed("diagnose", f"{folder}:wal-lat1", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "capmark.diagnose/1" and doc["tests"][0]["workload"] == "wal-lat1"
    written = completed("report", str(folder))
    assert written.returncode == 0, written.stderr
    html = (Path(folder) / "report.html").read_text()
    assert html.index("<h2>Diagnosis") < html.index("<h2>Run summary")
    assert "Commit bound" in html
