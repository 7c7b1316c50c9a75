"""pgbench's per-transaction logs (-l) read into what a step's jobs hand back: per client, the transactions that
ended inside the measured window, as latency histograms per script, errors, the 1 s series, retries, failures by
SQLSTATE class and, with --rate, the schedule lag.

One line per transaction (pgbench 15 and later):
    client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]
`time` is the latency in microseconds, counted from the transaction's scheduled start when --rate is given (so it
includes schedule_lag), or a word for a transaction that did not complete: `serialization` or `deadlock` (with
--failures-detailed), `failed`, or `skipped` (--latency-limit, which capmark does not use). time_epoch and time_us
are when it ended. schedule_lag is present with --rate, retries when --max-tries is not 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capmark.driver.jobs import Tally
from capmark.histogram import LatencyHistogram
from capmark.workloads.scripts import ScriptRecord, ScriptsRecord

# SQLSTATE class of the failures pgbench retries and logs by name: serialization_failure (40001) and
# deadlock_detected (40P01) are both class 40, the key the Python engine stores them under.
FAILURE_CLASS = {"serialization": "40", "deadlock": "40"}
FAILED_WORDS = frozenset({"serialization", "deadlock", "failed"})
SKIPPED = "skipped"

# pgbench ends a client on any other error: "client 3 script 0 aborted in command 1 query 0: ERROR:  ..."
ABORT_LINE = re.compile(r"client (\d+) script (\d+) aborted in command (\d+) query \d+: (.*)")
# Under -M prepared a statement that fails to prepare (a misspelt column) is reported twice: the server's error on a
# line of its own, then the client's abort, which names only the prepared statement the failure left missing.
SERVER_ERROR_LINE = re.compile(r"^pgbench: error: (ERROR:\s.*)$")
NOT_PREPARED = re.compile(r'prepared statement "P_\d+" does not exist')


class LogError(Exception):
    """A log line that is not pgbench's format: the message names the file and line."""


@dataclass
class LogLine:
    client: int
    script: int
    latency_us: int | None  # None: the transaction failed (see failure) or was skipped
    failure: str  # '' | serialization | deadlock | failed | skipped
    end_s: float  # epoch seconds at which it ended
    lag_us: int | None
    retries: int


def parse_line(line: str, rate: bool, retried: bool, where: str = "") -> LogLine:
    """One line; rate and retried say which optional columns pgbench wrote (--rate, --max-tries other than 1)."""
    parts = line.split()
    expected = 6 + rate + retried
    if len(parts) != expected:
        raise LogError(f"{where}: expected {expected} fields in pgbench's log line, found {len(parts)}: {line!r}")
    try:
        client, script, epoch, usec = int(parts[0]), int(parts[3]), int(parts[4]), int(parts[5])
        time_field = parts[2]
        latency = int(time_field) if time_field.isdigit() else None
        lag = int(parts[6]) if rate else None
        retries = int(parts[6 + rate]) if retried else 0
    except ValueError:
        raise LogError(f"{where}: a field of pgbench's log line is not a number: {line!r}") from None
    if latency is None and time_field not in FAILED_WORDS and time_field != SKIPPED:
        raise LogError(f"{where}: unknown transaction time {time_field!r} in pgbench's log line: {line!r}")
    return LogLine(client, script, latency, "" if latency is not None else time_field, epoch + usec / 1e6, lag,
                   retries)


def read_lines(paths: Iterable[Path], rate: bool, retried: bool) -> list[LogLine]:
    out = []
    for path in paths:
        with path.open() as f:
            for n, line in enumerate(f, start=1):
                if line.strip():
                    out.append(parse_line(line, rate, retried, f"{path.name}:{n}"))
    return out


