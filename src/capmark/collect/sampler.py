"""Sampling during a step: wait events of the workload's backends at 10 Hz, OS counters at 1 Hz.

The same activity sample (the engine's: pg_stat_activity, MySQL's PROCESSLIST) shows the sessions outside the
run: another application or another capmark run working on the server at the same time contaminates the step,
so each sample counts them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypedDict

from capmark.collect import os as oscollect
from capmark.collect.hosts import HostSource
from capmark.collect.procfs import ProcStat
from capmark.engines.base import Engine, TargetInfo
from capmark.errors import CapmarkError

CAPMARK_APPLICATION = "capmark"  # every capmark connection's application_name starts with this


class OtherSessionsRecord(TypedDict):
    """Other client sessions in the window, as the step stores them (interference.sessions)."""

    samples: int
    active_samples: int
    most_active: int
    active_share: float | None  # of the samples (None: no sample taken)
    by_application: dict[str, int]  # the five most active, "application (role)" -> samples
    capmark_samples: int
    capmark_by_application: dict[str, int]
    hidden_samples: int


class MemorySample(TypedDict):
    """The instance's processes' memory at one instant, as the step stores it (memory_series)."""

    t: float  # seconds into the window
    rss: dict[str, list[str | int]]  # pid -> [role, RSS bytes, private bytes (RSS less shared pages)]


@dataclass
class OtherSessions:
    """Client sessions outside this run seen in the samples: who was active, and in how many samples.

    Only application and role names are kept, never query text: other applications' SQL is theirs.
    """

    samples: int = 0
    active_samples: int = 0  # samples in which at least one other session was active
    most_active: int = 0  # the most other sessions active in one sample
    by_application: Counter[str] = field(default_factory=Counter)  # "application (role)" -> samples it was active in
    capmark_samples: int = 0  # samples in which another capmark run's session was active
    capmark_by_application: Counter[str] = field(default_factory=Counter)
    hidden_samples: int = 0  # samples with sessions whose state this role may not see (needs pg_read_all_stats)

    def count(self, rows: list[tuple[str | None, str, str]]) -> None:
        """One sample's other client sessions: (state, application_name, role)."""
        self.samples += 1
        active = [(app, role) for state, app, role in rows if state == "active"]
        if any(state is None for state, _app, _role in rows):
            self.hidden_samples += 1
        ours = [app for app, _role in active if app.startswith(CAPMARK_APPLICATION)]
        theirs = [f"{app or 'no application name'} ({role})" for app, role in active
                  if not app.startswith(CAPMARK_APPLICATION)]
        if theirs:
            self.active_samples += 1
            self.most_active = max(self.most_active, len(theirs))
            self.by_application.update(set(theirs))
        if ours:
            self.capmark_samples += 1
            self.capmark_by_application.update(set(ours))

    def to_dict(self) -> OtherSessionsRecord:
        return OtherSessionsRecord(samples=self.samples, active_samples=self.active_samples,
                                   most_active=self.most_active,
                                   active_share=self.active_samples / self.samples if self.samples else None,
                                   by_application=dict(self.by_application.most_common(5)),
                                   capmark_samples=self.capmark_samples,
                                   capmark_by_application=dict(self.capmark_by_application.most_common(5)),
                                   hidden_samples=self.hidden_samples)


