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


class Sampler(threading.Thread):
    """Runs beside the jobs on its own connection; stopping it joins within one sampling period."""

    WAIT_HZ = 10.0

    def __init__(self, conn: psycopg.Connection | None, backend_pids: list[int], os_local: bool) -> None:
        super().__init__(name="capmark-sampler", daemon=True)
        self.conn = conn
        self.pids = backend_pids
        self.os_local = os_local
        self.samples = Samples()
        self._halt = threading.Event()

    def stop(self) -> Samples:
        self._halt.set()
        self.join(timeout=5)
        return self.samples

    def run(self) -> None:
        period = 1.0 / self.WAIT_HZ
        start = time.monotonic()
        next_os = start + 1.0
        last_os = oscollect.read_proc_stat() if self.os_local else None
        tick = 0
        while not self._halt.is_set():
            tick += 1
            if self.conn is not None:
                self._sample_waits()
            now = time.monotonic()
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

    def _sample_waits(self) -> None:
        try:
            rows = self.conn.execute(
                "select state, wait_event_type, wait_event from pg_stat_activity where pid = any(%s)",
                (self.pids,), prepare=True).fetchall()
        except psycopg.Error as err:
            self.samples.errors.append(str(err).splitlines()[0])
            self.conn = None
            return
        self.samples.wait_samples += 1
        for state, wtype, event in rows:
            if state != "active":
                key = f"Client:{state or 'unknown'}"
            elif wtype:
                key = f"{wtype}:{event}"
            else:
                key = "CPU"
            self.samples.waits[key] += 1
