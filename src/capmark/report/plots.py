"""Plots as inline SVG strings (matplotlib, Agg backend): the report stays one offline file."""

from __future__ import annotations

import io
import logging
import math
import re
from typing import Any, Literal, Protocol

# matplotlib logs warnings about its own cache folder (e.g. "Matplotlib created a temporary cache directory"
# when the home folder is not writable) to stderr; they say nothing about the report, so only errors show.
logging.getLogger("matplotlib").setLevel(logging.ERROR)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from capmark.analysis.planning import Anticipation, Calibration  # noqa: E402
from capmark.histogram import bucket_bounds  # noqa: E402
from capmark.model.usl import usl  # noqa: E402
from capmark.results import StepResult, TestResult  # noqa: E402

_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return _METADATA.sub("", text[text.index("<svg"):])


def _legend(ax: Axes, **kw: Any) -> None:
    """A legend when something is labelled (matplotlib warns on stderr about an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def log_scale(ax: Axes, which: Literal["x", "y"]) -> None:
    """A logarithmic axis labelled in plain decimals (0.01, 0.1, 1, 10 ms; 2, 3, 5 between the powers of ten where
    the range is short), which a reader takes in at a glance, instead of matplotlib's powers of ten, whose math
    text is also the slowest part of drawing a histogram."""
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(_PlainLogFormatter())
    axis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


class _PlainLogFormatter(ticker.LogFormatter):
    """The ticks matplotlib's log formatter labels, as plain decimals: a tick of a log axis has one significant
    digit, so 0.002 and 3,000 need no exponent."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        if not super().__call__(x, pos) or x <= 0:
            return ""
        return f"{x:,.{max(0, -math.floor(math.log10(x) + 1e-9))}f}"


def _values(test: TestResult, key: str) -> list[float | None]:
    return [s.measured.kpm.get(key) for s in test.steps]


def _gaps(values: list[float | None]) -> list[float]:
    """A figure that was not measured as NaN: matplotlib leaves a gap there."""
    return [math.nan if v is None else v for v in values]


def _ms(seconds: float | None) -> float:
    """Seconds as milliseconds, a missing figure as NaN (a gap)."""
    return math.nan if seconds is None else seconds * 1000


def throughput_vs_jobs(test: TestResult) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    jobs = [s.jobs for s in test.steps]
    values = _values(test, "throughput")
    ax.plot(jobs, _gaps(values), marker="o")
    bad = [(j, v) for j, v, s in zip(jobs, values, test.steps, strict=True) if not s.measured.valid]
    if bad:
        ax.plot([j for j, _ in bad], _gaps([v for _, v in bad]), "x", color="red", markersize=9, label="invalid step")
        _legend(ax)
    ax.set_xlabel("jobs")
    ax.set_ylabel(test.throughput_label)
    ax.set_title("Throughput vs jobs")
    ax.set_ylim(bottom=0)
    return _svg(fig)


def response_vs_jobs(test: TestResult) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    jobs = [s.jobs for s in test.steps]
    for key, label in (("rt_p50_ms", "p50"), ("rt_p95_ms", "p95"), ("rt_p99_ms", "p99")):
        ax.plot(jobs, _gaps(_values(test, key)), marker="o", label=label)
    ax.set_xlabel("jobs")
    ax.set_ylabel("response time [ms]")
    ax.set_title("Response time vs jobs")
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _svg(fig)


