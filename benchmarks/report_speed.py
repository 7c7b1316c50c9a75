"""How long writing a run's report.html takes, on stored runs (no database): the analysis that the page shows and
the rendering (its plots above all), each the median of several runs in this process after one not counted.

    python benchmarks/report_speed.py [--runs 5] [--fixture run-quick --fixture run-script-repeats]

Every `capmark run` and `capmark report` writes the page, so this is part of every run's wall time (and of the
test suite's). The fixtures are the stored runs of tests/fixtures (tests/fixtures/README.md says how each was
recorded). To compare two versions of capmark, run this script under each, in alternating rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from capmark.analysis.report import stored_report_documents
from capmark.report.html import write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import storedruns  # noqa: E402  (tests/storedruns.py: the stored runs as the tests unpack them)


def time_report(folder: Path) -> tuple[float, float, int]:
    """Seconds for the documents and for the page, and the page's plots."""
    started = time.perf_counter()
    docs = stored_report_documents(folder)
    analysed = time.perf_counter()
    page = write_report(docs)
    rendered = time.perf_counter()
    return analysed - started, rendered - analysed, page.read_text().count("<svg")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fixture", action="append", dest="fixtures")
    args = parser.parse_args()
    for name in args.fixtures or ["run-quick", "run-script-repeats"]:
        with tempfile.TemporaryDirectory() as tmp:
            (run_id,) = storedruns.unpack(Path(tmp), name)
            folder = Path(tmp) / run_id
            time_report(folder)  # imports and first-use caches: not counted
            times = [time_report(folder) for _ in range(args.runs)]
        analysis = statistics.median(t[0] for t in times)
        render = statistics.median(t[1] for t in times)
        print(f"{name}: analysis {analysis:.2f} s, page {render:.2f} s ({times[0][2]} plots, "
              f"{render / max(times[0][2], 1) * 1000:.0f} ms a plot); medians of {args.runs}")


if __name__ == "__main__":
    main()
