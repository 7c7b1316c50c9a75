"""The database host's counters from a Prometheus node_exporter running on it.

For hosts where capmark may neither read /proc itself nor through the database (a managed or locked-down
server) but an operator already runs node_exporter. Its series are turned back into the /proc units of
procfs.py (CPU ticks, sectors, milliseconds, bytes), so the step and the analysis treat this source exactly like
the other two. node_exporter has no CPU by process: the instance's and other programs' CPU are not visible.
"""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass, field

import psutil
from prometheus_client.parser import text_string_to_metric_families

from capmark.collect import procfs
from capmark.collect.hostsource import HostWideOnly, local_boot_id
from capmark.config import (
    MASK,
    NODE_EXPORTER_EXAMPLE,
    NODE_EXPORTER_TOKEN_ENV,
    check_single_login,
    parse_node_exporter_url,
    redact_url,
)
from capmark.errors import CapmarkError

NAME = "node-exporter"
# A healthy exporter answers in ~10 ms; 5 s rides out a loaded host without stalling the 1 Hz sampler for long.
FETCH_TIMEOUT_S = 5.0
# The whole page of a host with thousands of disks and CPUs is a few MB; a cap keeps a wrong address (a file
# server, a log endpoint) from filling memory.
MAX_RESPONSE_BYTES = 64 << 20
METRICS_PATH = "/metrics"  # node_exporter's page; its "/" is an HTML landing page
EXAMPLE_URL = NODE_EXPORTER_EXAMPLE
# Unauthorized, Forbidden: the exporter (or a proxy in front of it) wants credentials, or other ones
LOGIN_REFUSED = (401, 403)
LOGIN_HINT = ("give its user and password in the address (http://USER:PASSWORD@HOST:9100/metrics) or its bearer token "
              f"(--node-exporter-token-file FILE or {NODE_EXPORTER_TOKEN_ENV}).")
# The collectors (node_exporter's names) the 1 Hz reading needs, asked for with its URL filter ?collect[]=...;
# the others (network, file systems, thermal...) would more than double the text parsed every second for nothing.
SAMPLE_COLLECTORS = ("cpu", "stat", "diskstats", "meminfo", "pressure")
DEVICE_COLLECTORS = ("filesystem", "diskstats")
# node_exporter multiplies /proc/diskstats sectors by 512: the kernel's fixed sector unit, whatever the device's.
# node_boot_time_seconds is /proc/stat btime, whole seconds that the kernel derives from the wall clock, so it can
# drift by a second between readings of the same boot; 2 s still tells two running kernels apart.
BOOT_TIME_TOLERANCE_S = 2.0
# The kernel averages pressure stalls over 10 s; node_exporter exports only the totals, so the share is derived
# from the totals seen over the same span of readings.
PRESSURE_WINDOW_S = 10.0
PRESSURE_KINDS = ("cpu", "io", "memory")
# The kernel folds each CPU's stall time into the totals at its own moments, so over a short span (the first
# reading after the start) the totals can grow by more than the span: a share is at most the whole span.
MAX_STALL_PCT = 100.0

# procfs.DISK_FIELDS key -> the node_exporter series and the factor back to /proc/diskstats units
DISK_SERIES: dict[str, tuple[str, float]] = {
    "reads": ("node_disk_reads_completed_total", 1.0),
    "reads_merged": ("node_disk_reads_merged_total", 1.0),
    "sectors_read": ("node_disk_read_bytes_total", 1.0 / procfs.SECTOR_BYTES),
    "read_ms": ("node_disk_read_time_seconds_total", 1000.0),
    "writes": ("node_disk_writes_completed_total", 1.0),
    "writes_merged": ("node_disk_writes_merged_total", 1.0),
    "sectors_written": ("node_disk_written_bytes_total", 1.0 / procfs.SECTOR_BYTES),
    "write_ms": ("node_disk_write_time_seconds_total", 1000.0),
    "in_flight": ("node_disk_io_now", 1.0),
    "io_ms": ("node_disk_io_time_seconds_total", 1000.0),
    "weighted_io_ms": ("node_disk_io_time_weighted_seconds_total", 1000.0),
    "discards": ("node_disk_discards_completed_total", 1.0),
    "discards_merged": ("node_disk_discards_merged_total", 1.0),
    "sectors_discarded": ("node_disk_discarded_sectors_total", 1.0),  # already in sectors, unlike reads/writes
    "discard_ms": ("node_disk_discard_time_seconds_total", 1000.0),
    "flushes": ("node_disk_flush_requests_total", 1.0),
    "flush_ms": ("node_disk_flush_requests_time_seconds_total", 1000.0),
}

