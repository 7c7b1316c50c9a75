"""Observation records built from a known ground truth: three workloads with known service demands, rates that follow
a profile (quiet, a peak, a dip) with independent wobbles, a host whose CPU is background + sum(rate x demand) with a
small deterministic noise, and the counters the collector would store. Inputs for the capacity analysis, not mocks:
the analysis reads them exactly as it reads a collected observation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from capmark.capacity.round_trips import wait_factor
from capmark.observations import (
    ActivityCell,
    DeviceDelta,
    HostDelta,
    Interval,
    IntervalStatus,
    Observation,
    ObservationEvent,
    ObservationSettings,
    RoundTrips,
    SessionKey,
    SessionUse,
    StatementDelta,
)

BLOCK = 8192


@dataclass
class Truth:
    """What the builder put in, per workload: CPU seconds per unit (processes + their interrupt share), the device's
    busy seconds per unit, execution time per unit, and the peak rate."""

    cpu: dict[str, float] = field(default_factory=lambda: {"lookups": 0.0004, "orders": 0.002, "reports": 0.05})
    exec_s: dict[str, float] = field(default_factory=lambda: {"lookups": 0.0005, "orders": 0.006, "reports": 0.08})
    read_bytes: dict[str, float] = field(default_factory=lambda: {"lookups": 0.0, "orders": 0.0, "reports": 1e6})
    dirtied: dict[str, float] = field(default_factory=lambda: {"lookups": 0.0, "orders": 2.0, "reports": 0.0})
    wal: dict[str, float] = field(default_factory=lambda: {"lookups": 0.0, "orders": 2000.0, "reports": 0.0})
    # WAL bytes per unit of a reader's pruning: written by the WAL writer, waited for by no commit (none by default)
    prune_wal: dict[str, float] = field(default_factory=lambda: {"lookups": 0.0, "orders": 0.0, "reports": 0.0})
    flush_s: float = 0.0  # WAL flush busy seconds per order's commit; 0: the WAL statistics were not collected
    peak_rate: dict[str, float] = field(default_factory=lambda: {"lookups": 800.0, "orders": 150.0, "reports": 4.0})
    read_s_per_byte: float = 5e-9
    write_s_per_byte: float = 2e-8
    background_cores: float = 0.2  # CPU of processes no database process explains (clients on the host)
    clients_per_core: float = 0.0  # and more of it per busy core of the workloads' processes (their clients' work)
    system_cores: float = 0.05  # the checkpointer and friends
    interrupt_share: float = 0.05  # of each workload's CPU, charged to no process (softirq)
    noise: float = 0.01  # host busy's deterministic relative noise
    cores: int = 4
    collector_per_s: float = 1.0  # the collector's own transactions
    # each unit's CPU times 1 + cost_slope x (u - cost_at), u the host's CPU utilisation in its interval: a cost that
    # falls (cost_slope < 0) or rises as the host fills
    cost_slope: float = 0.0
    cost_at: float = 0.5
    # the collector's round trips: idle_s + queue_s x the M/M/c wait factor at the interval's host busy, with a small
    # deterministic noise; 0: not probed (an observation from before the probe)
    round_trip_idle_s: float = 0.0
    round_trip_queue_s: float = 0.0

    def device(self, name: str) -> float:
        return self.read_bytes[name] * self.read_s_per_byte + (self.dirtied[name] * BLOCK + self.wal[name]) * \
            self.write_s_per_byte


APPS = {"lookups": "lookup-app", "orders": "orders-app", "reports": "report-app"}
QUERY = {"lookups": "101", "orders_update": "201", "orders_insert": "202", "reports": "301", "begin": "900",
         "end": "901", "collector": "999"}


def level(ordinal: int, peak_start: int, peak_len: int) -> float:
    """The load profile: quiet (0.5), the peak (1.0) for peak_len intervals, a dip (0.3) after it."""
    if ordinal < peak_start:
        return 0.5 + 0.2 * ordinal / max(1, peak_start)
    if ordinal < peak_start + peak_len:
        return 1.0
    return 0.3


def wobble(name: str, ordinal: int) -> float:
    """Independent deterministic variation per workload, so that the rates do not move together."""
    phase = {"lookups": 0.0, "orders": 2.1, "reports": 4.2}[name]
    period = {"lookups": 3.1, "orders": 4.7, "reports": 2.3}[name]
    return 1 + 0.15 * math.sin(ordinal * 2 * math.pi / period + phase)


def _busy_cores(truth: Truth, units: dict[str, float], length_s: float, cpu: dict[str, float]) -> float:
    """The host's busy cores without the noise: the workloads' processes with their clients, interrupts, the rest."""
    work = sum(units[n] * cpu[n] for n in units) / length_s
    return work * (1 - truth.interrupt_share) * (1 + truth.clients_per_core) + work * truth.interrupt_share + \
        truth.system_cores + truth.background_cores


def _cost_factor(truth: Truth, units: dict[str, float], length_s: float, cpu: dict[str, float]) -> float:
    """The interval's cost factor where the host settles (a fixed point: the factor sets the busy that sets it)."""
    factor = 1.0
    for _ in range(50):
        busy = _busy_cores(truth, units, length_s, {n: d * factor for n, d in cpu.items()}) / truth.cores
        factor = 1 + truth.cost_slope * (busy - truth.cost_at)
    return factor


