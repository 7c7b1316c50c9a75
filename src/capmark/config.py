"""Run specification and validation of user input (durations, job lists, parameters, DSNs)."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from capmark.errors import CapmarkError

DEFAULT_WARMUP_S = 5.0
DEFAULT_DURATION_S = 15.0
DEFAULT_SCALE = 1
DEFAULT_RESULTS_DIR = Path("capmark-results")
MODES = ("server", "client")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """Seconds from '30', '30s', '2m', '1h' or '500ms'."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match:
            raise CapmarkError(
                f"The {what} '{text}' is not a duration; write it as seconds or with a unit, e.g. 30, 30s, 2m."
            )
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds < 0:
        raise CapmarkError(f"The {what} must not be negative; got {text}.")
    return seconds


def read_toml(path: Path, what: str) -> dict:
    """A TOML file the user names (a suite, what-if scenarios), or one sentence saying why it cannot be used."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as err:
        raise CapmarkError(f"Cannot read the {what} {path} ({err.strerror}); check the path.") from None
    except tomllib.TOMLDecodeError as err:
        raise CapmarkError(f"The {what} {path} is not valid TOML ({err}); fix it and retry.") from None


def parse_jobs(text: str) -> list[int]:
    """A comma-separated, strictly increasing list of positive job counts, e.g. '1,2,4,8'."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise CapmarkError(
            f"The job list '{text}' is not valid; give positive integers separated by commas, e.g. --jobs 1,2,4."
        )
    jobs = [int(p) for p in parts]
    if any(j < 1 for j in jobs):
        raise CapmarkError(f"The job list '{text}' contains 0; every step needs at least 1 job.")
    if any(b <= a for a, b in zip(jobs, jobs[1:], strict=False)):
        raise CapmarkError(f"The job list '{text}' must be strictly increasing, e.g. --jobs 1,2,4.")
    if max(jobs) > 512:
        raise CapmarkError(f"The job list '{text}' asks for more than 512 jobs; capmark opens one connection per job.")
    return jobs


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
        query = re.sub(r"(password=)[^&]*", r"\1***", parts.query)
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn)


def redact_text(text: str) -> str:
    """Any DSN-looking password inside free text (error messages) replaced by '***'."""
    text = re.sub(r"(postgres(?:ql)?://[^:/@\s]+:)[^@\s]*@", r"\1***@", text)
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

    def validate(self) -> RunSpec:
        if self.mode not in MODES:
            raise CapmarkError(f"The mode '{self.mode}' is unknown; use --mode server or --mode client.")
        if self.duration_s < 1:
            raise CapmarkError("The step duration must be at least 1 second, e.g. --duration 10s.")
        check_pacing(self.mode, self.think_s, self.rate)
        if self.scale < 1:
            raise CapmarkError(f"The scale must be a positive integer; got {self.scale}.")
        if self.soak_s is not None:
            if self.suite_file or len(self.workloads) != 1:
                raise CapmarkError("A soak runs one workload: give exactly one, e.g. capmark run --soak 2h tp-light "
                                   "--jobs 4.")
            if self.jobs and len(self.jobs) != 1:
                raise CapmarkError("A soak runs one step: give one job count, e.g. --jobs 4.")
            if self.soak_s < 10:
                raise CapmarkError("A soak must last at least 10 seconds, e.g. --soak 30m.")
        return self


def check_pacing(mode: str, think_s: float, rate: float) -> None:
    if (think_s or rate) and mode != "client":
        raise CapmarkError("--think and --rate pace a client-side driver; add --mode client.")
    if think_s and rate:
        raise CapmarkError("Give either --think (closed loop) or --rate (open loop), not both.")
    if rate < 0:
        raise CapmarkError(f"The arrival rate must be positive; got {rate}.")


def parse_rate(text: str | None) -> float:
    """Arrivals per second from '500' or '500/s'."""
    if not text:
        return 0.0
    try:
        return float(str(text).removesuffix("/s"))
    except ValueError:
        raise CapmarkError(f"The rate '{text}' is not a number of arrivals per second, e.g. --rate 500.") from None


def env_dsn() -> str | None:
    return os.environ.get("CAPMARK_DSN") or None
