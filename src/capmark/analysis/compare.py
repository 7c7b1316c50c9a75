"""Baseline against candidate runs: what changed, and whether beyond noise (the capmark.compare/1 document).

Tests are matched by workload, mode and parameters, steps by their number of jobs; what has no partner is listed,
never guessed. For every matched step each key performance metric gets its change and verdict
(capmark.analysis.significance); beside them the environment's differences, which service-demand components moved,
the calibrated models' maximum throughput and knee, and the diagnosis findings that appeared or vanished.
From stored runs only: no database, no rendering.

A change is tested only across repetitions (`--repeat`): one step's window does not see the drift from one run to
the next (a checkpoint, the machine's other load: 15 % and more on a shared host), so the batch means of one step per
run would call that drift a change. A job count that either run measured once gets its change without a verdict,
and the advice to measure both runs again with repetitions.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capmark.analysis import significance as sig
from capmark.analysis.document import Document
from capmark.analysis.sessions import overridden, same_value, server_settings, session_settings
from capmark.analysis.significance import Better, Change, Verdict
from capmark.errors import CapmarkError
from capmark.measure import kpm, record
from capmark.measure.demands import Component, step_demands
from capmark.measure.noise import repeat_of
from capmark.results import RunResult, StepResult, TestResult

# Figures that are better higher: work done per second (the workload's units, rows, operations, data scanned).
HIGHER_BETTER = ("throughput", "throughput_per_job", "rows_per_s", "mops", "scan_mb_per_s")
# Figures that are better lower: times, and what the database did per unit of work.
LOWER_BETTER = ("rt_mean_ms", "rt_p50_ms", "rt_p95_ms", "rt_p99_ms", "rt_max_ms", "rt_mean_s", "db_read_ms",
                "device_read_ms", "wal_flush_ms_per_commit", "lag_p99_ms", "lag_max_ms", "wal_kb_per_txn",
                "logical_reads_per_unit", "wal_kb_per_unit")
# Rates of the database's own activity are not performance: more logical reads per second at the same throughput
# are more reads per query (a worse plan), and WAL MB/s and commits/s follow the throughput and what each unit
# writes. They are shown with their change, never judged (and not counted among a test's hypotheses); where a
# per-unit figure follows from them (PER_UNIT), that one is judged, lower being better.
NO_DIRECTION = ("logical_reads_per_s", "wal_mb_per_s", "commits_per_s")
NOT_PERFORMANCE = ("rates of the database's own work, not of performance: shown, never judged; logical reads and WAL "
                   "are judged per unit of work")
# Exactly proportional to the throughput at a given job count: with repetitions their tests are the throughput's.
PROPORTIONAL = ("throughput", "throughput_per_job", "rows_per_s", "mops")
# Not compared: the step plan's own figures.
SKIPPED = ("jobs", "elapsed_s")
# A service-demand component "moved" when it changed by at least this much (the demands report's threshold for a
# component that varies with concurrency) and is above its noise floor in either run.
DEMAND_MOVED_PCT = 20.0
DEMAND_FLOOR_TIME_S = 1e-6  # 1 us per unit: below, a time demand is rounding
DEMAND_FLOOR_BYTES = 100.0  # 100 bytes per unit
DEMAND_FLOOR_COUNT = 0.05  # 0.05 operations per unit
# How far beyond the most jobs either run measured the models are solved, for their maximum and knee.
MODEL_RANGE = 2
# Environment entries that differ between any two runs without describing the platform.
VOLATILE = ("database_host.boot_id", "spec.results_dir", "spec.data_dir", "spec.expected_s", "spec.dsn")
# What of the run specification describes the measurement (the rest is where it was stored).
SPEC_KEYS = ("warmup_s", "duration_s", "mode", "scale", "params", "collectors", "think_s", "rate",
             "nested_statements", "host_metrics", "driver_procs", "query_mode", "max_tries", "repeat")
# The repetitions to advise for a verdict: with two a side Welch's test has about one degree of freedom and needs a
# change of several times the runs' spread; with three it sees a change of about twice the run-to-run drift.
ADVISED_REPEAT = 3
# Where the environment's server settings are (their keys follow as database.settings.<name>).
SETTINGS_PREFIX = "database.settings."


@dataclass(frozen=True)
class PerUnit:
    """A figure per unit of work that follows from a rate and the throughput of the same window (both per second
    of it): rate x scale / throughput."""

    key: str
    rate: str  # the KPM it is derived from
    label: str  # {unit}: the workload's unit of work
    unit: str
    digits: int
    scale: float
    same_as: str = ""  # a KPM of the workload that already is this figure; then it is not derived


PER_UNIT = (PerUnit("logical_reads_per_unit", "logical_reads_per_s", "Logical reads per {unit}", "blocks", 1, 1.0),
            PerUnit("wal_kb_per_unit", "wal_mb_per_s", "WAL per {unit}", "kB", 2, 1e6 / 1024, "wal_kb_per_txn"))


def better_of(key: str) -> Better:
    if key in HIGHER_BETTER:
        return Better.HIGHER
    if key in LOWER_BETTER:
        return Better.LOWER
    return Better.NEITHER


@dataclass
class KpmChange:
    kpm: str
    label: str
    unit: str
    digits: int  # decimals the KPM is shown with
    better: str  # higher | lower | neither
    baseline: float | None
    candidate: float | None
    change_pct: float | None
    ci_low_pct: float | None  # 95 % interval of the change; None: not tested
    ci_high_pct: float | None
    p_value: float | None  # Welch's, two-sided
    p_adjusted: float | None  # Holm-adjusted over every tested figure of the test
    test: str
    n_baseline: int
    n_candidate: int
    verdict: str
    reason: str = ""  # why not tested
    repeats_needed: bool = False  # not tested because a run measured the step once: --repeat would test it


@dataclass
class DemandChange:
    key: str
    label: str
    group: str
    unit: str  # display unit; value x scale = displayed value
    scale: float
    baseline: float | None
    candidate: float | None
    change_pct: float | None
    moved: bool


@dataclass
class StepNotCompared:
    """A step of one run that did not finish (failed, interrupted) or did no work: no figure, no verdict."""

    jobs: int
    repeat: int
    run: str  # baseline | candidate
    status: str  # the step's own: failed | interrupted | ok (then it completed no unit of work)
    reason: str  # in words: "the candidate's step was interrupted (...)"
    rest_compared: bool  # the job count is compared on the run's other repetitions of it


@dataclass
class StepComparison:
    jobs: int
    baseline_repeats: list[int]  # the repetitions used (valid ones, or all when none is valid)
    candidate_repeats: list[int]
    invalid: list[str]  # why a run's steps at this job count failed their self-checks
    kpms: list[KpmChange] = field(default_factory=list)
    demands: list[DemandChange] = field(default_factory=list)

    @property
    def moved(self) -> list[DemandChange]:
        return [d for d in self.demands if d.moved]


@dataclass
class ModelSummary:
    max_throughput: float
    max_throughput_jobs: int
    knee_jobs: int | None
    bottleneck: str
    calibrated_from: list[int]


@dataclass
class ModelChange:
    answered: bool
    reason: str = ""
    solved_up_to: int = 0
    baseline: ModelSummary | None = None
    candidate: ModelSummary | None = None
    max_throughput_change_pct: float | None = None


@dataclass
class DiagnosisChange:
    baseline_summary: str
    candidate_summary: str
    new: list[str]  # findings of the candidate that the baseline did not show
    vanished: list[str]  # findings of the baseline that the candidate no longer shows
    kept: list[str]


@dataclass
class Curve:
    """The measured curve of a test (means over the repetitions used) for the plots."""

    run: str
    jobs: list[int]
    throughput: list[float | None]
    rt_p50_ms: list[float | None]
    rt_p95_ms: list[float | None]


@dataclass
class SessionSetting:
    """A server setting the test's workload set for its own sessions where a run's server had another value: the
    server's value did not apply to this test (a change of it between the runs is no change for the test)."""

    setting: str
    baseline_session: str | None  # what the workload set in the baseline (None: nothing)
    baseline_server: str | None  # the baseline server's value (None: not recorded)
    candidate_session: str | None
    candidate_server: str | None
    sentence: str  # "wal-lat1 ran its sessions with synchronous_commit = on; the candidate server's off did not apply"


