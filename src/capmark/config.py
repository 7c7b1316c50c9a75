"""Run specification and validation of user input (durations, job lists, parameters, DSNs)."""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from capmark.errors import CapmarkError

DEFAULT_WARMUP_S = 5.0
DEFAULT_DURATION_S = 15.0
DEFAULT_SCALE = 1
DEFAULT_RESULTS_DIR = Path("capmark-results")
MODES = ("server", "client")

MIN_STEP_S = 1.0  # the KPMs are per-second rates and the stability check needs whole seconds
# A measured step or warm-up longer than an hour is a soak: --soak samples memory over time as well.
MAX_STEP_S = 3600.0
# A soak keeps one throughput point per second in memory and in the results: a week is 604,800 points.
MAX_SOAK_S = 7 * 86400.0
MIN_SOAK_S = 10.0
# Think time is a pause between units inside a step: past a minute each job does less than one unit a minute.
MAX_THINK_S = 60.0
# One client-side driver issues at most ~10^5 units per second; a higher open-loop rate only measures the
# generator's backlog, and rates far beyond it are typing mistakes.
MAX_RATE = 1_000_000.0
MAX_JOBS = 512  # capmark opens one connection (and one thread) per job
# Each repetition runs the whole step plan again; ten give the t interval 9 degrees of freedom (t = 2.26, near the
# normal 1.96), and more would mostly lengthen the run.
MAX_REPEAT = 10
AUTO_JOBS = "auto"  # --jobs auto: step 1, 2, 4, ... until the knee (measure/stepping.py)
# Keys are 4-byte integers (at most 2^31 rows per table), and 10,000 units is already 10^9 rows per table:
# hundreds of GB and hours of loading before the first step.
MAX_SCALE = 10_000
ROWS_PER_SCALE = 100_000  # what one unit of --scale adds to each of the data model's main tables
# pgbench's own domains for --seed, --max-tries and --query-mode, which a script run accepts as pgbench does
MAX_SEED = (1 << 64) - 1  # pgbench's --random-seed is an unsigned 64-bit number
MAX_TRIES = 1_000_000  # pgbench's --max-tries is an unsigned int; beyond this a run would only spin
QUERY_MODES = ("simple", "extended", "prepared")  # pgbench's --protocol

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """Seconds from '30', '30s', '2m', '1h' or '500ms' (or a number of seconds from a TOML file)."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise CapmarkError(f"The {what} must be a duration, as seconds or with a unit, e.g. 30, \"30s\", \"2m\"; got "
                           f"{text!r}.")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise CapmarkError(
                f"The {what} '{text}' is not a duration; write it as seconds or with a unit, e.g. 30, 30s, 2m."
            )
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not math.isfinite(seconds):
        raise CapmarkError(f"The {what} must be a finite time; got {text}.")
    if seconds < 0:
        raise CapmarkError(f"The {what} must not be negative; got {text}.")
    return seconds


def check_times(warmup_s: float, duration_s: float, think_s: float = 0.0, where: str = "") -> None:
    """The warm-up, measured time and think time of a test are within what a step can measure."""
    of = f" of {where}" if where else ""
    if duration_s < MIN_STEP_S:
        raise CapmarkError(f"The step duration{of} must be at least {MIN_STEP_S:g} second (the figures are per-second "
                           f"rates); got {duration_s:g} s, e.g. --duration 10s.")
    for what, seconds in (("step duration", duration_s), ("warm-up", warmup_s)):
        if seconds > MAX_STEP_S:
            raise CapmarkError(f"The {what}{of} is {seconds:g} s, above the limit of one hour per step; for a long "
                               "measurement use a soak, e.g. --soak 2h.")
    if think_s > MAX_THINK_S:
        raise CapmarkError(f"The think time{of} is {think_s:g} s, above the limit of {MAX_THINK_S:g} s: each job "
                           "would do less than one unit a minute; use a shorter think time, e.g. --think 10ms.")


def read_toml(path: Path, what: str) -> dict:
    """A TOML file the user names (a suite, what-if scenarios), or one sentence saying why it cannot be used."""
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as err:
        raise CapmarkError(f"Cannot read the {what} {path} ({err.strerror}); check the path.") from None
    except UnicodeDecodeError:
        raise CapmarkError(f"The {what} {path} is not UTF-8 text; save it as UTF-8 and retry.") from None
    except tomllib.TOMLDecodeError as err:
        raise CapmarkError(f"The {what} {path} is not valid TOML ({err}); fix it and retry.") from None


def parse_jobs(text: str) -> list[int]:
    """A comma-separated, strictly increasing list of positive job counts, e.g. '1,2,4,8'."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise CapmarkError(
            f"The job list '{text}' is not valid; give positive integers separated by commas, e.g. --jobs 1,2,4."
        )
    jobs = [int(p) for p in parts]
    if any(j < 1 for j in jobs):
        raise CapmarkError(f"The job list '{text}' contains 0; every step needs at least 1 job.")
    if any(b <= a for a, b in zip(jobs, jobs[1:], strict=False)):
        raise CapmarkError(f"The job list '{text}' must be strictly increasing, e.g. --jobs 1,2,4.")
    if max(jobs) > MAX_JOBS:
        raise CapmarkError(f"The job list '{text}' asks for more than {MAX_JOBS} jobs; capmark opens one connection "
                           "per job.")
    return jobs


