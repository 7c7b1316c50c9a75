"""Console tables for calibrate, whatif, size and anticipate (the JSON documents are the source)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import wraps
from typing import Any

from rich.console import Console
from rich.markup import escape

from capmark.analysis.document import TestAnswer
from capmark.analysis.planning import (
    WITHIN_NOISE,
    Anticipation,
    Calibration,
    CurveJson,
    DbModel,
    Figure,
    Interval,
    ModelPoint,
    PredictionJson,
    Sizing,
    StepRow,
    Verdict,
    WhatIf,
)
from capmark.measure.noise import shown_digits
from capmark.report.fit import Col, FittedTable, sayer

Solved = ModelPoint | PredictionJson  # a model solution as a document carries it


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}"


def num(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.3f}"


def answered_only(print_test: Callable[[Any, str, Console], None]) -> Callable[[TestAnswer[Any], Console], None]:
    """A test the command could not answer gets one line saying why instead of its view."""
    @wraps(print_test)
    def show(a: TestAnswer[Any], console: Console) -> None:
        if a.answer is not None:
            print_test(a.answer, a.workload, console)
        else:
            sayer(console)(f"{a.workload}: no answer: {a.reason}", highlight=False, markup=False)

    return show


def _unconverged(points: Sequence[Solved]) -> list[str]:
    return [f"{p['jobs']:g}" if p.get("jobs") is not None else f"{p['offered_rate']:g}/s" for p in points
            if not p.get("converged", True)]


def _say_unconverged(points: Sequence[Solved], console: Console) -> None:
    bad = _unconverged(points)
    if bad:
        sayer(console)(f"  note: the model's fixed point did not settle at {', '.join(bad)} (shown: its last round); "
                      "treat those figures as rough", highlight=False, markup=False)


@contextmanager
def progress_on_stderr() -> Iterator[Callable[[str], None]]:
    """A status line on stderr that the analysis updates with what it is doing (nothing on a pipe)."""
    console = Console(stderr=True, emoji=False)
    if not console.is_terminal:
        yield lambda message: None
        return
    with console.status("Planning ...") as status:
        yield lambda message: status.update(escape(message))


def _jobs(jobs: list[int] | int) -> str:
    """'1' or '1, 2' of the job counts a model was calibrated on."""
    return ", ".join(str(j) for j in jobs) if isinstance(jobs, list) else str(jobs)


# The measured-vs-model table keeps throughput and response time, measured, modelled and the error, at any width;
# then the p95 error, the bottleneck, CPU and the group-commit batch as the width allows.
_CALIBRATION_COLUMNS = [Col("jobs"), Col("X\nmeas"), Col("X\nmodel"), Col("X err\n%"), Col("R meas\nms"),
                        Col("R model\nms"), Col("R err\n%"), Col("p95 err\n%", rank=1),
                        Col("CPU meas\n%", rank=3, group="CPU meas/model"),
                        Col("CPU model\n%", rank=3, group="CPU meas/model"),
                        Col("batch\nmeas", rank=4, group="batch meas/model"),
                        Col("batch\nmodel", rank=4, group="batch meas/model"),
                        Col("bottleneck", justify="left", rank=2)]


@answered_only
def print_calibration(t: Calibration, workload: str, console: Console) -> None:
    table = FittedTable(f"{workload}: measured vs model (calibrated on {_jobs(t.calibrated_from_jobs)} jobs)",
                        list(_CALIBRATION_COLUMNS))
    for r in t.steps:
        m, p, e = r["measured"], r["model"], r["error_pct"]
        mark = "*" if r["calibration"] else ("!" if not r["valid"] else "")
        iv = r.get("measured_interval") or {}
        table.add_row(f"{r['jobs']}{mark}", _pm(m["throughput"], iv.get("throughput"), 1, 0), num(p["throughput"], 0),
                      pct(e["throughput"]) + _noise_mark(r, "throughput"), _pm(m["response_time_s"],
                      iv.get("response_time_s"), 1000, 3), ms(p["response_time_s"]),
                      pct(e["response_time_s"]) + _noise_mark(r, "response_time_s"), pct(e["p95_s"]),
                      num(m["cpu_busy_pct"]), num(p["cpu_busy_pct"]), num(r["batch"]["measured"], 2),
                      num(r["batch"]["model"], 2), "invalid" if r["invalid_because"] else p["bottleneck"])
        if r["invalid_because"]:
            table.notes.append(f"! {r['jobs']} jobs: invalid, left out: {'; '.join(r['invalid_because'])}")
    console.print(table)
    v, c = t.verdict, t.calibration
    say = sayer(console)
    say(f"  model: {t.model}", highlight=False)
    _say_simulated(t, console)
    say(f"  calibration: CPU {c.cpu_s * 1e6:.1f} us/unit outside flushes{_from_text(c.cpu_from)} on "
        f"{c.cores} cores{_from_text(c.cores_from)}; WAL flush "
        f"requests {c.flush_requests:.3f}/unit, flush CPU {c.flush_cpu_s * 1e6:.1f} us + device "
        f"{c.flush_device_s * 1e6:.1f} us; delay {c.delay_s * 1e6:.1f} us", highlight=False)
    flush = flush_time_sentence(t.steps)
    if flush:
        say(f"  {flush}", highlight=False, markup=False)
    capacity = capacity_sentence(c)
    if capacity:
        say(f"  {capacity}", highlight=False, markup=False)
    for note in c.notes:
        say(f"  note: {note}", highlight=False)
    _print_types(t, console)
    say(f"  verdict over steps {v['steps_scored']}: throughput error median {num(v['throughput']['median_abs_pct'])} %, "
        f"max {num(v['throughput']['max_abs_pct'])} %; response time median "
        f"{num(v['response_time_s']['median_abs_pct'])} %, max {num(v['response_time_s']['max_abs_pct'])} %; CPU "
        f"within {num(v['cpu_busy_max_points'])} points{_type_verdict(v)} (* calibration, ! invalid step, excluded; ~ "
        "within the measured interval)", highlight=False)
    if "noise" in v:
        for n, label in ((v["noise"]["throughput"], "throughput"), (v["noise"]["response_time_s"], "response time")):
            median = (f", median error {num(n['model_error_median_abs_pct'])} %" if n["model_error"] else "")
            say(f"  {label}: {n['model_error']} step(s) outside the measured interval (model error{median}), "
                f"{n['within_noise']} inside it (measurement noise, ~), {n['no_interval']} without an interval",
                highlight=False)
        say(f"  {t.interval_note}", highlight=False, markup=False)
    say(f"  {t.p95_note}", highlight=False)
    u = t.usl
    say("  USL: " + (f"sigma {u['sigma']:.4f}, kappa {u['kappa']:.6f}, R^2 {u['r_squared']:.3f}. {u['summary']}"
                     if "sigma" in u else u["note"]), highlight=False)
    pr = t.prediction
    say(f"  prediction to {pr['points'][-1]['jobs']:g} jobs: max throughput {num(pr['max_throughput'], 0)}"
        f"{range_phrase(pr)} at {pr['max_throughput_jobs']} jobs; {knee_phrase(pr)}; bottleneck {pr['bottleneck']}",
        highlight=False)
    _say_unconverged([*(r["model"] for r in t.steps), *pr["points"]], console)


def _type_verdict(v: Verdict) -> str:
    by_type = v.get("p95_s_by_type") or {}
    if by_type.get("median_abs_pct") is None:
        return ""
    return (f"; per type: mean response time median {num(v['response_time_s_by_type']['median_abs_pct'])} %, p95 "
            f"median {num(by_type['median_abs_pct'])} %, max {num(by_type['max_abs_pct'])} %")


def flush_time_sentence(steps: list[StepRow]) -> str | None:
    """One WAL flush's elapsed time per job count, measured (pg_stat_io) and modelled: it grows with the CPU load."""
    pairs = [(r["jobs"], f) for r in steps if (f := r.get("flush_time_s"))]
    shown = [f"{jobs}: {_us(f['measured'])} / {_us(f['model'])}" for jobs, f in pairs if f["model"]]
    if not shown:
        return None
    return "one WAL flush's elapsed time in us, measured / model, by jobs: " + ", ".join(shown)


