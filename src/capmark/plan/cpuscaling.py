"""CPU capacity that does not grow linearly with the number of busy cores.

Two busy cores are not always twice one: SMT siblings share a core's pipeline, a hypervisor's steal and the
kernel's cache and lock traffic grow with the cores at work. It shows in the measurements as CPU per unit that
rises with the number of busy cores. The steps up to the host's core count are measured at different numbers of
busy cores, so they give that rise directly: CPU per unit c(b) = c1 (1 + g (b - 1)) at b busy cores, fitted by
least squares. The effective capacity of k busy cores is then k / (1 + g (k - 1)) cores' worth of the work of
one, and the model's CPU station serves that much when k jobs are at it (a load-dependent m-server station).
Beyond the measured cores (a what-if with more) the same line extrapolates: capacity tends to 1 / g cores'
worth, as in Amdahl's law, which is the most a line through two points can say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The busy cores of the steps must spread at least this much for a slope: the CPU per unit of one step varies
# by 2-5 % from run to run on a shared host, and over less than half a core that noise would read as a slope
# of 5-10 % per core.
MIN_SPREAD_CORES = 0.5
# Per extra busy core the CPU per unit may rise at most 100 % (each extra core adds no capacity at all beyond
# that) and fall at most 20 % (a fall means work amortised over concurrent units, e.g. shared cache warmth,
# which is not a capacity and must not let the model promise more than the cores).
MAX_GROWTH = 1.0
MIN_GROWTH = -0.2


@dataclass(frozen=True)
class CpuPoint:
    """One calibration step: how many cores were busy on average and what one unit cost of CPU there."""

    jobs: int
    busy_cores: float
    cpu_s: float


@dataclass(frozen=True)
class CpuScaling:
    growth: float  # relative rise of CPU per unit per busy core beyond the first (0: linear capacity)
    points: tuple[CpuPoint, ...]
    note: str | None = None  # why the growth is 0 or was bounded, for the user

    def per_unit(self, cpu_one_core: float, busy_cores: float) -> float:
        """CPU per unit with `busy_cores` cores at work."""
        return cpu_one_core * (1 + self.growth * (max(1.0, busy_cores) - 1))

    def capacity(self, cores: int) -> float:
        """How many cores' worth of one busy core's work `cores` busy cores do."""
        return effective_cores(cores, self.growth)


def effective_cores(cores: int, growth: float) -> float:
    return cores / (1 + growth * (cores - 1))


def demand_table(cpu_one_core: float, growth: float, cores: int) -> list[float]:
    """For a load-dependent CPU station: the time per completion with j = 1..cores jobs at the CPU (each job
    on its own core, each core slower by the growth); beyond `cores` jobs it stays at the last entry."""
    return [cpu_one_core * (1 + growth * (k - 1)) / k for k in range(1, cores + 1)]


def fit(points: Sequence[CpuPoint], cores: int) -> CpuScaling:
    """The growth of CPU per unit with busy cores from steps with at most `cores` jobs (least squares)."""
    pts = tuple(p for p in points if p.cpu_s > 0 and p.busy_cores > 0)
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
    n = len(pts)
    mean_b = sum(p.busy_cores for p in pts) / n
    mean_c = sum(p.cpu_s for p in pts) / n
    slope = (sum((p.busy_cores - mean_b) * (p.cpu_s - mean_c) for p in pts)
             / sum((p.busy_cores - mean_b) ** 2 for p in pts))
    at_one = mean_c + slope * (1 - mean_b)
    if at_one <= 0:
        return CpuScaling(MAX_GROWTH, pts, f"CPU per unit rises too steeply with busy cores to extrapolate to one; "
                                           f"bounded at +{MAX_GROWTH * 100:.0f} % per core")
    growth = slope / at_one
    if not MIN_GROWTH <= growth <= MAX_GROWTH:
        bound = min(MAX_GROWTH, max(MIN_GROWTH, growth))
        return CpuScaling(bound, pts, f"CPU per unit changes {growth * 100:+.0f} % per busy core, outside what a "
                                      f"capacity effect explains; bounded at {bound * 100:+.0f} %")
    return CpuScaling(growth, pts)
