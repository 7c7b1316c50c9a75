"""Workloads: which sessions and statements of an observation belong to which business workload, and how much each
did interval by interval.

Rules come from a TOML file of ordered `[[workload]]` entries; the first entry that matches wins:

    [[workload]]
    name = "orders"
    application = "shop-*"          # glob on application_name (a list of globs: any of them)
    user = "shop"                   # database, user: exact names (or lists of names)
    client = "10.1.0.0/16"          # client address in this network
    unit = "transactions"           # the default; or "query:<query id or regular expression on the text>"

    [[workload]]
    name = "reports"
    statement = "(?i)^select .* from sales_summary"   # regular expression on the statement text
    # query_id = "-12345678"                          # or the statement's query id

Without a file, sessions are grouped by application_name (by user where it is empty, then by database). Background
processes form SYSTEM, capmark's own collector sessions COLLECTOR (shown, never modelled), and what no rule catches
OTHER: nothing is dropped.

Attribution, and what it assumes:
- Sessions (activity samples, processes' CPU and IO) carry their SessionKey, so they map directly.
- pg_stat_statements knows a statement's user and database but not the application. A statement's counters (calls,
  times, blocks, WAL) are split among workloads by the share of its samples seen under each workload: first its
  active samples in the same interval, else any of its samples there (an idle session still shows the query id of
  its last statement), else the same over the whole observation. A statement never sampled whose calls match a
  sampled statement's interval by interval (a short INSERT after a sampled UPDATE in one transaction) is split as
  that statement is; any other statement never sampled is split by the workloads' share of active samples among
  sessions of the same user and database. This assumes a statement's
  calls are spread among workloads as its samples are: true for a statement only one workload runs, an estimate
  for a statement several run.
- MySQL's and MariaDB's digests know no user (their user is ""): one no sample showed is split by each user's
  statements of its command in the interval (the collector stores them under Interval.database[STATEMENT_USERS]),
  and within a user by the samples of their sessions in the digest's schema.
- A rule on query_id or statement text takes the whole statement (all its calls) for its workload. The CPU its
  calls used is moved from the session workloads that ran it in proportion to execution time.
- Nested statements (toplevel false) are already inside their caller's time and are not counted again.
- A workload's transactions: where its sessions were seen in explicit transactions (COMMIT, END, ROLLBACK or
  ABORT among its statements), its transaction-ending statements' calls; otherwise every top-level statement call
  is one transaction (autocommit). The total is reconciled with pg_stat_database's commits and rollbacks.
"""

from __future__ import annotations

import bisect
import fnmatch
import ipaddress
import math
import re
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from capmark.config import read_input_file
from capmark.errors import CapmarkError
from capmark.observations import (
    NO_QUERY,
    OTHER_STATEMENTS,
    STATEMENT_USERS,
    ActivityCell,
    Interval,
    Observation,
    SessionKey,
    StatementDelta,
)

