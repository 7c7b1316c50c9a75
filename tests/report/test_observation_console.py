"""The console views of planning from an observation, rendered from the stored observation of the small production
(tests/fixtures/observation-production, README there): the first screen says the peak, the host's CPU and busiest
disk, the top workloads and the growth that breaks first; every view fits 80 columns; response times are never shown
without saying they are means (or a p95 by the exponential assumption). No database.
"""

from __future__ import annotations

import io
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from capmark.analysis.observation import (
    BaselineOptions,
    WhatIfOptions,
    observation_compare,
    observation_report,
    parse_baseline_options,
    parse_whatif_options,
)
from capmark.observation_store import load_observation
from capmark.report.observation import (
    print_baseline,
    print_first_screen,
    print_observation_comparison,
    print_observation_report,
    print_sizing,
    print_whatif,
)

FIXTURE = Path(__file__).parent.parent / "fixtures" / "observation-production"
# pgbench's truth for the production's peak phase (the fixture's README)
PEAK_PHASE = (1795655985.0, 1795656021.0)
PEAK_TXN = {"lookups": 63266, "reports": 9525}
RATE_TOLERANCE = 0.03  # the observation's rate at the peak against pgbench's: counted exactly, windows differ by <1 s
WIDTH = 80


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("obs") / "obs-production"
    shutil.copytree(FIXTURE, folder)
    options = parse_baseline_options(BaselineOptions(peak_by="commits", peak_length="30s"))
    return observation_report(load_observation(folder), folder, options,
                              parse_whatif_options(WhatIfOptions(growth=("20%x3",), sla=("reports:p95<5s",))))


def shown(render, doc, width: int = WIDTH) -> list[str]:
    buf = io.StringIO()
    render(doc, Console(file=buf, width=width, color_system=None, emoji=False))
    return buf.getvalue().splitlines()


def test_the_first_screen_says_the_peak_window_inside_the_real_peak(report):
    lines = shown(print_first_screen, report)
    peak = next(line for line in lines if line.startswith("Peak window"))
    found = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) to (\d\d:\d\d:\d\d)", peak)
    assert found, peak
    start = datetime.fromisoformat(found.group(1)).timestamp()
    assert PEAK_PHASE[0] - 1 <= start <= PEAK_PHASE[1] - 30, peak  # a 30 s window that starts inside the phase
    assert "busiest by commits" in peak


def test_the_first_screen_says_cpu_and_busiest_disk_at_the_peak(report):
    line = next(line for line in shown(print_first_screen, report) if line.startswith("At the peak"))
    cpu = report.baseline.validation.resources[0]
    assert cpu.resource == "cpu" and f"host CPU {cpu.measured * 100:.0f} % busy of 2 cores" in line
    assert re.search(r"busiest disk \w+ \d+ % busy", line), line


def test_the_first_screen_lists_the_top_workloads_with_the_rates_pgbench_ran(report):
    lines = shown(print_first_screen, report)
    header = next(k for k, line in enumerate(lines) if "workload" in line and "rate /s" in line)
    assert "mean ms" in lines[header] and "p95 ms (exp.)" in lines[header] and "CPU share" in lines[header]
    rows = {}
    for line in lines[header + 2:header + 5]:
        cells = [c.strip() for c in line.strip("│").split("│")]
        rows[cells[0]] = cells
    assert set(rows) == {"lookups", "orders", "reports"}
    length = PEAK_PHASE[1] - PEAK_PHASE[0]
    for name, txn in PEAK_TXN.items():
        shown_rate = float(rows[name][1].replace(",", ""))
        assert shown_rate == pytest.approx(txn / length, rel=RATE_TOLERANCE), rows[name]
    # reports' aggregate is the CPU-heavy one: first by CPU share
    assert list(rows)[0] == "reports"


def test_the_first_screen_names_the_growth_that_breaks_first(report):
    text = " ".join(shown(print_first_screen, report, width=200))
    sizing = report.sizing
    assert sizing.runs_out_in_period is not None
    if sizing.runs_out_in_period == 0:
        assert "Already at the peak the host breaks the 80 % threshold" in text
    else:
        assert f"breaks first in period {sizing.runs_out_in_period}" in text
    over = sizing.runs_out_scenario.over_threshold
    assert any(f"{'CPU' if r == 'cpu' else r} at" in text for r in over), text


def test_the_first_screen_fits_one_screen(report):
    assert len(shown(print_first_screen, report)) <= 24


@pytest.mark.parametrize("view", ["report", "baseline", "whatif", "sizing", "compare"])
def test_every_view_fits_80_columns_without_cutting_a_cell(report, view):
    render, doc = {"report": (print_observation_report, report), "baseline": (print_baseline, report.baseline),
                   "whatif": (print_whatif, report.whatif), "sizing": (print_sizing, report.sizing),
                   "compare": (print_observation_comparison, observation_compare(report.baseline, report.baseline)),
                   }[view]
    lines = shown(render, doc)
    assert max(len(line) for line in lines) <= WIDTH
    assert not any("…" in line for line in lines)


def test_a_response_time_is_always_called_a_mean_or_a_p95(report):
    """The observation holds means: no header or sentence may present a time as 'latency' or a bare response."""
    lines = shown(print_observation_report, report, width=250)
    assert not any("latency" in line.lower() for line in lines)
    for line in lines:
        if re.search(r"\bresponse\b", line) and "residence" not in line:
            assert re.search(r"\bmean\b|p95|response time: the server", line), line
    assert any("p95 ms (exp.)" in line for line in lines)
    assert any("exponential assumption" in line for line in lines)


def test_the_baseline_shows_the_three_estimators_and_the_unattributed_cpu(report):
    lines = shown(print_baseline, report.baseline, width=200)
    tables = [line for line in lines if line.rstrip().endswith(": demand per unit, ms")]
    assert len(tables) == len(report.baseline.demands.resources)
    header = next(line for line in lines if "measured" in line and "statements" in line and "regression" in line)
    assert header
    unattributed = next(line for line in lines if line.startswith("Unattributed:"))
    assert f"{report.baseline.unattributed_cpu_cores:.2f} of the" in unattributed
    assert any(line.startswith("Validation (calibration, on the peak)") for line in lines)
    assert any(line.startswith("Validation (prediction, on a held-out busy window)") for line in lines)


def test_the_whatif_marks_resources_over_the_threshold(report):
    lines = shown(print_whatif, report.whatif, width=200)
    scenarios = {s.name: s for s in report.whatif.scenarios}
    for line in lines:
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells and cells[0] in scenarios and len(cells) > 2 and cells[-1] in ("yes", "no"):
            s = scenarios[cells[0]]
            assert sum("!" in c for c in cells) == len(s.over_threshold), line
            assert cells[-1] == ("yes" if s.breaks else "no")
