"""The model library reproduces every published case in ../shared/validation/queueing_cases.json, through
the same code path as `capmark solve`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from commandline import completed

from capmark.model.cases import solve


def _cases_file() -> Path:
    """../shared/validation/queueing_cases.json beside the checkout (CAPMARK_VALIDATION_FILE overrides)."""
    override = os.environ.get("CAPMARK_VALIDATION_FILE")
    if override:
        return Path(override)
    for folder in Path(__file__).resolve().parents:
        candidate = folder / "shared" / "validation" / "queueing_cases.json"
        if candidate.exists():
            return candidate
    raise FileNotFoundError("shared/validation/queueing_cases.json is not beside this checkout; set "
                            "CAPMARK_VALIDATION_FILE to its path")


CASES_FILE = _cases_file()
CASES = json.loads(CASES_FILE.read_text())["cases"]


def close(actual, expected, rel):
    if isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert a == pytest.approx(e, rel=rel), (actual, expected)
    else:
        assert actual == pytest.approx(expected, rel=rel)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_published_case(case):
    got = solve(case)
    for key, value in case["expect"].items():
        close(got[key], value, case["rel_tol"])


def test_solve_command_reads_the_whole_file():
    out = completed("solve", str(CASES_FILE))
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    assert [r["id"] for r in results] == [c["id"] for c in CASES]


@pytest.mark.parametrize("case,words", [
    ({"kind": "closed", "model": {"population": 0, "stations": [{"name": "a", "demand": 1}]}}, "population"),
    ({"kind": "closed", "model": {"population": 2, "stations": [{"name": "a", "demand": -1}]}}, "zero or more"),
    ({"kind": "closed", "model": {"population": 2, "stations": []}}, "no stations"),
    ({"kind": "closed", "method": "magic", "model": {"population": 2, "stations": [{"demand": 1}]}}, "Unknown method"),
    ({"kind": "open", "model": {"arrival_rate": 11, "service_rate": 5, "servers": 2}}, "unstable"),
    ({"kind": "usl-fit", "model": {"concurrency": [1, 2, 3], "throughput": [1, 2, 3]}}, "at least 4"),
    ({"kind": "teleport", "model": {}}, "Unknown case kind"),
])
def test_bad_models_get_one_sentence(tmp_path, case, words):
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    out = completed("solve", str(path))  # in this process: an exception the command let out fails the test
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert words in " ".join(out.stderr.split())
