"""CPU capacity that does not grow linearly with the number of busy cores.

Two busy cores are not always twice one: SMT siblings share a core's pipeline, a hypervisor's steal and the
kernel's cache and lock traffic grow with the cores at work. It shows in the measurements as CPU per unit that
rises with the number of busy cores. The steps up to the host's core count are measured at different numbers of
busy cores, so they give that rise directly: CPU per unit c(b) = c1 (1 + g (b - 1)) at b busy cores, fitted by
least squares. The effective capacity of k busy cores is then k / (1 + g (k - 1)) cores' worth of the work of
one, and the model's CPU station serves that much when k jobs are at it (a load-dependent m-server station).
Beyond the measured cores (a what-if with more) the same line extrapolates: capacity tends to 1 / g cores'
worth, as in Amdahl's law, which is the most a line through two points can say.

Commits that wait for another job's WAL flush cost CPU a lone commit never spends: the waiter sleeps on the WAL
write lock, is woken when the flush ends (two context switches and the lock hand-off) and, if its record is not
yet flushed, flushes again. One job never waits for another's flush; from two jobs on most commits do. So where
the steps differ in their commits' waits, the rise of CPU per unit is given to the waits: c = c1 + w W, W the
commits per unit that found another's flush in progress (commit_waits), w the CPU of one such wait. wal-lat1 on
2 cores: 24 us per commit alone, 37-40 us at 2 jobs and 38-41 us at 4-16, while the busy cores moved only from
0.8 to 1.15: the waits, not the cores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# The busy cores of the steps must spread at least this much for a slope: the CPU per unit of one step varies
# by 2-5 % from run to run on a shared host, and over less than half a core that noise would read as a slope
# of 5-10 % per core.
MIN_SPREAD_CORES = 0.5
# The steps' commits must differ by at least this many waits per unit for a wait cost: below it the flushes are
# too few to carry the CPU per unit's noise
MIN_WAIT_SPREAD = 0.05
# One commit's wait for another's flush (sleep, wake-up, lock hand-off) costs at most this much CPU: a few context
# switches are 2-20 us; more is not the wait but something else the steps' CPU per unit varies by
MAX_WAIT_CPU_S = 100e-6
# Per extra busy core the CPU per unit may rise at most 100 % (each extra core adds no capacity at all beyond
# that) and fall at most 20 % (a fall means work amortised over concurrent units, e.g. shared cache warmth,
# which is not a capacity and must not let the model promise more than the cores).
MAX_GROWTH = 1.0
MIN_GROWTH = -0.2
# More runnable jobs than cores: a probe step's CPU per unit must rise above one step's run-to-run noise (2-5 % on a
# shared host) to count, and the cost of every slice starting cold is bounded at three times the CPU (beyond it, it
# is not the caches but something the model should name otherwise, such as a lock).
MIN_OVERSUBSCRIPTION_RISE = 0.05
MAX_OVERSUBSCRIPTION = 2.0


@dataclass(frozen=True)
class CpuPoint:
    """One calibration step: how many cores were busy on average and what one unit cost of CPU there."""

    jobs: int
    busy_cores: float
    cpu_s: float
    commit_waits: float = 0.0  # commits per unit that found another job's WAL flush in progress


@dataclass(frozen=True)
class CpuScaling:
    growth: float  # relative rise of CPU per unit per busy core beyond the first (0: linear capacity)
    points: tuple[CpuPoint, ...]
    note: str | None = None  # why the growth is 0 or was bounded, for the user
    wait_cpu_s: float = 0.0  # CPU of one commit's wait for another's flush (0: the rise is the cores')

    def per_unit(self, cpu_one_core: float, busy_cores: float) -> float:
        """CPU per unit with `busy_cores` cores at work (no commit waits)."""
        return cpu_one_core * slowdown(self.growth, busy_cores)

    def fitted(self, cores: int) -> CpuScalingFit:
        """What the report shows of the fit on a host of `cores` cores."""
        return CpuScalingFit(growth_per_core=self.growth, wait_cpu_s=self.wait_cpu_s, note=self.note,
                             points=list(self.points),
                             effective_cores={str(k): effective_cores(k, self.growth) for k in range(1, cores + 1)})


@dataclass(frozen=True, kw_only=True)
class CpuScalingFit:
    """The fit as the calibrated model carries it for the report: the rise per busy core or per commit wait, why
    it is what it is, the points it rests on, and how many cores' worth each number of busy cores does."""

    growth_per_core: float
    wait_cpu_s: float
    note: str | None
    points: list[CpuPoint]
    effective_cores: dict[str, float]  # keyed by the number of busy cores, 1 .. the host's cores


def slowdown(growth: float, busy_cores: float) -> float:
    """How much longer one unit's CPU work takes with `busy_cores` cores at work than with one."""
    return 1 + growth * (max(1.0, busy_cores) - 1)


