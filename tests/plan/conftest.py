"""The stored run the planning tests calibrate, predict and size from (how it was recorded: tests/fixtures/README.md)."""

from __future__ import annotations

import pytest
from storedruns import unpack

from capmark.results import RunResult
from capmark.store import load_run

CPU_AND_COMMIT = "plan-cpu-commit"


@pytest.fixture(scope="session")
def cpu_and_commit_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """srv-query1 (CPU bound) and wal-lat1 (one flush per commit, batched by group commit) at 1, 2 and 4 jobs, every
    step valid, recorded on the embedded PostgreSQL 18 with the host to itself (other programs took 1.9 % of its busy
    CPU at most); each module that writes into it works on a copy."""
    results = tmp_path_factory.mktemp("cpu-and-commit")
    (run_id,) = unpack(results, CPU_AND_COMMIT)
    return load_run(results / run_id)