# A workload is taken to run explicit transactions when at least this many of its samples, and this share of its
# active ones, found it idle inside one (one stray sample, such as a tool's session, is not the workload's habit)
MIN_EXPLICIT_SAMPLES = 2
ANY_USER = ""  # the user of a statement whose engine does not tell users apart (MySQL's digests)
MIN_EXPLICIT_SHARE = 0.02
# A workload in explicit transactions whose COMMIT and END calls found explain less than this share of the commits the
# database counted beyond the other workloads has not had its own ends counted (pgbench -M prepared's never reach
# pg_stat_statements); what was found is another session's, and the database's commits count its transactions.
FEW_ENDS_SHARE = 0.5
# A workload counted by its statements, one transaction each, has at most the commits the database counted beyond the
# other workloads (a few more or less where the views' reads at an interval's edge split a transaction from its
# statement). One with more than this many times those is running several statements per transaction: one of two
# statements per transaction has twice as many.
BUNDLED_RATIO = 1.25
# Statements of one transaction or client loop run equally often: interval by interval their calls differ only by the
# loops in flight at the interval's two edges, at most one per server process of their user and database at each.
# Two independent workloads' Poisson counts of a few thousand differ by more than that in most intervals, so a match
# is asked for in at least this many intervals with more calls than that slack before a statement never sampled
# follows a sampled one.
MIN_COMPANION_INTERVALS = 3
SYSTEM = "SYSTEM"  # background processes: checkpointer, WAL writer, autovacuum, ...
OTHER = "OTHER"  # sessions and statements no rule catches
COLLECTOR = "COLLECTOR"  # capmark's own collector: shown so its cost is seen, never part of the model
RESERVED = (SYSTEM, OTHER, COLLECTOR)
COLLECTOR_APPLICATION = "capmark observe"  # the application_name the collector's own sessions set
COLLECTOR_QUERIES = "collector_query_ids"  # Observation.target key: the collector's own statements' query ids
GroupBy = Literal["application", "user", "database"]
GROUP_BY: tuple[GroupBy, ...] = ("application", "user", "database")
SESSION_KEYS = ("database", "user", "application", "client")
STATEMENT_KEYS = ("query_id", "statement")
RULE_KEYS = ("name", *SESSION_KEYS, *STATEMENT_KEYS, "unit")
TRANSACTIONS = "transactions"
_QUERY_UNIT = re.compile(r"^query:(.+)$", re.DOTALL)
_TRANSACTION_END = re.compile(r"^\s*(commit|end|rollback|abort)\b(?!\s+to\b)", re.IGNORECASE)
_GLOB_CHARS = re.compile(r"[*?\[]")
EXAMPLE = '[[workload]] with name = "orders" and application = "shop-*"'


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One [[workload]] entry: every key it sets must match (each a list of alternatives, any of which matches)."""

    name: str
    database: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    application: tuple[str, ...] = ()  # globs
    client: tuple[str, ...] = ()  # networks, as written (CIDR)
    query_id: tuple[str, ...] = ()
    statement: tuple[str, ...] = ()  # regular expressions, searched in the statement text
    unit: str = TRANSACTIONS  # "transactions" or "query:<id or pattern>"

    @property
    def on_statements(self) -> bool:
        return bool(self.query_id or self.statement)

    @property
    def text(self) -> str:
        """The rule as the report shows it."""
        parts = [f"{k} = {' | '.join(getattr(self, k))}" for k in (*SESSION_KEYS, *STATEMENT_KEYS) if getattr(self, k)]
        return ", ".join(parts) or "everything"

    def matches_session(self, key: SessionKey) -> bool:
        if self.on_statements:
            return False
        return (_any_equal(self.database, key.database) and _any_equal(self.user, key.user)
                and (not self.application or any(fnmatch.fnmatchcase(key.application, g) for g in self.application))
                and (not self.client or _in_networks(key.client, self.client)))

    def matches_statement(self, s: StatementDelta) -> bool:
        if not self.on_statements:
            return False
        if not (_any_equal(self.database, s.database) and _any_equal(self.user, s.user)):
            return False
        by_id = bool(self.query_id) and s.query_id in self.query_id
        by_text = bool(self.statement) and s.text is not None and any(re.search(p, s.text) for p in self.statement)
        return by_id or by_text

    def counts_call(self, s: StatementDelta) -> bool:
        """Whether a call of this statement is one unit of a `query:` workload."""
        m = _QUERY_UNIT.match(self.unit)
        if not m:
            return False
        target = m.group(1).strip()
        return s.query_id == target or (s.text is not None and re.search(target, s.text) is not None)


def _any_equal(values: tuple[str, ...], value: str) -> bool:
    return not values or value in values


def _in_networks(address: str, networks: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("/")[0])  # inet renders as 10.0.0.5 or 10.0.0.5/32
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(n, strict=False) for n in networks)


@dataclass(frozen=True, kw_only=True)
class WorkloadRules:
    """The ordered rules, or none (then sessions are grouped by `group_by`). `source` names the file for messages."""

    rules: tuple[Rule, ...] = ()
    group_by: GroupBy = "application"
    source: str = ""

    def session_workload(self, key: SessionKey) -> str:
        if key.application == COLLECTOR_APPLICATION:
            return COLLECTOR
        if key.is_background:
            return SYSTEM
        for rule in self.rules:
            if rule.matches_session(key):
                return rule.name
        if self.rules:
            return OTHER
        return default_group(key, self.group_by)

    def statement_rule(self, s: StatementDelta) -> Rule | None:
        for rule in self.rules:
            if rule.matches_statement(s):
                return rule
        return None

    def rule(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)

    def definition(self, name: str) -> str:
        """How the report describes a workload's membership."""
        rule = self.rule(name)
        if rule is not None:
            return rule.text
        return {SYSTEM: "background processes", COLLECTOR: f"sessions named '{COLLECTOR_APPLICATION}' (capmark)",
                OTHER: "what no rule catches"}.get(name, f"{self.group_by} = {name}" if not self.rules else name)


def default_group(key: SessionKey, group_by: GroupBy) -> str:
    """The --group-by name of a client session: the chosen field, falling back along application, user, database
    where it is empty; OTHER where all are."""
    order = GROUP_BY[GROUP_BY.index(group_by):]
    for attr in order:
        value = getattr(key, attr)
        if value and value not in RESERVED:
            return str(value)
    return OTHER


def check_group_by(text: str) -> GroupBy:
    for g in GROUP_BY:
        if text == g:
            return g
    raise CapmarkError(f"--group-by '{text}' is not known; use one of {', '.join(GROUP_BY)}.")


# ---------------------------------------------------------------------------------------------------- rule files
def load_rules(path: Path, group_by: GroupBy = "application") -> WorkloadRules:
    """Rules from a workloads file, or one sentence naming the entry and the fix."""
    try:
        text = read_input_file(path, "workloads file").decode("utf-8")
    except OSError as err:
        raise CapmarkError(f"Cannot read the workloads file {path} ({err.strerror}); check the path.") from None
    except UnicodeDecodeError:
        raise CapmarkError(f"The workloads file {path} is not UTF-8 text; save it as UTF-8 and retry.") from None
    return parse_rules(text, str(path), group_by)


def parse_rules(text: str, source: str = "the workloads file", group_by: GroupBy = "application") -> WorkloadRules:
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CapmarkError(f"{source} is not valid TOML ({err}); fix it and retry.") from None
    unknown = sorted(set(table) - {"workload"})
    if unknown:
        raise CapmarkError(f"{source}: unknown top-level key '{unknown[0]}'; define each workload as a "
                           f"[[workload]] entry, e.g. {EXAMPLE}.")
    entries = table.get("workload")
    if not entries:
        raise CapmarkError(f"{source} defines no workload; add [[workload]] entries with a name and a rule, e.g. "
                           f"{EXAMPLE!r}.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CapmarkError(f"{source}: 'workload' must be an array of tables; write each one as [[workload]].")
    rules: list[Rule] = []
    for index, entry in enumerate(entries, 1):
        rule = _rule(entry, f"{source}: workload entry {index}")
        if any(r.name == rule.name for r in rules):
            raise CapmarkError(f"{source}: the workload name '{rule.name}' is used twice (entry {index}); give each "
                               "entry its own name, or list several values in one entry, e.g. "
                               "application = [\"a\", \"b\"].")
        for earlier in rules:
            if _shadows(earlier, rule):
                raise CapmarkError(f"{source}: workload '{rule.name}' can never match, since '{earlier.name}' before "
                                   "it catches everything it would; move it above or narrow the earlier rule.")
        rules.append(rule)
    return WorkloadRules(rules=tuple(rules), group_by=group_by, source=source)


def _strings(entry: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key)
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v != "" for v in values):
        raise CapmarkError(f"{where}: '{key}' must be a non-empty string or a list of them; got {value!r}.")
    return tuple(str(v) for v in values)


