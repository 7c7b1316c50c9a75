"""Plots as inline SVG strings (matplotlib, Agg backend): the report stays one offline file."""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from capmark.driver.histogram import bucket_bounds  # noqa: E402
from capmark.measure import kpm  # noqa: E402
from capmark.results import StepResult, TestResult  # noqa: E402

_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return _METADATA.sub("", text[text.index("<svg"):])


def _values(test: TestResult, key: str) -> list[float | None]:
    return [kpm.compute(s, test.per_unit)[0].get(key) for s in test.steps]


def throughput_vs_jobs(test: TestResult) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    jobs = [s.jobs for s in test.steps]
    ax.plot(jobs, _values(test, "throughput"), marker="o")
    ax.set_xlabel("jobs")
    ax.set_ylabel(test.throughput_label)
    ax.set_title("Throughput vs jobs")
    ax.set_ylim(bottom=0)
    return _svg(fig)


def response_vs_jobs(test: TestResult) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    jobs = [s.jobs for s in test.steps]
    for key, label in (("rt_p50_ms", "p50"), ("rt_p95_ms", "p95"), ("rt_p99_ms", "p99")):
        ax.plot(jobs, _values(test, key), marker="o", label=label)
    ax.set_xlabel("jobs")
    ax.set_ylabel("response time [ms]")
    ax.set_title("Response time vs jobs")
    ax.set_ylim(bottom=0)
    ax.legend()
    return _svg(fig)


def cpu_vs_throughput(test: TestResult) -> str | None:
    busy = _values(test, "cpu_busy_pct")
    if all(b is None for b in busy):
        return None
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    tput = _values(test, "throughput")
    ax.plot(tput, busy, marker="o")
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
        idx = sorted(hist.counts)
        lows = [max(bucket_bounds(i)[0], 1e-7) * 1000 for i in idx]
        widths = [(bucket_bounds(i)[1] - max(bucket_bounds(i)[0], 1e-7)) * 1000 for i in idx]
        ax.bar(lows, [hist.counts[i] for i in idx], width=widths, align="edge", alpha=0.6, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("latency [ms] (log)")
    ax.set_ylabel("units")
    ax.set_title(f"Step {step.ordinal}: {step.jobs} jobs")
    if len(step.histograms) > 1:
        ax.legend()
    return _svg(fig)


def throughput_series(step: StepResult, label: str) -> str:
    fig, ax = plt.subplots(figsize=(4.6, 2.2))
    ax.plot(range(1, len(step.series_units) + 1), step.series_units, marker=".")
    ax.set_xlabel("second of the measured window")
    ax.set_ylabel(f"units/s ({label})")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Step {step.ordinal}: 1 s series")
    return _svg(fig)


def measured_vs_model(doc: dict, label: str) -> str:
    """Throughput vs jobs: measurements, the calibrated queueing model and the USL fit."""
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    jobs = [r["jobs"] for r in doc["steps"]]
    ax.plot(jobs, [r["measured"]["throughput"] for r in doc["steps"]], "o", label="measured")
    ax.plot(jobs, [r["model"]["throughput"] for r in doc["steps"]], "-", label="queueing model")
    if "predicted" in doc.get("usl", {}):
        valid = [r["jobs"] for r in doc["steps"] if r["valid"]]
        ax.plot(valid, doc["usl"]["predicted"], "--", label="USL")
    ax.set_xlabel("jobs")
    ax.set_ylabel(label)
    ax.set_ylim(bottom=0)
    ax.set_title("Measured vs model")
    ax.legend()
    return _svg(fig)