def check_repeat(repeat: object, where: str = "") -> int:
    """--repeat K or repeat = K: a whole number of repetitions of the step plan from 1 to MAX_REPEAT."""
    of = f" of {where}" if where else ""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise CapmarkError(f"The number of repetitions{of} must be a whole number from 1 to {MAX_REPEAT}; got "
                           f"{repeat!r}, e.g. --repeat 3.")
    return repeat


def check_max_jobs(max_jobs: int | None, auto: bool) -> None:
    """--max-jobs bounds --jobs auto, within the job limit."""
    if max_jobs is None:
        return
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 1 <= max_jobs <= MAX_JOBS:
        raise CapmarkError(f"--max-jobs must be a whole number from 1 to {MAX_JOBS} (capmark opens one connection "
                           f"per job); got {max_jobs!r}, e.g. --max-jobs 64.")
    if not auto:
        raise CapmarkError("--max-jobs bounds automatic stepping; add --jobs auto, or drop --max-jobs and list the "
                           "steps with --jobs.")


def default_jobs(cores: int) -> list[int]:
    """1, 2, 4, ... up to twice the database host's cores (the last step is exactly 2 x cores)."""
    limit = max(2, 2 * cores)
    jobs, j = [], 1
    while j < limit:
        jobs.append(j)
        j *= 2
    jobs.append(limit)
    return jobs


def parse_params(items: list[str] | None) -> dict[str, str]:
    """'name=value' pairs from repeated --param options."""
    params: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CapmarkError(f"The parameter '{item}' is not of the form name=value, e.g. --param update_pct=20.")
        if name.strip() in params:
            raise CapmarkError(f"The parameter {name.strip()} is given twice ({params[name.strip()]} and "
                               f"{value.strip()}); give each --param once.")
        params[name.strip()] = value.strip()
    return params


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by '***' (URL or key=value form)."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{host}"
        query = re.sub(r"((?:^|&)password=)[^&]*", r"\1***", parts.query, flags=re.IGNORECASE)
        # written out rather than with urlunsplit, which drops the '//' of an empty host (postgresql:///db?host=...)
        return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
                + (f"#{parts.fragment}" if parts.fragment else ""))
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn)


def redact_text(text: str) -> str:
    """Any DSN-looking password inside free text (error messages) replaced by '***'."""
    text = re.sub(r"((?:postgres(?:ql)?|mysql|mariadb)://[^:/@\s]+:)[^@\s]*@", r"\1***@", text)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", text)


