"""The comparison as one self-contained HTML page: per matched test its table, the long parts and overlaid plots of
the runs' measured curves. Renders the Comparison document only."""

from __future__ import annotations

from pathlib import Path

import jinja2
from markupsafe import Markup

from capmark.analysis.compare import CandidateComparison, Comparison, TestComparison, ended
from capmark.errors import CapmarkError
from capmark.report import plots
from capmark.report.compare_console import ci_text, run_lines
from capmark.report.console import fmt, fmt_scaled


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("capmark.report", "templates"),
                             autoescape=jinja2.select_autoescape(["j2", "html"]))
    env.filters.update(fmt=fmt, fmt_scaled=fmt_scaled, pct=lambda v: f"{v:+.1f}" if v is not None else "n/a",
                       ci=ci_text, p=lambda v: f"{v:.3g}" if v is not None else "")
    env.globals.update(ended=ended, run_lines=run_lines)
    return env


def test_plots(doc: Comparison, cand: CandidateComparison, test: TestComparison) -> list[Markup]:
    """Throughput and p95 latency vs jobs, baseline and candidate overlaid."""
    runs = [(f"baseline {doc.baseline}", test.baseline_curve), (f"candidate {cand.run}", test.candidate_curve)]
    return [Markup(plots.compared_curves([(label, c.jobs, c.throughput) for label, c in runs],
                                         test.throughput_label, "Throughput vs jobs")),
            Markup(plots.compared_curves([(label, c.jobs, c.rt_p95_ms) for label, c in runs],
                                         "p95 response time [ms]", "Latency (p95) vs jobs"))]


def render(doc: Comparison) -> str:
    charts = {(c.run, t.baseline_ordinal): test_plots(doc, c, t) for c in doc.candidates for t in c.tests}
    return _env().get_template("compare.html.j2").render(doc=doc, charts=charts)


def write_comparison(doc: Comparison, path: Path) -> Path:
    try:
        path.write_text(render(doc), encoding="utf-8")
    except OSError as err:
        raise CapmarkError(f"Cannot write the comparison to {path} ({err.strerror or err}); choose a writable file "
                           "with --output.") from None
    return path
