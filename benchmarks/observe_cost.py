"""What `capmark observe` costs the database host, and what it stores per interval.

Observes the embedded server (or --dsn, on this machine) at the collector's defaults (60 s intervals, 1 Hz activity
sampling, the top 200 statements) for --seconds while a separate load process keeps --statements distinct statements
busy over --sessions sessions, so that every interval holds a full top 200 and an OTHER row. It reports:

- the collector process's CPU (this process: the collector runs in it, the load does not) as a share of one core;
- the CPU of the collector's server backend (its SELECTs on the statistics views), from /proc;
- the bytes stored per interval (the compressed interval rows and the whole results file), and a day at 60 s
  intervals extrapolated from them.

Goals: at most 1 % of one core for collector and backend together; a day under 50 MB.

    python benchmarks/observe_cost.py [--dsn DSN] [--seconds 240] [--interval 60] [--statements 300]
    python benchmarks/observe_cost.py --private-mariadb   # a MariaDB of its own, performance_schema on

With a mysql:// DSN (or --private-mariadb, which starts one as the tests do) the load runs through mysqlclient and
the collector's server side is the OS thread serving its connection.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from capmark.engines import registry
from capmark.engines.postgres import embedded
from capmark.engines.postgres.observe import OBSERVE_APPLICATION
from capmark.observation_store import DB_NAME, ObservationStore, load_observation
from capmark.observe.collector import observe
from capmark.observe.spec import ObserveSpec

GOAL_SHARE_OF_ONE_CORE = 0.01
GOAL_DAY_BYTES = 50e6
DAY_S = 86400.0

# One process, several sessions, each running statements of distinct shapes (k additions: k distinct query ids) in
# a loop with a pause, so that the server stays lightly busy and pg_stat_statements holds many entries.
LOAD = r"""
import sys, time, threading, psycopg
dsn, statements, sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def run(part):
    conn = psycopg.connect(dsn, autocommit=True, application_name=f"observe-cost-app-{part}")
    while True:
        for k in range(part, statements, sessions):
            conn.execute("select " + " + ".join(["1"] * (k + 1)))
        time.sleep(0.2)
for part in range(sessions):
    threading.Thread(target=run, args=(part,), daemon=True).start()
time.sleep(1e9)
"""
MYSQL_LOAD = r"""
import sys, time, threading
from capmark.engines.mysql.connection import connect
dsn, statements, sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def run(part):
    cur = connect(dsn).cursor()
    while True:
        for k in range(part, statements, sessions):
            cur.execute("select " + " + ".join(["1"] * (k + 1)))
            cur.fetchall()
        time.sleep(0.2)
for part in range(sessions):
    threading.Thread(target=run, args=(part,), daemon=True).start()
time.sleep(1e9)
"""


def _cpu_s(pid: int | str) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rpartition(")")[2].split()
    return (int(f[11]) + int(f[12])) / 100


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class PostgresCollectorSide:
    """The collector's server backend, found by its application name."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def proc(self) -> str | None:
        row = self.conn.execute("select pid from pg_stat_activity where application_name = %s",
                                (OBSERVE_APPLICATION,)).fetchone()
        return str(row[0]) if row else None

    def close(self) -> None:
        self.conn.close()


class MysqlCollectorSide:
    """The server thread serving the collector's connection (the one in the collector's schema)."""

    def __init__(self, dsn: str) -> None:
        from capmark.engines.mysql.connection import connect

        self.conn = connect(dsn)

    def proc(self) -> str | None:
        cur = self.conn.cursor()
        cur.execute("SELECT (SELECT THREAD_OS_ID FROM performance_schema.threads WHERE NAME = 'thread/sql/main'), "
                    "THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_DB = 'performance_schema' "
                    "AND PROCESSLIST_ID <> CONNECTION_ID()")
        row = cur.fetchone()
        cur.close()
        return f"{row[0]}/task/{row[1]}" if row else None

    def close(self) -> None:
        self.conn.close()


def main() -> None:
    with contextlib.ExitStack() as stack:
        _main(stack)


