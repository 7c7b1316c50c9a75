"""baseline, whatif, size, report and compare on a stored observation through the real command line: which stored thing
each command takes by default, the JSON documents against the fields docs/production.md lists, the options reaching
the documents (per-workload growth, moves, SLAs, the peak's choice), report.html written into the observation's
folder, and runs still answered as before. No database: the stored observation of the small production and a stored
run (tests/fixtures).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from commandline import invoke

FIXTURES = Path(__file__).parent.parent / "fixtures"
DOCS = Path(__file__).parent.parent.parent / "docs" / "production.md"
OBS = "obs-20261126-011917-b520"  # the fixture's own id
LATER = "obs-20261126-011917-zzzz"  # the same observation cut short, under a later id
RUN = "20261122-000000-f1x7"
NEWER_RUN = "20990101-000000-f1x7"  # sorts after every observation id: the latest run and the latest folder
PEAK = ["--peak-by", "commits", "--peak-length", "30s"]
CUT = 22  # intervals kept in the later observation: the quiet part and the peak's first half


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("results")
    shutil.copytree(FIXTURES / "observation-production", folder / OBS, ignore=shutil.ignore_patterns("*.py", "*.md"))
    shutil.copytree(folder / OBS, folder / LATER)
    db = sqlite3.connect(folder / LATER / "results.sqlite")
    with db:
        db.execute("delete from interval where ordinal > (select min(ordinal) from interval) + ?", (CUT - 1,))
        db.execute("update observation set observation_id = ?", (LATER,))
    db.close()
    for name in (RUN, NEWER_RUN):
        (folder / name).mkdir()
        (folder / name / "results.sqlite").write_bytes(gzip.decompress((FIXTURES / "run-quick.sqlite.gz").read_bytes()))
    return folder


def run(results: Path, capsys, monkeypatch, *args: str) -> str:
    code, out, err = invoke([*args, "--results-dir", str(results)], capsys, monkeypatch)
    assert code == 0, (code, out, err)
    return out


def documented_fields(kind: str) -> tuple[str, set[str]]:
    """The schema and top-level fields docs/production.md lists for a document."""
    text = DOCS.read_text()
    paragraph = text.split(f"<!-- fields: {kind} -->", 1)[1].strip().split("\n\n", 1)[0]
    schema = re.search(r'"schema": "([^"]+)"', paragraph).group(1)
    listed = re.sub(r"\([^)]*\)", "", paragraph.split("fields", 1)[1]).split(".", 1)[0]  # nested fields in ( )
    return schema, set(re.findall(r"`([a-z_0-9]+)`", listed))


def test_baseline_takes_the_latest_observation_even_after_a_newer_run(results, capsys, monkeypatch):
    doc = json.loads(run(results, capsys, monkeypatch, "baseline", *PEAK, "--format", "json"))
    assert doc["observation_id"] == LATER


def test_whatif_without_a_name_still_takes_the_latest_run(results, capsys, monkeypatch):
    doc = json.loads(run(results, capsys, monkeypatch, "whatif", "--growth", "20%x3", "--format", "json"))
    assert doc["schema"] == "capmark.whatif/1"  # the run's what-if, not the observation's


@pytest.mark.parametrize("kind,args", [
    ("baseline", ["baseline", OBS, *PEAK]),
    ("whatif", ["whatif", OBS, *PEAK]),
    ("sizing", ["size", OBS, *PEAK]),
    ("compare", ["compare", OBS, LATER, *PEAK]),
    ("report", ["report", OBS, *PEAK]),
])
def test_each_json_document_has_the_documented_schema_and_fields(results, capsys, monkeypatch, kind, args):
    doc = json.loads(run(results, capsys, monkeypatch, *args, "--format", "json"))
    schema, fields = documented_fields(kind)
    assert doc["schema"] == schema
    assert set(doc) - {"schema"} == fields


def test_growth_per_workload_move_and_sla_reach_the_scenarios(results, capsys, monkeypatch):
    doc = json.loads(run(results, capsys, monkeypatch, "whatif", OBS, *PEAK, "--growth", "reports=30%x2",
                         "--growth", "10%x2", "--move", "orders", "--sla", "reports:p95<1ms", "--cpus", "4",
                         "--format", "json"))
    names = [s["name"] for s in doc["scenarios"]]
    assert names == ["baseline", "4 cores, orders moved off", "period 1", "period 2"]
    last = doc["scenarios"][-1]
    assert last["growth_factor"]["reports"] == pytest.approx(1.3 ** 2)
    assert last["growth_factor"]["lookups"] == pytest.approx(1.1 ** 2)
    assert "orders" not in last["growth_factor"] and all(w["name"] != "orders" for w in last["workloads"])
    reports = next(w for w in last["workloads"] if w["name"] == "reports")
    assert reports["slas_broken"] == ["reports:p95<1ms"]  # a p95 of reports' aggregate is milliseconds at least
    assert doc["first_breaking"] is not None


def test_whatif_without_a_change_is_the_case_studys_growth(results, capsys, monkeypatch):
    doc = json.loads(run(results, capsys, monkeypatch, "whatif", OBS, *PEAK, "--format", "json"))
    assert doc["changes"] == ["growth 20%x3"]
    assert [s["name"] for s in doc["scenarios"]] == ["baseline", "+20 %", "+44 %", "+72.8 %"]


def test_the_peak_options_choose_the_window(results, capsys, monkeypatch):
    by_commits = json.loads(run(results, capsys, monkeypatch, "baseline", OBS, *PEAK, "--format", "json"))["peak"]
    given = json.loads(run(results, capsys, monkeypatch, "baseline", OBS, "--peak", _window(by_commits),
                           "--format", "json"))["peak"]
    assert by_commits["by"] == "commits" and given["by"] == "given"
    assert given["ordinals"] == by_commits["ordinals"]
    assert len(by_commits["ordinals"]) == 15  # 30 s of 2 s intervals


def _window(peak: dict) -> str:
    from datetime import datetime

    start, end = (datetime.fromtimestamp(peak[k]).isoformat(timespec="seconds") for k in ("start", "end"))
    return f"{start}/{end}"


def test_the_estimator_option_reaches_the_model(results, capsys, monkeypatch):
    for given, used in (("regression", "regression"), ("share", "statements")):
        doc = json.loads(run(results, capsys, monkeypatch, "baseline", OBS, *PEAK, "--estimator", given,
                             "--format", "json"))
        assert doc["model"]["estimator"] == used


def test_unattributed_load_keeps_the_cpu_no_process_explains_where_it_did_not_rise_with_the_load(
        results, capsys, monkeypatch):
    """--unattributed load reaches the model, which fits the CPU no database process explains against the workloads'
    CPU over the observation's intervals. On this fixture another program's CPU fell as the workloads' rose, so none
    of it is the clients' work: all of it stays as background, the what-if's CPU is the default model's at every
    growth level (growing all of its 0.38 cores would add 0.28 at 1.728 times the peak), and the baseline and the
    console say why."""
    docs, scenarios = {}, {}
    for choice in ("background", "load"):
        args = ("--unattributed", choice) if choice == "load" else ()
        docs[choice] = json.loads(run(results, capsys, monkeypatch, "baseline", OBS, *PEAK, *args, "--format", "json"))
        planned = json.loads(run(results, capsys, monkeypatch, "whatif", OBS, *PEAK, *args, "--format", "json"))
        scenarios[choice] = [s["utilisation"]["cpu"] for s in planned["scenarios"]]
    spread = docs["background"]["unattributed_cpu_cores"]
    assert docs["load"]["model"]["unattributed"] == "load" and docs["background"]["model"]["unattributed"] == "background"
    assert spread > 0.1  # the fixture's host ran another program's tests beside the production
    assert docs["load"]["model"]["unattributed_fixed_cores"] == pytest.approx(spread, rel=1e-9)
    assert len(scenarios["load"]) == 4
    assert scenarios["load"] == pytest.approx(scenarios["background"], rel=1e-9)
    assert any("did not rise with the load" in n for n in docs["load"]["notes"]), docs["load"]["notes"]
    console = run(results, capsys, monkeypatch, "baseline", OBS, *PEAK, "--unattributed", "load")
    assert "keeps all of them as constant background" in " ".join(console.split()), console


def test_compare_keeps_before_and_after_in_order(results, capsys, monkeypatch):
    doc = json.loads(run(results, capsys, monkeypatch, "compare", OBS, LATER, *PEAK, "--format", "json"))
    before = json.loads(run(results, capsys, monkeypatch, "baseline", OBS, *PEAK, "--format", "json"))
    after = json.loads(run(results, capsys, monkeypatch, "baseline", LATER, *PEAK, "--format", "json"))
    assert (doc["before_id"], doc["after_id"]) == (OBS, LATER)
    for w in doc["workloads"]:
        assert w["rate"]["before"] == before["model"]["rates"].get(w["name"])
        assert w["rate"]["after"] == after["model"]["rates"].get(w["name"])
    assert doc["before_peak"] != doc["after_peak"]  # the cut observation's peak is another window


def test_report_prints_the_first_screen_and_writes_report_html_into_the_observation(results, capsys, monkeypatch):
    page = results / OBS / "report.html"
    page.unlink(missing_ok=True)
    out = run(results, capsys, monkeypatch, "report", OBS, *PEAK)
    lines = out.splitlines()
    assert lines[0].startswith(f"Observation {OBS}: 47 intervals of 2 s")
    assert lines[1].startswith("Peak window (busiest by commits)")
    assert lines[2].startswith("At the peak: host CPU")
    assert f"Report: {page}" in out.replace("\n", "")  # a long path wraps at the terminal's width
    html = page.read_text(encoding="utf-8")
    assert '<g id="peak-window-0">' in html and f"capmark observation {OBS}" in html


def test_a_run_is_reported_as_before(results, capsys, monkeypatch):
    out = run(results, capsys, monkeypatch, "report", RUN)
    assert f"Report: {results / RUN / 'report.html'}" in out.replace("\n", "")
    assert (results / RUN / "report.html").is_file()
    doc = json.loads(run(results, capsys, monkeypatch, "size", RUN, "--format", "json"))
    assert doc["schema"] == "capmark.size/1" and doc["tests"]
