"""Percentiles below the server clock's resolution are marked approximate in every table that shows them, and no
other figure is: rendered from real stored runs (no database needed)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from rich.console import Console

from capmark.analysis.report import stored_report_documents
from capmark.report import clock, html
from capmark.report.console import kpm_table, type_table
from capmark.store import DB_NAME

FIXTURES = Path(__file__).parents[1] / "fixtures"  # how each run was recorded: fixtures/README.md


def _parts(tmp_path: Path, name: str) -> dict:
    folder = tmp_path / name / "20261122-000000-f1x7"
    folder.mkdir(parents=True)
    (folder / DB_NAME).write_bytes(gzip.decompress((FIXTURES / f"{name}.sqlite.gz").read_bytes()))
    return {part.test.workload: part for part in stored_report_documents(folder).tests}


def _table_text(table) -> str:
    console = Console(width=300, record=True, emoji=False)
    console.print(table)
    return console.export_text()


def _rows(section: str, heading: str) -> list[list[str]]:
    """The cells of the first table after `heading` in an HTML section, header row left out."""
    table = section[section.index(heading):]
    table = table[table.index("<table"):table.index("</table>")]
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)]
            for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)][1:]


@pytest.fixture(scope="module")
def server_side(tmp_path_factory) -> dict:
    """srv-query1 (units of a few microseconds) and tp-light (reads of ~10 us, updates of ~0.3 ms), server-side."""
    return _parts(tmp_path_factory.mktemp("runs"), "run-format-2")


def test_the_kpm_table_marks_the_percentiles_of_microsecond_units_and_not_their_mean(server_side):
    part = server_side["srv-query1"]
    step = part.test.steps[0]
    assert step.measured.latency.p50_s < clock.RESOLVED_FROM_S  # what makes this run a case
    rows = _rows(html.test_section(part).html, "<table")
    headers = [c.key for c in html.kpm.COLUMNS.values() if c.key in part.test.kpms]
    for row in rows:
        cells = dict(zip(headers, row, strict=True))
        assert all(cells[k].startswith(clock.MARK) for k in ("rt_p50_ms", "rt_p95_ms", "rt_p99_ms")), cells
        assert not any(cells[k].startswith(clock.MARK) for k in ("rt_mean_ms", "rt_max_ms", "throughput"))
    text = _table_text(kpm_table(part.test))
    assert text.count(clock.MARK) == 3 * len(part.test.steps) + 1  # three percentiles per step, and the note
    assert clock.NOTE in " ".join(text.split())


def test_the_per_type_tables_mark_only_the_percentiles_below_the_clocks_resolution(server_side):
    part = server_side["tp-light"]
    marked = unmarked = 0
    for row in _rows(html.test_section(part).html, "Per transaction type"):
        percentiles = row[5:9]  # p50, p90, p95, p99 [ms]
        for text in percentiles:
            value_ms = float(text.removeprefix(clock.MARK))
            assert text.startswith(clock.MARK) == (value_ms < clock.RESOLVED_FROM_S * 1e3), row
            marked += text.startswith(clock.MARK)
            unmarked += not text.startswith(clock.MARK)
        assert not row[4].startswith(clock.MARK) and not row[9].startswith(clock.MARK)  # mean and max
    assert marked and unmarked  # the reads' medians are marked, the updates' percentiles are not
    assert clock.NOTE in " ".join(_table_text(type_table(part.test)).split())
    demands = html.demands_section(part)
    assert demands is not None and any(c.startswith(clock.MARK) for r in _rows(demands.html, "Latency realism")
                                       for c in r)


def test_the_same_figures_timed_by_the_client_carry_no_mark(tmp_path):
    """A client-side driver times its units with a nanosecond clock (a client's unit, a round trip included, is
    rarely under 25 us; the stored server-side figures stand in for one that is)."""
    part = _parts(tmp_path, "run-format-2")["srv-query1"]
    part.test.mode = "client"
    assert clock.MARK not in html.test_section(part).html
    assert clock.MARK not in _table_text(kpm_table(part.test))
