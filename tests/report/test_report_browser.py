"""The HTML report as a browser shows it: a real headless Chromium opens report.html of a stored run and the page
must render its sections and every chart, with no script error. Needs Debian's chromium: the session fixture
installs it with apt-get where the tests run as root, and the tests skip with the reason elsewhere."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from browser import VIEWPORT, Browser, find_browser, install_browser

from capmark.analysis.report import stored_report_documents
from capmark.report.html import render
from capmark.store import DB_NAME, load_run

FIXTURES = Path(__file__).parents[1] / "fixtures"
# two server-side tests, one a mix of transaction types; and scripts measured twice at four job counts with
# per-command latency and invalid steps (tests/fixtures/README.md)
RUNS = ("run-format-1", "run-script-repeats")

# Everything the checks need, read from the page once it has loaded and been laid out.
PROBE = """JSON.parse(JSON.stringify({
  title: document.title,
  h1: document.querySelector("h1") && document.querySelector("h1").textContent,
  sections: [...document.querySelectorAll("section > h2")].map(h => h.textContent),
  nav: [...document.querySelectorAll("nav a")].map(a => a.getAttribute("href")),
  anchors: [...document.querySelectorAll("section[id]")].map(s => "#" + s.id),
  chartSlots: document.querySelectorAll(".charts > div").length,
  svgs: [...document.querySelectorAll("svg")].map(s => {
    const r = s.getBoundingClientRect();
    return {w: r.width, h: r.height, inSlot: !!s.closest(".charts > div"), texts: s.querySelectorAll("text").length};
  }),
  tables: document.querySelectorAll("table").length,
  firstTableRows: Object.fromEntries([...document.querySelectorAll("section[id]")].map(
    s => [s.id, s.querySelector("table") ? s.querySelector("table").querySelectorAll("tr:has(td)").length : null])),
  pageWidth: document.documentElement.scrollWidth,
}))"""


@pytest.fixture(scope="session")
def chromium() -> str:
    path = find_browser() or install_browser()
    if not path:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium); not installed and not root to install it")
    return path


@pytest.fixture(scope="module", params=RUNS)
def stored_run(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser") / "20261122-000000-f1x7"
    folder.mkdir()
    (folder / DB_NAME).write_bytes(gzip.decompress((FIXTURES / f"{request.param}.sqlite.gz").read_bytes()))
    return load_run(folder)


@pytest.fixture(scope="module")
def report_html(stored_run) -> str:
    return render(stored_report_documents(Path(stored_run.folder)))


@pytest.fixture(scope="module")
def shown(chromium, report_html, tmp_path_factory):
    folder = tmp_path_factory.mktemp("page")
    page = folder / "report.html"
    page.write_text(report_html, encoding="utf-8")
    with Browser(chromium) as browser:
        return browser.load(page, PROBE, screenshot=folder / "first-screen.png")


def test_the_report_renders_its_title_and_every_section(shown, stored_run):
    probe = shown.probe
    assert probe["title"] == f"capmark run {stored_run.run_id}" and probe["h1"] == probe["title"]
    for test in stored_run.tests:
        for heading in (f"Test {test.ordinal}: {test.workload}", f"Service demands: {test.workload}",
                        f"Model: {test.workload}"):
            assert heading in probe["sections"]
    assert {"At a glance", "Run summary", "Environment"} <= set(probe["sections"])
    assert probe["nav"] == probe["anchors"]  # every link of the contents leads to its section
    assert probe["tables"] >= len(probe["sections"])


def test_each_test_shows_a_row_per_step(shown, stored_run):
    for test in stored_run.tests:
        assert shown.probe["firstTableRows"][f"test-{test.ordinal}"] == len(test.steps)


def test_the_page_logs_no_error(shown):
    assert shown.errors == []


def test_every_chart_is_drawn_with_a_size(shown, report_html):
    svgs = shown.probe["svgs"]
    claimed = len(re.findall(r"<svg\b", report_html))  # the charts the report rendered into the file
    assert claimed >= 10 and len(svgs) == claimed
    assert shown.probe["chartSlots"] == claimed and all(s["inSlot"] for s in svgs)
    for s in svgs:
        assert s["w"] > 100 and s["h"] > 80 and s["texts"] > 0, s  # a chart with its axes' labels, not a speck


def test_the_page_fits_the_window_width(shown):
    """No table or chart makes the page scroll sideways on a laptop-sized window."""
    assert shown.probe["pageWidth"] <= VIEWPORT[0]


def test_the_first_screen_is_captured(shown):
    shot = shown.screenshot
    assert shot is not None and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(shot.read_bytes()[16:20], "big"), int.from_bytes(shot.read_bytes()[20:24], "big")
    assert (width, height) == VIEWPORT


def test_a_script_error_in_the_page_is_caught(chromium, report_html, tmp_path):
    """The check above is not blind: a copy of the report with a failing script and a console error fails it."""
    page = tmp_path / "broken.html"
    page.write_text(report_html.replace("</body>", "<script>console.error('drawn wrong');"
                                        "null.chart();</script></body>"), encoding="utf-8")
    with Browser(chromium) as browser:
        got = browser.load(page, "document.title")
    assert any("drawn wrong" in e for e in got.errors)
    assert any(e.startswith("uncaught: TypeError") for e in got.errors)