@dataclass
class TestComparison:
    __test__ = False  # not a pytest class

    workload: str
    mode: str
    params: dict[str, int | str]
    unit: str
    throughput_label: str
    baseline_ordinal: int
    candidate_ordinal: int
    baseline_status: str  # the test's: ok | failed | interrupted | running | killed | abandoned
    baseline_reason: str  # why it is not ok, in words
    candidate_status: str
    candidate_reason: str
    steps: list[StepComparison]
    baseline_only_jobs: list[int]
    candidate_only_jobs: list[int]
    not_compared: list[StepNotCompared]  # steps that did not finish, in either run
    model: ModelChange
    diagnosis: DiagnosisChange
    baseline_curve: Curve
    candidate_curve: Curve
    session_settings: list[SessionSetting] = field(default_factory=list)


@dataclass
class EnvironmentDifference:
    key: str  # dotted path in the run's environment (or spec.* for the measurement's settings)
    baseline: Any
    candidate: Any
    # the compared tests whose workloads set this server setting for their own sessions: the change did not apply
    # to them
    not_applied_to: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        """The difference on one line, with the tests it did not reach."""
        text = f"{self.key}: {self.baseline} -> {self.candidate}"
        if self.not_applied_to:
            text += (f" (not in effect for {', '.join(self.not_applied_to)}, which set"
                     f"{'s' if len(self.not_applied_to) == 1 else ''} it for its sessions)")
        return text