def cpu_vs_throughput(test: TestResult) -> str | None:
    busy = _values(test, "cpu_busy_pct")
    if all(b is None for b in busy):
        return None
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    tput = _values(test, "throughput")
    ax.plot(_gaps(tput), _gaps(busy), marker="o")
    for s, x, y in zip(test.steps, tput, busy, strict=True):
        if y is not None:
            ax.annotate(f"{s.jobs}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(test.throughput_label)
    ax.set_ylabel("CPU busy [%]")
    ax.set_ylim(0, 100)
    ax.set_title("CPU busy vs throughput (labels: jobs)")
    return _svg(fig)


def latency_histogram(step: StepResult) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 2.6))
    for name, hist in step.histograms.items():
        if not hist.total:
            continue
        # one filled outline over the buckets from the lowest to the highest (empty ones at zero): a bar per bucket
        # drew hundreds of patches, 0.9 s of SVG per histogram
        first, last = min(hist.counts), max(hist.counts)
        edges = [max(bucket_bounds(i)[0], 1e-7) * 1000 for i in range(first, last + 1)]
        edges.append(bucket_bounds(last)[1] * 1000)
        ax.stairs([hist.counts.get(i, 0) for i in range(first, last + 1)], edges, fill=True, alpha=0.6, label=name)
    log_scale(ax, "x")
    ax.set_xlabel("latency [ms] (log)")
    ax.set_ylabel("units")
    ax.set_title(f"Step {step.ordinal}: {step.jobs} jobs")
    if len(step.histograms) > 1:
        _legend(ax)
    return _svg(fig)


def throughput_series(step: StepResult, label: str) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 2.2))
    ax.plot(range(1, len(step.series_units) + 1), step.series_units, marker=".")
    ax.set_xlabel("second of the measured window")
    ax.set_ylabel(f"units/s ({label})")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Step {step.ordinal}: 1 s series")
    return _svg(fig)


