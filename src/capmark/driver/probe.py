"""What N busy cores of the database host really deliver: a short CPU-bound probe through the database itself.

Two busy cores are not always twice one (SMT siblings, a hypervisor's scheduling, shared caches). A what-if that
changes the core count, or a model calibrated on a run confined to fewer cores, needs the host's own answer, which
the steps of a confined run cannot show. The probe runs the same CPU-bound statement in 1, 2, ... N sessions (and
2N, to see what oversubscription costs), in alternating rounds with medians, and calls the throughput at k sessions
over that at one the effective cores at k: peakmarks reports the same property as thread performance at low and at
high utilisation. It runs once per database host (its fingerprint) and is kept in the user's cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from capmark.engines.base import Engine

# CPU-bound, no table, no IO: the server's executor alone, 10-20 ms each on the 2-vCPU development machine, so a
# level's short window holds many whole statements per session. PostgreSQL's set-returning function stands in the
# select list, where its rows stream through the aggregate: in FROM it is gathered into a tuplestore first, which at
# 500,000 rows outgrew work_mem and wrote and read 855 temporary blocks per statement, so the probe measured the
# device as well as the cores. MariaDB's benchmark() of 2,000,000 digests took 1.7 s, longer than a window.
PROBE_STATEMENTS = {
    "postgresql": "select count(*) from (select generate_series(1, 300000)) as numbers",
    "mysql": "select benchmark(20000, md5('capmark'))",
}
# The host's speed moves from one second to the next (one core's CPU per statement went from 32 to 44 ms between
# two 2 s levels on this VM), so levels alternate in many short rounds and each ratio's two rates are a fraction of
# a second apart. Confined to one core, 24 rounds of 0.25 s read 1.01-1.04 cores at 2 sessions in five probes, where
# 3 rounds of 2 s read 0.79-1.14.
PROBE_LEVEL_S = 0.25
PROBE_ROUNDS = 24  # alternating order (up, down, up, ...) with medians
PROBE_FORMAT = 3  # 3: PostgreSQL's statement no longer spills to temporary files, so earlier probes are measured again
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "capmark" / "platforms"


@dataclass(frozen=True, kw_only=True)
class PlatformScaling:
    """The host's CPU scaling as the probe measured it."""

    cores: int
    effective_cores: dict[str, float]  # sessions (1 .. cores, 2 x cores) -> cores' worth of one session's work
    growth: float  # the rise of CPU per unit per busy core beyond the first (plan/cpuscaling's line through them)
    statements_per_s_one: float  # one session's rate: what the effective cores are relative to
    measured_at: str
    format: int = PROBE_FORMAT

    @property
    def at_full_load(self) -> float:
        return self.effective_cores[str(self.cores)]

    @property
    def decline_per_core(self) -> float:
        """How much one core's throughput falls at full load against a lone busy core (peakmarks' decline)."""
        return 1 - self.at_full_load / self.cores

    def words(self) -> str:
        full = self.at_full_load
        over = self.effective_cores.get(str(2 * self.cores))
        return (f"{self.cores} busy cores did {full:.2f} cores' worth of one core's work ({self.decline_per_core:.0%} "
                f"less per core than one busy core)"
                + (f"; {2 * self.cores} sessions did {over:.2f}" if over is not None else ""))

    def record(self) -> dict[str, Any]:  # open-ended: the run's environment is JSON
        """As the run's environment keeps it: the figures and, once, the sentence every reader shows."""
        return {**asdict(self), "words": self.words()}


def growth_of(effective: dict[int, float]) -> float:
    """The growth g of k / (1 + g (k - 1)) through the measured points k = 2 .. cores (least squares of
    k / E(k) - 1 on k - 1 through the origin); 0 with one core."""
    pairs = [(k - 1, k / e - 1) for k, e in effective.items() if k >= 2 and e > 0]
    den = sum(x * x for x, _ in pairs)
    return sum(x * y for x, y in pairs) / den if den else 0.0


def session_rate(ends: list[float], opened: float, closed: float) -> float:
    """One session's statements per second between the first and the last of its statements that ended inside the
    window: whole statements over the time they took, so a window that cuts a statement in two costs nothing (a
    count of the statements inside a 2 s window of ~15 statements/s would be off by up to one in 15)."""
    inside = [t for t in ends if opened < t <= closed]
    if len(inside) < 2:
        return 0.0
    return (len(inside) - 1) / (inside[-1] - inside[0])