def _us(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:.0f}"


def capacity_sentence(c: DbModel) -> str | None:
    """What makes the CPU per unit rise with load, as calibrated: commits waiting for other jobs' flushes, or
    busy cores that do less than linearly more (how many cores' worth each number of them does)."""
    scaling = c.cpu_scaling
    if scaling is None:
        return None
    points = ", ".join(f"{p.jobs} job{'s' if p.jobs != 1 else ''}: {p.busy_cores:.2f} busy, "
                       f"{p.cpu_s * 1e6:.1f} us" + (f", {p.commit_waits:.2f} commit waits" if p.commit_waits else "")
                       for p in scaling.points)
    growth, wait = scaling.growth_per_core, scaling.wait_cpu_s or 0.0
    if wait:
        head = (f"CPU per unit: {wait * 1e6:.1f} us more per commit that waits for another job's WAL flush "
                "(sleep, wake-up, lock hand-off), cores taken as linear")
    elif growth:
        worth = ", ".join(f"{k} busy = {v:.2f}" for k, v in scaling.effective_cores.items())
        head = f"CPU capacity: {worth} cores' worth (CPU per unit {growth * 100:+.1f} % per busy core beyond the first"
        head += ")"
    else:
        head = "CPU capacity: linear in the busy cores"
    why = f"; {scaling.note}" if scaling.note else ""
    return f"{head}; from the steps up to the core count ({points or 'none with the CPU measured'}){why}"