def measured_vs_model(doc: Calibration, label: str) -> str:
    """Throughput vs jobs: measurements, the calibrated queueing model (at the steps and beyond) and the USL."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    steps = doc.steps
    ok = [r for r in steps if r["valid"]]
    bad = [r for r in steps if not r["valid"]]
    ax.plot([r["jobs"] for r in ok], _gaps([r["measured"]["throughput"] for r in ok]), "o", label="measured")
    if bad:
        ax.plot([r["jobs"] for r in bad], _gaps([r["measured"]["throughput"] for r in bad]), "x", color="grey",
                label="measured (invalid)")
    curve = doc.prediction["points"]
    ax.plot(_gaps([p["jobs"] for p in curve]), _gaps([p["throughput"] for p in curve]), "-", label="queueing model")
    if "predicted" in doc.usl:
        top = max([p["jobs"] or 1.0 for p in curve] + [r["jobs"] for r in steps])
        grid = [1 + i * (top - 1) / 60 for i in range(61)]
        u = doc.usl
        ax.plot(grid, [float(usl(n, u["lambda"], u["sigma"], u["kappa"])) for n in grid], "--", label="USL")
    ax.set_xlabel("jobs")
    ax.set_ylabel(label)
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput: measured vs model")
    _legend(ax)
    return _svg(fig)


def model_response_vs_jobs(doc: Calibration) -> str:
    """Mean response time vs jobs, measured and modelled, with the knee (R = 2 x its one-job value)."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    steps = [r for r in doc.steps if r["valid"]]
    ax.plot([r["jobs"] for r in steps], [_ms(r["measured"]["response_time_s"]) for r in steps], "o",
            label="measured mean")
    ax.plot([r["jobs"] for r in steps], [_ms(r["measured"]["p95_s"]) for r in steps], "^", label="measured p95")
    curve = doc.prediction["points"]
    jobs = _gaps([p["jobs"] for p in curve])
    ax.plot(jobs, [_ms(p["response_time_s"]) for p in curve], "-", label="model mean")
    ax.plot(jobs, [_ms(p["p95_s"]) for p in curve], ":", label="model p95")
    knee = doc.prediction["knee_jobs"]
    if knee:
        ax.axvline(knee, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(f"knee {knee}", (knee, ax.get_ylim()[1] * 0.9), fontsize=8)
    ax.set_xlabel("jobs")
    ax.set_ylabel("response time (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("Response time: measured vs model")
    _legend(ax)
    return _svg(fig)


def utilization_vs_throughput(doc: Calibration) -> str:
    """Busy % of the CPU and every device against throughput: measured points, model lines."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    steps = [r for r in doc.steps if r["valid"]]
    curve = doc.prediction["points"]
    names = sorted({k for p in curve for k in p["utilizations"]})
    for i, name in enumerate(names):
        color = f"C{i}"
        ax.plot(_gaps([p["throughput"] for p in curve]), [p["utilizations"].get(name, 0) * 100 for p in curve], "-",
                color=color, label=f"{name} (model)")
        measured = [(r["measured"]["throughput"], r["measured"]["cpu_busy_pct"] if name == "CPU"
                     else r["measured"]["device_util_pct"].get(name)) for r in steps]
        pts = [(x, y) for x, y in measured if y is not None]
        if pts:
            ax.plot(_gaps([x for x, _ in pts]), [y for _, y in pts], "o", color=color)
    ax.set_xlabel("throughput (units/s)")
    ax.set_ylabel("busy %")
    ax.set_ylim(0, 105)
    ax.set_title("Utilization vs throughput (points measured)")
    _legend(ax, fontsize=7)
    return _svg(fig)


def anticipation(doc: Anticipation) -> str:
    """Shallahamer's quick curve through the measured point, and after the change."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    ax.plot([p.rate for p in doc.curve], [p.response_time_s * 1000 for p in doc.curve], "-",
            label=f"M = {doc.effective_servers:.2f}")
    m = doc.measured
    ax.plot([m.rate], [m.response_time_s * 1000], "o", label=f"measured ({m.jobs} jobs)")
    c = doc.change
    if c.service_time_s != doc.service_time_s or c.servers != doc.effective_servers:
        ax.plot([p.rate for p in c.curve], [p.response_time_s * 1000 for p in c.curve], "--",
                label="after the change")
    ax.set_xlabel("arrival rate (units/s)")
    ax.set_ylabel("response time (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("Quick anticipation R = S / (1 - (S λ / M)^M)")
    _legend(ax)
    return _svg(fig)


class Chart(Protocol):
    """A diagnosis finding's evidence as series (the diagnosis's Chart), read here without reaching below analysis."""

    @property
    def kind(self) -> str: ...  # jobs | time

    @property
    def x(self) -> list[float]: ...

    @property
    def series(self) -> dict[str, list[float | None]]: ...


def finding_chart(name: str, chart: Chart) -> str:
    """The evidence of a diagnosis finding (its name): its series against jobs or against time."""
    fig, ax = plt.subplots(figsize=(4.2, 2.6))
    first = True
    twin: Axes | None = None
    for label, values in chart.series.items():
        pts = [(x, y) for x, y in zip(chart.x, values, strict=False) if y is not None]
        if not pts:
            continue
        target = ax if first else (twin := twin or ax.twinx())
        target.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if chart.kind == "jobs" else None,
                    color="C0" if first else "C1", label=label)
        target.set_ylabel(label, color="C0" if first else "C1")
        first = False
    ax.set_xlabel("jobs" if chart.kind == "jobs" else "second of the window")
    ax.set_title(name, fontsize=9)
    return _svg(fig)


def memory_over_time(step: StepResult) -> str:
    """Soak view: memory of each instance role and the throughput, per sampling interval."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    times = [m["t"] / 60 for m in step.memory_series]
    roles = sorted({v[0] for m in step.memory_series for v in m["rss"].values()})
    for role in roles:
        ax.plot(times, [sum(v[1] for v in m["rss"].values() if v[0] == role) / 2**20 for m in step.memory_series],
                label=role)
    ax.set_xlabel("minute of the window")
    ax.set_ylabel("RSS (MB)")
    _legend(ax, fontsize=7)
    if step.series_units:
        twin = ax.twinx()
        per_min = max(1, len(step.series_units) // 60) if len(step.series_units) >= 120 else 1
        xs = [(i + 1) * per_min / 60 for i in range(len(step.series_units) // per_min)]
        ys = [sum(step.series_units[i * per_min:(i + 1) * per_min]) / per_min for i in range(len(xs))]
        twin.plot(xs, ys, color="grey", linewidth=0.8)
        twin.set_ylabel("units/s", color="grey")
    ax.set_title(f"Memory over time ({step.jobs} jobs)")
    return _svg(fig)


def compared_curves(curves: list[tuple[str, list[int], list[float | None]]], ylabel: str, title: str) -> str:
    """Several runs' measured curves over jobs on one axis (a comparison: baseline and candidates)."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    for label, jobs, values in curves:
        ax.plot(jobs, [v if v is not None else float("nan") for v in values], marker="o", label=label)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("jobs")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _svg(fig)
