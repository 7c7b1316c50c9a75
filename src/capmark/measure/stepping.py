"""Which job counts a test measures, and in which order: interleaved repetitions, and stepping that finds the knee.

Repetitions run the step plan forwards, then backwards, then forwards again (1, 2, 4, 4, 2, 1, ...), so that a
slow drift of the platform over the run (a growing table, a filling cache, a warming disk) lands on every job
count alike instead of on the last ones.

With `--jobs auto` the runner steps 1, 2, 4, 8, ... and decides each next step from the ones it has measured
(`next_jobs`): once the throughput curve bends it measures the halfway point of that interval once, and it stops
when the throughput has stopped rising for two steps, when the response time has passed four times its one-job
value, or at the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from capmark.results import KneeRecord

# A rise below 5 % is within what steps on a quiet 2-core host repeat to (their 1 s throughput varies by up to
# 18 %, averaged over a 15 s window to a few %): the curve has stopped rising, it is not still climbing slowly.
FLAT_RISE = 0.05
# Two flat steps in a row, not one: one flat step can be a noisy measurement between two rising ones.
FLAT_STEPS = 2
# The response time at four times its one-job value means each unit queues three times as long as it is
# served: the platform is saturated, and more jobs only lengthen the queue.
RT_BLOWUP = 4.0
# The curve bends where the added jobs bring less than half of their proportional share of throughput
# (doubling the jobs adds less than 50 %): the knee lies inside that interval, so its midpoint is worth a step.
BEND_GAIN = 0.5
# Without --max-jobs, auto stepping goes up to 4 x the database host's cores: far enough past the cores for a
# platform that waits on IO or on locks to show its knee, and a bound on a platform that never stops scaling.
AUTO_CORES_FACTOR = 4

Point = tuple[int, float, float]  # (jobs, throughput, mean response time in seconds)


def interleave(jobs: list[int], repeat: int) -> list[tuple[int, int]]:
    """(repeat index from 1, jobs) in the order they run: every other pass reversed."""
    order = []
    for r in range(1, repeat + 1):
        order += [(r, j) for j in (jobs if r % 2 else list(reversed(jobs)))]
    return order


def chain(max_jobs: int) -> list[int]:
    """The doubling steps of auto stepping: 1, 2, 4, ... and the bound itself when it is no power of two."""
    out, j = [], 1
    while j < max_jobs:
        out.append(j)
        j *= 2
    return [*out, max_jobs]


def worst_case_steps(max_jobs: int) -> int:
    """Every doubling step plus one halfway point per bend; a bend needs a scaling interval before the one that
    bends, and 1 -> 2 has no midpoint, so there are at most (n - 1) // 2 of them."""
    n = len(chain(max_jobs))
    return n + max(0, (n - 1) // 2)


def _gain(a: Point, b: Point) -> float:
    """The throughput rise from a to b relative to the proportional one (1.0: linear scaling)."""
    if a[1] <= 0 or b[0] <= a[0]:
        return 0.0
    return (b[1] / a[1] - 1) / (b[0] / a[0] - 1)


def _rise(a: Point, b: Point) -> float:
    return b[1] / a[1] - 1 if a[1] > 0 else 0.0


@dataclass(frozen=True)
class Knee:
    """Where auto stepping stopped and why, in words for the user."""

    jobs: int | None  # the measured step at the knee (None: the bound came first)
    rule: str  # "throughput flat" | "response time" | "bound"
    stopped_at: int  # the most jobs measured
    text: str

    def record(self) -> KneeRecord:
        """As the test's header stores it (TestResult.stepping["knee"])."""
        return KneeRecord(jobs=self.jobs, rule=self.rule, stopped_at=self.stopped_at, text=self.text)


def _knee(pts: list[Point]) -> Knee | None:
    """The knee the measured curve shows: the response time blew up, or the throughput went flat."""
    top = pts[-1][0]
    one = next((p for p in pts if p[0] == 1), None)
    if one is not None and one[2] > 0:
        over = [p for p in pts if p[2] > RT_BLOWUP * one[2]]
        if over:
            k = over[0]
            return Knee(k[0], "response time", top, f"the knee is at {k[0]} jobs: the mean response time passed "
                        f"{RT_BLOWUP:g} x its one-job value there ({k[2] * 1000:.3f} ms against "
                        f"{one[2] * 1000:.3f} ms)")
    tail = pts[-FLAT_STEPS - 1:]
    if len(pts) > FLAT_STEPS and all(_rise(a, b) < FLAT_RISE for a, b in zip(tail, tail[1:], strict=False)):
        k = tail[0]
        return Knee(k[0], "throughput flat", top, f"the knee is at {k[0]} jobs: the throughput rose by less than "
                    f"{FLAT_RISE * 100:g} % in each of the {FLAT_STEPS} steps after it")
    return None


def _bound(pts: list[Point], max_jobs: int) -> Knee:
    """Stopped by --max-jobs before the curve showed its knee: say whether it had begun to flatten."""
    top = pts[-1][0]
    if len(pts) >= 2 and _rise(pts[-2], pts[-1]) < FLAT_RISE:
        k = pts[-2][0]
        return Knee(None, "bound", top, f"stopped at the bound of {max_jobs} jobs: the throughput rose by less than "
                    f"{FLAT_RISE * 100:g} % from {k} to {top} jobs, so the knee is probably near {k} jobs (a second flat "
                    "step would confirm it: raise --max-jobs)")
    return Knee(None, "bound", top, f"no knee up to the bound of {max_jobs} jobs: the throughput was still rising; "
                "raise --max-jobs to look further")


def stop(measured: list[Point], max_jobs: int) -> Knee | None:
    """Where and why stepping ends on these measurements (the knee, or the bound), or None to go on."""
    pts = sorted(measured)
    if not pts:
        return None
    return _knee(pts) or (_bound(pts, max_jobs) if pts[-1][0] >= max_jobs else None)


def next_jobs(measured: list[Point], max_jobs: int) -> int | None:
    """The next job count to measure from the steps measured so far, or None when auto stepping is done. A bend
    in the last interval gets its midpoint measured even at the bound: it is where the knee lies."""
    if not measured:
        return 1
    pts = sorted(measured)
    if _knee(pts) is not None:
        return None
    doubling = set(chain(max_jobs))
    on_chain = [p for p in pts if p[0] in doubling]
    if len(on_chain) >= 2:
        a, b = on_chain[-2], on_chain[-1]
        before = _gain(on_chain[-3], a) if len(on_chain) >= 3 else 1.0  # the first interval counts as scaling
        inside = any(a[0] < p[0] < b[0] for p in pts)
        if b[0] - a[0] >= 2 and not inside and _gain(a, b) < BEND_GAIN <= before:
            return (a[0] + b[0]) // 2
    if pts[-1][0] >= max_jobs:
        return None
    return min(2 * pts[-1][0], max_jobs)