def _print_types(t: Calibration, console: Console) -> None:
    """For a mix: each transaction type as a class of the model, and its mean and p95 measured vs model."""
    types = t.calibration.types
    rows = [r for r in t.steps if r.get("by_type")]
    if not types or not rows:
        return
    classes = ", ".join(f"{c.name} {c.share * 100:.0f} % (work x{c.scale:.2f}, {c.flush_requests:.2f} flushes)"
                        for c in types)
    sayer(console)(f"  classes (one per transaction type): {classes}", highlight=False, markup=False)
    table = FittedTable("by type: measured vs model", [
        Col("jobs"), Col("type", justify="left"), Col("R meas\nms"), Col("R model\nms"), Col("R err\n%"),
        Col("p95 meas\nms", rank=2, group="p95 meas/model"), Col("p95 model\nms", rank=2, group="p95 meas/model"),
        Col("p95 err\n%", rank=1)])
    for r in rows:
        for name, v in r["by_type"].items():
            m, p, e = v["measured"], v["model"], v["error_pct"]
            table.add_row(f"{r['jobs']}{'*' if r['calibration'] else ''}", name, ms(m["response_time_s"]),
                          ms(p["response_time_s"]), pct(e["response_time_s"]), ms(m["p95_s"]), ms(p["p95_s"]),
                          pct(e["p95_s"]))
    console.print(table)


def _say_simulated(t: Calibration, console: Console) -> None:
    """With the simulation: each step's 95 % intervals, MVA's figures beside them, and where the two disagree."""
    rows = [r for r in t.steps if r.get("mva")]
    if not rows:
        return
    say = sayer(console)
    say(f"  {rows[0]['model'].get('method') or 'simulation'}; 95 % intervals from the replications, MVA beside:",
        highlight=False, markup=False)
    for r in rows:
        p, iv, a = r["model"], r["model"]["interval"] or {}, r["mva"]
        x_lo, x_hi = iv.get("throughput", (None, None))
        r_lo, r_hi = iv.get("response_time_s", (None, None))
        say(f"    {r['jobs']} jobs: X {num(p['throughput'], 0)} ({num(x_lo, 0)}-{num(x_hi, 0)}), MVA "
            f"{num(a['throughput'], 0)}; R {ms(p['response_time_s'])} ({ms(r_lo)}-{ms(r_hi)}) ms, MVA "
            f"{ms(a['response_time_s'])} ms; batch {num(p['batch'], 2)}, MVA {num(a['batch'], 2)}",
            highlight=False, markup=False)
        if r.get("solver_note"):
            say(f"      note: {r['solver_note']}", highlight=False, markup=False)
    for note in dict.fromkeys(n for r in rows for n in r["model"].get("notes") or []):
        say(f"  note: {note}", highlight=False, markup=False)


def _pm(value: float | None, interval: Interval | None, scale: float, digits: int) -> str:
    """A measured figure with its 95 % half-width where it has one: '12,345 ± 210'."""
    if value is None:
        return "n/a"
    if not interval:
        return f"{value * scale:,.{digits}f}"
    d = shown_digits(interval["half_width"] * scale, digits)
    return f"{value * scale:,.{d}f} ± {interval['half_width'] * scale:,.{d}f}"


def _noise_mark(row: StepRow, key: Figure) -> str:
    """'~' beside an error the measured interval covers: measurement noise, not model error."""
    kinds = row.get("error_kind")
    return "~" if kinds and kinds[key] == WITHIN_NOISE else ""