@dataclass
class Regression:
    """A significant slow-down: a figure that got worse beyond noise."""

    candidate: str
    workload: str
    jobs: int
    kpm: str
    change_pct: float
    invalid: bool  # a run's steps at this job count failed their self-checks (another program may have done it)

    def sentence(self) -> str:
        caveat = " (a step failed its self-checks)" if self.invalid else ""
        return (f"{self.workload} at {self.jobs} jobs: {self.kpm} {self.change_pct:+.1f} % in run "
                f"{self.candidate}{caveat}")


@dataclass
class CandidateComparison:
    run: str
    created_at: str
    status: str  # the run's: complete | running | failed | interrupted | killed | abandoned
    reason: str  # why it is not complete, in words
    environment: list[EnvironmentDifference]
    tests: list[TestComparison]
    baseline_only_tests: list[str]
    candidate_only_tests: list[str]


@dataclass(kw_only=True)
class Comparison(Document):
    """A baseline run against one or more candidates: per matched test and step every key metric's change with its
    test and verdict, and the environment, service demands, models and diagnosis beside them (`capmark compare`)."""

    SCHEMA = "capmark.compare/1"
    baseline: str
    baseline_created_at: str
    baseline_status: str  # complete | running | failed | interrupted | killed | abandoned
    baseline_reason: str  # why it is not complete, in words
    candidates: list[CandidateComparison]
    alpha: float = sig.ALPHA
    method: str = ("Welch's t-test on the logarithms of the repetition values, where both runs measured a job count "
                   "at least twice (--repeat); a job count either run measured once is not tested (one window does "
                   f"not see the drift between runs: measure both with --repeat {ADVISED_REPEAT}); p-values "
                   "Holm-adjusted per test; the change's 95 % interval is Welch's, of the ratio; rates of the "
                   "database's own work (logical reads/s, WAL MB/s, commits/s) are judged per unit of work")

    def regressions(self, threshold_pct: float = 0.0) -> list[Regression]:
        """Every significant slow-down of at least threshold_pct (in the figure's own change)."""
        return [Regression(c.run, t.workload, s.jobs, k.kpm, k.change_pct, bool(s.invalid))
                for c in self.candidates for t in c.tests for s in t.steps for k in s.kpms
                if k.verdict == Verdict.SLOWER and k.change_pct is not None and abs(k.change_pct) >= threshold_pct]

    def unjudged(self, threshold_pct: float = 0.0) -> list[Regression]:
        """Every figure that got worse by at least threshold_pct but was not tested, because a run measured its step
        once: no verdict, so --fail-on-regression does not count it."""
        return [Regression(c.run, t.workload, s.jobs, k.kpm, k.change_pct, bool(s.invalid))
                for c in self.candidates for t in c.tests for s in t.steps for k in s.kpms
                if k.repeats_needed and k.change_pct is not None and abs(k.change_pct) >= threshold_pct
                and _worse(k)]

    def unjudged_sentence(self, threshold_pct: float = 0.0) -> str:
        """For --fail-on-regression: the changes for the worse it cannot judge, and what to do; empty when none."""
        found = sorted(self.unjudged(threshold_pct), key=lambda r: -abs(r.change_pct))
        if not found:
            return ""
        shown = "; ".join(r.sentence() for r in found[:UNJUDGED_SHOWN])
        more = f"; and {len(found) - UNJUDGED_SHOWN} more" if len(found) > UNJUDGED_SHOWN else ""
        return (f"not tested, so not counted as regressions: {len(found)} figure{'s' if len(found) > 1 else ''} "
                f"worse by at least {threshold_pct:g} % ({shown}{more}), measured once in a run, where the drift "
                f"between runs cannot be told from a change; measure both runs with --repeat {ADVISED_REPEAT}.")

    def incomplete(self) -> list[tuple[str, str, str]]:
        """The runs that are not complete: (run id, status, reason), the baseline first."""
        runs = [(self.baseline, self.baseline_status, self.baseline_reason),
                *((c.run, c.status, c.reason) for c in self.candidates)]
        return [r for r in runs if r[1] != COMPLETE]

    def incomplete_sentence(self) -> str:
        """Why a verdict for CI (--fail-on-regression) cannot be given, in one sentence; empty when it can."""
        runs = self.incomplete()
        if not runs:
            return ""
        said = " and ".join(f"run {run} {ended(status, reason)}" for run, status, reason in runs)
        running = [r for r in runs if r[1] == "running"]
        if len(running) == len(runs):
            advice = "compare again when it has finished" if len(runs) == 1 else \
                "compare again when they have finished"
        elif running:
            advice = "compare again when the running one has finished and measure the other again"
        else:
            advice = "measure it again" if len(runs) == 1 else "measure them again"
        return f"{said[0].upper()}{said[1:]}; --fail-on-regression needs two complete runs; {advice}."


