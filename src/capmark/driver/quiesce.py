"""Let the server settle before a test, so that its first step does not pay for what came before.

Without this, the dirty buffers of the data setup (hundreds of MB in a fresh run) or of the previous test
are written by the checkpointer and the OS during the next measured window, and autovacuum (PostgreSQL) or
purge (InnoDB) cleans up after the previous test while this one runs. Quiescing asks the engine for a
checkpoint where it has one (PostgreSQL's CHECKPOINT writes and syncs every dirty buffer now), then waits until
the data device has stopped writing and the engine's background work on capmark's tables is done, for at most
QUIESCE_LIMIT_S.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from capmark.collect.hosts import HostSource
from capmark.collect.procfs import SECTOR_BYTES
from capmark.engines.base import Engine

# After the CHECKPOINT the server has nothing left to write, so a device still busy after half a minute is busy
# with another program's writes, which waiting longer does not cure; the note then says so.
QUIESCE_LIMIT_S = 30.0
# The device counts as idle after this long without a write burst. After the checkpoint the server's own writes are
# synced, so the window guards against what is still streaming (the InnoDB page cleaner, another program's copy), which
# shows within half a second as well as within one; the OS's periodic writeback (every 5 s) no such window catches.
# Half a second less per test: 19 s of a full-suite run's 38 tests.
IDLE_WINDOW_S = 0.5
# Writes below this rate do not count as activity: a shared host always trickles some (journals, other
# programs' logs), while a checkpoint or the OS flushing the setup writes tens to hundreds of MB a second.
IDLE_WRITE_BYTES_PER_S = 1 << 20
POLL_S = 0.1

@dataclass
class Quiesced:
    """How settling went: stored with the test, and a note when it did not fully succeed."""

    seconds: float
    checkpoint_done: bool
    limit_hit: bool
    still_busy: list[str] = field(default_factory=list)  # what was still going on when the limit was hit
    checkpoint_refused: str = ""  # the engine's sentence for a checkpoint the user may not request

    def note(self) -> str:
        """A sentence for the first step's notes; empty when the server settled."""
        parts = []
        if self.limit_hit:
            parts.append(f"The server had not settled after {self.seconds:.0f} s before this test "
                         f"({', '.join(self.still_busy)}); the first step may include that activity.")
        if not self.checkpoint_done:
            parts.append(self.checkpoint_refused)
        return " ".join(parts)


class _DeviceWatch:
    """Bytes written to the data devices over the last IDLE_WINDOW_S, from /proc/diskstats."""

    def __init__(self, devices: list[str], host: HostSource) -> None:
        self.devices = devices
        self.host = host
        self.samples: deque[tuple[float, int]] = deque()

    def _written_sectors(self) -> int:
        return sum(d["sectors_written"] for d in self.host.diskstats(self.devices).values())

    def idle(self) -> bool:
        now = time.monotonic()
        self.samples.append((now, self._written_sectors()))
        while len(self.samples) > 2 and now - self.samples[1][0] >= IDLE_WINDOW_S:
            self.samples.popleft()  # keep the newest sample that is at least a window old
        oldest_t, oldest_sectors = self.samples[0]
        span = now - oldest_t
        if span < IDLE_WINDOW_S:
            return False
        written = (self.samples[-1][1] - oldest_sectors) * SECTOR_BYTES
        return written < IDLE_WRITE_BYTES_PER_S * span


def quiesce(conn: Any, engine: Engine, devices: list[str], host: HostSource,
            limit_s: float = QUIESCE_LIMIT_S) -> Quiesced:
    """Ask the engine for a checkpoint, then wait until the data devices (when this host sees them) are idle and
    the engine's background work on capmark's tables is done; at most limit_s. conn must be in autocommit mode."""
    started = time.monotonic()
    refused = engine.checkpoint(conn)  # '' when the checkpoint was written
    watch = _DeviceWatch(devices, host) if devices else None
    while True:
        busy = engine.background_work(conn)
        if watch is not None and not watch.idle():
            busy.insert(0, f"the data device {', '.join(devices)} was writing")
        elapsed = time.monotonic() - started
        if not busy or elapsed >= limit_s:
            return Quiesced(elapsed, not refused, bool(busy), busy, refused)
        time.sleep(POLL_S)