def _from_text(origin: str | None) -> str:
    """'(estimated from wait samples)' where a figure is not the step's own measurement; nothing where it is."""
    return f" ({origin})" if origin and origin != "measured" else ""


def _say_platform(t: WhatIf | Sizing, console: Console) -> None:
    """The cores and CPU a plan was solved with where they are not measured, and the model's notes."""
    pf = t.platform
    if not pf:
        return
    if pf.cores_from != "measured" or pf.cpu_from != "measured":
        sayer(console)(f"  platform: {pf.cores} cores{_from_text(pf.cores_from)}, CPU per unit {pf.cpu_from}",
                      highlight=False, markup=False)
    for note in pf.notes:
        sayer(console)(f"  note: {note}", highlight=False, markup=False)


def range_phrase(prediction: CurveJson) -> str:
    """' (1,200 to 1,450 with the demands' spread over the calibration steps)', or nothing without a spread."""
    span = prediction["max_throughput_range"]
    if not span:
        return ""
    return f" ({num(span[0], 0)} to {num(span[1], 0)} with the demands' spread over the calibration steps)"


def knee_phrase(prediction: CurveJson) -> str:
    """'knee (rule) at 8 jobs', or 'knee (rule) not reached' within the predicted range."""
    where = f"at {prediction['knee_jobs']} jobs" if prediction["knee_jobs"] else "not reached"
    return f"knee ({prediction['knee_rule']}) {where}"


def whole(v: float | None) -> str:
    return num(v, 0)


def _end(value: float | None, shown: Callable[[float | None], str]) -> str:
    """One end of a range: a model that saturates the offered load has none."""
    return "saturated" if value is None else shown(value)


def _util(p: PredictionJson) -> str:
    return ", ".join(f"{k} {v * 100:.0f}%" for k, v in sorted(p["utilizations"].items(), key=lambda kv: -kv[1]))


@answered_only
def print_whatif(t: WhatIf, workload: str, console: Console) -> None:
    b = t.baseline
    load = f"an open load of {num(b['rate'], 0)} arrivals/s" if "rate" in b else f"{b['jobs']} jobs"
    table = FittedTable(f"{workload}: what if (baseline {load}, {num(b['throughput'], 0)} {t.unit}/s)",
                        [Col("scenario", justify="left", wrap=True), Col("X"), Col("X chg\n%"), Col("R\nms"),
                         Col("R chg\n%", rank=2), Col("p95\nms"), Col("stretch", rank=4), Col("headroom\n%", rank=3),
                         Col("bottleneck", justify="left", rank=1),
                         Col("utilization", justify="left", rank=5, wrap=True, sep=", ")])
    for s in t.scenarios:
        p, c = s["prediction"], s["change_vs_baseline_pct"]
        x = "saturated" if p["saturated"] else num(p["throughput"], 0)
        table.add_row(s["name"], x, pct(c.get("throughput")), ms(p["response_time_s"]),
                      pct(c.get("response_time_s")),
                      ms(p["p95_s"]), num(p["stretch"], 2), num(p["headroom"] * 100 if p["headroom"] is not None
                                                                  else None, 0), p["bottleneck"], _util(p))
    console.print(table)
    sayer(console)(f"  models: closed rows {t.scenarios[0]['prediction']['model']}; growth rows the open model; "
                  f"calibrated on {_jobs(t.model)} jobs", highlight=False)
    for s in t.scenarios:
        types = s["prediction"].get("by_type") or {}
        if types:
            each = ", ".join(f"{name} {ms(v['response_time_s'])} / {ms(v['p95_s'])}" for name, v in types.items())
            sayer(console)(f"  {s['name']}, per transaction type, mean / p95 ms: {each}", highlight=False, markup=False)
    spans = [(s["name"], span) for s in t.scenarios if (span := s.get("spread_range")) is not None]
    if spans:
        sayer(console)("  with the measured demands moved by their spread over the calibration steps, low to high:",
                       highlight=False)
    for name, span in spans:
        rate, response = span["throughput"], span["response_time_s"]
        sayer(console)(f"    {name}: X {_end(rate[0], whole)} to {_end(rate[1], whole)}, R {_end(response[0], ms)} to "
                       f"{_end(response[1], ms)} ms", highlight=False, markup=False)
    _say_platform(t, console)
    for note in dict.fromkeys(n for s in t.scenarios for n in s["prediction"].get("notes") or []):
        sayer(console)(f"  note: {note}", highlight=False, markup=False)
    _say_unconverged([s["prediction"] for s in t.scenarios], console)