COMPLETE = "complete"
UNJUDGED_SHOWN = 3  # changes named in the sentence about untested ones; the rest are counted


def _worse(change: KpmChange) -> bool:
    if change.baseline is None or change.candidate is None or change.candidate == change.baseline:
        return False
    return (change.candidate > change.baseline) == (change.better == Better.LOWER.value) \
        and change.better != Better.NEITHER.value


def clause(text: str) -> str:
    """A stored reason as a clause inside one sentence: one line, its own sentences joined by semicolons."""
    text = " ".join(text.split()).rstrip(".")
    return re.sub(r"\.\s+(?=[A-Z])", "; ", text)


def ended(status: str, reason: str) -> str:
    """How a run or a test ended, after its name: "is still running", "failed: the server restarted"."""
    why = clause(reason)
    if status == "running":
        return "is still running"
    if status == "failed":
        return f"failed: {why}" if why else "failed"
    if status in ("killed", "abandoned", "interrupted"):
        return f"was {status}" + (f" ({why})" if why and why != status else "")
    return f"ended as '{status}'" + (f" ({why})" if why else "")


# --- matching ---------------------------------------------------------------------------------------------------

def test_key(test: TestResult) -> str:
    params = ", ".join(f"{k}={v}" for k, v in sorted(test.params.items()))
    return f"{test.workload} ({test.mode}-side{', ' + params if params else ''})"


def match_tests(baseline: RunResult, candidate: RunResult
                ) -> tuple[list[tuple[TestResult, TestResult]], list[str], list[str]]:
    """Pairs of tests with the same workload, mode and parameters (in run order where a run repeats one), and the
    keys of those without a partner on either side."""
    left = [t for t in baseline.tests if t.steps]
    right = [t for t in candidate.tests if t.steps]
    pairs = []
    for t in list(left):
        partner = next((c for c in right if test_key(c) == test_key(t)), None)
        if partner is not None:
            pairs.append((t, partner))
            left.remove(t)
            right.remove(partner)
    return pairs, [test_key(t) for t in left], [test_key(t) for t in right]


def used_steps(steps: list[StepResult]) -> list[StepResult]:
    """The valid repetitions of a job count where at least two are (enough to test a change across), else all of
    them (compared, and said so): one valid repetition of three would leave no spread to judge by."""
    good = [s for s in steps if record.of(s).valid]
    return sorted(good if len(good) >= min(2, len(steps)) else steps, key=repeat_of)


def finished(step: StepResult) -> bool:
    """A step that ran to its end and did work; only these are compared."""
    return step.status == "ok" and step.units > 0


def _by_jobs(test: TestResult) -> dict[int, list[StepResult]]:
    out: dict[int, list[StepResult]] = {}
    for s in test.steps:
        if finished(s):
            out.setdefault(s.jobs, []).append(s)
    return out


