"""The HTML report's per-test section, rendered from a real stored run (no database needed)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from capmark.analysis.report import stored_report_documents
from capmark.report import html
from capmark.store import DB_NAME

FIXTURE = Path(__file__).parents[1] / "fixtures" / "run-format-1.sqlite.gz"  # how it was recorded: fixtures/README.md
RECORDED_THROUGHPUT_1_JOB = 440_501.67  # srv-query1 at 1 job, read from the fixture when it was recorded


def _cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", row)]


def test_the_kpm_table_of_a_test_has_a_row_per_step(tmp_path):
    folder = tmp_path / "20261122-000000-f1x7"
    folder.mkdir()
    (folder / DB_NAME).write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    part = next(t for t in stored_report_documents(folder).tests if t.test.workload == "srv-query1")
    test = part.test
    section = html.test_section(part).html
    table = section[section.index("<table"):section.index("</table>")]
    header, *rows = [_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)]
    assert [r[0] for r in rows] == [str(s.jobs) for s in test.steps] == ["1", "2"]
    throughput = header.index("Throughput[qps]")
    assert rows[0][throughput] == f"{RECORDED_THROUGHPUT_1_JOB:,.0f}"