def waiting_share(flusher_busy: float, jobs: float) -> float:
    """The chance that a commit finds another job's flush in progress. With n jobs the flusher is busy U of the
    time, U / n of it with each job's own flushes; a job never commits during its own flush, so it meets one of
    the others' in U (n - 1) / n of the rest, 1 - U / n. One job never waits for another."""
    if jobs <= 1:
        return 0.0
    busy = min(max(flusher_busy, 0.0), 0.999)
    if math.isinf(jobs):  # an open load: the others are everyone
        return busy
    return min(1.0, busy * (jobs - 1) / jobs / (1 - busy / jobs))


def effective_cores(cores: int, growth: float) -> float:
    return cores / (1 + growth * (cores - 1))


def demand_table(cpu_one_core: float, growth: float, cores: int, oversubscription: float = 0.0,
                 up_to: int = 0) -> list[float]:
    """For a load-dependent CPU station: the time per completion with j = 1..cores jobs at the CPU (each job
    on its own core, each core slower by the growth); beyond `cores`, up to `up_to` jobs, slower still by the
    oversubscription (oversubscribed), after which it stays at the last entry."""
    table = [cpu_one_core * (1 + growth * (k - 1)) / k for k in range(1, cores + 1)]
    if oversubscription > 0:
        table += [table[-1] * oversubscribed(oversubscription, k, cores) for k in range(cores + 1, up_to + 1)]
    return table


def oversubscribed(oversubscription: float, runnable: float, cores: int) -> float:
    """How much more CPU a unit takes with `runnable` jobs on `cores` cores than with one job per core: time slices
    that start with a cold cache, and the switches between them. The share of slices that start cold grows as
    1 - cores / runnable, so the cost rises from nothing at the core count towards 1 + oversubscription when every
    slice starts cold (a line in the runnable jobs would grow for ever; the caches' refill cannot)."""
    if runnable <= cores or oversubscription <= 0:
        return 1.0
    return 1 + oversubscription * (1 - cores / runnable)


def fit_oversubscription(cpu_at_cores: float, cpu_at_probe: float, probe_jobs: int, cores: int) -> float:
    """The oversubscription that gives the CPU per unit a step above the cores measured (its probe), from that at the
    core count; 0 where the rise is within a step's noise (MIN_OVERSUBSCRIPTION_RISE), bounded by MAX_OVERSUBSCRIPTION."""
    if probe_jobs <= cores or cpu_at_cores <= 0:
        return 0.0
    rise = cpu_at_probe / cpu_at_cores - 1
    if rise < MIN_OVERSUBSCRIPTION_RISE:
        return 0.0
    return min(MAX_OVERSUBSCRIPTION, rise / (1 - cores / probe_jobs))


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def fit(points: Sequence[CpuPoint], cores: int) -> CpuScaling:
    """What makes CPU per unit rise over the steps with at most `cores` jobs: the commits' waits where the steps
    differ in them, else the busy cores (least squares either way)."""
    pts = tuple(p for p in points if p.cpu_s > 0 and p.busy_cores > 0)
    waits = [p.commit_waits for p in pts]
    if pts and max(waits) - min(waits) >= MIN_WAIT_SPREAD:
        _, per_wait = _line(waits, [p.cpu_s for p in pts])
        if 0 <= per_wait <= MAX_WAIT_CPU_S:
            return CpuScaling(0.0, pts, None, per_wait)
        bound = min(MAX_WAIT_CPU_S, max(0.0, per_wait))
        return CpuScaling(0.0, pts, f"CPU per unit changes by {per_wait * 1e6:+.1f} us per commit that waits for "
                                    f"another's flush, more than such a wait costs; taken as {bound * 1e6:.1f} us",
                          bound)
    if cores < 2:
        return CpuScaling(0.0, pts, "one core: nothing to scale")
    if len({p.jobs for p in pts}) < 2:
        return CpuScaling(0.0, pts, "one job count up to the core count was measured: CPU capacity taken as linear "
                                    "in the busy cores")
    spread = max(p.busy_cores for p in pts) - min(p.busy_cores for p in pts)
    if spread < MIN_SPREAD_CORES:
        return CpuScaling(0.0, pts, f"the steps up to the core count kept {min(p.busy_cores for p in pts):.2f}-"
                                    f"{max(p.busy_cores for p in pts):.2f} cores busy, too close together to tell a "
                                    "change of CPU per unit from noise: capacity taken as linear")
    intercept, slope = _line([p.busy_cores for p in pts], [p.cpu_s for p in pts])
    at_one = intercept + slope
    if at_one <= 0:
        return CpuScaling(MAX_GROWTH, pts, f"CPU per unit rises too steeply with busy cores to extrapolate to one; "
                                           f"bounded at +{MAX_GROWTH * 100:.0f} % per core")
    growth = slope / at_one
    if not MIN_GROWTH <= growth <= MAX_GROWTH:
        bound = min(MAX_GROWTH, max(MIN_GROWTH, growth))
        return CpuScaling(bound, pts, f"CPU per unit changes {growth * 100:+.0f} % per busy core, outside what a "
                                      f"capacity effect explains; bounded at {bound * 100:+.0f} %")
    return CpuScaling(growth, pts)