def _step_ended(step: StepResult) -> str:
    notes = clause("; ".join(step.notes))
    if step.status == "ok":
        return "completed no unit of work"
    how = {"failed": "failed", "interrupted": "was interrupted"}.get(step.status, f"ended as '{step.status}'")
    return f"{how} ({notes})" if notes else how


def not_compared(base_test: TestResult, cand_test: TestResult) -> list[StepNotCompared]:
    """Every step of either run that did not finish, with the reason; whether its job count is still compared
    on the run's other repetitions of it."""
    base_jobs, cand_jobs = _by_jobs(base_test), _by_jobs(cand_test)
    out = []
    for name, test, own, other in (("baseline", base_test, base_jobs, cand_jobs),
                                   ("candidate", cand_test, cand_jobs, base_jobs)):
        repeated = len({repeat_of(s) for s in test.steps}) > 1
        for s in test.steps:
            if finished(s):
                continue
            which = f"repetition {repeat_of(s)}" if repeated else "step"
            out.append(StepNotCompared(s.jobs, repeat_of(s), name, s.status, f"the {name}'s {which} {_step_ended(s)}",
                                       s.jobs in own and s.jobs in other))
    return sorted(out, key=lambda n: (n.jobs, n.run != "baseline", n.repeat))


# --- figures ----------------------------------------------------------------------------------------------------

def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.fmean(got) if len(got) == len(values) and got else None


def repeat_advice(base_used: int, cand_used: int) -> str:
    """Why a step's figures are not tested for want of repetitions, and what to do."""
    once = [name for name, used in (("the baseline", base_used), ("the candidate", cand_used)) if used < 2]
    who = "each run" if len(once) == 2 else once[0] if once else "a run"
    return (f"{who} measured this step once, and one measurement cannot tell a change from the drift between runs: "
            f"measure both runs with --repeat {ADVISED_REPEAT}")


def _figure_change(key: str, base_values: list[float | None], cand_values: list[float | None], once: str) -> Change:
    """The change of a figure's mean over the repetitions used, tested across them where both runs have two or more
    (the spread between repetitions is the drift between runs); else untested, saying why (once). A rate of the
    database's own work is shown, never judged."""
    b, c = _mean(base_values), _mean(cand_values)
    if b is None or c is None:
        return sig.untested(b, c, "not measured in " + ("either run" if b is None and c is None else
                                                         "the baseline" if b is None else "the candidate"))
    bv = [float(v) for v in base_values if v is not None]  # all present: _mean is None otherwise
    cv = [float(v) for v in cand_values if v is not None]
    if key in NO_DIRECTION:
        return sig.untested(b, c, NOT_PERFORMANCE, len(bv), len(cv))
    if len(bv) >= 2 and len(cv) >= 2:
        return sig.compare_samples(bv, cv, b, c, sig.WELCH_REPETITIONS)
    return sig.untested(b, c, once, len(bv), len(cv))


# open-ended: a step's key figures by name; which ones exist depends on the workload's family
def _per_unit(values: dict[str, Any], figure: PerUnit) -> float | None:
    rate, throughput = values.get(figure.rate), values.get("throughput")
    if not isinstance(rate, int | float) or not isinstance(throughput, int | float) or throughput <= 0:
        return None
    return float(rate) * figure.scale / float(throughput)


def _figures(test: TestResult) -> list[tuple[str, str, str, int]]:
    """The figures compared for a test, in its table's order: (key, label, unit, digits); each per-unit figure
    right after the rate it follows from."""
    out = []
    for key in dict.fromkeys(test.kpms):
        if key in SKIPPED or key not in kpm.COLUMNS:
            continue
        column = kpm.COLUMNS[key]
        out.append((key, column.label, kpm.unit_of(column, test.throughput_label), column.digits))
        out += [(f.key, f.label.format(unit=test.unit or "unit"), f.unit, f.digits) for f in PER_UNIT
                if f.rate == key and f.same_as not in test.kpms]
    return out