@dataclass
class RunSpec:
    """Everything a run needs, validated; plain data handed from the CLI to the API."""

    workloads: list[str] = field(default_factory=list)
    jobs: list[int] | None = None
    warmup_s: float = DEFAULT_WARMUP_S
    duration_s: float = DEFAULT_DURATION_S
    mode: str = "server"
    scale: int = DEFAULT_SCALE
    params: dict[str, str] = field(default_factory=dict)
    dsn: str | None = None
    data_dir: Path | None = None
    results_dir: Path = DEFAULT_RESULTS_DIR
    collectors: bool = True
    suite_file: Path | None = None
    think_s: float = 0.0
    rate: float = 0.0
    nested_statements: bool = False  # pg_stat_statements tracks statements inside the slice procedures
    soak_s: float | None = None  # one long step of one workload at one job count
    all_statements: bool = False  # store every role's statements, not only capmark's (privacy: opt in)
    host_metrics: str = "auto"  # where the database host's OS counters come from (collect/hosts.py)
    node_exporter: str | None = None  # a node_exporter on the database host: http://host:9100/metrics
    driver_procs: int | None = None  # client side: worker processes for the jobs (None: one per load-host core)
    cluster: str | None = None  # client side: a Ray cluster whose nodes run the jobs (ray://HEAD:10001 or auto)
    scripts: list[str] = field(default_factory=list)  # pgbench scripts, FILE or FILE@WEIGHT, run as one test
    defines: list[str] = field(default_factory=list)  # NAME=VALUE variables of the scripts (pgbench -D)
    seed: int | None = None  # the scripts' random seed (None: chosen at random and recorded)
    query_mode: str = "prepared"  # how the scripts' statements are sent: simple, extended, prepared
    max_tries: int = 1  # tries of a script transaction that hits a serialization failure or deadlock
    allow_shell: bool = False  # scripts may run \shell and \setshell
    repeat: int = 1  # runs of the step plan, interleaved (measure/stepping.py)
    jobs_auto: bool = False  # --jobs auto: step until the knee (measure/stepping.py)
    max_jobs: int | None = None  # the bound of --jobs auto (None: 4 x the database host's cores)

    def validate(self) -> RunSpec:
        """Every setting checked before anything is created or any server is contacted."""
        if self.mode not in MODES:
            raise CapmarkError(f"The mode '{self.mode}' is unknown; use --mode server or --mode client.")
        if self.soak_s is None:
            check_times(self.warmup_s, self.duration_s, self.think_s)
        check_pacing(self.mode, self.think_s, self.rate)
        check_scale(self.scale)
        check_repeat(self.repeat)
        check_max_jobs(self.max_jobs, self.jobs_auto or self.suite_file is not None)
        if self.jobs_auto and self.jobs:
            raise CapmarkError("Give either a job list or --jobs auto, not both.")
        if self.suite_file is not None and (self.workloads or self.params):
            raise CapmarkError("A suite file names its own workloads and parameters; drop the workload names and "
                               "--param, or drop --suite.")
        if self.dsn is not None:
            check_dsn(self.dsn)
        elif self.data_dir is not None and not env_dsn():
            check_data_dir(self.data_dir)
        if self.soak_s is not None:
            self._validate_soak(self.soak_s)
        check_host_metrics(self.host_metrics, self.node_exporter)
        check_driver_procs(self.driver_procs)
        check_cluster(self.cluster, self.mode, self.suite_file is not None or bool(self.scripts))
        check_script_options(self.seed, self.max_tries, self.query_mode)
        if self.suite_file is not None and self.scripts:
            raise CapmarkError("A suite file names its own tests; put the script in the suite file (script = "
                               "\"file.sql\") or drop --suite.")
        return self

    def _validate_soak(self, soak_s: float) -> None:
        if self.suite_file or len(self.workloads) != 1:
            raise CapmarkError("A soak runs one workload: give exactly one, e.g. capmark run --soak 2h tp-light "
                               "--jobs 4.")
        if self.jobs_auto or (self.jobs and len(self.jobs) != 1):
            raise CapmarkError("A soak runs one step: give one job count, e.g. --jobs 4.")
        if self.repeat != 1:
            raise CapmarkError("A soak runs one long step and is not repeated; drop --repeat, or measure steps with "
                               "--duration instead of --soak.")
        if not MIN_SOAK_S <= soak_s <= MAX_SOAK_S:
            raise CapmarkError(f"A soak must last between {MIN_SOAK_S:g} seconds and 7 days (one throughput point "
                               f"per second is kept); got {soak_s:g} s, e.g. --soak 30m.")
        check_times(self.warmup_s, MIN_STEP_S, self.think_s)


