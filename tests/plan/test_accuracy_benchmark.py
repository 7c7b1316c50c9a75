"""benchmarks/model_accuracy.py scores a stored run of its own shape (a commit workload and a mix at 1-16 jobs)
from end to end. It measures for 14 minutes before it scores, and its scoring once failed at the end of them
(it read the calibration as a dict after it became the model itself): nothing else runs that code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from storedruns import unpack

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "model_accuracy.py"
SCORE_TIMEOUT_S = 120


def test_the_accuracy_benchmark_scores_a_stored_run(tmp_path: Path) -> None:
    (run_id,) = unpack(tmp_path / "results", "plan-group-commit")
    out = tmp_path / "scores.json"
    done = subprocess.run([sys.executable, str(BENCHMARK), "--run", str(tmp_path / "results" / run_id),
                           "--json", str(out)], capture_output=True, text=True, timeout=SCORE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    scores = {s["workload"]: s for s in json.loads(out.read_text())["scores"]}
    assert set(scores) == {"tp-light", "wal-lat1"}
    for name, s in scores.items():
        # calibrated within the 2 cores, every other job count scored, each with its batch beside the model's
        assert s["calibrated_on"] == [1, 2] and s["scored_steps"] == 3, (name, s)
        assert all(st["batch"]["measured"] and st["batch"]["model"] for st in s["steps"]), name
        assert name in done.stdout