@dataclass
class ScriptCounts:
    """The window's retries and failures by SQLSTATE class, per script: the part of the Python engine's script
    statistics that pgbench's log gives (it has no per-command figures over a window: -r reports whole runs)."""

    names: list[str]
    retries: list[int]
    failures_by_class: list[dict[str, int]]

    @classmethod
    def zeros(cls, names: list[str]) -> ScriptCounts:
        return cls(list(names), [0] * len(names), [{} for _ in names])

    def plus(self, other: ScriptCounts) -> ScriptCounts:
        out = ScriptCounts.zeros(self.names)
        for i in range(len(self.names)):
            out.retries[i] = self.retries[i] + other.retries[i]
            for part in (self.failures_by_class[i], other.failures_by_class[i]):
                for k, v in part.items():
                    out.failures_by_class[i][k] = out.failures_by_class[i].get(k, 0) + v
        return out

    def to_dict(self) -> ScriptsRecord:
        """As the Python engine stores its script statistics (instruments.unit_stats), without the per-command
        list, which pgbench cannot give over a window."""
        return ScriptsRecord(scripts={
            name: ScriptRecord(commands=[], retries=self.retries[i],
                               failures_by_class={k: v for k, v in sorted(self.failures_by_class[i].items()) if v})
            for i, name in enumerate(self.names)})


@dataclass
class Window:
    start: float  # epoch seconds
    end: float


@dataclass
class _Client:
    latency_s: list[list[float]]
    lag_s: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    error_seconds: list[int] = field(default_factory=list)


def tallies(lines: list[LogLine], names: list[str], clients: int, window: Window, rate: bool) -> list[Tally]:
    """One Tally per pgbench client (= capmark job) from the transactions that ended inside the window."""
    n = len(names)
    out = [Tally([LatencyHistogram() for _ in range(n)], [0] * n) for _ in range(clients)]
    counts = [ScriptCounts.zeros(names) for _ in range(clients)]
    acc = [_Client([[] for _ in range(n)]) for _ in range(clients)]
    for line in lines:
        if not window.start <= line.end_s < window.end or line.failure == SKIPPED:
            continue
        if not 0 <= line.client < clients or not 0 <= line.script < n:
            raise LogError(f"pgbench logged client {line.client} script {line.script}, outside the "
                           f"{clients} clients and {n} scripts it was given")
        c, tally, mine = acc[line.client], out[line.client], counts[line.client]
        mine.retries[line.script] += line.retries
        if line.latency_us is None:
            tally.errors[line.script] += 1
            c.error_seconds.append(int(line.end_s - window.start))
            cls = FAILURE_CLASS.get(line.failure, "??")
            mine.failures_by_class[line.script][cls] = mine.failures_by_class[line.script].get(cls, 0) + 1
            continue
        c.latency_s[line.script].append(line.latency_us / 1e6)
        c.ends.append(line.end_s)
        if rate and line.lag_us is not None:
            c.lag_s.append(line.lag_us / 1e6)
    for tally, c, mine in zip(out, acc, counts, strict=True):
        for t, values in enumerate(c.latency_s):
            if values:
                tally.histograms[t].add_durations(np.asarray(values))
        for value in c.lag_s:
            tally.lag.record(value)
        if c.ends:
            seconds, per = np.unique((np.asarray(c.ends) - window.start).astype(np.int64), return_counts=True)
            for second, count in zip(seconds.tolist(), per.tolist(), strict=True):
                tally.add_second(second, count, 0)
        for second in c.error_seconds:
            tally.add_second(second, 0, 1)
        tally.unit_stats = mine
    return out


@dataclass(frozen=True)
class Abort:
    """A client pgbench ended on an error it does not retry (a unique violation, a syntax error, ...)."""

    client: int
    script: int
    command: int
    message: str


def aborts(stderr: str) -> list[Abort]:
    """The clients pgbench ended, from its error output (the message's first line). A client that ended because its
    statement could not be prepared gets the server's reason for that, not pgbench's "prepared statement P_0 does
    not exist"."""
    out = []
    server_error = ""
    for line in stderr.splitlines():
        m = ABORT_LINE.search(line)
        if m:
            message = " ".join(m[4].split())
            if server_error and NOT_PREPARED.search(message):
                message = f"{server_error} (the statement could not be prepared)"
            out.append(Abort(int(m[1]), int(m[2]), int(m[3]), message))
        elif e := SERVER_ERROR_LINE.match(line):
            server_error = " ".join(e[1].split())
    return out
