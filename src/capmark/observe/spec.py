"""What `capmark observe` was asked to do, checked before any server is contacted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capmark.config import DEFAULT_RESULTS_DIR, check_host_metrics
from capmark.errors import CapmarkError

DEFAULT_INTERVAL_S = 60.0
DEFAULT_SAMPLE_HZ = 1.0
DEFAULT_TOP_STATEMENTS = 200
# An interval shorter than a second holds less than one activity sample and the views' own update period (the
# server publishes a backend's statistics at most once a second); a day is the longest that still shows a peak.
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 86400.0
# Sampling pg_stat_activity faster than 10 Hz costs the server more than the 1 % the collector may take; slower
# than once a minute no longer sees who ran the short transactions.
MIN_SAMPLE_HZ = 1 / 60
MAX_SAMPLE_HZ = 10.0
MAX_TOP_STATEMENTS = 5000  # pg_stat_statements.max's default: more than the server keeps


@dataclass(frozen=True)
class ObserveSpec:
    dsn: str | None = None  # None: CAPMARK_DSN, else the embedded server
    data_dir: Path | None = None  # the embedded server's
    interval_s: float = DEFAULT_INTERVAL_S
    planned_s: float | None = None  # --for; None: until Ctrl-C or SIGTERM
    sample_hz: float = DEFAULT_SAMPLE_HZ
    top_statements: int = DEFAULT_TOP_STATEMENTS
    store_query_text: bool = False
    host_metrics: str = "auto"
    node_exporter: str | None = None
    node_exporter_token: str | None = None
    results_dir: Path = DEFAULT_RESULTS_DIR

    def check(self) -> None:
        """One sentence for the first setting that is out of its range."""
        if not MIN_INTERVAL_S <= self.interval_s <= MAX_INTERVAL_S:
            raise CapmarkError(f"--interval {self.interval_s:g}s is out of range; give between {MIN_INTERVAL_S:g}s and "
                               "24h, e.g. --interval 60s.")
        if self.planned_s is not None and self.planned_s < self.interval_s:
            raise CapmarkError(f"--for {self.planned_s:g}s is shorter than one interval ({self.interval_s:g}s); observe "
                               "for at least one interval, e.g. --for 8h.")
        if not MIN_SAMPLE_HZ <= self.sample_hz <= MAX_SAMPLE_HZ:
            raise CapmarkError(f"--sample-hz {self.sample_hz:g} is out of range; give between one sample a minute "
                               f"({MIN_SAMPLE_HZ:.4f}) and {MAX_SAMPLE_HZ:g}, e.g. --sample-hz 1.")
        if not 1 <= self.top_statements <= MAX_TOP_STATEMENTS:
            raise CapmarkError(f"--top-statements {self.top_statements} is out of range; give between 1 and "
                               f"{MAX_TOP_STATEMENTS}, e.g. --top-statements 200.")
        check_host_metrics(self.host_metrics, self.node_exporter)