@dataclass
class Samples:
    waits: Counter[str] = field(default_factory=Counter)  # "type:event" (or "CPU" when not waiting) -> samples
    wait_samples: int = 0
    # per second: t, cpu_<state>_pct for each CPU state and busy, procs_running, procs_blocked, ctxt
    os_series: list[dict[str, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # per second of the window: [samples, checkpointer busy, autovacuum running]
    background: dict[int, list[int]] = field(default_factory=dict)
    memory_series: list[MemorySample] = field(default_factory=list)
    others: OtherSessions = field(default_factory=OtherSessions)
    transactions: int = 0  # transactions the sampler's own session committed (they count in xact_commit)

    def background_series(self) -> list[dict[str, float]]:
        """Share of each second's samples in which a checkpoint was being written or autovacuum ran."""
        return [{"t": second + 1, "checkpoint": busy / n, "autovacuum": vac / n}
                for second, (n, busy, vac) in sorted(self.background.items()) if n]


class Sampler(threading.Thread):
    """Runs beside the jobs on its own connection; stopping it joins within one sampling period."""

    WAIT_HZ = 10.0

    def __init__(self, conn: Any, backend_pids: list[int], host: HostSource | None, *, engine: Engine,
                 info: TargetInfo, memory_every_s: float = 60.0, own_pids: list[int] | None = None) -> None:
        super().__init__(name="capmark-sampler", daemon=True)
        self.conn = conn
        self.engine = engine
        self.info = info
        self.pids = backend_pids
        # this run's other sessions (its control connection): neither workload nor interference
        self.own_pids = [*backend_pids, *(own_pids or [])]
        self.host = host  # None: no OS series (no source, or collectors off)
        self.memory_every_s = memory_every_s
        self.samples = Samples()
        self._halt = threading.Event()
        self._start = 0.0

    def stop(self) -> Samples:
        self._halt.set()
        self.join(timeout=5)
        return self.samples

    def publish_statistics(self, info: TargetInfo) -> None:
        """After stop(): make the sampler's session publish its statistics now, so that every transaction it
        committed is in the closing snapshot and can be taken out of the workload's (this one included)."""
        if self.conn is None or not info.has("force_flush"):
            return
        try:
            self.engine.flush_own_stats(self.conn, info)
        except self.engine.error as err:
            self.samples.errors.append(str(err).splitlines()[0])
            return
        self.samples.transactions += 1

    def run(self) -> None:
        period = 1.0 / self.WAIT_HZ
        start = self._start = time.monotonic()
        next_os = start + 1.0
        next_memory = start
        last_os = self._read_stat()
        tick = 0
        while not self._halt.is_set():
            tick += 1
            if self.conn is not None:
                self._sample_waits(self.conn)
            now = time.monotonic()
            if self.host is not None and now >= next_memory:
                self._sample_memory(now - start)
                next_memory += self.memory_every_s
            if last_os is not None and now >= next_os:
                current = self._read_stat()
                if current is not None:
                    pct = oscollect.cpu_percentages(last_os.cpu, current.cpu)
                    self.samples.os_series.append({
                        "t": round(now - start, 3), **{f"cpu_{k}_pct": round(v, 2) for k, v in pct.items()},
                        "procs_running": current.procs_running, "procs_blocked": current.procs_blocked,
                        "ctxt": current.ctxt - last_os.ctxt,
                    })
                last_os = current
                next_os += 1.0
            self._halt.wait(max(0.0, start + tick * period - time.monotonic()))

    def _read_stat(self) -> ProcStat | None:
        if self.host is None:
            return None
        try:
            return self.host.stat()
        except (OSError, self.engine.error, CapmarkError) as err:  # the source went away: the series stops, the step not
            self.samples.errors.append(f"the host's CPU series stopped: {str(err).strip().splitlines()[0]}")
            self.host = None
            return None

    def _sample_memory(self, t: float) -> None:
        """RSS and private memory (RSS less shared pages: shared buffers touched count in RSS but are no leak)."""
        try:
            sample = self.host.instance() if self.host is not None else None
        except (OSError, self.engine.error, CapmarkError) as err:
            self.samples.errors.append(f"the memory series stopped: {str(err).strip().splitlines()[0]}")
            return
        procs = sample.procs if sample is not None else {}
        if not procs:
            return
        self.samples.memory_series.append(MemorySample(t=round(t, 1), rss={
            str(pid): [role, rss, max(0, rss - shared)] for pid, (role, _u, _s, rss, shared) in procs.items()}))

    def _sample_waits(self, conn: Any) -> None:
        try:
            sample = self.engine.sample_activity(conn, self.info, self.pids, self.own_pids)
        except self.engine.error as err:
            self.samples.errors.append(str(err).splitlines()[0])
            self.conn = None
            return
        self.samples.transactions += sample.transactions
        self.samples.wait_samples += 1
        second = int(time.monotonic() - self._start)
        bg = self.samples.background.setdefault(second, [0, 0, 0])
        bg[0] += 1
        bg[1] += int(sample.checkpoint_busy)
        bg[2] += int(sample.autovacuum)
        self.samples.waits.update(sample.waits)
        self.samples.others.count(sample.others)
