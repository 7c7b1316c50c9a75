"""Console tables at the terminal's width, rendered from real stored runs: at 80 columns each table is one piece
(one header, no line past the edge, no cell cut short) with the columns it leaves out named under it; at 200
columns the whole table shows."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from capmark import api
from capmark.analysis.report import report_documents
from capmark.report.console import print_run
from capmark.report.demands import print_demands
from capmark.report.diagnosis import print_diagnosis
from capmark.report.planning import print_calibration, print_size, print_whatif

FIXTURES = Path(__file__).parents[1] / "fixtures"
NARROW, WIDE = 80, 200
HIDDEN = "wider terminal shows:"
RULE = re.compile(r"^─{10,}$")  # the line under a table's header: one per table, two where a table was cut in parts


def _unpack(where: Path, name: str) -> Path:
    folder = where / name / "20261122-000000-f1x7"
    folder.mkdir(parents=True)
    (folder / "results.sqlite").write_bytes(gzip.decompress((FIXTURES / f"{name}.sqlite.gz").read_bytes()))
    return folder


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    """Two server-side tests (srv-query1; tp-light, a mix of two transaction types), two steps each, with their
    documents computed once."""
    folder = str(_unpack(tmp_path_factory.mktemp("runs"), "run-format-1"))
    return {"run": api.open_run(folder), "calibrate": api.calibrate(folder), "demands": api.demands(folder),
            "whatif": api.whatif(folder, changes={"growth": "20%x3", "cpus": 4}),
            "size": api.size(folder, target_tps=200_000), "diagnose": api.diagnose(folder)}


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """Scripts (two types, per-command latency) at four job counts measured twice, most steps invalid."""
    folder = str(_unpack(tmp_path_factory.mktemp("runs"), "run-script-repeats"))
    return {"run": api.open_run(folder), "calibrate": api.calibrate(folder), "demands": api.demands(folder),
            "diagnose": api.diagnose(folder)}


PRINTERS = {"calibrate": print_calibration, "demands": print_demands, "whatif": print_whatif, "size": print_size,
            "diagnose": print_diagnosis}


def shown(docs: dict, view: str, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, emoji=False)
    if view == "report":
        print_run(report_documents(docs["run"]), console)
    else:
        for test_doc in docs[view].tests:
            PRINTERS[view](test_doc, console)
    return console.file.getvalue().splitlines()


def one_piece(lines: list[str], titles: list[str], width: int) -> None:
    """Every line within the width, no cell cut short with an ellipsis, each table's title once and one header
    rule per table."""
    assert max(len(line) for line in lines) <= width
    assert not any("…" in line for line in lines)
    for title in titles:
        assert sum(line.startswith(title) for line in lines) == 1, title
    assert sum(bool(RULE.match(line.strip())) for line in lines) == len(titles)


def header(lines: list[str], title: str) -> str:
    """The header lines of the table under `title` (up to its rule), joined."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next(i for i in range(start, len(lines)) if RULE.match(lines[i].strip()))
    return "\n".join(lines[start + 1:end])


KPM_TITLES = ["srv-query1 (server-side; unit: query)", "tp-light (server-side; unit: transaction; update_pct=20)"]


def test_the_run_tables_fit_80_columns_in_one_piece(mix):
    lines = shown(mix, "report", NARROW)
    one_piece(lines, [*KPM_TITLES, "tp-light: per transaction type"], NARROW)
    for title in KPM_TITLES:
        head = header(lines, title)
        # the essential columns share the one header: the load, throughput and p95
        assert "Jobs" in head and "Throughput" in head and "RT p95" in head
        assert "CPU idle" not in head and "Elapsed" not in head
    notes = [line for line in lines if line.startswith(HIDDEN)]
    assert len(notes) == len(KPM_TITLES)
    left_out = " ".join(lines[lines.index(notes[0]):lines.index(notes[0]) + 2])
    assert "CPU idle" in left_out and "Elapsed" in left_out  # named, so the reader knows they exist


def test_a_wide_terminal_shows_every_run_column(mix):
    lines = shown(mix, "report", WIDE)
    one_piece(lines, [*KPM_TITLES, "tp-light: per transaction type"], WIDE)
    assert not any(line.startswith(HIDDEN) for line in lines)
    head = header(lines, KPM_TITLES[1])
    for column in ("CPU user", "CPU sys", "CPU idle", "CPU iowait", "Per job", "RT max", "Logical reads",
                   "Physical reads", "Buffer hit", "Commits", "WAL per txn", "Elapsed"):
        assert column in head


