"""What `capmark run` leaves on the screen, replayed from a stored run of the quick suite (no database): the run's
own observer is given the stored tests and steps as the runner gives them, then the run's ending is printed. The
last screen answers (the at-a-glance table, within 80 columns), the whole output fits about two screens, and
--verbose (or `capmark report`) shows the rest."""

from __future__ import annotations

import gzip
import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from commandline import invoke
from rich.console import Console

from capmark import api, cli
from capmark.report.console import GLANCE_TITLE, REPEATABILITY_NOTE, glance_table
from capmark.results import RunResult

FIXTURES = Path(__file__).parents[1] / "fixtures"
NARROW = 80
# The default output of `capmark run` for the quick suite (three tests of three steps), from its first step on:
# two screens of a 30-line terminal, so that the step figures, each test's table and the answer at the end can be
# read without scrolling far back. The preparation messages before the first step (starting the server, creating
# the data model) come on top; a run prints them once.
QUICK_RUN_LINES = 60
RULE = re.compile(r"^─{10,}$")
QUICK = ("srv-mixed", "tp-mixed1", "wal-lat1")


def _unpack(where: Path, name: str) -> Path:
    folder = where / name / "20261125-000000-q1ck"
    folder.mkdir(parents=True)
    (folder / "results.sqlite").write_bytes(gzip.decompress((FIXTURES / f"{name}.sqlite.gz").read_bytes()))
    return folder


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    """The quick suite at 1, 2 and 4 jobs on the embedded PostgreSQL (tests/fixtures/README.md)."""
    return _unpack(tmp_path_factory.mktemp("runs"), "run-quick")


@pytest.fixture(scope="module")
def repeated(tmp_path_factory) -> Path:
    """A user's scripts at four job counts, each measured twice."""
    return _unpack(tmp_path_factory.mktemp("runs"), "run-script-repeats")


def replay(folder: Path, width: int = NARROW, verbose: bool = False, tests: int = 1) -> list[str]:
    """The lines `capmark run` prints from its first step on, for the run stored in `folder` (each of its tests
    `tests` times, as a run of that many such tests would)."""
    run: RunResult = api.open_run(str(folder))
    console = Console(file=io.StringIO(), width=width, color_system=None, emoji=False)
    observer = cli.LiveObserver(console, show_tables=True, verbose=verbose)
    for test in run.tests * tests:
        observer.test_started(test, sorted({s.jobs for s in test.steps}))
        for step in test.steps:
            observer.step_done(test, step)
        observer.test_done(test)
    cli.print_ending(folder, console, verbose)
    return console.file.getvalue().splitlines()


def glance(lines: list[str]) -> list[str]:
    """The at-a-glance table: from its title to the end."""
    starts = [i for i, line in enumerate(lines) if line.startswith(GLANCE_TITLE)]
    assert len(starts) == 1, lines
    return lines[starts[0]:]


def rendered(table: object, width: int = NARROW) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, emoji=False)
    console.print(table)
    return console.file.getvalue().splitlines()


def test_the_run_ends_with_the_glance_table_within_80_columns(quick):
    lines = replay(quick)
    assert max(len(line) for line in lines) <= NARROW
    assert not any("…" in line for line in lines)
    table = rendered(glance_table(api.report_documents(quick).headlines))
    assert lines[-len(table):] == table  # the answer is the last thing on the screen
    rule = next(i for i, line in enumerate(table) if RULE.match(line.strip()))
    head = " ".join(table[1:rule])
    for column in ("Workload", "Peak", "Knee", "Bottleneck", "Head", "Diagnosis"):
        assert column in head
    rows = [line.split()[0] for line in table[rule + 1:] if line.startswith(QUICK)]
    assert rows == list(QUICK)  # one row per workload, in the run's order
    above = "".join("".join(lines[-len(table) - 3:-len(table)]).split())  # a long path wraps
    assert str(quick) in above and "capmarkreportprintseverytable" in above  # where the rest is, just above