@answered_only
def print_size(t: Sizing, workload: str, console: Console) -> None:
    sla = t.sla.text
    say = sayer(console)
    say(f"{workload}: sizing for {sla} (model calibrated on {_jobs(t.calibrated_from)} jobs)", highlight=False)
    _say_platform(t, console)
    at = t.at_max_jobs  # None only when not even one job meets the SLA
    if at is not None and t.search_limit_reached:
        say(f"  the SLA holds at every load up to {t.max_jobs} jobs (the search limit): the predicted figure stops "
            f"growing (p95 {ms(at['p95_s'])} ms, mean {ms(at['response_time_s'])} ms there)", highlight=False)
    elif at is not None and t.max_jobs:
        more = t.one_more_job
        say(f"  most jobs within the SLA: {t.max_jobs} ({num(at['throughput'], 0)} {t.unit}/s, mean "
            f"{ms(at['response_time_s'])} ms, p95 {ms(at['p95_s'])} ms); {t.max_jobs + 1} jobs: p95 "
            f"{ms(more['p95_s'])} ms, mean {ms(more['response_time_s'])} ms", highlight=False)
    else:
        say("  even one job misses the SLA on the measured platform", highlight=False)
    if t.at_max_rate:
        r = t.at_max_rate
        say(f"  highest arrival rate within the SLA (open model): {num(t.max_rate, 0)} {t.unit}/s "
            f"(bottleneck {r['bottleneck']} at {r['utilizations'][r['bottleneck']] * 100:.0f}%)", highlight=False)
    jobs = t.max_jobs_range
    spans = ([f"{jobs[0]} jobs at both ends" if jobs[0] == jobs[1] else f"{jobs[0]} to {jobs[1]} jobs"]
             if jobs else []) + (
        [f"{num(t.max_rate_range[0], 0)} to {num(t.max_rate_range[1], 0)} {t.unit}/s"] if t.max_rate_range else [])
    if spans:
        say(f"  with the measured demands moved by their spread over the calibration steps: {', '.join(spans)}",
            highlight=False)
    _say_unconverged([p for p in (t.at_max_jobs, t.one_more_job, t.at_max_rate) if p], console)
    for note in t.unsettled_notes:
        say(f"  note: {note}", highlight=False, markup=False)
    if t.rate_search_limit_reached:
        say("  note: the open model did not saturate at any rate searched, so the highest rate is the search's limit, "
            "not where the SLA breaks", highlight=False, markup=False)
    tg = t.target
    if tg:
        if tg["meets_now"]:
            say(f"  at {num(tg['target_rate'], 0)}/s the measured platform meets the SLA", highlight=False)
        elif not tg["reachable"]:
            say(f"  {tg['note']}", highlight=False)
        else:
            o = tg["options"]
            parts = [f"{o['cores']['value']} cores" if o["cores"]["value"] else "no core count",
                     f"CPU speed x{o['cpu_speed']['value']:.2f}" if o["cpu_speed"]["value"] else "no CPU speed-up",
                     f"disk speed x{o['disk_speed']['value']:.2f}" if o["disk_speed"]["value"] else "no disk speed-up"]
            say(f"  at {num(tg['target_rate'], 0)}/s the SLA needs one of: {'; '.join(parts)} (searched "
                f"{tg['limits']}); smallest change: {tg['smallest']}", highlight=False)
        if tg.get("unsettled_note"):
            say(f"  note: {tg['unsettled_note']}", highlight=False, markup=False)


@answered_only
def print_anticipation(t: Anticipation, workload: str, console: Console) -> None:
    m, c = t.measured, t.change
    sayer(console)(f"{workload}: {t.formula}; S = {ms(t.service_time_s)} ms (at {t.service_time_from_jobs} "
                  f"job), measured {num(m.rate, 0)}/s at {m.jobs} jobs with R {ms(m.response_time_s)} ms -> "
                  f"effective M = {t.effective_servers:.2f}", highlight=False)
    after = "saturated (S*lambda/M >= 1)" if c.saturated else f"R {ms(c.response_time_s)} ms"
    sayer(console)(f"  after the change (S {ms(c.service_time_s)} ms, lambda {num(c.rate, 0)}/s, M "
                  f"{c.servers:.2f}): {after}", highlight=False)
