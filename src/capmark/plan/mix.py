"""The transaction types of a mix as classes of the model, from the calibration step's per-type latencies.

The calibrated model knows the mean unit: its CPU, device time and WAL flush requests. A mix's types differ:
tp-light's reads commit without a WAL flush while its updates wait for one; stress-mixed's query is a lookup
and its insert, update and delete each commit. The statistics views count WAL flushes per run, not per type,
so the flushes are given to the types whose measured latency can hold them, longest first: a type whose
unit took L at calibration holds at most L / T whole flushes of T each, and no more than it commits (tpcc's
delivery takes 9 flushes' time but commits once: the rest is its work). Flushes that no type can hold are
flushes no unit waited for (the WAL writer's, or a commit's that another's flush had covered): stress-mixed's
updates took 14 us against a 25 us flush and did not slow down when the inserts' flushes did. What the
flushes leave of each type's latency sets its share of the other work, relative to the mean unit's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from capmark.measure import kpm
from capmark.plan.dbmodel import QUANTILES, TypeDemand
from capmark.results import StepResult

# A type holds a flush when its latency is at least this fraction of one flush's: the flush time is a mean over
# all flushes of the step (pg_stat_io), and a commit's own flush can be a little shorter than that mean
FLUSH_FIT = 0.9
# Where the steps do not count commits, a type holds as many flushes as its latency can
MANY_FLUSHES = 1_000_000


@dataclass(frozen=True, kw_only=True)
class _TypeLatency:
    """A type's share of the units and its latency (mean, p95, p99 and at QUANTILES), averaged over the steps."""

    share: float
    mean: float
    p95: float
    p99: float
    quantiles: list[float]


def _per_type(steps: Sequence[StepResult]) -> dict[str, _TypeLatency]:
    """Share of units and latency figures per type, averaged over the steps (repetitions of one job count)."""
    names = [t for t in steps[0].txn_types if all(s.histograms.get(t) is not None for s in steps)]
    out: dict[str, _TypeLatency] = {}
    for name in names:
        shares, means, p95s, p99s, grid = [], [], [], [], []
        for s in steps:
            h = s.histograms[name]
            if not h.total or not s.units:
                break
            summary = h.summary()
            shares.append(h.total / s.units)
            means.append(summary["mean_s"] or 0.0)
            p95s.append(summary["p95_s"] or 0.0)
            p99s.append(summary["p99_s"] or 0.0)
            grid.append([h.percentile(100 * p) or 0.0 for p in QUANTILES])
        else:
            out[name] = _TypeLatency(share=statistics.fmean(shares), mean=statistics.fmean(means),
                                     p95=statistics.fmean(p95s), p99=statistics.fmean(p99s),
                                     quantiles=[statistics.fmean(col) for col in zip(*grid, strict=True)])
    return out


def _most_flushes(steps: Sequence[StepResult]) -> int:
    """The most flushes one unit of a type can wait for: one per commit, and units commit as often as the steps'
    commits per unit say (a long transaction that commits once waits for one flush, however long it takes)."""
    rates = [c / s.units for s in steps if s.units and (c := kpm.workload_commits(s)) is not None]
    return max(1, round(statistics.fmean(rates))) if rates else MANY_FLUSHES


def type_demands(steps: Sequence[StepResult], flush_requests: float, flush_s: float) -> list[TypeDemand]:
    """The classes of the calibration steps' mix (empty for a single type). `flush_requests` is the mean unit's
    flush requests before batching, `flush_s` the time of one flush alone."""
    types = _per_type(steps)
    if len(types) < 2:
        return []
    flushes = dict.fromkeys(types, 0.0)
    left = flush_requests
    most = _most_flushes(steps)
    if flush_requests > 0 and flush_s > 0:
        for name in sorted(types, key=lambda n: types[n].mean, reverse=True):
            fits = float(min(most, int(types[name].mean / (FLUSH_FIT * flush_s))))
            flushes[name] = max(0.0, min(fits, left / types[name].share))
            left -= flushes[name] * types[name].share
    rest = {name: max(0.0, t.mean - flushes[name] * flush_s) for name, t in types.items()}
    other = sum(t.share * rest[name] for name, t in types.items())  # the mean unit's work outside flushes
    return [TypeDemand(name=name, share=t.share, scale=rest[name] / other if other > 0 else 1.0,
                       flush_requests=flushes[name], base_s=t.mean, base_p95_s=t.p95, base_p99_s=t.p99,
                       base_quantiles_s=t.quantiles)
            for name, t in types.items()]