def build(truth: Truth | None = None, intervals: int = 60, length_s: float = 60.0, peak_start: int = 30,
          peak_len: int = 10, broken: tuple[int, ...] = (), events: tuple[tuple[int, str], ...] = (),
          texts: bool = True, cpu_scale: dict[str, float] | None = None) -> tuple[Observation, dict[int, dict[str,
                                                                                                          float]]]:
    """The observation and, per interval, each workload's true units."""
    truth = truth or Truth()
    base_cpu = {n: d * (cpu_scale or {}).get(n, 1.0) for n, d in truth.cpu.items()}
    units_by_interval: dict[int, dict[str, float]] = {}
    out = []
    t0 = 1_800_000_000.0
    for k in range(intervals):
        start = t0 + k * length_s
        if k in broken:
            out.append(Interval(ordinal=k, start=start, end=start + length_s, status=IntervalStatus.BROKEN,
                                reason="the server restarted"))
            continue
        units = {n: round(truth.peak_rate[n] * level(k, peak_start, peak_len) * wobble(n, k) * length_s)
                 for n in truth.peak_rate}
        units_by_interval[k] = units
        factor = _cost_factor(truth, units, length_s, base_cpu)
        cpu = {n: d * factor for n, d in base_cpu.items()}
        sessions, cells, statements = [], [], []
        proc_cpu_total = 0.0
        for name, u in units.items():
            key = SessionKey(database="shop", user="app", application=APPS[name], client="10.1.2.3")
            process_cpu = u * cpu[name] * (1 - truth.interrupt_share)
            proc_cpu_total += process_cpu
            sessions.append(SessionUse(session=key, cpu_user_s=0.75 * process_cpu, cpu_system_s=0.25 * process_cpu,
                                       read_bytes=u * truth.read_bytes[name], write_bytes=u * truth.wal[name],
                                       processes=4))
            active = round(u * truth.exec_s[name])  # Little: seconds active over the interval = samples at 1 Hz
            if name == "orders":
                statements += [
                    StatementDelta(query_id=QUERY["begin"], database="shop", user="app", calls=u,
                                   exec_time_s=u * 1e-5, text="BEGIN" if texts else None),
                    StatementDelta(query_id=QUERY["orders_update"], database="shop", user="app", calls=u,
                                   exec_time_s=u * truth.exec_s[name] * 0.6, shared_blks_dirtied=u * truth.dirtied[name],
                                   rows=u, wal_records=1.2 * u, wal_bytes=u * truth.wal[name] * 0.7,
                                   text="UPDATE accounts SET ..."),
                    StatementDelta(query_id=QUERY["orders_insert"], database="shop", user="app", calls=u,
                                   exec_time_s=u * (truth.exec_s[name] * 0.4 - 2e-5), rows=u, wal_records=2.0 * u,
                                   wal_bytes=u * truth.wal[name] * 0.3, text="INSERT INTO history ..."),
                    StatementDelta(query_id=QUERY["end"], database="shop", user="app", calls=u, exec_time_s=u * 1e-5,
                                   text="END" if texts else None)]
                cells += [ActivityCell(session=key, query_id=QUERY["orders_update"], state="active",
                                       in_transaction=True, wait_class="lock", wait_event="transactionid",
                                       samples=active),
                          ActivityCell(session=key, query_id=QUERY["orders_insert"], state="idle in transaction",
                                       in_transaction=True, wait_class="client", wait_event="ClientRead", samples=30),
                          # pg_stat_activity shows an idle session's most recent query: BEGIN or END here
                          ActivityCell(session=key, query_id=QUERY["begin"], state="idle in transaction",
                                       in_transaction=True, wait_class="client", wait_event="ClientRead", samples=2),
                          ActivityCell(session=key, query_id=QUERY["end"], state="idle", in_transaction=False,
                                       wait_class="client", wait_event="ClientRead", samples=100)]
            else:
                q = QUERY[name]
                prunes = truth.prune_wal[name] > 0  # a record every twenty rows it returns
                statements.append(StatementDelta(query_id=q, database="shop", user="app", calls=u, rows=u,
                                                 exec_time_s=u * truth.exec_s[name],
                                                 shared_blks_read=u * truth.read_bytes[name] / BLOCK,
                                                 wal_records=0.05 * u if prunes else 0.0,
                                                 wal_bytes=u * truth.prune_wal[name]))
                # lookups are short: in two intervals of three their samples caught no query id (the split then
                # follows the idle samples' last query)
                cells.append(ActivityCell(session=key, query_id=q if name == "reports" or k % 3 == 0 else "",
                                          state="active", in_transaction=False, wait_class="cpu", wait_event="",
                                          samples=active))
                cells.append(ActivityCell(session=key, query_id=q, state="idle", in_transaction=False,
                                          wait_class="client", wait_event="ClientRead", samples=60 * 4 - active))
        collector_calls = truth.collector_per_s * length_s
        statements.append(StatementDelta(query_id=QUERY["collector"], database="shop", user="app",
                                         calls=collector_calls, exec_time_s=collector_calls * 1e-4))
        system = SessionKey(backend_type="checkpointer")
        dirtied_bytes = sum(units[n] * truth.dirtied[n] * BLOCK for n in units)
        sessions.append(SessionUse(session=system, cpu_user_s=truth.system_cores * length_s, cpu_system_s=0.0,
                                   read_bytes=0.0, write_bytes=dirtied_bytes, processes=1))
        interrupts = sum(units[n] * cpu[n] * truth.interrupt_share for n in units)
        noise = 1 + truth.noise * math.sin(k * 1.7)
        busy = (proc_cpu_total * (1 + truth.clients_per_core) + interrupts
                + (truth.system_cores + truth.background_cores) * length_s) * noise
        total = truth.cores * length_s
        read_bytes = sum(units[n] * truth.read_bytes[n] for n in units)
        write_bytes = sum(units[n] * (truth.dirtied[n] * BLOCK + truth.wal[n] + truth.prune_wal[n]) for n in units)
        read_busy, write_busy = read_bytes * truth.read_s_per_byte, write_bytes * truth.write_s_per_byte
        host = HostDelta(cpu_s={"user": 0.7 * (busy - interrupts), "system": 0.3 * (busy - interrupts),
                                "softirq": interrupts, "idle": total - busy},
                         devices=[DeviceDelta(name="sda", reads=read_bytes / 65536, writes=write_bytes / 8192,
                                              read_bytes=read_bytes, write_bytes=write_bytes,
                                              busy_s=read_busy + write_busy, read_time_s=read_busy,
                                              write_time_s=write_busy),
                                  DeviceDelta(name="sdb", reads=1, writes=1, read_bytes=4096, write_bytes=4096,
                                              busy_s=0.01, read_time_s=0.005, write_time_s=0.005)],
                         memory={}, run_queue=None, pressure={})
        xacts = sum(units.values()) + collector_calls
        trips = None
        if truth.round_trip_idle_s > 0:
            mean = (truth.round_trip_idle_s + truth.round_trip_queue_s * wait_factor(truth.cores, busy / total)) \
                * (1 + 0.03 * math.sin(k * 2.3))
            trips = RoundTrips(probes=180, mean_s=mean, p50_s=0.8 * mean, p90_s=1.5 * mean, max_s=5 * mean)
        out.append(Interval(ordinal=k, start=start, end=start + length_s, statements=statements, activity=cells,
                            sessions=sessions, activity_samples=60, host=host, round_trips=trips,
                            database={"database": [{"datname": "shop", "xact_commit": xacts, "xact_rollback": 0}],
                                      **({"wal": [{"wal_sync_time": units["orders"] * truth.flush_s * 1e3}]}
                                         if truth.flush_s > 0 else {})}))
    obs = Observation(observation_id="obs-test", created_at="2027-01-01T00:00:00", status="ended", reason="",
                      settings=ObservationSettings(interval_s=length_s, sample_hz=1.0, top_statements=200,
                                                   store_query_text=texts, host_metrics="local", planned_s=None),
                      target={"collector_query_ids": [QUERY["collector"]]}, host={}, host_cores=truth.cores,
                      intervals=out,
                      events=[ObservationEvent(at=t0 + k * length_s + length_s / 2, kind=kind, text=kind)
                              for k, kind in events])
    return obs, units_by_interval