def _rule(entry: dict[str, object], where: str) -> Rule:
    unknown = sorted(set(entry) - set(RULE_KEYS))
    if unknown:
        raise CapmarkError(f"{where}: unknown key '{unknown[0]}'; a workload takes {', '.join(RULE_KEYS)}.")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CapmarkError(f"{where} has no name; add name = \"...\" to it.")
    where = f"{where} ('{name}')"
    if name in RESERVED:
        raise CapmarkError(f"{where}: {name} is reserved for capmark's own classes ({', '.join(RESERVED)}); choose "
                           "another name.")
    values = {k: _strings(entry, k, where) for k in (*SESSION_KEYS, *STATEMENT_KEYS)}
    if not any(values.values()):
        raise CapmarkError(f"{where} has no rule; give it at least one of {', '.join((*SESSION_KEYS, *STATEMENT_KEYS))}.")
    for glob in values["application"]:
        if glob.count("[") != glob.count("]"):
            raise CapmarkError(f"{where}: the application pattern '{glob}' has an unclosed '['; close it or escape it "
                               "as [[].")
    for network in values["client"]:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise CapmarkError(f"{where}: client '{network}' is not an address or network; write it in CIDR form, "
                               "e.g. 10.1.0.0/16.") from None
    for pattern in values["statement"]:
        try:
            re.compile(pattern)
        except re.error as err:
            raise CapmarkError(f"{where}: the statement pattern '{pattern}' is not a valid regular expression ({err}); "
                               "fix it.") from None
    if (values["query_id"] or values["statement"]) and (values["application"] or values["client"]):
        raise CapmarkError(f"{where}: a rule on query_id or statement cannot also name an application or client "
                           "(the statement statistics do not record them); use database or user beside it.")
    unit = entry.get("unit", TRANSACTIONS)
    if not isinstance(unit, str) or not (unit == TRANSACTIONS or _QUERY_UNIT.match(unit)):
        raise CapmarkError(f"{where}: unit {unit!r} is not known; use \"transactions\" or \"query:<query id or "
                           "pattern>\".")
    if (m := _QUERY_UNIT.match(unit)) is not None:
        try:
            re.compile(m.group(1).strip())
        except re.error as err:
            raise CapmarkError(f"{where}: the unit's pattern '{m.group(1)}' is not a valid regular expression "
                               f"({err}); fix it.") from None
    return Rule(name=name.strip(), unit=unit, **values)


def _covers(key: str, wide: tuple[str, ...], narrow: tuple[str, ...]) -> bool:
    """Whether every value `narrow` allows is allowed by `wide` (empty allows everything), as far as can be told."""
    if not wide:
        return True
    if not narrow:
        return False
    for value in narrow:
        if value in wide:
            continue
        if key == "application" and not _GLOB_CHARS.search(value) and any(fnmatch.fnmatchcase(value, g) for g in wide):
            continue
        if key == "application" and "*" in wide:
            continue
        if key == "client":
            n = ipaddress.ip_network(value, strict=False)
            if any(n.version == w.version and n.subnet_of(w)  # type: ignore[arg-type]
                   for w in (ipaddress.ip_network(x, strict=False) for x in wide)):
                continue
        return False
    return True


def _shadows(earlier: Rule, later: Rule) -> bool:
    if earlier.on_statements != later.on_statements:
        return False
    keys = (*SESSION_KEYS, *STATEMENT_KEYS)
    return all(_covers(k, getattr(earlier, k), getattr(later, k)) for k in keys)


# ---------------------------------------------------------------------------------------------------- attribution
@dataclass(kw_only=True)
class WorkloadUse:
    """What one workload did in one interval (or summed over several): counts, seconds and bytes."""

    units: float = 0.0  # its unit of work: transactions, or the calls of its unit statement
    calls: float = 0.0  # top-level statement calls
    exec_time_s: float = 0.0  # statements' execution plus planning time
    blocks_read: float = 0.0  # shared, local and temp blocks read (pg_stat_statements)
    blocks_written: float = 0.0  # shared, local and temp blocks written by the backends themselves
    blocks_dirtied: float = 0.0
    wal_bytes: float = 0.0
    changing_wal_bytes: float = 0.0  # of it, the WAL of statements that change rows (changes_rows)
    transaction_ends: float = 0.0  # COMMIT, END, ROLLBACK, ABORT calls
    cpu_user_s: float = 0.0  # its server processes' CPU (SessionUse), statement rules' moves applied
    cpu_system_s: float = 0.0
    read_bytes: float = 0.0  # its processes' bytes that reached a device
    write_bytes: float = 0.0
    samples: float = 0.0  # activity samples of its sessions (any state)
    active_samples: float = 0.0  # of them, active (running a statement)
    explicit_transaction_samples: float = 0.0
    log_flush_samples: float = 0.0  # active and waiting for the WAL flush
    waits: dict[str, float] = field(default_factory=dict)  # active samples by wait class

    @property
    def cpu_s(self) -> float:
        return self.cpu_user_s + self.cpu_system_s

    def add(self, other: WorkloadUse, weight: float = 1.0) -> None:
        for f in fields(self):
            if f.name == "waits":
                for k, v in other.waits.items():
                    self.waits[k] = self.waits.get(k, 0.0) + weight * v
            else:
                setattr(self, f.name, getattr(self, f.name) + weight * getattr(other, f.name))


