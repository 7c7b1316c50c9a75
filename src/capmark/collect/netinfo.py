"""What a job connection's socket carried: bytes and segments each way, and retransmissions.

The network tier of the three-tier view (client / network / database) in the CITI performance report: the
bytes a unit of work moves between the driver and the server. Linux keeps these counters per TCP socket and
hands them out with getsockopt(IPPROTO_TCP, TCP_INFO); capmark reads them at the step's two snapshots, while
the jobs wait at the barrier, so the difference is the measured window's traffic. A Unix-domain socket (a local
socket file) keeps no such counters.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, NotRequired, TypedDict

# Offsets of the fields read in struct tcp_info, from the Linux uapi header <linux/tcp.h>; checked with
# offsetof() against /usr/include/linux/tcp.h of Debian 12 (the layout only ever grows at its end).
TCPI_TOTAL_RETRANS = 100  # __u32 tcpi_total_retrans: segments retransmitted over the connection's life
TCPI_BYTES_ACKED = 120  # __u64 tcpi_bytes_acked (Linux 4.1): bytes sent that the peer acknowledged
TCPI_BYTES_RECEIVED = 128  # __u64 tcpi_bytes_received (Linux 4.1): bytes received in order
TCPI_SEGS_OUT = 136  # __u32 tcpi_segs_out (Linux 4.2): segments sent, retransmissions and pure ACKs included
TCPI_SEGS_IN = 140  # __u32 tcpi_segs_in (Linux 4.2): segments received, pure ACKs included
# Bytes to ask for: up to the end of tcpi_segs_in. An older kernel returns fewer and has no byte counters.
TCP_INFO_NEEDED = TCPI_SEGS_IN + 4
# The 32-bit counters wrap (4 G segments); a delta is taken modulo their range.
U32 = 1 << 32
# SO_DOMAIN (Linux 2.6.32) is missing from the socket module of some Python builds; its value is fixed.
SO_DOMAIN = getattr(socket, "SO_DOMAIN", 39)

UNIX_SOCKET = "n/a: Unix socket"
OLD_KERNEL = "n/a: this Linux kernel keeps no byte counters per TCP connection (they came with Linux 4.2)"
NOT_LINUX = "n/a: per-connection TCP counters are read on Linux only"


@dataclass(frozen=True)
class TcpCounters:
    """One reading of a TCP connection's cumulative counters (since the connection opened)."""

    bytes_sent: int  # sent and acknowledged by the server
    bytes_received: int
    segments_out: int
    segments_in: int
    retransmits: int


@dataclass(frozen=True)
class NetReading:
    """A connection's counters, or why there are none (reason starts with "n/a: ")."""

    transport: str  # tcp | unix | "" when the socket could not be read
    counters: TcpCounters | None
    reason: str = ""


class NetworkRecord(TypedDict):
    """The traffic as StepResult.network stores it: TcpCounters' fields, or the reason they are missing."""

    transport: str
    connections: int
    reason: NotRequired[str]
    bytes_sent: NotRequired[int]
    bytes_received: NotRequired[int]
    segments_out: NotRequired[int]
    segments_in: NotRequired[int]
    retransmits: NotRequired[int]


@dataclass(frozen=True)
class NetworkDelta:
    """The traffic of a set of connections between two readings, summed over them."""

    transport: str
    connections: int
    counters: TcpCounters | None
    reason: str = ""

    def to_dict(self) -> NetworkRecord:
        """The form StepResult.network stores: the counters' fields, or the reason they are missing."""
        out = NetworkRecord(transport=self.transport, connections=self.connections)
        c = self.counters
        if c is None:
            out["reason"] = self.reason
        else:
            out["bytes_sent"], out["bytes_received"] = c.bytes_sent, c.bytes_received
            out["segments_out"], out["segments_in"], out["retransmits"] = c.segments_out, c.segments_in, c.retransmits
        return out


def parse_tcp_info(raw: bytes) -> TcpCounters | None:
    """The counters from struct tcp_info as the kernel returned it; None if it is too short to hold them."""
    if len(raw) < TCP_INFO_NEEDED:
        return None
    (retrans,) = struct.unpack_from("=I", raw, TCPI_TOTAL_RETRANS)
    acked, received, segs_out, segs_in = struct.unpack_from("=QQII", raw, TCPI_BYTES_ACKED)
    return TcpCounters(acked, received, segs_out, segs_in, retrans)


def read(conn: Any) -> NetReading:
    """Read one database connection's socket counters (psycopg's and mysqlclient's both tell their descriptor by
    fileno()). The connection's own descriptor is duplicated and only
    the duplicate is closed, so the connection is left as it was."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None:
        return NetReading("", None, NOT_LINUX)
    try:
        fd = conn.fileno()
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            family = sock.getsockopt(socket.SOL_SOCKET, SO_DOMAIN)
            if family == socket.AF_UNIX:
                return NetReading("unix", None, UNIX_SOCKET)
            raw = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, TCP_INFO_NEEDED)
    except Exception as err:  # noqa: BLE001 - OSError or the driver's error: either way, unreadable
        return NetReading("", None, f"n/a: the connection's socket could not be read ({err})")
    counters = parse_tcp_info(raw)
    return NetReading("tcp", counters, "" if counters else OLD_KERNEL)


def read_all(conns: Iterable[Any]) -> list[NetReading]:
    return [read(c) for c in conns]


def _difference(before: TcpCounters, after: TcpCounters) -> TcpCounters:
    return TcpCounters(after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received,
                       (after.segments_out - before.segments_out) % U32, (after.segments_in - before.segments_in) % U32,
                       (after.retransmits - before.retransmits) % U32)


def summed_delta(before: list[NetReading], after: list[NetReading]) -> NetworkDelta:
    """Each connection's traffic between its two readings, summed over the connections (the units of a step
    are the jobs' together, so their traffic is too). Any connection without counters makes the sum n/a."""
    n = len(after)
    missing = next((r for r in [*before, *after] if r.counters is None), None)
    if missing is not None:
        return NetworkDelta(missing.transport, n, None, missing.reason)
    if len(before) != n:
        return NetworkDelta("tcp", n, None, "n/a: the connections changed between the two readings")
    parts = [_difference(b.counters, a.counters) for b, a in zip(before, after, strict=True)
             if b.counters is not None and a.counters is not None]
    total = TcpCounters(*(sum(getattr(p, f.name) for p in parts) for f in fields(TcpCounters)))
    return NetworkDelta("tcp", n, total)