def _step_comparison(test: TestResult, cand_test: TestResult, jobs: int, base_steps: list[StepResult],
                     cand_steps: list[StepResult]) -> StepComparison:
    base_used, cand_used = used_steps(base_steps), used_steps(cand_steps)
    invalid = [f"{name}: {'; '.join(dict.fromkeys(p for s in steps for p in record.of(s).problems))}"
               for name, steps in (("baseline", base_used), ("candidate", cand_used))
               if not all(record.of(s).valid for s in steps)]
    base_kpms = [dict(record.of(s, test.per_unit).kpm) for s in base_used]
    cand_kpms = [dict(record.of(s, cand_test.per_unit).kpm) for s in cand_used]
    for values in base_kpms + cand_kpms:
        values.update({f.key: _per_unit(values, f) for f in PER_UNIT})
    once = repeat_advice(len(base_used), len(cand_used))
    out = StepComparison(jobs, [repeat_of(s) for s in base_used], [repeat_of(s) for s in cand_used], invalid)
    for key, label, unit, digits in _figures(test):
        change = _figure_change(key, [v.get(key) for v in base_kpms], [v.get(key) for v in cand_kpms], once)
        if change.baseline is None and change.candidate is None:
            continue
        out.kpms.append(KpmChange(key, label, unit, digits, better_of(key).value,
                                  change.baseline, change.candidate, change.change_pct, change.ci_low_pct,
                                  change.ci_high_pct, change.p_value, None, change.test, change.n_baseline,
                                  change.n_candidate, Verdict.UNTESTED.value, change.reason,
                                  change.reason == once))
    out.demands = demand_changes(base_used, cand_used)
    return out


def _hypothesis(jobs: int, change: KpmChange) -> tuple[int, str]:
    """What a p-value tests: the figures proportional to the throughput have the throughput's repetition values up
    to a constant, so the same test; every other figure is measured apart."""
    return jobs, "throughput" if change.kpm in PROPORTIONAL else change.kpm


def _adjust(steps: list[StepComparison]) -> None:
    """Holm over the hypotheses of the test (a hypothesis weighs in with its smallest p-value; a figure's adjusted
    p-value is never below its own), then each figure's verdict."""
    family: dict[tuple[int, str], float] = {}
    for s in steps:
        for k in s.kpms:
            if k.p_value is not None:
                key = _hypothesis(s.jobs, k)
                family[key] = min(family.get(key, 1.0), k.p_value)
    adjusted = dict(zip(family, sig.holm(list(family.values())), strict=True))
    for s in steps:
        for k in s.kpms:
            if k.p_value is not None:
                k.p_adjusted = max(k.p_value, adjusted[_hypothesis(s.jobs, k)])
            change = Change(k.baseline, k.candidate, k.change_pct, k.ci_low_pct, k.ci_high_pct, k.p_value, k.test,
                            k.n_baseline, k.n_candidate)
            k.verdict = sig.verdict(change, Better(k.better), k.p_adjusted).value


# --- service demands --------------------------------------------------------------------------------------------

def _demand_floor(time: bool, unit: str) -> float:
    if time:
        return DEMAND_FLOOR_TIME_S
    return DEMAND_FLOOR_BYTES if unit in ("kB", "B") else DEMAND_FLOOR_COUNT


def demand_changes(base_steps: list[StepResult], cand_steps: list[StepResult]) -> list[DemandChange]:
    """Every service-demand component per unit of work (means over the repetitions used), largest move first."""
    base = [step_demands(s) for s in base_steps]
    cand = [step_demands(s) for s in cand_steps]
    comps: dict[str, Component] = {}
    for _, found in base + cand:
        comps.update(found)
    out = []
    for key, comp in comps.items():
        b = _mean([d.get(key) for d, _ in base])
        c = _mean([d.get(key) for d, _ in cand])
        if b is None and c is None:
            continue
        pct = sig.change_pct(b, c)
        above = max(b or 0.0, c or 0.0) >= _demand_floor(comp.time, comp.unit)
        moved = above and (pct is None and (b is not None) != (c is not None) or
                           pct is not None and abs(pct) >= DEMAND_MOVED_PCT)
        out.append(DemandChange(key, comp.label, comp.group, comp.unit, comp.scale, b, c, pct, moved))
    out.sort(key=lambda d: (not d.moved, -abs(d.change_pct or 0.0)))
    return out


# --- model, diagnosis, curves -----------------------------------------------------------------------------------