@dataclass(kw_only=True)
class IntervalUse:
    """One interval, split by workload. `database_transactions`: pg_stat_database commits + rollbacks (None: not
    collected)."""

    ordinal: int
    length_s: float
    workloads: dict[str, WorkloadUse]
    database_transactions: float | None
    activity_samples: int


@dataclass(kw_only=True)
class Attribution:
    """Every usable interval split by workload, and how transactions were counted per workload."""

    rules: WorkloadRules
    names: list[str]  # every workload seen, the modelled ones first (by units), then OTHER, SYSTEM, COLLECTOR
    intervals: dict[int, IntervalUse]
    explicit: dict[str, bool]  # True: transactions counted by COMMIT/END/ROLLBACK/ABORT calls
    unit_names: dict[str, str]  # "transactions" or "calls of <pattern>"
    notes: list[str]

    def over(self, ordinals: Iterable[int]) -> dict[str, WorkloadUse]:
        total: dict[str, WorkloadUse] = {n: WorkloadUse() for n in self.names}
        for o in ordinals:
            for name, use in self.intervals[o].workloads.items():
                total.setdefault(name, WorkloadUse()).add(use)
        return total

    @property
    def modelled(self) -> list[str]:
        """The workloads the model carries as classes: every one but SYSTEM and COLLECTOR (background load)."""
        return [n for n in self.names if n not in (SYSTEM, COLLECTOR)]


def is_transaction_end(s: StatementDelta) -> bool:
    return s.text is not None and _TRANSACTION_END.match(s.text) is not None


def changes_rows(s: StatementDelta) -> bool:
    """Whether the statement's calls changed rows, so that their transactions commit with a transaction id and wait
    for the WAL flush. A read-only statement writes WAL too (pruning a page of dead row versions, hint bits under
    checksums), but its transaction has no id and its commit waits for no flush. Told from the counters alone (query
    text is optional): a row change logs at least one record for each row changed (its `rows`), a reader's pruning
    logs a record per page now and then, well under one per row it returns."""
    return s.wal_records > 0 and s.wal_records >= s.rows


def database_transactions(interval: Interval) -> float | None:
    """The applications' transactions by pg_stat_database over the interval: xact_commit + xact_rollback less the
    sessions established, summed over databases (None: not collected). A new session commits one transaction of its
    own while it starts (reading the catalogs), measured 1.02 a connection, so an application that connects for
    its work would otherwise have its transactions overcounted by its connections (159 in a 93 s observation of
    three pgbench applications, 2 % of one's transactions); `sessions` exists from PostgreSQL 14.

    The collector stores the view's delta rows under Interval.database["database"] (a list of rows); a dict of rows
    by database name under "pg_stat_database" is read too."""
    view = interval.database.get("database", interval.database.get("pg_stat_database"))
    rows = list(view.values()) if isinstance(view, dict) else view if isinstance(view, list) else []
    found = [r for r in rows if isinstance(r, dict) and ("xact_commit" in r or "xact_rollback" in r)]
    if not found:
        return None
    return sum(max(0.0, float(r.get("xact_commit") or 0) + float(r.get("xact_rollback") or 0)
                   - float(r.get("sessions") or 0)) for r in found)


def application_transactions(interval: Interval) -> float | None:
    """The database's transactions (database_transactions) less those of capmark's own collector, where it counted
    them: what the applications committed."""
    x = database_transactions(interval)
    if x is None or interval.collector_transactions is None:
        return x
    return max(0.0, x - interval.collector_transactions)


