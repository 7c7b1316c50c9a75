"""capmark compare on stored runs (no database): a verdict only where repetitions measured the drift between runs,
no direction for rates that are not performance, and what a workload's own session settings hide."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from commandline import invoke
from scipy import stats
from storedruns import unpack

from capmark.analysis import significance as sig
from capmark.analysis.compare import Comparison, compare_runs, compare_tests
from capmark.analysis.significance import Verdict
from capmark.histogram import LatencyHistogram
from capmark.measure import record
from capmark.results import RunResult, StepResult, TestResult
from capmark.store import load_run

# Two runs of pls-add and srv-query1, nothing changed between them, each step measured once on a busy host
# (tests/fixtures/README.md): their 1 s batch means called the drift between them a change.
UNCHANGED = ("compare-unchanged-1", "compare-unchanged-2")
# stress-update and wal-lat1, three repetitions each, with the server's synchronous_commit on, then off.
SYNC = ("compare-sync-on", "compare-sync-off")


def _compare(results: Path, names: tuple[str, str]) -> tuple[Comparison, list[str]]:
    ids = unpack(results, *names)
    return compare_runs(load_run(results / ids[0]), [load_run(results / ids[1])]), ids


def _figures(doc: Comparison, workload: str) -> dict[str, object]:
    test = next(t for t in doc.candidates[0].tests if t.workload == workload)
    return {k.kpm: k for s in test.steps for k in s.kpms}


# --- 1: a verdict needs repetitions of both runs ----------------------------------------------------------------

def test_unchanged_runs_measured_once_get_no_verdict_and_the_advice(tmp_path):
    doc, _ = _compare(tmp_path, UNCHANGED)
    srv = _figures(doc, "srv-query1")["throughput"]
    assert srv.change_pct < -50  # the drift between the two runs: more than half the throughput
    verdicts = {k.verdict for w in ("pls-add", "srv-query1") for k in _figures(doc, w).values()}
    assert verdicts == {Verdict.UNTESTED}
    assert srv.p_value is None and srv.repeats_needed and "--repeat 3" in srv.reason
    assert not doc.regressions(0)
    assert [r.kpm for r in doc.unjudged(50) if r.workload == "srv-query1"][:1] == ["throughput"]


def test_fail_on_regression_passes_untested_changes_and_says_so(tmp_path, monkeypatch, capsys):
    ids = unpack(tmp_path, *UNCHANGED)
    code, out, err = invoke(["compare", *ids, "--fail-on-regression", "5", "--results-dir", str(tmp_path)], capsys,
                            monkeypatch)
    text = " ".join(err.split())
    assert code == 0, err
    assert "not counted as regressions" in text and "srv-query1 at 1 jobs: rt_mean_ms +149.9 %" in text
    assert "--repeat 3" in text


def test_with_repetitions_the_test_is_across_the_repetition_values(tmp_path):
    doc, ids = _compare(tmp_path, SYNC)
    tput = _figures(doc, "stress-update")["throughput"]
    runs = [load_run(tmp_path / i) for i in ids]
    values = [[s.measured.throughput for t in r.tests if t.workload == "stress-update" for s in t.steps] for r in runs]
    assert tput.test == sig.WELCH_REPETITIONS and tput.n_baseline == tput.n_candidate == 3
    expected = stats.ttest_ind(np.log(values[1]), np.log(values[0]), equal_var=False).pvalue
    assert tput.p_value == pytest.approx(expected, rel=1e-9)
    # a commit that waits for its WAL flush against one that does not: several times the rate
    assert tput.verdict == Verdict.FASTER and tput.change_pct > 100


# --- 2: rates of the database's own work have no direction; per unit of work, lower is better ------------------

def _run(run_id: str, figures: list[tuple[float, float, float]], kpms: list[str]) -> RunResult:
    """One job, one repetition per (throughput, logical reads per unit, WAL kB per unit), with the key figures a run
    stores (the step table's kpm column)."""
    steps = []
    for rep, (x, reads, wal_kb) in enumerate(figures, 1):
        hist = LatencyHistogram()
        hist.record(1 / x)
        hist.counts = {i: int(x * 10) for i in hist.counts}
        hist.sum_s = 10.0
        kpm = {"jobs": 1, "elapsed_s": 10.0, "throughput": x, "logical_reads_per_s": reads * x,
               "wal_mb_per_s": wal_kb * 1024 * x / 1e6, "commits_per_s": x, "wal_kb_per_txn": wal_kb}
        step = StepResult(rep, 1, "ok", "", 10.0, ["t"], {"t": hist}, {"t": 0}, series_units=[int(x)] * 11,
                          repeat=rep)
        step.measures = record.build(step, stored=kpm)
        steps.append(step)
    test = TestResult(1, "tp-light", "TP", "", "transaction", "tps", "server", {}, kpms, steps=steps)
    return RunResult(run_id, "", "", "complete", {}, {}, {}, [test])


RATES = ["jobs", "throughput", "logical_reads_per_s", "wal_mb_per_s", "commits_per_s"]


def test_more_reads_and_wal_per_unit_at_the_same_throughput_is_worse_not_faster():
    base = _run("a", [(1000, 5.0, 0.50), (1040, 5.1, 0.51), (980, 4.9, 0.49)], RATES)
    cand = _run("b", [(1010, 10.0, 1.00), (990, 10.2, 1.02), (1030, 9.9, 0.99)], RATES)
    test = compare_tests(base, base.tests[0], cand, cand.tests[0])
    got = {k.kpm: k for k in test.steps[0].kpms}
    assert got["throughput"].verdict == Verdict.NO_CHANGE
    for rate in ("logical_reads_per_s", "wal_mb_per_s", "commits_per_s"):
        assert got[rate].better == "neither" and got[rate].verdict == Verdict.UNTESTED, rate
    reads, wal = got["logical_reads_per_unit"], got["wal_kb_per_unit"]
    assert reads.label == "Logical reads per transaction" and reads.better == "lower"
    assert reads.baseline == pytest.approx(5.0) and reads.candidate == pytest.approx(10.0 + 0.1 / 3)
    assert reads.verdict == Verdict.SLOWER and wal.verdict == Verdict.SLOWER
    # the figure already declared per unit is judged as it is, not derived again
    both = _run("c", [(1000, 5.0, 0.5)] * 3, [*RATES, "wal_kb_per_txn"])
    test = compare_tests(both, both.tests[0], both, both.tests[0])
    keys = [k.kpm for k in test.steps[0].kpms]
    assert "wal_kb_per_unit" not in keys and {k.kpm: k.better for k in test.steps[0].kpms}["wal_kb_per_txn"] == "lower"


# --- 3: a setting the workload sets for its own sessions ----------------------------------------------------------

def test_a_server_setting_that_the_workloads_sessions_override_is_said(tmp_path, monkeypatch, capsys):
    doc, ids = _compare(tmp_path, SYNC)
    cand = doc.candidates[0]
    env = {d.key: d for d in cand.environment}
    sync = env["database.settings.synchronous_commit"]
    assert (sync.baseline, sync.candidate, sync.not_applied_to) == ("on", "off", ["wal-lat1"])
    wal = next(t for t in cand.tests if t.workload == "wal-lat1")
    assert [s.sentence for s in wal.session_settings] == [
        "wal-lat1 ran its sessions with synchronous_commit = on; the candidate server's off did not apply"]
    stress = next(t for t in cand.tests if t.workload == "stress-update")
    assert stress.session_settings == []  # it sets nothing: the server's off applied

    code, out, err = invoke(["compare", *ids, "--results-dir", str(tmp_path)], capsys, monkeypatch)
    text = " ".join(out.split())
    assert code == 0, err
    assert "wal-lat1 ran its sessions with synchronous_commit = on; the candidate server's off did not apply" in text
    assert "synchronous_commit: on -> off (not in effect for wal-lat1, which sets it for its sessions)" in text
    page = tmp_path / "cmp.html"
    code, _, err = invoke(["compare", *ids, "--format", "html", "--output", str(page), "--results-dir",
                           str(tmp_path)], capsys, monkeypatch)
    assert code == 0, err
    assert "the candidate server&#39;s off did not apply" in page.read_text()


def test_a_setting_both_servers_had_otherwise_is_said_once(tmp_path):
    doc, _ = _compare(tmp_path, UNCHANGED)
    srv = next(t for t in doc.candidates[0].tests if t.workload == "srv-query1")
    assert [s.sentence for s in srv.session_settings] == [
        "srv-query1 ran its sessions with max_parallel_workers_per_gather = 0; the server's 2 did not apply"]
    pls = next(t for t in doc.candidates[0].tests if t.workload == "pls-add")
    assert pls.session_settings == []


def test_the_run_report_says_which_server_setting_a_workload_overrode(tmp_path, monkeypatch, capsys):
    """capmark report of the run whose server had synchronous_commit off: wal-lat1's sessions set it on, so the
    report must not let the reader credit the server's off with wal-lat1's figures; stress-update sets nothing."""
    off = unpack(tmp_path, SYNC[1])[0]
    code, out, err = invoke(["report", off, "--results-dir", str(tmp_path)], capsys, monkeypatch)
    text = " ".join(out.split())
    assert code == 0, err
    assert "wal-lat1 ran its sessions with synchronous_commit = on; the server's off did not apply." in text
    assert "stress-update ran its sessions with" not in text
    on = unpack(tmp_path, SYNC[0])[0]
    code, out, err = invoke(["report", on, "--results-dir", str(tmp_path)], capsys, monkeypatch)
    assert code == 0, err
    assert "synchronous_commit = on; the server's" not in " ".join(out.split())  # the server had on: nothing hidden


def test_the_html_report_says_which_server_setting_a_workload_overrode(tmp_path):
    from capmark.analysis.report import report_documents
    from capmark.report.html import render

    off = unpack(tmp_path, SYNC[1])[0]
    page = " ".join(render(report_documents(load_run(tmp_path / off))).split())
    assert "wal-lat1 ran its sessions with synchronous_commit = on; the server&#39;s off did not apply." in page
    assert "stress-update ran its sessions with" not in page
