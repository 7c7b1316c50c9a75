"""A report of several tests is drawn in forked worker processes: the page must be the one a single process draws,
a worker that dies must cost nothing but time, and a capmark ended while they draw must leave none of them behind.
The page is drawn in a fresh interpreter: this one may hold threads or Ray, in which case capmark draws in itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from storedruns import unpack

from capmark.errors import RunInterrupted

SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
# The kernel ends a worker as its parent dies. A worker that ended only when it found its pipe closed would first
# finish drawing its share: about 2 s for each of these.
GONE_WITHIN_S = 0.5
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: the report is drawn in one process")

# Draws the stored run's page with workers and in one process, and says whether they are the same page (matplotlib
# names each figure's clip paths and markers with a random id: equal pages differ only there).
SAME_PAGE = r"""
import re, sys
from pathlib import Path
from capmark.analysis.report import stored_report_documents
from capmark.report import html, workers
docs = stored_report_documents(Path(sys.argv[1]))
assert workers.worker_count(len(docs.tests)) >= 2, workers.worker_count(len(docs.tests))
drawn = html.render(docs)
workers.MIN_ITEMS = len(docs.tests) + 1
alone = html.render(docs)
random_id = re.compile(r'(id="|#)[mp]?[0-9a-f]{10}')
print(random_id.sub(r"\1ID", drawn) == random_id.sub(r"\1ID", alone), re.findall(r'id="(test-\d+)"', drawn))
"""


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("results")
    (run_id,) = unpack(results, "run-quick")  # three tests of three steps each
    return results / run_id


@TWO_CORES
def test_workers_draw_the_page_a_single_process_draws(stored: Path) -> None:
    """Every test's sections, in the run's order: a lost test, a test drawn twice or the tests in the order the
    workers finished would each change the page."""
    out = subprocess.run([sys.executable, "-c", SAME_PAGE, str(stored)], env=ENV, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True ['test-1', 'test-2', 'test-3']", out.stdout


# Shares [0, 1, 2, 3] among workers, one of which dies as the out-of-memory killer would end it, and prints the result.
DIES = r"""
import os
from capmark.report import workers
parent = os.getpid()
def draw(item):
    if item == 1 and os.getpid() != parent:
        os._exit(3)
    return item * item
assert workers.worker_count(4) >= 2, workers.worker_count(4)
print(workers.forked_map(draw, [0, 1, 2, 3]))
"""


@TWO_CORES
def test_a_worker_that_dies_leaves_its_share_to_the_process_itself() -> None:
    """Not a hang waiting for what will never come, nor a part missing from the page."""
    out = subprocess.run([sys.executable, "-c", DIES], env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[0, 1, 4, 9]", (out.stdout, out.stderr)


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie: a dead worker waits as a zombie until the process that inherited it reaps it."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@TWO_CORES
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_capmark_ended_while_its_workers_draw_leaves_none_behind(stored: Path, how: signal.Signals) -> None:
    """SIGKILL: the workers die with capmark. Ctrl-C or SIGTERM: capmark says it was interrupted, in one line, and
    ends its workers, which die quietly (each printed capmark's own traceback when they ran its handler)."""
    proc = subprocess.Popen([sys.executable, "-m", "capmark", "report", stored.name, "--rerender", "--results-dir",
                             str(stored.parent)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        seen: list[psutil.Process] = []
        deadline = time.monotonic() + 60
        while not seen and proc.poll() is None and time.monotonic() < deadline:
            seen = psutil.Process(proc.pid).children(recursive=True)
            time.sleep(0.01)
        assert seen, "the report was drawn without workers (or before they were seen)"
        time.sleep(0.2)  # into their drawing, every worker started
        drawing = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, how)
        proc.wait(10)  # not its stderr's end: a worker left behind would hold that open
        deadline = time.monotonic() + GONE_WITHIN_S
        while (alive := [w for w in drawing if _running(w)]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive, [(w.pid, w.status()) for w in alive]
        _, err = proc.communicate(timeout=10)
        if how != signal.SIGKILL:
            assert proc.returncode == RunInterrupted.exit_code and len(err.strip().splitlines()) == 1, (
                proc.returncode, err)
    finally:
        if proc.poll() is None:
            proc.kill()