def _shares(weights: dict[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items() if v > 0} if total > 0 else {}


class _Samples:
    """Sample counts behind the statement split, per interval and over the whole observation."""

    def __init__(self, observation: Observation, rules: WorkloadRules) -> None:
        self.active: dict[tuple[int, str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.any: dict[tuple[int, str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.whole_active: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.whole_any: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.user_db: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.clients: dict[str, float] = defaultdict(float)
        self.in_transaction: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.user_db_any: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # (interval, command) -> user -> statements: where the engine's statement statistics do not know the user
        self.user_commands: dict[tuple[int, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for interval in observation.usable():
            for row in interval.database.get(STATEMENT_USERS) or ():
                if isinstance(row, dict) and row.get("command"):
                    self.user_commands[(interval.ordinal, str(row["command"]))][str(row.get("user") or "")] += \
                        float(row.get("calls") or 0.0)
            for cell in interval.activity:
                name = rules.session_workload(cell.session)
                if cell.session.is_background:
                    continue
                # a statement's samples by its user, and by its database alone for engines whose statement
                # statistics do not know the user (MySQL's digests): their statements carry the user ""
                keys = [(cell.session.database, cell.session.user, cell.query_id),
                        (cell.session.database, ANY_USER, cell.query_id)]
                if cell.query_id != NO_QUERY:
                    for key in keys:
                        self.any[(interval.ordinal, *key)][name] += cell.samples
                        self.whole_any[key][name] += cell.samples
                if in_explicit_transaction(cell):
                    self.in_transaction[(cell.session.database, cell.session.user)][name] += cell.samples
                self.user_db_any[(cell.session.database, cell.session.user)][name] += cell.samples
                if cell.state == "active":
                    self.user_db[(cell.session.database, cell.session.user)][name] += cell.samples
                    self.clients[name] += cell.samples
                    if cell.query_id != NO_QUERY:
                        for key in keys:
                            self.active[(interval.ordinal, *key)][name] += cell.samples
                            self.whole_active[key][name] += cell.samples
        # never sampled: the sampled statement it runs with (needs the tables above)
        self.companions = _companions(observation, self)

    def sampled(self, key: tuple[str, str, str]) -> bool:
        return key in self.whole_any and bool(_shares(self.whole_any[key]))

    def _by_samples(self, ordinal: int, key: tuple[str, str, str]) -> dict[str, float]:
        for table, k in ((self.active, (ordinal, *key)), (self.any, (ordinal, *key)),
                         (self.whole_active, key), (self.whole_any, key)):
            if k in table and (shares := _shares(table[k])):  # type: ignore[index]
                return shares
        return {}

    def split(self, ordinal: int, s: StatementDelta) -> dict[str, float]:
        key = (s.database, s.user, s.query_id)
        if s.query_id != OTHER_STATEMENTS:
            if shares := self._by_samples(ordinal, key):
                return shares
            if s.user == ANY_USER and s.command and (shares := self._by_user_commands(ordinal, s)):
                return shares
            companion = self.companions.get(key)
            if companion is not None and (shares := self._by_samples(ordinal, companion)):
                return shares
        control = is_transaction_end(s) or _is_transaction_start(s)  # only workloads seen inside transactions
        if control and (shares := _shares(self._matching(self.in_transaction, s))):
            return shares
        if (s.user or s.database) and (shares := _shares(self._matching(self.user_db, s))):
            return shares
        return _shares(self.clients) or {OTHER: 1.0}

    def _by_user_commands(self, ordinal: int, s: StatementDelta) -> dict[str, float]:
        """A statement whose user the engine does not know, split by each user's statements of its command in the
        interval, and within a user by the samples of that user's sessions in the statement's database (users with
        none there ran the command elsewhere)."""
        weights: dict[str, float] = defaultdict(float)
        for user, calls in self.user_commands.get((ordinal, s.command), {}).items():
            among = self.user_db.get((s.database, user)) or self.user_db_any.get((s.database, user)) or {}
            for name, share in _shares(among).items():
                weights[name] += calls * share
        return _shares(weights)

    @staticmethod
    def _matching(table: dict[tuple[str, str], dict[str, float]], s: StatementDelta) -> dict[str, float]:
        """Samples by workload among sessions of the statement's database and user (either may be unknown)."""
        weights: dict[str, float] = defaultdict(float)
        for (db, user), names in table.items():
            if (not s.database or db == s.database) and (not s.user or user == s.user):
                for n, v in names.items():
                    weights[n] += v
        return weights


def _companions(observation: Observation, samples: _Samples) -> dict[tuple[str, str, str], tuple[str, str, str]]:
    """For each top-level statement no sample ever showed, the sampled statement of the same user and database whose
    calls it matches in every interval where either ran (within the processes in flight at the edges, see
    MIN_COMPANION_INTERVALS), the closest where several do. At 1 Hz a 20 us INSERT between a sampled UPDATE and an
    untracked END is caught once or twice in a few minutes, and in one observation of five not at all; split by all
    active samples of its user and database it went mostly to a long-running report and doubled its transactions."""
    calls: dict[tuple[str, str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    slack: dict[tuple[int, str, str], float] = defaultdict(float)  # per interval, user and database
    for interval in observation.usable():
        for st in interval.statements:
            if st.toplevel and st.query_id != OTHER_STATEMENTS and not is_transaction_end(st) \
                    and not _is_transaction_start(st):
                calls[(st.database, st.user, st.query_id)][interval.ordinal] += st.calls
        for su in interval.sessions:
            if not su.session.is_background:
                for user in {su.session.user, ANY_USER}:
                    slack[(interval.ordinal, su.session.database, user)] += 2 * su.processes
    # Candidates by total calls: a companion's total is within the whole observation's slack of the statement's, so
    # a day of statements compares each unsampled one with a few sampled ones, not with all of them.
    totals: dict[tuple[str, str], list[tuple[float, tuple[str, str, str]]]] = defaultdict(list)
    for key, by_interval in calls.items():
        if samples.sampled(key):
            totals[key[:2]].append((sum(by_interval.values()), key))
    for listed in totals.values():
        listed.sort()
    whole_slack: dict[tuple[str, str], float] = defaultdict(float)
    for (_, database, user), v in slack.items():
        whole_slack[(database, user)] += v
    out = {}
    for key, mine in calls.items():
        listed = totals.get(key[:2], [])
        if samples.sampled(key) or not listed:
            continue
        total, room = sum(mine.values()), whole_slack.get(key[:2], 0.0)
        best: tuple[float, tuple[str, str, str]] | None = None
        for their_total, other in listed[bisect.bisect_left(listed, (total - room,)):]:
            if their_total > total + room:
                break
            gap = _companion_gap(mine, calls[other], {o: slack.get((o, *key[:2]), 0.0) for o in set(mine) | set(
                calls[other])})
            if gap is not None and (best is None or gap < best[0]):
                best = (gap, other)
        if best is not None:
            out[key] = best[1]
    return out


def _companion_gap(mine: dict[int, float], theirs: dict[int, float], allowed: dict[int, float]) -> float | None:
    """The summed gap of two statements' calls over the intervals where either ran, or None where they are not
    companions: a gap beyond the interval's slack, or too few intervals with more calls than the slack (only those
    tell two statements apart)."""
    gaps, telling = 0.0, 0
    for o, room in allowed.items():
        a, b = mine.get(o, 0.0), theirs.get(o, 0.0)
        if abs(a - b) > room:
            return None
        gaps += abs(a - b)
        telling += max(a, b) > room
    return gaps if telling >= MIN_COMPANION_INTERVALS else None


def attribute(observation: Observation, rules: WorkloadRules) -> Attribution:
    """Split every usable interval of an observation among workloads (see the module's docstring for how)."""
    samples = _Samples(observation, rules)
    collector_ids = set(observation.target.get(COLLECTOR_QUERIES) or ())
    intervals: dict[int, IntervalUse] = {}
    statement_calls: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # non-ending calls
    unit_calls: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # query: units
    collector_counted: dict[int, float] = {}  # the collector's own transactions, by interval, where it counted them
    for interval in observation.usable():
        use: dict[str, WorkloadUse] = defaultdict(WorkloadUse)
        for cell in interval.activity:
            w = use[rules.session_workload(cell.session)]
            w.samples += cell.samples
            if cell.state == "active":
                w.active_samples += cell.samples
                w.waits[cell.wait_class] = w.waits.get(cell.wait_class, 0.0) + cell.samples
                if cell.wait_class == "log_flush":
                    w.log_flush_samples += cell.samples
            if in_explicit_transaction(cell):
                w.explicit_transaction_samples += cell.samples
        for su in interval.sessions:
            w = use[rules.session_workload(su.session)]
            w.cpu_user_s += su.cpu_user_s
            w.cpu_system_s += su.cpu_system_s
            w.read_bytes += su.read_bytes
            w.write_bytes += su.write_bytes
        moved: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # from -> to: exec seconds
        session_exec: dict[str, float] = defaultdict(float)
        for s in interval.statements:
            if not s.toplevel:
                continue
            rule = rules.statement_rule(s)
            shares = {COLLECTOR: 1.0} if s.query_id in collector_ids else samples.split(interval.ordinal, s)
            if rule is not None:
                for name, share in shares.items():
                    moved[name][rule.name] += share * (s.exec_time_s + s.plan_time_s)
                shares = {rule.name: 1.0}
            for name, share in shares.items():
                if rule is None:
                    session_exec[name] += share * (s.exec_time_s + s.plan_time_s)
                w = use[name]
                w.calls += share * s.calls
                w.exec_time_s += share * (s.exec_time_s + s.plan_time_s)
                w.blocks_read += share * (s.shared_blks_read + s.local_blks_read + s.temp_blks_read)
                w.blocks_written += share * (s.shared_blks_written + s.local_blks_written + s.temp_blks_written)
                w.blocks_dirtied += share * (s.shared_blks_dirtied + s.local_blks_dirtied)
                w.wal_bytes += share * s.wal_bytes
                if changes_rows(s):
                    w.changing_wal_bytes += share * s.wal_bytes
                if is_transaction_end(s):
                    w.transaction_ends += share * s.calls
                elif not _is_transaction_start(s):
                    statement_calls[name][interval.ordinal] += share * s.calls
                owner = rules.rule(name)
                if owner is not None and owner.counts_call(s):
                    unit_calls[name][interval.ordinal] += share * s.calls
        for source, targets in moved.items():  # the CPU of statements a statement rule took
            total_exec = session_exec[source] + sum(targets.values())
            if total_exec <= 0 or source not in use:
                continue
            for target, seconds in targets.items():
                f = seconds / total_exec
                for attr in ("cpu_user_s", "cpu_system_s", "read_bytes", "write_bytes"):
                    part = getattr(use[source], attr) * f
                    setattr(use[source], attr, getattr(use[source], attr) - part)
                    setattr(use[target], attr, getattr(use[target], attr) + part)
        if interval.collector_transactions is not None:
            # counted by the collector itself: its statements' calls are not its transactions (a reading runs
            # several in one). Its entry is made here even when none of its statements was stored.
            use[COLLECTOR]  # noqa: B018
            collector_counted[interval.ordinal] = float(interval.collector_transactions)
        intervals[interval.ordinal] = IntervalUse(ordinal=interval.ordinal, length_s=interval.length_s,
                                                  workloads=dict(use), database_transactions=database_transactions(
                                                      interval), activity_samples=interval.activity_samples)
    names_seen = {n for iu in intervals.values() for n in iu.workloads}
    explicit: dict[str, bool] = {}
    unit_names: dict[str, str] = {}
    notes: list[str] = []
    unknown_ends: list[str] = []  # workloads in explicit transactions whose COMMIT or END is not known
    by_samples: list[str] = []  # workloads that the samples found inside explicit transactions
    seen_inside: list[str] = []  # workloads counted by statements that a sample found inside a transaction at all
    for name in names_seen:
        rule = rules.rule(name)
        ends = sum(iu.workloads[name].transaction_ends for iu in intervals.values() if name in iu.workloads)
        explicit[name] = ends > 0
        if rule is not None and rule.unit != TRANSACTIONS:
            unit_names[name] = f"calls of {rule.unit.removeprefix('query:').strip()}"
            counted = unit_calls[name]
        else:
            unit_names[name] = TRANSACTIONS
            counted = {} if explicit[name] else statement_calls[name]
            if name == COLLECTOR:
                counted = {**statement_calls[name], **collector_counted}
            inside = sum(iu.workloads[name].explicit_transaction_samples for iu in intervals.values()
                         if name in iu.workloads)
            active = sum(iu.workloads[name].active_samples for iu in intervals.values() if name in iu.workloads)
            if _explicit(inside, active) and name not in (SYSTEM, COLLECTOR):
                by_samples.append(name)
                if not explicit[name]:
                    unknown_ends.append(name)
            elif inside > 0 and not explicit[name] and name not in (SYSTEM, COLLECTOR):
                seen_inside.append(name)
        for iu in intervals.values():
            if name in iu.workloads:
                w = iu.workloads[name]
                w.units = w.transaction_ends if unit_names[name] == TRANSACTIONS and explicit[name] \
                    else counted.get(iu.ordinal, 0.0)
    # every workload with COMMIT or END calls, not only those the samples found inside transactions: at 1 Hz a
    # workload of short transactions may be caught idle inside one once in a whole observation, below the evidence
    # asked for, while a few stray COMMITs of another session split to it would stand for all its transactions
    with_ends = sorted(n for n in names_seen if explicit[n] and unit_names[n] == TRANSACTIONS and n not in (SYSTEM,
                                                                                                          COLLECTOR))
    # a workload of short transactions at a low rate may be caught inside one less often than the evidence asks for
    # (or never): its statements then stand for transactions, which the database's commits can refute
    for name in _bundled(intervals, sorted(seen_inside), unknown_ends, unit_names):
        unknown_ends.append(name)
        notes.append(f"{name}: its statements outnumber the commits the database counted beyond the other workloads' "
                     f"by more than {BUNDLED_RATIO:.2f} times, so it runs several of them per transaction; its "
                     "transactions are taken from the database's commits instead")
    for name in _too_few_ends(intervals, with_ends, unknown_ends, unit_names):
        explicit[name] = False
        unknown_ends.append(name)
        notes.append(f"{name}: the COMMIT and END statements found for it explain less than "
                     f"{FEW_ENDS_SHARE:.0%} of the commits the database counted beyond the other workloads' (its own are "
                     "not among the stored statements, as with pgbench -M prepared); its transactions are taken from "
                     "the database's commits instead")
    if unknown_ends:
        notes.append(_from_database(intervals, unknown_ends, unit_names))
    totals = {n: sum(iu.workloads[n].units for iu in intervals.values() if n in iu.workloads) for n in names_seen}
    tail = [n for n in (OTHER, SYSTEM, COLLECTOR) if n in names_seen]
    names = sorted((n for n in names_seen if n not in tail), key=lambda n: (-totals[n], n)) + tail
    return Attribution(rules=rules, names=names, intervals=intervals, explicit=explicit, unit_names=unit_names,
                       notes=notes)


def _too_few_ends(intervals: dict[int, IntervalUse], candidates: list[str], unknown: list[str],
                  unit_names: dict[str, str]) -> list[str]:
    """Workloads whose attributed COMMIT and END calls fall far short of what the database committed beyond every
    other workload: a stray COMMIT of another session (split to them by their samples inside transactions) is then all
    that was found, while their own transaction ends went uncounted."""
    if not candidates or any(iu.database_transactions is None for iu in intervals.values()):
        return []
    short = []
    for name in candidates:
        rest = _remaining_commits(intervals, name, unknown, unit_names)
        ends = sum(iu.workloads[name].transaction_ends for iu in intervals.values() if name in iu.workloads)
        if ends < FEW_ENDS_SHARE * rest:
            short.append(name)
    return short


def _remaining_commits(intervals: dict[int, IntervalUse], name: str, unknown: list[str],
                       unit_names: dict[str, str]) -> float:
    """The commits and rollbacks the database counted beyond every workload but `name` (and those whose
    transactions are still unknown), interval by interval; the intervals' database counts must all be there."""
    rest = 0.0
    for iu in intervals.values():
        assert iu.database_transactions is not None
        others = sum(w.units for n, w in iu.workloads.items()
                     if n != name and n not in unknown and unit_names.get(n) == TRANSACTIONS)
        rest += max(0.0, iu.database_transactions - others)
    return rest


def _bundled(intervals: dict[int, IntervalUse], candidates: list[str], unknown: list[str],
             unit_names: dict[str, str]) -> list[str]:
    """Workloads counted by their statements, one per transaction, whose statements outnumber the commits left for
    them by more than BUNDLED_RATIO: they run explicit transactions that the samples did not catch often enough to
    tell, and whose BEGIN and END never reached the statements."""
    if not candidates or any(iu.database_transactions is None for iu in intervals.values()):
        return []
    own = {n: sum(iu.workloads[n].units for iu in intervals.values() if n in iu.workloads) for n in candidates}
    bundled: list[str] = []
    while len(bundled) < len(candidates):  # the most outnumbered first: its excess shrinks what the others seem to have
        ratios = {}
        for name in (n for n in candidates if n not in bundled):
            rest = _remaining_commits(intervals, name, unknown + bundled, unit_names)
            ratios[name] = own[name] / rest if rest > 0 else math.inf if own[name] > 0 else 0.0
        worst = max(ratios, key=lambda n: ratios[n])
        if ratios[worst] <= BUNDLED_RATIO:
            break
        bundled.append(worst)
    return bundled


def _from_database(intervals: dict[int, IntervalUse], names: list[str], unit_names: dict[str, str]) -> str:
    """Transactions of workloads seen inside explicit transactions whose COMMIT or END statement is not known (no
    statement texts): per interval, pg_stat_database's commits and rollbacks less every other workload's
    transactions (the collector's included), split among them by their samples inside explicit transactions. Where the
    database's counts are missing, each of their statements counts as a transaction. Returns the report's note."""
    missing = False
    owed = 0.0  # others' statements counted in an interval whose commits the database counted in the one before
    for ordinal in sorted(intervals):
        iu = intervals[ordinal]
        present = [n for n in names if n in iu.workloads]
        if iu.database_transactions is None:
            missing = missing or bool(present)
            continue
        others = sum(w.units for n, w in iu.workloads.items() if n not in names and unit_names.get(n) == TRANSACTIONS)
        # The views are read one after the other at an interval's edge, so a transaction may be counted by the
        # database in one interval and by its statement in the next: what one interval lacks is taken from the
        # next, never clipped away (clipping would add it to the workload a second time).
        rest = iu.database_transactions - others - owed
        owed = max(0.0, -rest)
        rest = max(0.0, rest)
        if not present:
            continue
        weights = {n: iu.workloads[n].explicit_transaction_samples for n in present}
        total = sum(weights.values())
        for n in present:
            iu.workloads[n].units = rest * (weights[n] / total if total > 0 else 1 / len(present))
    listed = ", ".join(names)
    if missing:
        return (f"{listed}: sessions were seen inside explicit transactions, but no COMMIT or END statement of theirs is "
                "known (none is among the stored statements) nor the database's commits, so each of their statements "
                "counts as a transaction; store statement texts or set unit = \"query:...\"")
    return (f"{listed}: sessions were seen inside explicit transactions, but no COMMIT or END statement of theirs is "
            "known (none is among the stored statements), so their transactions are the database's commits and "
            "rollbacks less the other workloads' (split by their samples inside explicit transactions where several)")


def _explicit(inside: float, active: float) -> bool:
    """Whether a workload runs explicit transactions, by its samples inside them: a few, and a few per cent of its
    active samples (one statement of an autocommit workload delayed between Bind and Execute is not evidence)."""
    return inside >= MIN_EXPLICIT_SAMPLES and inside >= MIN_EXPLICIT_SHARE * max(active, inside)


def in_explicit_transaction(cell: ActivityCell) -> bool:
    """A sample of a session idle inside an explicit transaction, waiting for its client: only a transaction the
    client opened itself leaves a session idle in it."""
    return cell.state.startswith("idle in transaction")


def _is_transaction_start(s: StatementDelta) -> bool:
    return s.text is not None and re.match(r"^\s*(begin|start\s+transaction)\b", s.text, re.IGNORECASE) is not None


# ---------------------------------------------------------------------------------------------------- documents
@dataclass(kw_only=True)
class WorkloadShare:
    """One workload's definition and its share of the work, over the whole observation and in the peak."""

    name: str
    rule: str
    unit: str
    explicit_transactions: bool
    modelled: bool
    units: float
    transactions_share: float
    cpu_share: float
    io_share: float
    peak_units: float = math.nan
    peak_transactions_share: float = math.nan
    peak_cpu_share: float = math.nan
    peak_io_share: float = math.nan


@dataclass(kw_only=True)
class Reconciliation:
    """The workloads' transactions against pg_stat_database's commits + rollbacks over the same intervals."""

    workloads_transactions: float
    database_transactions: float | None
    gap: float | None  # database minus workloads: other sessions' transactions, or counting by statements
    gap_share: float | None


def shares(attribution: Attribution, ordinals: Sequence[int]) -> dict[str, tuple[float, float, float, float]]:
    """Per workload: units and the shares of transactions, CPU and IO bytes over the given intervals."""
    total = attribution.over(ordinals)
    units = sum(w.units for n, w in total.items() if attribution.unit_names.get(n) == TRANSACTIONS)
    cpu = sum(w.cpu_s for w in total.values())
    io = sum(w.read_bytes + w.write_bytes for w in total.values())

    def part(a: float, b: float) -> float:
        return a / b if b > 0 else math.nan

    return {n: (w.units, part(w.units, units) if attribution.unit_names.get(n) == TRANSACTIONS else math.nan,
                part(w.cpu_s, cpu), part(w.read_bytes + w.write_bytes, io)) for n, w in total.items()}


def workload_shares(attribution: Attribution, peak: Sequence[int] = ()) -> list[WorkloadShare]:
    whole = shares(attribution, list(attribution.intervals))
    at_peak = shares(attribution, peak) if peak else {}
    rows = []
    for name in attribution.names:
        u, t, c, i = whole[name]
        pu, pt, pc, pi = at_peak.get(name, (math.nan,) * 4)
        rows.append(WorkloadShare(name=name, rule=attribution.rules.definition(name), unit=attribution.unit_names[name],
                                  explicit_transactions=attribution.explicit[name],
                                  modelled=name in attribution.modelled, units=u, transactions_share=t, cpu_share=c,
                                  io_share=i, peak_units=pu, peak_transactions_share=pt, peak_cpu_share=pc,
                                  peak_io_share=pi))
    return rows


def reconcile(attribution: Attribution, ordinals: Sequence[int]) -> Reconciliation:
    total = attribution.over(ordinals)
    ours = sum(w.units for n, w in total.items() if attribution.unit_names.get(n) == TRANSACTIONS)
    db = [attribution.intervals[o].database_transactions for o in ordinals]
    if not db or any(d is None for d in db):
        return Reconciliation(workloads_transactions=ours, database_transactions=None, gap=None, gap_share=None)
    theirs = sum(d for d in db if d is not None)
    gap = theirs - ours
    return Reconciliation(workloads_transactions=ours, database_transactions=theirs, gap=gap,
                          gap_share=gap / theirs if theirs > 0 else None)
