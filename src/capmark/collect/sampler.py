"""Sampling during a step: wait events of the workload's backends at 10 Hz, OS counters at 1 Hz."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from capmark.collect import os as oscollect


@dataclass
class Samples:
    waits: Counter = field(default_factory=Counter)  # "type:event" (or "CPU" when not waiting) -> samples
    wait_samples: int = 0
    os_series: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # per second of the window: [samples, checkpointer busy, autovacuum running]
    background: dict[int, list[int]] = field(default_factory=dict)
    memory_series: list[dict[str, Any]] = field(default_factory=list)  # {"t", "rss": {pid: [role, rss, private]}}

    def background_series(self) -> list[dict[str, float]]:
        """Share of each second's samples in which a checkpoint was being written or autovacuum ran."""
        return [{"t": second + 1, "checkpoint": busy / n, "autovacuum": vac / n}
                for second, (n, busy, vac) in sorted(self.background.items()) if n]


class Sampler(threading.Thread):
    """Runs beside the jobs on its own connection; stopping it joins within one sampling period."""

    WAIT_HZ = 10.0

    def __init__(self, conn: psycopg.Connection | None, backend_pids: list[int], os_local: bool,
                 postmaster_pid: int | None = None, memory_every_s: float = 60.0) -> None:
        super().__init__(name="capmark-sampler", daemon=True)
        self.conn = conn
        self.pids = backend_pids
        self.os_local = os_local
        self.postmaster_pid = postmaster_pid if os_local else None
        self.memory_every_s = memory_every_s
        self.samples = Samples()
        self._halt = threading.Event()
        self._start = 0.0

    def stop(self) -> Samples:
        self._halt.set()
        self.join(timeout=5)
        return self.samples

    def run(self) -> None:
        period = 1.0 / self.WAIT_HZ
        start = self._start = time.monotonic()
        next_os = start + 1.0
        next_memory = start
        last_os = oscollect.read_proc_stat() if self.os_local else None
        tick = 0
        while not self._halt.is_set():
            tick += 1
            if self.conn is not None:
                self._sample_waits()
            now = time.monotonic()
            if self.postmaster_pid and now >= next_memory:
                self._sample_memory(now - start)
                next_memory += self.memory_every_s
            if last_os is not None and now >= next_os:
                current = oscollect.read_proc_stat()
                pct = oscollect.cpu_percentages(last_os.cpu, current.cpu)
                self.samples.os_series.append({
                    "t": round(now - start, 3), **{f"cpu_{k}_pct": round(v, 2) for k, v in pct.items()},
                    "procs_running": current.procs_running, "procs_blocked": current.procs_blocked,
                    "ctxt": current.ctxt - last_os.ctxt,
                })
                last_os = current
                next_os += 1.0
            self._halt.wait(max(0.0, start + tick * period - time.monotonic()))

    def _sample_memory(self, t: float) -> None:
        """RSS and private memory (RSS less shared pages: shared buffers touched count in RSS but are no leak)."""
        procs = oscollect.sample_instance(self.postmaster_pid).procs if self.postmaster_pid else {}
        self.samples.memory_series.append({"t": round(t, 1), "rss": {
            str(pid): [role, rss, max(0, rss - shared)] for pid, (role, _u, _s, rss, shared) in procs.items()}})

    def _sample_waits(self) -> None:
        try:
            rows = self.conn.execute(
                "select pid = any(%s), state, wait_event_type, wait_event, backend_type from pg_stat_activity "
                "where pid = any(%s) or backend_type in ('checkpointer', 'autovacuum worker')",
                (self.pids, self.pids), prepare=True).fetchall()
        except psycopg.Error as err:
            self.samples.errors.append(str(err).splitlines()[0])
            self.conn = None
            return
        self.samples.wait_samples += 1
        second = int(time.monotonic() - self._start)
        bg = self.samples.background.setdefault(second, [0, 0, 0])
        bg[0] += 1
        vacuum = False
        for mine, state, wtype, event, backend_type in rows:
            if not mine:
                if backend_type == "checkpointer" and event != "CheckpointerMain":
                    bg[1] += 1  # idle checkpointers wait on CheckpointerMain; anything else is checkpoint work
                vacuum = vacuum or backend_type == "autovacuum worker"
                continue
            if state != "active":
                key = f"Client:{state or 'unknown'}"
            elif wtype:
                key = f"{wtype}:{event}"
            else:
                key = "CPU"
            self.samples.waits[key] += 1
        bg[2] += int(vacuum)