def test_the_planning_tables_fit_80_columns_in_one_piece(mix):
    calibration = shown(mix, "calibrate", NARROW)
    one_piece(calibration, ["srv-query1: measured vs model", "tp-light: measured vs model",
                            "by type: measured vs model"], NARROW)
    assert "X err" in header(calibration, "tp-light: measured vs model")
    assert any(line.startswith(HIDDEN) and "batch meas/model" in line for line in calibration)
    whatif = shown(mix, "whatif", NARROW)
    one_piece(whatif, ["srv-query1: what if", "tp-light: what if"], NARROW)
    assert "cpus 4 BL+72.8%" in "\n".join(whatif)  # the scenario names whole
    assert all(max(len(line) for line in shown(mix, view, NARROW)) <= NARROW for view in ("size", "diagnose"))


def test_a_wide_terminal_shows_every_planning_column(mix):
    calibration = shown(mix, "calibrate", WIDE)
    assert not any(line.startswith(HIDDEN) for line in calibration)
    assert "batch" in header(calibration, "tp-light: measured vs model")
    whatif = shown(mix, "whatif", WIDE)
    one_piece(whatif, ["srv-query1: what if", "tp-light: what if"], WIDE)
    head = header(whatif, "tp-light: what if")
    assert "utilization" in head and "stretch" in head and "headroom" in head
    assert any("WAL flush" in line and "disk" in line and "CPU" in line for line in whatif)  # utilization on a line


DEMAND_TITLES = ["latency realism (ms)", "per commit", "Do the instruments agree?"]


def test_the_demand_tables_fit_80_columns_in_one_piece(mix):
    lines = shown(mix, "demands", NARROW)
    titles = [f"{w}: service demand per {u}" for w, u in (("srv-query1", "query"), ("tp-light", "transaction"))]
    statements = [line for line in lines if line.startswith("top statements at")]
    assert len(statements) == 2
    assert max(len(line) for line in lines) <= NARROW and not any("…" in line for line in lines)
    assert sum(bool(RULE.match(line.strip())) for line in lines) == len(titles) + 2 * len(DEMAND_TITLES) + 2
    for title in titles:
        head = header(lines, title)
        assert "1 jobs" in head and "2 jobs" in head and "mean" in head  # the values, not only the labels
    # a verdict that is a sentence goes under the table with a reference, not into a column a word wide
    verdicts = [line for line in lines if re.search(r"differ \[\d+\]\s*$", line)]
    assert all(any(line.startswith(re.search(r"\[\d+\]", v).group()) for line in lines) for v in verdicts)


def test_a_wide_terminal_shows_every_demand_column(mix):
    lines = shown(mix, "demands", WIDE)
    assert not any(line.startswith(HIDDEN) for line in lines)
    assert "std" in header(lines, "srv-query1: service demand per query")
    stmts = header(lines, "top statements at 2 jobs")
    assert "dirtied" in stmts and "written" in stmts


def test_repeats_commands_and_invalid_steps_fit_80_columns(scripts):
    run = shown(scripts, "report", NARROW)
    title = "script:transfer+lookup"
    one_piece(run, [f"{title} (client-side", f"{title}: repeatability", f"{title}: per transaction type",
                    f"{title}: per command"], NARROW)
    assert "Rep" in header(run, f"{title} (client-side")  # repetitions are told apart
    assert "UPDATE capmark.account" in "\n".join(run)  # a command wraps, whole
    calibration = shown(scripts, "calibrate", NARROW)
    one_piece(calibration, [f"{title}: measured vs model", "by type: measured vs model"], NARROW)
    assert any(line.startswith("! 1 jobs: invalid, left out:") for line in calibration)
    demands = shown(scripts, "demands", NARROW)
    assert max(len(line) for line in demands) <= NARROW and not any("…" in line for line in demands)
    head = header(demands, f"{title}: service demand per transaction")
    assert "1 jobs" in head and "4 jobs" in head  # the lowest and highest load, of eight steps
    hidden = next(line for line in demands if line.startswith(HIDDEN))
    assert "2 jobs rep 1" in hidden
    assert all(len(line) <= NARROW for line in shown(scripts, "diagnose", NARROW))


def test_a_wide_terminal_shows_every_step_of_the_repeats(scripts):
    demands = shown(scripts, "demands", WIDE)
    head = header(demands, "script:transfer+lookup: service demand per transaction")
    assert head.count("jobs") == 8 and head.count("rep 2") == 4
    run = shown(scripts, "report", WIDE)
    assert "Within step" in header(run, "script:transfer+lookup: repeatability")


def test_every_common_kpm_has_its_rank():
    """A column every workload reports and the ranking does not know would rank as a family's own metric."""
    from capmark.report.console import _KPM_RANKS
    from capmark.workloads.base import COMMON_KPMS

    assert set(_KPM_RANKS) == set(COMMON_KPMS)