def _main(stack: contextlib.ExitStack) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="observe this PostgreSQL (on this machine) instead of the embedded one")
    ap.add_argument("--seconds", type=float, default=240.0, help="how long to observe")
    ap.add_argument("--interval", type=float, default=60.0, help="the collector's interval (default: its default)")
    ap.add_argument("--statements", type=int, default=300, help="distinct statements the load keeps busy")
    ap.add_argument("--sessions", type=int, default=8, help="the load's sessions (each its own application)")
    ap.add_argument("--private-mariadb", action="store_true",
                    help="observe a MariaDB of its own with performance_schema on (tests/mariadbprivate.py)")
    args = ap.parse_args()
    if args.private_mariadb:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import mariadbprivate

        consumers = [f"--performance-schema-consumer-{c}=ON" for c in ("events-statements-current",
                                                                        "events-waits-current")]
        dsn = stack.enter_context(mariadbprivate.running("--performance-schema=ON", *consumers))
    else:
        dsn = args.dsn or embedded.start(None)
    mysql = registry.for_dsn(dsn).name == "mysql"
    load = subprocess.Popen([sys.executable, "-c", MYSQL_LOAD if mysql else LOAD, dsn, str(args.statements),
                             str(args.sessions)])
    results = Path(tempfile.mkdtemp(prefix="capmark-observe-cost-"))
    store = ObservationStore(results)
    watcher = MysqlCollectorSide(dsn) if mysql else PostgresCollectorSide(dsn)
    backend: dict[str, Any] = {}

    def watch_backend() -> None:
        """The collector's backend (or server thread): its CPU when first seen and last seen."""
        while not done.is_set():
            pid = watcher.proc()
            if pid:
                backend.setdefault("pid", pid)
                if pid == backend["pid"]:
                    backend.setdefault("first", _cpu_s(pid))
                    backend["last"] = _cpu_s(pid)
            done.wait(1.0)

    done = threading.Event()
    try:
        time.sleep(3.0)  # the load's sessions are up
        watching = threading.Thread(target=watch_backend, daemon=True)
        cpu0, wall0 = _own_cpu_s(), time.monotonic()
        watching.start()
        observed = observe(ObserveSpec(dsn=dsn, interval_s=args.interval, planned_s=args.seconds,
                                       results_dir=results), store)
        wall = time.monotonic() - wall0
        own = _own_cpu_s() - cpu0
        done.set()
        watching.join()
    finally:
        load.terminate()
        store.close()
        watcher.close()
    obs = load_observation(store.folder)
    db = sqlite3.connect(store.folder / DB_NAME)
    rows = db.execute("select count(*), sum(length(data)) from interval").fetchone()
    db.close()
    file_bytes = os.path.getsize(store.folder / DB_NAME)
    server = backend.get("last", 0.0) - backend.get("first", 0.0)
    share = (own + server) / wall
    statements = [len(i.statements) for i in obs.intervals]
    print(f"observed {wall:.0f} s at {args.interval:g} s intervals, 1 Hz sampling, top 200: {observed.intervals} "
          f"intervals, statements per interval {statements} (changed: {[i.statements_total for i in obs.intervals]})")
    print(f"collector process: {own:.2f} s CPU = {own / wall * 100:.2f} % of one core; its server backend: "
          f"{server:.2f} s = {server / wall * 100:.2f} % (together {share * 100:.2f} %, goal at most "
          f"{GOAL_SHARE_OF_ONE_CORE * 100:.0f} %: {'met' if share <= GOAL_SHARE_OF_ONE_CORE else 'MISSED'})")
    per_interval = rows[1] / rows[0] if rows[0] else 0.0
    per_interval_file = file_bytes / rows[0] if rows[0] else 0.0
    day = DAY_S / args.interval
    print(f"stored: {per_interval / 1e3:.1f} kB per interval compressed ({file_bytes / 1e6:.2f} MB file for "
          f"{rows[0]} intervals, {per_interval_file / 1e3:.1f} kB each); a day at {args.interval:g} s: "
          f"{per_interval_file * day / 1e6:.1f} MB (goal under {GOAL_DAY_BYTES / 1e6:.0f} MB: "
          f"{'met' if per_interval_file * day <= GOAL_DAY_BYTES else 'MISSED'})")


if __name__ == "__main__":
    main()
