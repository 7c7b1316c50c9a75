"""capmark compare: the statistics against scipy, and real runs as stored (a commit-bound workload with
synchronous_commit on and off, measured with repetitions, must differ; identical runs measured once get no verdict)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from commandline import assert_one_sentence, invoke
from scipy import stats
from storedruns import unpack

from capmark import api
from capmark.analysis import significance as sig
from capmark.analysis.compare import Comparison, compare_tests, environment_differences, match_tests
from capmark.analysis.significance import Better, Change, Verdict
from capmark.histogram import LatencyHistogram
from capmark.results import RunResult, StepResult, TestResult
from capmark.store import DB_NAME, load_run

# Two samples whose variances differ tenfold: Student's pooled test and Welch's give clearly different p-values.
BASE = [100.0, 101.5, 99.2, 100.8, 98.9]
CAND = [104.0, 96.0, 110.0, 92.0, 107.0, 101.0]


# --- significance: pure functions ---------------------------------------------------------------------------

def _logs(values: list[float]) -> list[float]:
    return [math.log(v) for v in values]


def test_p_value_is_welchs_on_the_logarithms_not_students_nor_the_raw_values():
    welch = stats.ttest_ind(_logs(CAND), _logs(BASE), equal_var=False).pvalue
    student = stats.ttest_ind(_logs(CAND), _logs(BASE), equal_var=True).pvalue
    raw = stats.ttest_ind(CAND, BASE, equal_var=False).pvalue
    assert min(abs(welch - student), abs(welch - raw)) > 0.005  # the data tell the three apart
    got = sig.compare_samples(BASE, CAND, statistics.fmean(BASE), statistics.fmean(CAND), sig.WELCH_BATCHES)
    assert got.p_value == pytest.approx(welch, rel=1e-9)


def test_interval_is_welchs_interval_of_the_log_ratio():
    b = [1000.0, 1100.0, 950.0, 1020.0, 990.0]
    c = [1500.0, 1300.0, 1450.0, 1380.0, 1600.0]
    got = sig.compare_samples(b, c, statistics.fmean(b), statistics.fmean(c), sig.WELCH_BATCHES)
    ci = stats.ttest_ind(_logs(c), _logs(b), equal_var=False).confidence_interval(0.95)
    assert got.ci_low_pct == pytest.approx((math.exp(ci.low) - 1) * 100, rel=1e-9)
    assert got.ci_high_pct == pytest.approx((math.exp(ci.high) - 1) * 100, rel=1e-9)
    assert got.change_pct == pytest.approx((statistics.fmean(c) / statistics.fmean(b) - 1) * 100)
    assert got.ci_low_pct < got.change_pct < got.ci_high_pct


def test_interval_excludes_no_change_exactly_when_the_test_rejects():
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.01, 0.02, 0.03, 0.05, -0.03):
        b = list(rng.normal(1000, 15, 5))
        c = list(rng.normal(1000 * (1 + shift), 15, 5))
        change = sig.compare_samples(b, c, statistics.fmean(b), statistics.fmean(c), sig.WELCH_BATCHES)
        assert (change.ci_low_pct > 0 or change.ci_high_pct < 0) == (change.p_value < 0.05), (shift, change)


def test_a_tenfold_change_with_proportional_noise_is_significant():
    """Batch means of a commit-bound step with its flush (about 2,000/s) and without it (about 20,000/s), each with
    30 % spread from a busy machine: on the raw scale the fast run's spread leaves Welch's test two degrees of
    freedom and p above 5 %; on the log scale the ratio is plain."""
    b, c = [2152.0, 2136.0, 1028.0], [23514.0, 12680.0, 12728.0]
    assert stats.ttest_ind(c, b, equal_var=False).pvalue > 0.05
    got = sig.compare_samples(b, c, statistics.fmean(b), statistics.fmean(c), sig.WELCH_BATCHES)
    assert got.p_value < 0.01 and got.ci_low_pct > 100


def test_batch_means_are_moved_to_the_steps_figure_with_their_relative_spread():
    assert sig.scaled_to([90.0, 110.0, 100.0], 50.0) == pytest.approx([45.0, 55.0, 50.0])


def test_zero_or_no_spread_is_not_tested():
    assert sig.compare_samples([0.0, 1.0], [1.0, 2.0], 0.5, 1.5, sig.WELCH_BATCHES).p_value is None
    same = sig.compare_samples([5.0, 5.0], [5.0, 5.0], 5.0, 5.0, sig.WELCH_BATCHES)
    assert same.p_value is None and "spread" in same.reason


def test_batch_means_leave_out_the_last_second_and_the_odd_first_ones():
    series = [7, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 999]  # 11 full seconds -> 5 batches of 2, the first dropped
    assert sig.batch_means(series) == [2.0, 6.0, 10.0, 14.0, 18.0]
    assert sig.batch_means([5, 6, 7, 8]) == []  # 3 full seconds: one batch of two at most


def test_batch_means_keep_the_false_positive_rate_near_alpha_where_raw_seconds_do_not():
    """Identical AR(1) processes (lag-1 correlation 0.5, as a checkpoint or a busy neighbour makes): Welch on the
    raw seconds calls noise a change in about a quarter of the pairs, on batch means far fewer; for independent
    seconds the batch-means test holds its level (4,000 pairs: the binomial standard error is 0.35 %)."""
    rng = np.random.default_rng(11)

    def series(rho: float, count: int) -> np.ndarray:
        x = np.zeros((count, 62))
        noise = rng.normal(0, 1, (count, 62))
        for i in range(1, 62):
            x[:, i] = rho * x[:, i - 1] + noise[:, i]
        return 1000 + 30 * x[:, 50:]  # 12 seconds after a burn-in

    def rates(rho: float, pairs: int) -> tuple[float, float]:
        a, b = series(rho, pairs), series(rho, pairs)
        batched = stats.ttest_ind(np.log([sig.batch_means(list(r)) for r in b]),
                                  np.log([sig.batch_means(list(r)) for r in a]), axis=1, equal_var=False).pvalue
        raw = stats.ttest_ind(b[:, :-1], a[:, :-1], axis=1, equal_var=False).pvalue
        return float(np.mean(batched < sig.ALPHA)), float(np.mean(raw < sig.ALPHA))

    independent, _ = rates(0.0, 4000)
    assert 0.035 <= independent <= 0.065
    batched, raw = rates(0.5, 4000)
    assert raw > 0.2 and batched < raw * 0.65


def test_little_response_times():
    assert sig.little_response_times([1000.0, 500.0], jobs=2, think_s=0.001) == pytest.approx([0.001, 0.003])
    assert sig.little_response_times([1000.0, 0.0], jobs=2, think_s=0.0) is None


def test_holm_matches_the_textbook_adjustment():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running maximum
    assert sig.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


@pytest.mark.parametrize(("better", "base", "cand", "expected"), [
    (Better.HIGHER, 100.0, 120.0, Verdict.FASTER), (Better.HIGHER, 100.0, 80.0, Verdict.SLOWER),
    (Better.LOWER, 2.0, 1.0, Verdict.FASTER), (Better.LOWER, 1.0, 2.0, Verdict.SLOWER),
    (Better.NEITHER, 1.0, 2.0, Verdict.HIGHER), (Better.NEITHER, 2.0, 1.0, Verdict.LOWER)])
def test_verdict_direction(better, base, cand, expected):
    change = Change(base, cand, sig.change_pct(base, cand), None, None, 0.001, sig.WELCH_BATCHES, 5, 5)
    assert sig.verdict(change, better, 0.001) is expected
    assert sig.verdict(change, better, 0.05) is Verdict.NO_CHANGE  # the level itself is not below it
    assert sig.verdict(change, better, None) is Verdict.UNTESTED


# --- matching and environment, on stored-run records -----------------------------------------------------------

def _step(jobs: int) -> StepResult:
    return StepResult(1, jobs, "ok", "", 5.0, ["t"], {}, {})


def _run(run_id: str, tests: list[tuple[str, str, dict[str, int]]], settings: dict[str, str]) -> RunResult:
    return RunResult(run_id, "", "", "complete", {"duration_s": 15.0, "results_dir": f"/r/{run_id}"},
                     {"database": {"version_num": 180006, "settings": settings},
                      "database_host": {"cores": 2, "boot_id": run_id}}, {},
                     [TestResult(i, w, "F", "", "u", "tps", mode, params, [], steps=[_step(1)])
                      for i, (w, mode, params) in enumerate(tests, 1)])


def test_tests_match_by_workload_mode_and_parameters():
    base = _run("a", [("tp-light", "server", {"update_pct": 20}), ("tp-light", "server", {"update_pct": 50}),
                      ("srv-query1", "server", {})], {})
    cand = _run("b", [("tp-light", "server", {"update_pct": 50}), ("srv-query1", "client", {})], {})
    pairs, baseline_only, candidate_only = match_tests(base, cand)
    assert [(b.ordinal, c.ordinal) for b, c in pairs] == [(2, 1)]
    assert baseline_only == ["tp-light (server-side, update_pct=20)", "srv-query1 (server-side)"]
    assert candidate_only == ["srv-query1 (client-side)"]


def test_environment_differences_name_what_changed_and_skip_what_always_differs():
    base = _run("a", [], {"synchronous_commit": "on", "work_mem": "4MB"})
    cand = _run("b", [], {"synchronous_commit": "off", "work_mem": "4MB", "commit_delay": "10"})
    diffs = {d.key: (d.baseline, d.candidate) for d in environment_differences(base, cand)}
    assert diffs == {"database.settings.synchronous_commit": ("on", "off"),
                     "database.settings.commit_delay": (None, "10")}  # boot id and results folder left out


def _repeated_run(run_id: str, throughputs: list[float], jobs: list[int] | None = None) -> RunResult:
    """A test measured once per value (at one job, or at the jobs given, once each): 10 s windows of units that
    each take jobs / throughput (Little's law)."""
    steps = []
    for rep, x in enumerate(throughputs, 1):
        n = jobs[rep - 1] if jobs else 1
        latency = n / x
        hist = LatencyHistogram()
        hist.record(latency)
        units = int(x * 10)
        hist.counts = {i: units for i in hist.counts}
        hist.sum_s = latency * units
        steps.append(StepResult(rep, n, "ok", "", 10.0, ["t"], {"t": hist}, {"t": 0},
                                series_units=[units // 10] * 11, repeat=1 if jobs else rep,
                                pacing={"think_s": 0.0, "rate": 0.0}))
    test = TestResult(1, "srv-query1", "SRV", "", "query", "qps", "server", {},
                      ["jobs", "throughput", "rt_mean_ms", "rt_p95_ms"], steps=steps)
    return RunResult(run_id, "", "", "complete", {}, {}, {}, [test])


def test_with_repetitions_every_figure_is_tested_across_the_repetition_values():
    base = _repeated_run("a", [1000, 1050, 900])
    cand = _repeated_run("b", [1200, 1190, 1400])
    test = compare_tests(base, base.tests[0], cand, cand.tests[0])
    figures = {k.kpm: k for k in test.steps[0].kpms}
    assert {k.test for k in figures.values()} == {sig.WELCH_REPETITIONS}
    x = figures["throughput"]
    assert x.p_value == pytest.approx(stats.ttest_ind(_logs([1200, 1190, 1400]), _logs([1000, 1050, 900]),
                                                      equal_var=False).pvalue, rel=1e-9)
    assert x.baseline == pytest.approx(2950 / 3) and x.n_baseline == x.n_candidate == 3
    assert figures["rt_p95_ms"].p_value is not None  # percentiles too, with repetitions
    # three hypotheses (throughput, mean and p95 response time), Holm-adjusted
    assert sorted(k.p_adjusted for k in figures.values()) == pytest.approx(
        sorted(sig.holm([k.p_value for k in figures.values()])))
    assert not test.model.answered and "CPU" in test.model.reason  # no host CPU in these records: said, not raised


def test_steps_match_by_jobs_and_the_rest_is_listed():
    base = _repeated_run("a", [1000, 1900, 2500], jobs=[1, 2, 4])
    cand = _repeated_run("b", [1000, 2600], jobs=[1, 3])
    test = compare_tests(base, base.tests[0], cand, cand.tests[0])
    assert [s.jobs for s in test.steps] == [1]
    assert test.baseline_only_jobs == [2, 4] and test.candidate_only_jobs == [3]
    assert test.baseline_curve.jobs == [1, 2, 4] and test.candidate_curve.throughput == pytest.approx([1000, 2600])


# --- real runs, stored (tests/fixtures/README.md; no database) -------------------------------------------------

# stress-update (commit-bound) and wal-lat1, three repetitions each, with the server's synchronous_commit on, then
# off; two runs of pls-add and srv-query1 with nothing changed between them, each step measured once
SYNC_ON, SYNC_OFF = "compare-sync-on", "compare-sync-off"
UNCHANGED = ("compare-unchanged-1", "compare-unchanged-2")
STEADY = ["pls-add", "srv-query1"]
COMMIT_BOUND = "stress-update"
REPEATS = 3  # the repetitions each job count of the synchronous_commit runs was measured with


@pytest.fixture
def runs(tmp_path) -> tuple[Path, str, str, str, str]:
    """The results folder; the runs with synchronous_commit on and off; the two unchanged runs."""
    results = tmp_path / "results"
    return (results, *unpack(results, SYNC_ON, SYNC_OFF), *unpack(results, *UNCHANGED))


@pytest.fixture
def comparison(runs) -> Comparison:
    """synchronous_commit on (baseline) against off."""
    results, on, off, _, _ = runs
    return api.compare(on, [off], results)


@pytest.fixture
def unchanged(runs) -> Comparison:
    results, _, _, first, second = runs
    return api.compare(first, [second], results)


def _test(doc: Comparison, candidate: str, workload: str):
    cand = next(c for c in doc.candidates if c.run == candidate)
    return next(t for t in cand.tests if t.workload == workload)


def _figures(test) -> dict[str, object]:
    return {k.kpm: k for s in test.steps for k in s.kpms}


def test_synchronous_commit_off_is_significantly_faster(runs, comparison):
    results, on, off, _, _ = runs
    test = _test(comparison, off, COMMIT_BOUND)
    figures = _figures(test)
    tput, rt = figures["throughput"], figures["rt_mean_ms"]
    print(f"sync off: throughput {tput.change_pct:+.0f} % p={tput.p_value:.2g}; mean RT {rt.change_pct:+.0f} %")
    # tested across the repetitions: each run's three values, not the batches of one window
    values = [[s.measured.throughput for t in load_run(results / run).tests if t.workload == COMMIT_BOUND
               for s in t.steps] for run in (on, off)]
    assert tput.test == sig.WELCH_REPETITIONS and tput.n_baseline == tput.n_candidate == REPEATS
    assert tput.p_value == pytest.approx(stats.ttest_ind(_logs(values[1]), _logs(values[0]), equal_var=False).pvalue,
                                         rel=1e-9)
    # a commit that waits for its WAL flush against one that does not: several times the rate
    assert tput.verdict == Verdict.FASTER and tput.change_pct > 100 and tput.ci_low_pct > 50
    assert rt.verdict == Verdict.FASTER and rt.change_pct < -50
    env = {d.key: (d.baseline, d.candidate) for d in _candidate(comparison, off).environment}
    assert env["database.settings.synchronous_commit"] == ("on", "off")
    moved = [d.key for s in test.steps for d in s.moved]
    assert moved, "a commit without its flush must move a service demand (device or WAL time per unit)"


def _candidate(doc: Comparison, run_id: str):
    return next(c for c in doc.candidates if c.run == run_id)


def test_identical_runs_show_no_significant_change(runs, unchanged):
    """Two runs with nothing changed between them, each step measured once on a busy host: the drift between them
    (more than half of srv-query1's throughput) is no verdict, and every figure says how to get one."""
    _, _, _, _, second = runs
    lines = []
    for workload in STEADY:
        figures = _figures(_test(unchanged, second, workload))
        lines += [f"{workload} {k.kpm}: {k.change_pct:+.1f} % {k.verdict} ({k.reason})" for k in figures.values()
                  if k.change_pct is not None]
        assert {k.verdict for k in figures.values()} == {Verdict.UNTESTED}, "\n".join(lines)
        for key in ("throughput", "rt_mean_ms", "rt_p95_ms"):
            assert figures[key].repeats_needed and "measure both runs with --repeat 3" in figures[key].reason
    print("\n".join(lines))
    assert _figures(_test(unchanged, second, "srv-query1"))["throughput"].change_pct < -50
    assert unchanged.regressions(0) == []


def test_document_is_strict_json_with_its_schema(comparison):
    doc = json.loads(json.dumps(comparison.to_json(), allow_nan=False))
    assert doc["schema"] == "capmark.compare/1"
    assert [c["run"] for c in doc["candidates"]] == [c.run for c in comparison.candidates]
    step = doc["candidates"][0]["tests"][0]["steps"][0]
    assert {"kpm", "baseline", "candidate", "change_pct", "ci_low_pct", "ci_high_pct", "p_value", "p_adjusted",
            "test", "verdict", "repeats_needed"} <= set(step["kpms"][0])


def _main(args: list[str], monkeypatch, capsys) -> tuple[int, str]:
    from capmark import cli

    monkeypatch.setattr("sys.argv", ["capmark", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    return ended.value.code, out.out + out.err


def test_fail_on_regression_exit_codes(runs, monkeypatch, capsys):
    results, on, off, _, _ = runs
    where = ["--results-dir", str(results)]
    # synchronous_commit off as the baseline: the run with it on is a significant slow-down
    code, text = _main(["compare", off, on, "--fail-on-regression", "20", *where], monkeypatch, capsys)
    assert code == 1 and f"{COMMIT_BOUND} at 1 jobs: throughput" in text
    code, _ = _main(["compare", off, on, "--fail-on-regression", "1000000", *where], monkeypatch, capsys)
    assert code == 0  # no slow-down that large
    code, _ = _main(["compare", on, off, "--fail-on-regression", "0", *where], monkeypatch, capsys)
    assert code == 0  # faster is not a regression
    code, text = _main(["compare", on, "no-such-run", *where], monkeypatch, capsys)
    assert code == 2 and "no-such-run" in text and "Traceback" not in text and len(text.strip().splitlines()) == 1
    code, text = _main(["compare", on, on, *where], monkeypatch, capsys)
    assert code == 2 and "both the baseline and a candidate" in text


def test_html_has_the_overlaid_plots_and_both_runs(runs, tmp_path, monkeypatch, capsys):
    results, on, off, _, _ = runs
    out = tmp_path / "cmp.html"
    code, _ = _main(["compare", on, off, "--format", "html", "--output", str(out), "--results-dir",
                     str(results)], monkeypatch, capsys)
    page = out.read_text()
    assert code == 0 and page.count("<svg") == 4  # two matched tests: throughput and latency vs jobs each
    assert f"baseline {on}" in page and f"candidate {off}" in page  # the plots' legends
    assert "synchronous_commit" in page
    assert "<link" not in page and "<script" not in page and 'src="http' not in page  # one offline file


def test_console_fits_80_columns(comparison, unchanged):
    from rich.console import Console

    from capmark.report.compare_console import print_comparison

    texts = []
    for doc in (comparison, unchanged):
        console = Console(record=True, width=80, emoji=False)
        print_comparison(doc, console)
        texts.append(console.export_text())
        assert all(len(line) <= 80 for line in texts[-1].splitlines())
    assert "faster" in texts[0] and "synchronous_commit: on -> off" in texts[0]
    assert "measure both runs with --repeat 3" in " ".join(texts[1].split())


def test_bad_threshold_is_one_sentence(tmp_path, monkeypatch, capsys):
    code, text = _main(["compare", "x", "y", "--fail-on-regression", "-5", "--results-dir", str(tmp_path)],
                       monkeypatch, capsys)
    assert code == 2 and "--fail-on-regression must be" in text


def test_output_without_html_is_refused(tmp_path, monkeypatch, capsys):
    code, text = _main(["compare", "x", "y", "--output", str(tmp_path / "x.html"), "--results-dir", str(tmp_path)],
                       monkeypatch, capsys)
    assert code == 2 and "--format html" in text



# --- runs that did not complete, on the stored fixture (no database) -----------------------------------------------

FIXTURE = Path(__file__).parents[1] / "fixtures" / "run-format-1.sqlite.gz"
BASE_ID, CAND_ID = "20261122-000000-f1x7", "20261122-000001-f1x8"


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    """The stored fixture twice, as a baseline and a candidate run (same figures: nothing changed)."""
    results = tmp_path / "results"
    for run_id in (BASE_ID, CAND_ID):
        (results / run_id).mkdir(parents=True)
        (results / run_id / DB_NAME).write_bytes(gzip.decompress(FIXTURE.read_bytes()))
        _edit(results, run_id, "update run set run_id = ?", run_id)
    return results


def _edit(results: Path, run_id: str, sql: str, *params: object) -> None:
    db = sqlite3.connect(results / run_id / DB_NAME)
    db.execute(sql, params)
    db.commit()
    db.close()


def _edit_test(results: Path, run_id: str, ordinal: int, status: str, reason: str) -> None:
    """A test's status as the run stores it: in its column and in its record."""
    _edit(results, run_id, "update test set status = ?, header = json_set(header, '$.status', ?, '$.reason', ?) "
          "where ordinal = ?", status, status, reason, ordinal)


def _compare_json(results: Path, monkeypatch, capsys) -> dict:
    code, out, err = invoke(["compare", BASE_ID, CAND_ID, "--format", "json", "--results-dir", str(results)],
                            capsys, monkeypatch)
    assert code == 0, err
    return json.loads(out)


def test_the_header_and_each_test_say_how_the_runs_ended(pair, monkeypatch, capsys, tmp_path):
    _edit(pair, CAND_ID, "update run set status = 'failed', reason = 'the database server restarted'")
    _edit_test(pair, CAND_ID, 2, "failed", "the connection was terminated")
    doc = _compare_json(pair, monkeypatch, capsys)
    assert (doc["baseline_status"], doc["baseline_reason"]) == ("complete", "")
    cand = doc["candidates"][0]
    assert (cand["status"], cand["reason"]) == ("failed", "the database server restarted")
    tests = {t["workload"]: t for t in cand["tests"]}
    assert (tests["tp-light"]["baseline_status"], tests["tp-light"]["candidate_status"]) == ("ok", "failed")
    assert tests["tp-light"]["candidate_reason"] == "the connection was terminated"
    assert tests["srv-query1"]["candidate_status"] == "ok"

    code, out, err = invoke(["compare", BASE_ID, CAND_ID, "--results-dir", str(pair)], capsys, monkeypatch)
    assert code == 0, err
    assert f"candidate {CAND_ID} failed: the database server restarted" in " ".join(out.split())
    assert "tp-light in the candidate failed: the connection was terminated" in " ".join(out.split())
    page = tmp_path / "cmp.html"
    code, _, err = invoke(["compare", BASE_ID, CAND_ID, "--format", "html", "--output", str(page), "--results-dir",
                           str(pair)], capsys, monkeypatch)
    assert code == 0, err
    text = " ".join(page.read_text().split())
    assert "failed: the database server restarted" in text and "the connection was terminated" in text


def test_a_step_that_did_not_finish_gets_no_verdict_and_says_why(pair, monkeypatch, capsys):
    _edit(pair, CAND_ID, "update step set status = 'interrupted', raw = json_set(raw, '$.status', 'interrupted', "
          "'$.notes', json_array('interrupted by SIGTERM')) where test_ordinal = 2 and ordinal = 2")
    _edit(pair, CAND_ID, "update run set status = 'interrupted', reason = 'interrupted'")
    _edit_test(pair, CAND_ID, 2, "interrupted", "interrupted")
    doc = _compare_json(pair, monkeypatch, capsys)
    light = next(t for t in doc["candidates"][0]["tests"] if t["workload"] == "tp-light")
    assert [s["jobs"] for s in light["steps"]] == [1]  # 2 jobs: no figure, no verdict
    assert light["baseline_only_jobs"] == [] and light["candidate_only_jobs"] == []  # not "without a partner"
    (skipped,) = light["not_compared"]
    assert skipped["jobs"] == 2 and "candidate" in skipped["reason"] and "interrupted" in skipped["reason"]
    code, out, err = invoke(["compare", BASE_ID, CAND_ID, "--results-dir", str(pair)], capsys, monkeypatch)
    assert code == 0, err
    assert ("2 jobs not compared: the candidate's step was interrupted (interrupted by SIGTERM)"
            in " ".join(out.split()))


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


INCOMPLETE = [
    pytest.param(CAND_ID, lambda: ("update run set status = 'running', pid = ?, pid_started = ?, host = ?",
                                   os.getpid(), psutil.Process().create_time(), socket.gethostname()),
                 "is still running", id="running"),
    pytest.param(CAND_ID, lambda: ("update run set status = 'running', pid = ?, host = ?", _gone_pid(),
                                   socket.gethostname()), "was killed", id="killed"),
    pytest.param(CAND_ID, lambda: ("update run set status = 'running', host = 'another-host', heartbeat_at = ?",
                                   (dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)).isoformat()),
                 "abandoned", id="abandoned"),
    pytest.param(CAND_ID, lambda: ("update run set status = 'failed', reason = 'the results disk filled'",),
                 "failed: the results disk filled", id="failed"),
    pytest.param(BASE_ID, lambda: ("update run set status = 'interrupted', reason = 'interrupted'",),
                 "was interrupted", id="baseline-interrupted"),
]


@pytest.mark.parametrize(("run_id", "edit", "words"), INCOMPLETE)
def test_fail_on_regression_needs_two_complete_runs(run_id, edit, words, pair, monkeypatch, capsys, tmp_path):
    where = ["--fail-on-regression", "5", "--results-dir", str(pair)]
    code, _, err = invoke(["compare", BASE_ID, CAND_ID, *where], capsys, monkeypatch)
    assert code == 0, err  # both complete, nothing changed
    _edit(pair, run_id, *edit())
    page = tmp_path / "cmp.html"
    for fmt in (["--format", "json"], ["--format", "html", "--output", str(page)], []):
        code, out, err = invoke(["compare", BASE_ID, CAND_ID, *fmt, *where], capsys, monkeypatch)
        line = assert_one_sentence(code, out, err, f"run {run_id}", words, "--fail-on-regression needs two complete "
                                   "runs")
        assert "unexpected" not in line
    assert not page.exists()  # nothing half-built
    code, out, err = invoke(["compare", BASE_ID, CAND_ID, "--format", "json", "--results-dir", str(pair)], capsys,
                            monkeypatch)
    assert code == 0 and json.loads(out)["schema"] == "capmark.compare/1"  # without the flag: compared, and said
