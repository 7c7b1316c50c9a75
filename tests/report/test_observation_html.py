"""An observation's report.html, rendered from the stored observation of the small production: one self-contained page
with the timeline (the peak shaded over the peak's own times), the baseline tables, the validation and the what-if
charts with the threshold drawn; and, in a real headless Chromium, the page logs no error, fits a laptop's width and
draws every chart with a size. No database.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from browser import VIEWPORT, Browser, find_browser, install_browser

from capmark.analysis.observation import (
    BaselineOptions,
    WhatIfOptions,
    observation_report,
    parse_baseline_options,
    parse_whatif_options,
)
from capmark.observation_store import load_observation
from capmark.report.observation_html import PEAK_GID, THRESHOLD_GID, render, write_observation_report

FIXTURE = Path(__file__).parent.parent / "fixtures" / "observation-production"
SECTIONS = ("summary", "timeline", "workloads", "baseline", "estimators", "validation", "whatif", "sizing")
PANELS = 3  # CPU by workload, devices, commits per second


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("obs") / "obs-production"
    shutil.copytree(FIXTURE, folder)
    options = parse_baseline_options(BaselineOptions(peak_by="commits", peak_length="30s"))
    return observation_report(load_observation(folder), folder, options,
                              parse_whatif_options(WhatIfOptions(growth=("20%x3",))))


@pytest.fixture(scope="module")
def page(report) -> str:
    return render(report)


def test_the_page_is_self_contained(page):
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", page)  # no external script, style or image
    assert "<script" not in page


def test_every_section_is_there_and_linked(page, report):
    for anchor in SECTIONS:
        assert f'<section id="{anchor}">' in page and f'href="#{anchor}"' in page
    assert f"<title>capmark observation {report.observation_id}</title>" in page


def test_the_timeline_shades_the_peak_in_every_panel(page):
    assert len(re.findall(r"<svg\b", page)) == 3  # the timeline and the two what-if charts
    for k in range(PANELS):
        band = re.search(rf'<g id="{PEAK_GID}-{k}">\s*<path d="M ([\d.]+) ([\d.]+)\s*L ([\d.]+) ([\d.]+)\s*'
                         rf'L ([\d.]+) ([\d.]+)', page)
        assert band, f"no shaded peak in panel {k}"
        xs = {float(band.group(i)) for i in (1, 3, 5)}
        assert max(xs) - min(xs) > 10  # a band, not a line


def test_the_peak_band_sits_where_the_peak_is_on_the_time_axis(page, report):
    """The band's share of the panel's width is the peak's share of the observation's time span."""
    timeline = report.baseline.timeline
    span = timeline[-1].end - timeline[0].start  # the plotted points are interval middles; the axis has margins
    mids = ((timeline[-1].start + timeline[-1].end) - (timeline[0].start + timeline[0].end)) / 2
    band = re.search(rf'<g id="{PEAK_GID}-0">\s*<path d="M ([\d.]+) [\d.]+\s*L ([\d.]+) [\d.]+\s*L ([\d.]+) ', page)
    xs = sorted({float(band.group(i)) for i in (1, 2, 3)})
    width_px = xs[-1] - xs[0]
    # matplotlib's default x margin is 5 % each side of the data (the interval middles)
    axis_px = re.search(r'<g id="patch_2">\s*<path d="M ([\d.]+) [\d.]+\s*L ([\d.]+) ', page)
    left, right = sorted((float(axis_px.group(1)), float(axis_px.group(2))))
    axis = right - left
    peak = report.baseline.peak
    expected = (peak.end - peak.start) / (mids * 1.1) * axis
    assert width_px == pytest.approx(expected, rel=0.05)
    first_mid = (timeline[0].start + timeline[0].end) / 2
    assert (xs[0] - left) / axis == pytest.approx((peak.start - first_mid + 0.05 * mids) / (1.1 * mids), abs=0.01)
    assert span > mids


def test_the_whatif_chart_draws_the_threshold(page, report):
    assert f'<g id="{THRESHOLD_GID}">' in page
    assert f"{report.whatif.threshold:.0%} threshold" in page
    for s in report.whatif.scenarios:
        assert f"<td class=\"l\">{s.name}</td>" in page


def test_the_tables_say_means_and_the_p95_assumption(page):
    assert "mean response ms" in page and "exponential assumption" in page
    assert "latency" not in page.lower()


def test_the_page_is_written_whole_into_the_folder(report, tmp_path):
    path = write_observation_report(report, tmp_path / "report.html")
    written = path.read_text(encoding="utf-8")
    assert written.startswith("<!DOCTYPE html>") and written.rstrip().endswith("</html>")
    assert f'<g id="{PEAK_GID}-0">' in written
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no partial file left behind


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_browser() or install_browser()
    if not path:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium); not installed and not root to install it")
    return path


PROBE = """(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return {w: r.width, h: r.height}; };
  return {
    title: document.title,
    pageWidth: document.documentElement.scrollWidth,
    sections: [...document.querySelectorAll('section')].map(s => s.id),
    svgs: [...document.querySelectorAll('svg')].map(s => ({...box(s), texts: s.querySelectorAll('text').length})),
    bands: [0, 1, 2].map(k => { const g = document.getElementById('peak-window-' + k); return g ? box(g) : null; }),
  };
})()"""


def test_in_a_browser_the_page_shows_every_chart_and_the_peak(chromium, page, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    with Browser(chromium) as browser:
        shown = browser.load(path, PROBE, screenshot=tmp_path / "first-screen.png")
    assert shown.errors == []
    probe = shown.probe
    assert probe["sections"] == list(SECTIONS)
    assert probe["pageWidth"] <= VIEWPORT[0]
    assert len(probe["svgs"]) == 3
    for s in probe["svgs"]:
        assert s["w"] > 300 and s["h"] > 150 and s["texts"] > 5, s
    for band in probe["bands"]:
        assert band is not None and band["w"] > 10 and band["h"] > 10, band