def test_the_glance_peak_is_the_throughput_of_a_step_shown_above(quick):
    """The peak in the last table is the throughput of one of that workload's own steps in its table above (the
    stored run has a valid step of tp-mixed1 only, so the others have no peak)."""
    lines = replay(quick)
    table = glance(lines)
    row = next(line for line in table if line.startswith("tp-mixed1"))
    peak = row.split()[1]
    assert re.fullmatch(r"[\d,]+", peak), row
    above = lines[:lines.index(table[0])]
    start = next(i for i, line in enumerate(above) if line.startswith("tp-mixed1 (server-side"))
    end = next(i for i in range(start + 1, len(above)) if above[i].startswith("wider terminal shows"))
    throughputs = [line.split()[2] for line in above[start:end] if re.match(r"^\s+\d+\s", line)]
    assert peak in throughputs
    for workload in ("srv-mixed", "wal-lat1"):
        assert next(line for line in table if line.startswith(workload)).split()[1] == "n/a"


def test_the_quick_suite_fits_two_screens_and_verbose_shows_the_rest(quick):
    lines = replay(quick)
    assert len(lines) <= QUICK_RUN_LINES, "\n".join(lines)
    text = "\n".join(lines)
    for workload in QUICK:
        assert f"{workload} (server-side" in text  # each test's key figures
    assert "per transaction type" not in text and "Diagnosis of" not in text
    assert "repeatability" not in text  # the steps were measured once
    verbose = replay(quick, verbose=True)
    shown = "\n".join(verbose)
    assert "srv-mixed: per transaction type" in shown and "tp-mixed1: per transaction type" in shown
    assert all(f"Diagnosis of {w}:" in shown for w in QUICK)
    assert glance(verbose)[1:] == glance(lines)[1:]  # the same answer last
    assert max(len(line) for line in verbose) <= NARROW


def test_a_figure_no_workload_has_gives_its_room_to_the_diagnosis(quick):
    """Where no step of any test passed its self-checks there is no peak, no model and so no knee, bottleneck or
    headroom: the table keeps the workload and its diagnosis, and says what 'valid' means."""
    measured = api.report_documents(quick).headlines
    none_valid = [replace(h, peak_throughput=None, peak_jobs=None, per_core=None, knee_jobs=None, knee_typical_s=None,
                          knee_p95_s=None, bottleneck=None, capacity=None, capacity_jobs=None, headroom_pct=None,
                          valid_steps=0, peak_at_highest_step=False) for h in measured]
    table = rendered(glance_table(none_valid))
    rule = next(i for i, line in enumerate(table) if RULE.match(line.strip()))
    assert table[1:rule] == [table[1]] and table[1].split() == ["Workload", "Diagnosis"]
    assert "n/a" not in "\n".join(table)
    assert "0 of 3 steps valid" in " ".join(" ".join(table).split())
    assert "Valid: passed its self-checks" in table[-1] + " " + table[-2]


def test_repetitions_show_their_table_and_what_plus_minus_means_once(repeated):
    lines = replay(repeated, tests=2)
    titles = [line for line in lines if line.startswith("script:transfer+lookup: repeatability")]
    assert len(titles) == 2
    text = " ".join(" ".join(lines).split())
    assert text.count(REPEATABILITY_NOTE.split(":")[0]) == 1  # explained once per run, not under every test
    assert text.index(REPEATABILITY_NOTE.split(":")[0]) > text.index(titles[0])


def test_report_prints_every_table_and_ends_with_the_glance_table(quick, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(NARROW))
    code, out, err = invoke(["report", str(quick)], capsys, monkeypatch)
    assert code == 0, err
    lines = out.splitlines()
    assert "tp-mixed1: per transaction type" in out
    assert max(len(line) for line in lines) <= NARROW
    table = glance(lines)
    above = "".join("".join(lines[lines.index(table[0]) - 3:lines.index(table[0])]).split())  # a long path wraps
    assert f"Report:{quick / 'report.html'}" in above
    assert [line.split()[0] for line in table if line.startswith(QUICK)] == list(QUICK)