def _level(engine: Engine, sessions: list[Any], statement: str) -> float:
    """Statements per second of the sessions each running `statement` back to back, over a window that opens
    once every session has finished its first statement (all sessions busy)."""
    ends: list[list[float]] = [[] for _ in sessions]
    first_done = threading.Barrier(len(sessions))
    window: list[float] = []

    def loop(i: int) -> None:
        engine.execute(sessions[i], statement)
        if first_done.wait() == 0:
            window.append(time.monotonic())
        while True:
            engine.execute(sessions[i], statement)
            now = time.monotonic()
            ends[i].append(now)
            if window and now >= window[0] + PROBE_LEVEL_S:
                return

    threads = [threading.Thread(target=loop, args=(i,), name=f"capmark-probe-{i}", daemon=True)
               for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    opened = window[0]
    return sum(session_rate(e, opened, opened + PROBE_LEVEL_S) for e in ends)


def effective_cores(rates: list[dict[int, float]], levels: list[int]) -> dict[int, float] | None:
    """Per level, the median over the rounds of its rate over one session's rate in the same round; None where a
    level has no round with both rates (its statements outlasted the window: a host too loaded to measure)."""
    out = {}
    for k in levels:
        ratios = [round_[k] / round_[1] for round_ in rates if round_[1] > 0 and round_[k] > 0]
        if not ratios:
            return None
        out[k] = statistics.median(ratios)
    return out


def probe_levels(cores: int) -> list[int]:
    """1, 2, 4 ... up to the cores, the cores, and twice the cores: a few levels even on a large host."""
    levels = {cores, 2 * cores}
    k = 1
    while k < cores:
        levels.add(k)
        k *= 2
    return sorted(levels)


def measure(engine: Engine, dsn: str, cores: int) -> PlatformScaling | None:
    """Each round measures every level once (up, then down, then up); a level's effective cores is the median over
    the rounds of its rate over one session's rate in the same round, so a host whose speed moved between rounds
    moves both sides of each ratio. None where some level could not be measured in any round."""
    levels = probe_levels(cores)
    rates: list[dict[int, float]] = []
    statement = PROBE_STATEMENTS[engine.name]
    sessions: list[Any] = []  # opened once: a level of k sessions takes the first k, so no level waits for connections
    try:
        for _ in range(max(levels)):
            sessions.append(engine.connect(dsn, application_name="capmark probe"))
        for r in range(PROBE_ROUNDS):
            rates.append({k: _level(engine, sessions[:k], statement)
                          for k in (levels if r % 2 == 0 else reversed(levels))})
    finally:
        for session in sessions:
            session.close()
    effective = effective_cores(rates, levels)
    if effective is None:
        return None
    return PlatformScaling(cores=cores, effective_cores={str(k): round(v, 4) for k, v in effective.items()},
                           growth=growth_of({k: v for k, v in effective.items() if k <= cores}),
                           statements_per_s_one=round(statistics.median(r[1] for r in rates if r[1] > 0), 2),
                           measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


# k sessions on k cores do at most k cores' worth, and sessions beyond the cores add none: a probe that says more
# (beyond this margin, a level's quantisation and drift) was disturbed by other programs and is not kept
PLAUSIBLE_MARGIN = 0.10


def plausible(scaling: PlatformScaling) -> bool:
    full = scaling.effective_cores.get(str(scaling.cores), 0.0)
    over = scaling.effective_cores.get(str(2 * scaling.cores), 0.0)
    within = all(e <= int(k) * (1 + PLAUSIBLE_MARGIN) for k, e in scaling.effective_cores.items() if int(k) <= scaling.cores)
    return within and over <= full * (1 + PLAUSIBLE_MARGIN)


def _cache_file(engine: Engine, host_key: dict[str, Any]) -> Path:  # open-ended: host facts that name the host
    digest = hashlib.sha256(json.dumps({"engine": engine.name, **host_key}, sort_keys=True).encode()).hexdigest()
    return CACHE_DIR / f"{digest[:16]}.json"


# open-ended: host_key is the host facts that name the host (runner._host_key), as JSON
def host_scaling(engine: Engine, dsn: str, cores: int | None, host_key: dict[str, Any],
                 say: Callable[[str], None]) -> PlatformScaling | None:
    """The host's scaling from the cache, else measured now and cached; None where it cannot be measured (an
    engine without a probe statement, an unknown core count)."""
    if not cores or engine.name not in PROBE_STATEMENTS:
        return None
    path = _cache_file(engine, host_key)
    try:
        stored = json.loads(path.read_text())
        if stored.get("format") == PROBE_FORMAT and stored.get("cores") == cores:
            return PlatformScaling(**stored)
    except (OSError, ValueError, TypeError):
        pass
    say(f"Measuring what {cores} busy cores of the database host deliver (once per host, about "
        f"{len(probe_levels(cores)) * PROBE_ROUNDS * PROBE_LEVEL_S:.0f} s) ...")
    scaling = measure(engine, dsn, cores)
    if scaling is None:
        say(f"The host's CPU scaling could not be measured: the probe's statements outlasted its {PROBE_LEVEL_S:g} s "
            "windows (a host this loaded is slower than it is); the model takes capacity as linear in the busy cores, "
            "and the host is measured again next time.")
        return None
    say(f"This host: {scaling.words()}.")
    if not plausible(scaling):
        say("Other programs seem to have taken the CPU while it was measured (more sessions did more than their "
            "cores could); it will be measured again next time.")
        return scaling
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(scaling)))
    except OSError:
        pass  # measured again next time
    return scaling