# A process per job is the most that helps (each job has one connection); beyond the machine's own limits the
# operating system refuses long before this.
MAX_DRIVER_PROCS = 4096


def check_driver_procs(procs: int | None) -> None:
    if procs is None:
        return
    if isinstance(procs, bool) or not isinstance(procs, int) or not 1 <= procs <= MAX_DRIVER_PROCS:
        raise CapmarkError(f"--driver-procs must be a whole number from 1 to {MAX_DRIVER_PROCS:,}; got {procs!r}, "
                           "e.g. --driver-procs 4.")


# Ray's own address forms: a Ray client address, a head node's address seen from a node, or the cluster this
# host has joined.
_CLUSTER_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


def check_cluster(address: str | None, mode: str, suite: bool) -> None:
    if address is None:
        return
    if not isinstance(address, str) or not (address == "auto" or _CLUSTER_ADDRESS.match(address)):
        raise CapmarkError(f"--cluster '{address}' is not a Ray cluster address; write ray://HEAD:10001, or auto "
                           "on a host that has joined the cluster.")
    if mode != "client" and not suite:
        raise CapmarkError("--cluster places client-side jobs on the cluster's nodes, and server-side jobs only wait "
                           "for the server; add --mode client.")


def check_script_options(seed: int | None, max_tries: int, query_mode: str) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise CapmarkError(f"--seed must be a whole number from 0 to 2^64-1; got {seed!r}, e.g. --seed 42.")
    if isinstance(max_tries, bool) or not isinstance(max_tries, int) or not 1 <= max_tries <= MAX_TRIES:
        raise CapmarkError(f"--max-tries must be a whole number from 1 to {MAX_TRIES:,}; got {max_tries!r}, e.g. "
                           "--max-tries 10.")
    if query_mode not in QUERY_MODES:
        raise CapmarkError(f"--query-mode '{query_mode}' is unknown; use one of {', '.join(QUERY_MODES)}.")


HOST_METRIC_SOURCES = ("auto", "local", "sql", "node-exporter", "none")


def check_host_metrics(source: str, node_exporter: str | None) -> None:
    """--host-metrics and --node-exporter, checked before any server is contacted."""
    if source not in HOST_METRIC_SOURCES:
        raise CapmarkError(f"--host-metrics '{source}' is unknown; use one of {', '.join(HOST_METRIC_SOURCES)}.")
    if node_exporter is not None:
        parsed = urlsplit(node_exporter)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise CapmarkError(f"--node-exporter '{node_exporter}' is not an http(s) address; write it as "
                               "http://DBHOST:9100/metrics.")
        if source not in ("auto", "node-exporter"):
            raise CapmarkError(f"--node-exporter names a node_exporter, but --host-metrics is '{source}'; drop one "
                               "of them.")
    elif source == "node-exporter":
        raise CapmarkError("--host-metrics node-exporter needs the exporter's address: add --node-exporter "
                           "http://DBHOST:9100/metrics.")


