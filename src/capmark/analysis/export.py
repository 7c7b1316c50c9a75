"""The export of a stored run (capmark.run/1): the same content as the console tables, with units."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capmark.analysis.demands import demands_of
from capmark.analysis.document import Document
from capmark.measure import kpm, noise, record
from capmark.results import RunResult, TestResult


@dataclass(kw_only=True)
class RunExport(Document):
    """The run's record, its environment and target, and per test its steps' KPMs, latency and demands."""

    SCHEMA = "capmark.run/1"
    run: dict[str, Any]
    environment: dict[str, Any]
    target: dict[str, Any]
    tests: list[dict[str, Any]]


def columns(test: TestResult) -> list[dict[str, Any]]:
    return [{"key": c.key, "label": c.label, "unit": kpm.unit_of(c, test.throughput_label)}
            for c in (kpm.column_of(k, test) for k in test.kpms if k in kpm.COLUMNS)]


def test_to_json(test: TestResult) -> dict[str, Any]:
    steps = []
    for step in test.steps:
        measured = record.of(step, test.per_unit)
        values, reasons = measured.kpm, measured.unavailable
        lat = step.latency.summary()
        steps.append({
            "ordinal": step.ordinal, "jobs": step.jobs, "repeat": noise.repeat_of(step), "status": step.status,
            "started_at": step.started_at,
            "units": step.units, "errors": sum(step.errors.values()),
            "kpm": {k: values.get(k) for k in test.kpms},
            "na_reasons": reasons,
            "latency_s": lat,
            "latency_by_type_s": {t: h.summary() | {"units": h.total, "throughput": h.total / step.elapsed_s}
                                  for t, h in step.histograms.items()},
            "notes": step.notes,
            "load_nodes": ((step.instruments or {}).get("cluster") or {}).get("nodes"),
            "scripts": ((step.instruments or {}).get("unit_stats") or {}).get("scripts"),
        })
    return {"demands": demands_of(test).to_json() if test.steps else None,
            "ordinal": test.ordinal, "workload": test.workload, "family": test.family, "unit": test.unit,
            "throughput_unit": test.throughput_label, "mode": test.mode, "params": test.params,
            "status": test.status, "reason": test.reason, "quiesce_s": test.quiesce_s, "notes": test.notes,
            "columns": columns(test),
            "steps": steps, "stepping": stepping_doc(test), "repeatability": repeatability_doc(test)}


def stepping_doc(test: TestResult) -> dict[str, Any]:
    """How the steps were chosen, and where automatic stepping found the knee."""
    st = test.stepping or {}
    return {"repeat": noise.repeats_of(test.steps) if not st else st.get("repeat", 1), "auto": bool(st.get("auto")),
            "max_jobs": st.get("max_jobs"), "knee": st.get("knee")}


def repeatability_doc(test: TestResult) -> dict[str, Any]:
    """Per job count and KPM: mean, 95 % half-width, method and n; the methods in words."""
    return {"confidence": noise.CONFIDENCE, "methods": noise.METHODS,
            "jobs": [r.to_dict() for r in noise.analyse(test.steps, list(test.kpms), test.per_unit)]}


def run_export(run: RunResult) -> RunExport:
    target = run.target
    return RunExport(
        run={"id": run.run_id, "created_at": run.created_at, "status": run.status, "reason": run.reason,
                "pid": run.pid, "heartbeat_at": run.heartbeat_at, "folder": run.folder,
                "spec": run.spec, "notes": run.setup_notes, "setup_s": run.setup_s},
        environment=run.environment,
        target={"version": target.get("version"), "dsn": target.get("dsn_redacted"),
                   "embedded": target.get("embedded"), "local": target.get("local"),
                   "capabilities": target.get("capabilities"), "devices": target.get("devices")},
        tests=[test_to_json(t) for t in run.tests],
    )
