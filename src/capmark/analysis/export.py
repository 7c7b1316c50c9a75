"""The export of a stored run (capmark.run/1): the same content as the console tables, with units."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from capmark.analysis.demands import TestDemands, demands_of
from capmark.analysis.document import Document
from capmark.measure import kpm, noise, record
from capmark.measure.noise import JobNoise
from capmark.results import KneeRecord, RunResult, TestResult


class ExportedRun(TypedDict):
    """The run's own record."""

    id: str
    created_at: str
    status: str
    reason: str
    pid: int | None
    heartbeat_at: str
    folder: str
    spec: dict[str, Any]  # open-ended: RunResult.spec as stored, passed through
    notes: list[str]
    setup_s: float


class CapabilityRecord(TypedDict):
    """engines.base.Capability as the run's target stores it."""

    available: bool
    reason: str


class ExportedTarget(TypedDict):
    """What capmark measured: the server's version and address, what it could read there, the data devices
    (None in runs stored without the field)."""

    version: str | None
    dsn: str | None
    embedded: bool | None
    local: bool | None
    capabilities: dict[str, CapabilityRecord] | None
    devices: list[str] | None


class Column(TypedDict):
    """A KPM column as the test's tables show it."""

    key: str
    label: str
    unit: str


class ExportedStep(TypedDict):
    ordinal: int
    jobs: int
    repeat: int
    status: str
    started_at: str
    units: int
    errors: int
    kpm: dict[str, float | None]  # the test's KPM columns (kpm.COLUMNS), None where n/a
    na_reasons: dict[str, str]
    latency_s: dict[str, float | None]  # LatencyHistogram.summary()
    latency_by_type_s: dict[str, dict[str, float | None]]  # the same per transaction type, with units, throughput
    notes: list[str]
    # open-ended: the cluster instrument's nodes as the Ray driver recorded them, passed through
    load_nodes: list[dict[str, Any]] | None
    # open-ended: pgbench scripts' per-command statistics as the script driver recorded them, passed through
    scripts: dict[str, Any] | None


class SteppingDoc(TypedDict):
    repeat: int
    auto: bool
    max_jobs: int | None
    knee: KneeRecord | None


class Repeatability(TypedDict):
    confidence: float
    methods: dict[str, str]
    jobs: list[JobNoise]


class ExportedTest(TypedDict):
    demands: TestDemands | None
    ordinal: int
    workload: str
    family: str
    unit: str
    throughput_unit: str
    mode: str
    params: dict[str, int | str]
    status: str
    reason: str
    quiesce_s: float
    notes: list[str]
    columns: list[Column]
    steps: list[ExportedStep]
    stepping: SteppingDoc
    repeatability: Repeatability


@dataclass(kw_only=True)
class RunExport(Document):
    """The run's record, its environment and target, and per test its steps' KPMs, latency and demands."""

    SCHEMA = "capmark.run/1"
    run: ExportedRun
    environment: dict[str, Any]  # open-ended: facts about the platform as stored with the run, passed through
    target: ExportedTarget
    tests: list[ExportedTest]


def columns(test: TestResult) -> list[Column]:
    return [Column(key=c.key, label=c.label, unit=kpm.unit_of(c, test.throughput_label))
            for c in (kpm.column_of(k, test) for k in test.kpms if k in kpm.COLUMNS)]


def test_to_json(test: TestResult) -> ExportedTest:
    steps = []
    for step in test.steps:
        measured = record.of(step, test.per_unit)
        values, reasons = measured.kpm, measured.unavailable
        steps.append(ExportedStep(
            ordinal=step.ordinal, jobs=step.jobs, repeat=noise.repeat_of(step), status=step.status,
            started_at=step.started_at,
            units=step.units, errors=sum(step.errors.values()),
            kpm={k: values.get(k) for k in test.kpms},
            na_reasons=reasons,
            latency_s=step.latency.summary(),
            latency_by_type_s={t: h.summary() | {"units": h.total, "throughput": h.total / step.elapsed_s}
                               for t, h in step.histograms.items()},
            notes=step.notes,
            load_nodes=((step.instruments or {}).get("cluster") or {}).get("nodes"),
            scripts=((step.instruments or {}).get("unit_stats") or {}).get("scripts"),
        ))
    return ExportedTest(demands=demands_of(test) if test.steps else None,
                        ordinal=test.ordinal, workload=test.workload, family=test.family, unit=test.unit,
                        throughput_unit=test.throughput_label, mode=test.mode, params=test.params,
                        status=test.status, reason=test.reason, quiesce_s=test.quiesce_s, notes=test.notes,
                        columns=columns(test),
                        steps=steps, stepping=stepping_doc(test), repeatability=repeatability_doc(test))


def stepping_doc(test: TestResult) -> SteppingDoc:
    """How the steps were chosen, and where automatic stepping found the knee."""
    st = test.stepping or {}
    return SteppingDoc(repeat=noise.repeats_of(test.steps) if not st else st.get("repeat", 1),
                       auto=bool(st.get("auto")), max_jobs=st.get("max_jobs"), knee=st.get("knee"))


def repeatability_doc(test: TestResult) -> Repeatability:
    """Per job count and KPM: mean, 95 % half-width, method and n; the methods in words."""
    return Repeatability(confidence=noise.CONFIDENCE, methods=noise.METHODS,
                         jobs=noise.analyse(test.steps, list(test.kpms), test.per_unit))


def run_export(run: RunResult) -> RunExport:
    target = run.target
    return RunExport(
        run=ExportedRun(id=run.run_id, created_at=run.created_at, status=run.status, reason=run.reason, pid=run.pid,
                        heartbeat_at=run.heartbeat_at, folder=run.folder, spec=run.spec, notes=run.setup_notes,
                        setup_s=run.setup_s),
        environment=run.environment,
        target=ExportedTarget(version=target.get("version"), dsn=target.get("dsn_redacted"),
                              embedded=target.get("embedded"), local=target.get("local"),
                              capabilities=target.get("capabilities"), devices=target.get("devices")),
        tests=[test_to_json(t) for t in run.tests],
    )
