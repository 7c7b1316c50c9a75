"""Calibration and validation on a real short run (first slice of the planning issue)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from capmark import api
from capmark.config import RunSpec

pytestmark = pytest.mark.db


@pytest.fixture(scope="module")
def run(embedded_dsn, tmp_path_factory):
    return api.run(RunSpec(workloads=["srv-query1"], jobs=[1, 2, 4], warmup_s=0.5, duration_s=2.0, dsn=embedded_dsn,
                           results_dir=tmp_path_factory.mktemp("plan")))


def test_calibration_reproduces_its_own_step_and_predicts_the_others(run):
    doc = api.calibrate(run.folder)
    t = doc["tests"][0]
    assert t["calibrated_from_jobs"] == [1] and [r["jobs"] for r in t["steps"]] == [1, 2, 4]
    first = t["steps"][0]
    assert first["calibration"] and abs(first["error_pct"]["throughput"]) < 10
    for r in t["steps"]:
        assert r["model"]["bottleneck"] == "cpu"  # srv-query1 is CPU bound
        assert r["model"]["cpu_busy_pct"] <= 100.0 + 1e-6
    assert t["verdict"]["throughput"]["median_abs_pct"] is not None


def test_calibrate_command_json_recomputes_from_storage(run):
    out = subprocess.run([sys.executable, "-m", "capmark.cli", "calibrate", f"{run.folder}:srv-query1",
                          "--from-steps", "1,2", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "capmark.calibrate/1"
    assert doc["tests"][0]["calibrated_from_jobs"] == [1, 2]
