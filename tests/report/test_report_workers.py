"""A report of several tests is drawn in worker processes: the page must be the one a single process draws, and a
capmark killed while they draw must leave none of them behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from storedruns import unpack

from capmark.analysis.report import stored_report_documents
from capmark.report import html

SRC = str(Path(__file__).resolve().parents[2] / "src")
# matplotlib names each figure's clip paths and markers with a random id: equal pages differ only there
_RANDOM_ID = re.compile(r'(id="|#)[mp]?[0-9a-f]{10}')
# The kernel kills a worker as its parent dies. A worker that ended only when it next
# asked for work (its task queue closed) would first finish drawing its test: about 2 s for each of these.
GONE_WITHIN_S = 0.5


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie: a dead worker waits as a zombie until the process that inherited it reaps it."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("results")
    (run_id,) = unpack(results, "run-quick")  # three tests of three steps each
    return results / run_id


def test_workers_draw_the_page_a_single_process_draws(stored: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's sections, in the run's order: a lost test, a test drawn twice or tests in the order the workers
    finished would each change the page."""
    docs = stored_report_documents(stored)
    assert len(docs.tests) >= html.PARALLEL_MIN_TESTS
    drawn = html.render(docs)
    monkeypatch.setattr(html, "PARALLEL_MIN_TESTS", len(docs.tests) + 1)
    alone = html.render(docs)
    assert _RANDOM_ID.sub(r"\1ID", drawn) == _RANDOM_ID.sub(r"\1ID", alone)
    titles = re.findall(r'id="test-(\d+)"', drawn)
    assert titles == sorted(titles, key=int) and len(titles) == len(docs.tests), titles


INTERRUPTED = 130


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: the report is drawn in one process")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_capmark_ended_while_its_workers_draw_leaves_none_behind(stored: Path, how: signal.Signals) -> None:
    """SIGKILL: the workers die with capmark. Ctrl-C or SIGTERM: capmark says it was interrupted, in one line, and
    ends its workers, which die quietly (each printed capmark's own traceback when they ran its handler)."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "capmark", "report", stored.name, "--rerender", "--results-dir",
                             str(stored.parent)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        workers: list[psutil.Process] = []
        deadline = time.monotonic() + 60
        while not workers and proc.poll() is None and time.monotonic() < deadline:
            workers = psutil.Process(proc.pid).children(recursive=True)
            time.sleep(0.01)
        assert workers, "the report was drawn without workers (or before they were seen)"
        time.sleep(0.2)  # into their drawing
        os.kill(proc.pid, how)
        _, err = proc.communicate(timeout=10)
        if how != signal.SIGKILL:
            assert proc.returncode == INTERRUPTED and len(err.strip().splitlines()) == 1, (proc.returncode, err)
        deadline = time.monotonic() + GONE_WITHIN_S
        while (alive := [w for w in workers if _running(w)]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive, [(w.pid, w.status()) for w in alive]
    finally:
        if proc.poll() is None:
            proc.kill()