def model_change(baseline: RunResult, base_test: TestResult, candidate: RunResult, cand_test: TestResult
                 ) -> ModelChange:
    """Each run's calibrated model solved over the same range: maximum throughput, its jobs, the knee."""
    from capmark.plan.calibrate import calibrate
    from capmark.plan.dbhost import database_host, require_host_cpu
    from capmark.plan.predict import curve

    up_to = MODEL_RANGE * max(s.jobs for s in base_test.steps + cand_test.steps)
    summaries = []
    for name, run, test in (("baseline", baseline, base_test), ("candidate", candidate, cand_test)):
        try:
            host = database_host(run)
            require_host_cpu(run, [test], host)
            model = calibrate(test, None, host)
            c = curve(model, up_to)
        except CapmarkError as err:
            return ModelChange(False, f"the {name}'s model cannot be calibrated: {err}", up_to)
        summaries.append(ModelSummary(c.max_throughput, c.max_throughput_jobs, c.knee_jobs, c.bottleneck,
                                      list(model.calibrated_from)))
    base, cand = summaries
    return ModelChange(True, "", up_to, base, cand, sig.change_pct(base.max_throughput, cand.max_throughput))


def diagnosis_change(base_test: TestResult, cand_test: TestResult) -> DiagnosisChange:
    from capmark.diagnose.diagnosis import diagnose_test

    b, c = diagnose_test(base_test), diagnose_test(cand_test)
    before = [f.name for f in b.findings]
    after = [f.name for f in c.findings]
    return DiagnosisChange(b.summary, c.summary, [n for n in after if n not in before],
                           [n for n in before if n not in after], [n for n in after if n in before])


def measured_curve(run: RunResult, test: TestResult) -> Curve:
    by_jobs = _by_jobs(test)
    jobs = sorted(by_jobs)
    rows = [[kpm.compute(s, test.per_unit)[0] for s in used_steps(by_jobs[j])] for j in jobs]
    return Curve(run.run_id, jobs, *([_mean([v.get(key) for v in r]) for r in rows]
                                     for key in ("throughput", "rt_p50_ms", "rt_p95_ms")))


def compare_tests(baseline: RunResult, base_test: TestResult, candidate: RunResult, cand_test: TestResult
                  ) -> TestComparison:
    base_jobs, cand_jobs = _by_jobs(base_test), _by_jobs(cand_test)
    steps = [_step_comparison(base_test, cand_test, j, base_jobs[j], cand_jobs[j])
             for j in sorted(set(base_jobs) & set(cand_jobs))]
    _adjust(steps)
    skipped = not_compared(base_test, cand_test)
    # a job count whose partner did not finish is said there, not as "without a partner"
    base_unfinished = {n.jobs for n in skipped if n.run == "baseline"}
    cand_unfinished = {n.jobs for n in skipped if n.run == "candidate"}
    return TestComparison(
        base_test.workload, base_test.mode, dict(base_test.params), base_test.unit, base_test.throughput_label,
        base_test.ordinal, cand_test.ordinal, base_test.status, base_test.reason, cand_test.status,
        cand_test.reason, steps, sorted(set(base_jobs) - set(cand_jobs) - cand_unfinished),
        sorted(set(cand_jobs) - set(base_jobs) - base_unfinished), skipped,
        model_change(baseline, base_test, candidate, cand_test),
        diagnosis_change(base_test, cand_test), measured_curve(baseline, base_test),
        measured_curve(candidate, cand_test), session_setting_changes(baseline, base_test, candidate, cand_test))


# --- settings the workloads set for their own sessions ----------------------------------------------------------

def session_setting_changes(baseline: RunResult, base_test: TestResult, candidate: RunResult, cand_test: TestResult
                            ) -> list[SessionSetting]:
    """The server settings the test's sessions set to another value than a run's server had, each with its
    sentence."""
    runs = ((baseline, base_test), (candidate, cand_test))
    names = dict.fromkeys(o.setting for run, test in runs for o in overridden(run, test))
    sessions = [session_settings(run, test) for run, test in runs]
    servers = [server_settings(run) for run, _ in runs]
    out = []
    for name in names:
        (bs, cs), (bv, cv) = [d.get(name) for d in sessions], [d.get(name) for d in servers]
        out.append(SessionSetting(name, bs, bv, cs, cv, _session_sentence(base_test.workload, name, bs, bv, cs, cv)))
    return out