def check_scale(scale: int) -> None:
    """The data model size: --scale units of 100,000 rows per table."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise CapmarkError(f"The scale must be a positive whole number; got {scale!r}, e.g. --scale 1.")
    if scale > MAX_SCALE:
        raise CapmarkError(f"The scale {scale} is above the limit of {MAX_SCALE:,}: each unit adds {ROWS_PER_SCALE:,} "
                           f"rows per table, so {MAX_SCALE:,} already means 10^9 rows per table (hundreds of GB); "
                           "use a smaller --scale.")


def check_pacing(mode: str, think_s: float, rate: float, where: str = "") -> None:
    """--think and --rate: a client-side driver, one of the two, a finite think time and rate."""
    of = f" ({where})" if where else ""
    if (think_s or rate) and mode != "client":
        raise CapmarkError(f"--think and --rate pace a client-side driver{of}; add --mode client.")
    if think_s and rate:
        raise CapmarkError(f"Give either --think (closed loop) or --rate (open loop), not both{of}.")
    if not math.isfinite(rate) or rate < 0:
        raise CapmarkError(f"The arrival rate must be a positive number{of}; got {rate}.")
    if rate > MAX_RATE:
        raise CapmarkError(f"The arrival rate {rate:g}/s{of} is above the limit of {MAX_RATE:,.0f}/s: one driver issues "
                           "at most about 100,000 units per second; use a lower --rate.")


def parse_rate(text: str | float | None, what: str = "rate") -> float:
    """Arrivals per second from '500' or '500/s' (0.0 when not given: closed loop)."""
    if text is None:
        return 0.0
    if isinstance(text, bool):
        raise CapmarkError(f"The {what} {text!r} is not a number of arrivals per second, e.g. --rate 500.")
    try:
        rate = float(str(text).strip().removesuffix("/s"))
    except ValueError:
        raise CapmarkError(f"The {what} '{text}' is not a number of arrivals per second, e.g. --rate 500.") from None
    if not math.isfinite(rate) or rate <= 0:
        raise CapmarkError(f"The {what} '{text}' must be a positive, finite number of arrivals per second, e.g. "
                           "--rate 500 (leave --rate out for a closed loop).")
    return rate


DSN_SCHEMES = ("postgresql", "postgres")
MYSQL_SCHEMES = ("mysql", "mariadb")
MYSQL_OPTIONS = ("socket",)  # what a mysql:// URL may carry after '?'


def check_dsn(dsn: str) -> None:
    """A connection string, checked without connecting: PostgreSQL's by libpq's own parser, a MySQL/MariaDB URL for
    its port and options."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    if not dsn.strip():
        raise CapmarkError("The --dsn is empty; give a PostgreSQL URL, e.g. postgresql://user@host:5432/dbname, or "
                           "leave it out to use the embedded server.")
    if "://" in dsn:
        scheme = dsn.split("://", 1)[0]
        if scheme.lower() in MYSQL_SCHEMES:
            _check_mysql_url(dsn)
            return
        if scheme.lower() not in DSN_SCHEMES:
            raise CapmarkError(f"The --dsn scheme '{scheme}' is not one capmark measures; write "
                               "postgresql://user@host:5432/dbname or mysql://user:password@host:3306/dbname.")
    elif "=" not in dsn:
        raise CapmarkError("The --dsn is neither a postgresql:// URL nor key=value settings; write e.g. "
                           "postgresql://user@host:5432/dbname.")
    try:
        conninfo_to_dict(dsn)
    except ProgrammingError as err:
        reason = " ".join(redact_text(str(err)).split()).rstrip(".")
        raise CapmarkError(f"The --dsn is not a valid PostgreSQL connection string ({reason}); write e.g. "
                           "postgresql://user@host:5432/dbname.") from None


def _check_mysql_url(dsn: str) -> None:
    parts = urlsplit(dsn)
    try:
        parts.port  # noqa: B018 - reading it is the check: urllib raises on a port that is not a number
    except ValueError:
        raise CapmarkError(f"The port in '{redact_dsn(dsn)}' is not a number; write "
                           "mysql://user:password@host:3306/dbname.") from None
    unknown = sorted({k.split("=", 1)[0] for k in parts.query.split("&") if k} - set(MYSQL_OPTIONS))
    if unknown:
        raise CapmarkError(f"The MySQL URL has options capmark does not know ({', '.join(unknown)}); only "
                           f"{', '.join(MYSQL_OPTIONS)}= is understood.")


def check_data_dir(path: Path) -> None:
    """The embedded server's data directory is a folder capmark can create or write."""
    if path.exists() and not path.is_dir():
        raise CapmarkError(f"The data directory {path} is a file, not a folder; choose another --data-dir.")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CapmarkError(f"The data directory {path} cannot be created: {existing} is a file; choose another "
                           "--data-dir.")
    if not os.access(existing, os.W_OK | os.X_OK) or _read_only_filesystem(existing):
        raise CapmarkError(f"The data directory {path} cannot be created or written ({existing} is not writable); "
                           "choose a writable --data-dir.")


def _read_only_filesystem(path: Path) -> bool:
    """os.access says yes to root even on a read-only mount; statvfs tells."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def env_dsn() -> str | None:
    return os.environ.get("CAPMARK_DSN") or None