NO_PROCESS_CPU = ("CPU by process: a node_exporter reports only host-wide counters, so the database's CPU is taken "
                  "as the host's busy time and the host's other programs cannot be told apart from it")
NO_PRESSURE = ("stall pressure: the node_exporter reports no node_pressure_* series (its pressure collector is off, "
               "or the host's kernel has no pressure stall information)")
NO_CPU_MODEL = "the CPU model: start the node_exporter with --collector.cpu.info to report it"

Series = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value) of each series


@dataclass
class Scrape:
    """One page of the exporter, by sample name."""

    series: Series

    def value(self, name: str) -> float | None:
        rows = self.series.get(name)
        return rows[0][1] if rows else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        return {labels[label]: v for labels, v in self.series.get(name, []) if label in labels}

    def label(self, name: str, label: str) -> str | None:
        rows = self.series.get(name)
        return rows[0][0].get(label) if rows else None


def parse(text: str) -> Scrape:
    """The Prometheus text format, read by the Prometheus client library's own parser; ValueError if not."""
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((sample.labels, sample.value))
    return Scrape(series)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to read the exporter: its address without credentials, that address as messages show it, and
    the Authorization header (basic from the address's user and password, or a bearer token)."""

    url: str
    shown: str
    authorization: str | None = field(default=None, repr=False)


def endpoint(url: str, token: str | None = None) -> Endpoint:
    """The exporter's /metrics address from what the user gave, its credentials taken out of it; CapmarkError if
    it is no http(s) address."""
    address = parse_node_exporter_url(url)
    check_single_login(address, token)
    parts = urllib.parse.urlsplit(f"{address.scheme}://{address.location}")
    if parts.path in ("", "/"):
        parts = parts._replace(path=METRICS_PATH)
    bare = urllib.parse.urlunsplit(parts)
    if address.user is not None:
        pair = f"{address.user}:{address.password or ''}".encode()
        user = urllib.parse.quote(address.user, safe="")
        shown = redact_url(f"{address.scheme}://{user}:{MASK}@{bare.split('://', 1)[1]}")
        return Endpoint(bare, shown, f"Basic {base64.b64encode(pair).decode()}")
    return Endpoint(bare, redact_url(bare), f"Bearer {token}" if token else None)


def with_collectors(url: str, collectors: tuple[str, ...] | None) -> str:
    """The address asking node_exporter for those collectors only (all of them for None)."""
    if not collectors:
        return url
    query = urllib.parse.urlencode([("collect[]", c) for c in collectors])
    return f"{url}{'&' if '?' in url else '?'}{query}"


def fetch_text(url: str, shown: str, authorization: str | None = None) -> str:
    """The page at url; CapmarkError saying what is wrong when there is none (naming the address as shown)."""
    request = urllib.request.Request(url)
    if authorization:
        request.add_unredirected_header("Authorization", authorization)  # never sent on to where a redirect points
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:
            body = response.read(MAX_RESPONSE_BYTES)
    except urllib.error.HTTPError as err:
        if err.code in LOGIN_REFUSED:
            why = "it rejected the login given" if authorization else "it asks for a login"
            raise CapmarkError(f"The node_exporter at {shown} answered HTTP {err.code} ({err.reason}): {why}; "
                               f"{LOGIN_HINT}") from None
        raise CapmarkError(f"The node_exporter address {shown} answered HTTP {err.code} ({err.reason}); "
                           f"node_exporter serves its counters at {METRICS_PATH}, e.g. {EXAMPLE_URL}.") from None
    except urllib.error.URLError as err:
        raise CapmarkError(_unreachable(shown, err.reason)) from None
    except http.client.HTTPException:
        raise CapmarkError(f"{shown} does not answer in HTTP, so it is not a node_exporter (is the port another "
                           f"service's?); give the address of the node_exporter, e.g. {EXAMPLE_URL}.") from None
    except OSError as err:  # a timeout or a reset while reading the page
        raise CapmarkError(_unreachable(shown, err)) from None
    return body.decode("utf-8", "replace")


def _unreachable(shown: str, reason: object) -> str:
    return (f"No node_exporter answered at {shown} ({_why(reason)}); check that it runs on the database host and "
            "that this machine may reach that address and port.")


def _why(reason: object) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {FETCH_TIMEOUT_S:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[:1].lower() + reason.strerror[1:]  # "Connection refused" inside a sentence
    return str(reason)


def stat_from(scrape: Scrape) -> procfs.ProcStat | None:
    """/proc/stat from node_cpu_seconds_total: seconds back to USER_HZ ticks (node_exporter divided by it)."""
    per_cpu: dict[str, dict[str, int]] = {}
    for labels, seconds in scrape.series.get("node_cpu_seconds_total", []):
        if labels.get("mode") in procfs.CPU_FIELDS and "cpu" in labels:
            per_cpu.setdefault(labels["cpu"], {})[labels["mode"]] = round(seconds * procfs.USER_HZ)
    if not per_cpu:
        return None
    ordered = [per_cpu[c] for c in sorted(per_cpu, key=_cpu_number)]
    total = {k: sum(cpu.get(k, 0) for cpu in ordered) for k in procfs.CPU_FIELDS}
    return procfs.ProcStat(total, ordered, _count(scrape.value("node_context_switches_total")),
                           _count(scrape.value("node_procs_running")), _count(scrape.value("node_procs_blocked")))


def _cpu_number(label: str) -> tuple[int, str]:
    return (int(label), "") if label.isdigit() else (1 << 30, label)


def _count(value: float | None) -> int:
    return round(value) if value is not None else 0


def disks_from(scrape: Scrape, devices: list[str]) -> dict[str, dict[str, int]]:
    """/proc/diskstats fields of the devices, in its units: sectors, milliseconds, counts."""
    out: dict[str, dict[str, int]] = {}
    for key, (name, factor) in DISK_SERIES.items():
        for device, value in scrape.by_label(name, "device").items():
            if device in devices:
                out.setdefault(device, {})[key] = round(value * factor)
    return out


def memory_from(scrape: Scrape) -> dict[str, int]:
    """The /proc/meminfo lines capmark reports, in bytes (node_exporter already multiplied kB by 1024)."""
    out = {}
    for key in procfs.MEMINFO_LINES:
        value = scrape.value(f"node_memory_{key}_bytes")
        if value is not None:
            out[key] = round(value)
    return out


def stalls_from(scrape: Scrape) -> dict[tuple[str, str], float]:
    """Seconds stalled so far: (kind, 'some' | 'full') -> total. node_exporter calls 'some' waiting and 'full'
    stalled (1.5 has no 'full' line for the CPU)."""
    out = {}
    for kind in PRESSURE_KINDS:
        for line, word in (("some", "waiting"), ("full", "stalled")):
            value = scrape.value(f"node_pressure_{kind}_{word}_seconds_total")
            if value is not None:
                out[(kind, line)] = value
    return out


@dataclass
class StallHistory:
    """The stall totals of the last readings, so that a reading can say which share of the last ~10 s was
    stalled, as the kernel's avg10 would (an average over the span, not the kernel's decaying one)."""

    readings: deque[tuple[float, dict[tuple[str, str], float]]] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pressure(self, now: float, totals: dict[tuple[str, str], float]) -> dict[str, procfs.Pressure]:
        with self.lock:
            while len(self.readings) > 1 and now - self.readings[1][0] >= PRESSURE_WINDOW_S:
                self.readings.popleft()  # keep one reading at or beyond the window's start as its base
            base_t, base = self.readings[0] if self.readings else (now, totals)
            self.readings.append((now, totals))
        span = now - base_t

        def share(key: tuple[str, str]) -> float:
            if span <= 0 or key not in base:
                return 0.0
            return round(min(MAX_STALL_PCT, 100.0 * max(0.0, totals[key] - base[key]) / span), 2)

        out = {}
        for kind in PRESSURE_KINDS:
            if (kind, "some") in totals:
                full = share((kind, "full")) if (kind, "full") in totals else None
                out[kind] = procfs.Pressure(share((kind, "some")), round(totals[(kind, "some")] * 1e6), full)
        return out


@dataclass
class FetchCost:
    """What reading the exporter cost this process: capmark's own overhead, reported beside its results."""

    fetches: int = 0
    fetch_s: float = 0.0  # wall time waiting for the page
    parse_s: float = 0.0  # CPU time parsing it

    def parse_ms_per_fetch(self) -> float | None:
        return 1000.0 * self.parse_s / self.fetches if self.fetches else None


@dataclass
class NodeExporterHost(HostWideOnly):
    """A database host read through its node_exporter: host-wide counters only."""

    url: str
    facts: procfs.HostFacts
    driver_on_host: bool
    enabled: frozenset[str] | None  # the exporter's collectors; None if it does not say (no filter is sent)
    data_directory: str | None = None
    name: str = NAME
    stalls: StallHistory = field(default_factory=StallHistory)
    cost: FetchCost = field(default_factory=FetchCost)
    shown: str = ""  # the address in messages, credentials masked (the url itself when empty)
    authorization: str | None = field(default=None, repr=False)

    def scrape(self, collectors: tuple[str, ...] | None) -> Scrape:
        """One page with only those collectors (those the exporter runs), timed."""
        wanted = None if collectors is None or self.enabled is None else tuple(
            c for c in collectors if c in self.enabled)
        if wanted == ():
            return Scrape({})  # the exporter runs none of them: nothing to ask for
        started = time.perf_counter()
        text = fetch_text(with_collectors(self.url, wanted), self.shown or self.url, self.authorization)
        fetched, cpu = time.perf_counter(), time.thread_time()
        try:
            page = parse(text)
        except ValueError:
            raise CapmarkError(f"{self.shown or self.url} does not answer in the Prometheus text format; give the "
                               f"address of the node_exporter's counters, e.g. {EXAMPLE_URL}.") from None
        self.cost.fetches += 1
        self.cost.fetch_s += fetched - started
        self.cost.parse_s += time.thread_time() - cpu
        return page

    def stat(self) -> procfs.ProcStat | None:
        return stat_from(self.scrape(("cpu", "stat")))

    def diskstats(self, devices: list[str]) -> dict[str, dict[str, int]]:
        return disks_from(self.scrape(("diskstats",)), devices)

    def meminfo(self) -> dict[str, int]:
        return memory_from(self.scrape(("meminfo",)))

    def pressure(self) -> dict[str, procfs.Pressure]:
        return self.stalls.pressure(time.monotonic(), stalls_from(self.scrape(("pressure",))))

    def counters(self, devices: list[str]) -> tuple[procfs.ProcStat | None, dict[str, dict[str, int]],
                                                  dict[str, int], dict[str, procfs.Pressure]]:
        """CPU, the devices, memory and pressure in one page, as ProcHost.counters gives them."""
        page = self.scrape(SAMPLE_COLLECTORS)
        return (stat_from(page), disks_from(page, devices), memory_from(page),
                self.stalls.pressure(time.monotonic(), stalls_from(page)))

    def data_device(self, data_directory: str | None) -> tuple[str | None, str]:
        """The disk of the file system holding the data directory, from the exporter's file systems."""
        data_directory = data_directory or self.data_directory
        if not data_directory:
            return None, "the role may not read data_directory, so the data device is unknown"
        return device_of(self.scrape(DEVICE_COLLECTORS), data_directory)

    def close(self) -> None:
        pass


def device_of(scrape: Scrape, path: str) -> tuple[str | None, str]:
    """The node_disk_* device under the longest mount point holding path, or None and the reason."""
    best: tuple[str, str] | None = None
    target = path.rstrip("/") + "/"
    for name, rows in scrape.series.items():
        if not name.startswith("node_filesystem_"):
            continue
        for labels, _value in rows:
            point, device = labels.get("mountpoint"), labels.get("device")
            if point and device and target.startswith(point.rstrip("/") + "/") and (
                    best is None or len(point) > len(best[0])):
                best = (point, device)
    if best is None:
        return None, (f"no file system the node_exporter reports holds {path} (it leaves out some kinds, such as "
                      "overlay, and mounts under /dev, /proc and /sys)")
    point, device = best
    disks = set(scrape.by_label("node_disk_io_time_seconds_total", "device"))
    if not disks:
        return None, "the node_exporter reports no disks (its diskstats collector is off)"
    name = _disk_name(device, scrape)
    if name in disks:
        return name, ""
    return None, (f"the file system of {path} (mounted at {point} from {device}) is not among the disks the "
                  "node_exporter reports; it leaves out partitions unless started with "
                  "--collector.diskstats.device-exclude='^(ram|loop|fd)\\d+$'")


def _disk_name(device: str, scrape: Scrape) -> str:
    """The kernel's name of a mounted device: /dev/sda1 -> sda1; /dev/mapper/vg-data -> its dm-N."""
    if device.startswith("/dev/mapper/"):
        mapped = {labels.get("name"): labels.get("device") for labels, _v in
                  scrape.series.get("node_disk_device_mapper_info", [])}
        return mapped.get(device.removeprefix("/dev/mapper/")) or device
    return device.removeprefix("/dev/")


def node_exporter_source(url: str, data_directory: str | None, token: str | None = None) -> NodeExporterHost:
    """The exporter at url, checked to be a node_exporter; CapmarkError in one sentence when it is not. The user and
    password in url log in with basic authentication; a token is sent as a bearer token instead."""
    where = endpoint(url, token)
    probe = NodeExporterHost(where.url, procfs.HostFacts(NAME), driver_on_host=False, enabled=None, shown=where.shown,
                             authorization=where.authorization)
    page = probe.scrape(None)  # every collector once: the facts, and which collectors may be asked for
    stat = stat_from(page)
    if stat is None:
        raise CapmarkError(f"{where.shown} answers but reports no node_cpu_seconds_total, so it is not a node_exporter "
                           "(or its cpu collector is off); give the address of the node_exporter on the database "
                           f"host, e.g. {EXAMPLE_URL}.")
    enabled = frozenset(page.by_label("node_scrape_collector_success", "collector")) or None
    on_this_host = driver_on_host(page)
    host = NodeExporterHost(where.url, host_facts(page, stat, on_this_host), on_this_host, enabled, data_directory,
                            cost=probe.cost, shown=where.shown, authorization=where.authorization)
    host.stalls.pressure(time.monotonic(), stalls_from(page))  # the first reading's base
    return host


def host_facts(scrape: Scrape, stat: procfs.ProcStat, on_this_host: bool) -> procfs.HostFacts:
    memory = scrape.value("node_memory_MemTotal_bytes")
    facts = procfs.HostFacts(NAME, cores=len(stat.per_cpu), cpu_model=scrape.label("node_cpu_info", "model_name"),
                             memory_bytes=round(memory) if memory is not None else None,
                             kernel=scrape.label("node_uname_info", "release"),
                             # node_exporter has no boot id; an exporter on this machine's running kernel shares this
                             # machine's, so that the host's CPU probe, cached by it, is not measured again
                             boot_id=local_boot_id() if on_this_host else None,
                             cannot_see=[NO_PROCESS_CPU])
    if not stalls_from(scrape):
        facts.cannot_see.append(NO_PRESSURE)
    if facts.cpu_model is None:
        facts.cannot_see.append(NO_CPU_MODEL)
    return facts


def driver_on_host(scrape: Scrape) -> bool:
    """capmark runs on the database host: the same running kernel (boot time) and the same host name."""
    booted = scrape.value("node_boot_time_seconds")
    same_boot = booted is not None and abs(booted - psutil.boot_time()) <= BOOT_TIME_TOLERANCE_S
    return same_boot and scrape.label("node_uname_info", "nodename") == socket.gethostname()