def _session_sentence(workload: str, name: str, base_session: str | None, base_server: str | None,
                      cand_session: str | None, cand_server: str | None) -> str:
    """"wal-lat1 ran its sessions with synchronous_commit = on; the candidate server's off did not apply"."""
    runs = (("baseline", base_session, base_server), ("candidate", cand_session, cand_server))
    missed = [(run, server) for run, session, server in runs
              if session is not None and server is not None and not same_value(session, server)]
    if base_session is None or cand_session is None or not same_value(base_session, cand_session):
        return "; ".join(f"in the {run} {workload} ran its sessions with {name} = {session}; the server's {server} "
                         "did not apply" for run, session, server in runs if (run, server) in missed)
    head = f"{workload} ran its sessions with {name} = {base_session}"
    if len(missed) == 1:
        return f"{head}; the {missed[0][0]} server's {missed[0][1]} did not apply"
    (_, first), (_, second) = missed
    if same_value(first, second):
        return f"{head}; the server's {first} did not apply"
    return f"{head}; neither the baseline server's {first} nor the candidate server's {second} applied"


# --- environment ------------------------------------------------------------------------------------------------

# open-ended: the stored environment as whichever capmark version wrote it, flattened to dotted keys
def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = value


# open-ended: the stored environment as whichever capmark version wrote it, flattened to dotted keys
def described(run: RunResult) -> dict[str, Any]:
    """What the run stored about its platform and measurement, flat: database version and settings, cores,
    memory, kernel, capmark's version, and the measurement's settings (spec.*)."""
    out: dict[str, Any] = {}  # open-ended: see above
    _flatten(run.environment, "", out)
    _flatten({k: run.spec[k] for k in SPEC_KEYS if k in run.spec}, "spec", out)
    return {k: v for k, v in out.items() if k not in VOLATILE}


def environment_differences(baseline: RunResult, candidate: RunResult,
                            pairs: list[tuple[TestResult, TestResult]] | None = None) -> list[EnvironmentDifference]:
    """What differs in what the runs recorded; a server setting that a compared test's workload set for its own
    sessions in both runs names that test (the change did not reach it)."""
    b, c = described(baseline), described(candidate)
    own: dict[str, list[str]] = {}
    for base_test, cand_test in pairs or []:
        both = session_settings(baseline, base_test).keys() & session_settings(candidate, cand_test).keys()
        for name in sorted(both):
            own.setdefault(SETTINGS_PREFIX + name, [])
            if base_test.workload not in own[SETTINGS_PREFIX + name]:
                own[SETTINGS_PREFIX + name].append(base_test.workload)
    return [EnvironmentDifference(k, b.get(k), c.get(k), own.get(k, [])) for k in sorted(b.keys() | c.keys())
            if b.get(k) != c.get(k)]


# --- the document -----------------------------------------------------------------------------------------------

Progress = Callable[[str], None]


def compare_run(baseline: RunResult, candidate: RunResult, progress: Progress | None = None) -> CandidateComparison:
    pairs, baseline_only, candidate_only = match_tests(baseline, candidate)
    tests = []
    for b, c in pairs:
        if progress:
            progress(f"comparing {b.workload} with run {candidate.run_id}")
        tests.append(compare_tests(baseline, b, candidate, c))
    return CandidateComparison(candidate.run_id, candidate.created_at, candidate.status, candidate.reason,
                               environment_differences(baseline, candidate, pairs), tests, baseline_only,
                               candidate_only)


def compare_runs(baseline: RunResult, candidates: list[RunResult], progress: Progress | None = None) -> Comparison:
    """The comparison of a baseline run with each candidate. A candidate that shares no test with the baseline is
    refused in one sentence, so that an empty document is never taken for "nothing changed"."""
    out = []
    for cand in candidates:
        if cand.run_id == baseline.run_id:
            raise CapmarkError(f"Run {cand.run_id} is both the baseline and a candidate; name two different runs.")
        doc = compare_run(baseline, cand, progress)
        if not doc.tests:
            mine = ", ".join(doc.baseline_only_tests) or "none with a measured step"
            theirs = ", ".join(doc.candidate_only_tests) or "none with a measured step"
            raise CapmarkError(f"Runs {baseline.run_id} and {cand.run_id} have no test in common (same workload, "
                               f"mode and parameters, with a measured step): the baseline has {mine}; the "
                               f"candidate has {theirs}.")
        out.append(doc)
    return Comparison(baseline=baseline.run_id, baseline_created_at=baseline.created_at,
                      baseline_status=baseline.status, baseline_reason=baseline.reason, candidates=out)
