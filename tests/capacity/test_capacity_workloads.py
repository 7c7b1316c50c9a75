"""Workload rules (matching, first match wins, bad files) and the attribution of statements and transactions."""

from __future__ import annotations

import dataclasses
import re

import pytest
from capacity.synthetic import QUERY, build

from capmark.capacity.workloads import (
    COLLECTOR,
    OTHER,
    SYSTEM,
    WorkloadRules,
    attribute,
    default_group,
    parse_rules,
    reconcile,
)
from capmark.errors import CapmarkError
from capmark.observations import (
    STATEMENT_USERS,
    ActivityCell,
    Interval,
    Observation,
    ObservationSettings,
    SessionKey,
    StatementDelta,
)

RULES = """
[[workload]]
name = "orders"
application = "orders-*"

[[workload]]
name = "office"
client = "192.168.0.0/16"

[[workload]]
name = "reports"
user = ["analyst", "bi"]
database = "shop"

[[workload]]
name = "slow-search"
statement = "(?i)^select .* like"
user = "app"
"""


def one_sentence(message: str) -> bool:
    return message.endswith(".") and not re.search(r"\.\s+[A-Z]", message) and "\n" not in message


def key(**kw: str) -> SessionKey:
    return SessionKey(**kw)


def test_rules_match_first_and_in_order():
    rules = parse_rules(RULES)
    assert rules.session_workload(key(application="orders-web", client="192.168.1.5")) == "orders"  # first wins
    assert rules.session_workload(key(application="crm", client="192.168.1.5")) == "office"
    assert rules.session_workload(key(application="crm", client="10.0.0.1")) == OTHER
    assert rules.session_workload(key(user="bi", database="shop")) == "reports"
    assert rules.session_workload(key(user="bi", database="hr")) == OTHER  # every key of a rule must match
    assert rules.session_workload(key(backend_type="autovacuum worker", user="bi", database="shop")) == SYSTEM
    assert rules.session_workload(key(application="capmark observe", user="bi", database="shop")) == COLLECTOR
    assert rules.session_workload(key(application="orders-web", client="")) == "orders"  # a Unix socket
    assert rules.session_workload(key(application="office", client="not-an-ip")) == OTHER


def test_statement_rules_match_text_or_id_only_for_their_user():
    rules = parse_rules(RULES)
    like = StatementDelta(query_id="7", database="shop", user="app", text="SELECT * FROM t WHERE a LIKE 'x%'")
    assert rules.statement_rule(like) is not None and rules.statement_rule(like).name == "slow-search"
    other_user = StatementDelta(query_id="7", database="shop", user="bi", text=like.text)
    assert rules.statement_rule(other_user) is None
    no_text = StatementDelta(query_id="7", database="shop", user="app")
    assert rules.statement_rule(no_text) is None
    # a statement rule never claims a session
    assert rules.session_workload(key(user="app", database="shop")) == OTHER


def test_default_grouping_falls_back_from_application_to_user_then_database():
    assert default_group(key(application="web", user="u", database="d"), "application") == "web"
    assert default_group(key(application="", user="u", database="d"), "application") == "u"
    assert default_group(key(application="", user="", database="d"), "application") == "d"
    assert default_group(key(application="web", user="u", database="d"), "user") == "u"
    assert default_group(key(), "application") == OTHER
    # an application named like a reserved class does not become that class
    assert default_group(key(application="SYSTEM", user="u"), "application") == "u"


@pytest.mark.parametrize("text, words", [
    ("[[workload]\nname='a'", "not valid TOML"),
    ("", "defines no workload"),
    ("[[workload]]\nname = 'a'\napp = 'x'", "unknown key 'app'"),
    ("[[workload]]\nname = 'a'\nclient = '10.0.0.300/8'", "client '10.0.0.300/8' is not an address"),
    ("[[workload]]\nname = 'a'\nstatement = '(unclosed'", "not a valid regular expression"),
    ("[[workload]]\nname = 'a'\napplication = '[ab'", "unclosed '['"),
    ("[[workload]]\nname = 'a'\nuser = 'x'\n[[workload]]\nname = 'a'\nuser = 'y'", "used twice"),
    ("[[workload]]\nname = 'all'\napplication = 'shop-*'\n[[workload]]\nname = 'web'\napplication = 'shop-web'",
     "'web' can never match, since 'all'"),
    ("[[workload]]\nname = 'net'\nclient = '10.0.0.0/8'\n[[workload]]\nname = 'sub'\nclient = '10.1.0.0/16'",
     "'sub' can never match"),
    ("[[workload]]\nname = 'a'", "has no rule"),
    ("[[workload]]\nuser = 'x'", "has no name"),
    ("[[workload]]\nname = 'OTHER'\nuser = 'x'", "reserved"),
    ("[[workload]]\nname = 'a'\nuser = 'x'\nunit = 'rows'", "unit 'rows' is not known"),
    ("[[workload]]\nname = 'a'\napplication = 'x'\nquery_id = '5'", "cannot also name an application"),
    ("title = 'x'", "unknown top-level key 'title'"),
    ("[[workload]]\nname = 'a'\nuser = 3", "'user' must be a non-empty string"),
])
def test_bad_rule_files_get_one_sentence(text, words):
    with pytest.raises(CapmarkError) as err:
        parse_rules(text, "w.toml")
    message = str(err.value)
    assert words in message and one_sentence(message)


def test_narrower_rule_after_a_wider_one_in_another_key_is_allowed():
    parse_rules("[[workload]]\nname = 'web'\napplication = 'shop-web'\n[[workload]]\nname = 'all'\n"
                "application = 'shop-*'")
    parse_rules("[[workload]]\nname = 'a'\nuser = 'x'\n[[workload]]\nname = 'b'\napplication = 'y'")


def test_transactions_per_workload_match_the_truth_and_reconcile():
    obs, truth = build()
    att = attribute(obs, WorkloadRules())
    for ordinal, units in truth.items():
        got = att.intervals[ordinal].workloads
        assert got["orders-app"].units == pytest.approx(units["orders"], rel=1e-9)  # its END calls
        assert got["lookup-app"].units == pytest.approx(units["lookups"], rel=1e-9)  # autocommit statements
        assert got["report-app"].units == pytest.approx(units["reports"], rel=1e-9)
    assert att.explicit["orders-app"] and not att.explicit["lookup-app"]
    r = reconcile(att, list(att.intervals))
    assert r.gap == pytest.approx(0, abs=1e-6)  # the collector's own transactions are its own class
    assert att.over(att.intervals)[COLLECTOR].units == 60 * 60


def test_without_statement_texts_transactions_come_from_the_database_counts():
    obs, truth = build(texts=False)
    att = attribute(obs, WorkloadRules())
    assert not att.explicit["orders-app"]
    assert any("orders-app" in n and "less the other workloads'" in n for n in att.notes)
    for ordinal, units in truth.items():
        got = att.intervals[ordinal].workloads
        assert got["orders-app"].units == pytest.approx(units["orders"], rel=1e-9)
        assert got["lookup-app"].units == pytest.approx(units["lookups"], rel=1e-9)  # BEGIN and END not among them
    for interval in obs.intervals:
        interval.database.clear()
    att = attribute(obs, WorkloadRules())
    assert any("each of their statements counts as a transaction" in n for n in att.notes)


def observation(cells: list[ActivityCell], statements: list[StatementDelta]) -> Observation:
    interval = Interval(ordinal=0, start=0.0, end=60.0, statements=statements, activity=cells, activity_samples=60)
    return Observation(observation_id="x", created_at="", status="ended", reason="",
                       settings=ObservationSettings(interval_s=60, sample_hz=1, top_statements=200,
                                                    store_query_text=True, host_metrics="none", planned_s=None),
                       target={}, host={}, host_cores=2, intervals=[interval])


def test_a_shared_statement_is_split_by_its_samples_and_an_unsampled_one_by_user_and_database():
    a, b = key(application="a", user="u", database="d"), key(application="b", user="u", database="d")
    cells = [ActivityCell(session=a, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=30),
             ActivityCell(session=b, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=10),
             ActivityCell(session=b, query_id="3", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=40)]
    statements = [StatementDelta(query_id="1", database="d", user="u", calls=1000, exec_time_s=4.0),
                  StatementDelta(query_id="2", database="d", user="u", calls=800, exec_time_s=1.0),
                  StatementDelta(query_id="9", database="d", user="u", toplevel=False, calls=500, exec_time_s=9.0)]
    use = attribute(observation(cells, statements), WorkloadRules()).intervals[0].workloads
    # statement 1: 3:1 by its own samples; statement 2 never sampled: by the users' active samples, 30:50
    assert use["a"].calls == pytest.approx(750 + 800 * 30 / 80)
    assert use["b"].calls == pytest.approx(250 + 800 * 50 / 80)
    assert use["a"].exec_time_s == pytest.approx(3.0 + 1.0 * 30 / 80)  # the nested statement is not counted again



def test_a_digest_without_a_user_is_split_by_the_users_counts_of_its_command():
    """MySQL's digests have no user. A sampled one goes by its samples; one no sample showed goes by each user's
    statements of its command in the interval (here only orders' user updated), and within the user by the samples
    of its sessions in the digest's schema (two applications 3:1); a user with statements of that command but no
    session in the schema ran them elsewhere. By the schema's active samples alone the always-busy report would
    have taken most of the UPDATEs."""
    report, web, batch = (key(application="report", user="bi", database="shop"),
                          key(application="web", user="app", database="shop"),
                          key(application="batch", user="app", database="shop"))
    cells = [ActivityCell(session=report, query_id="sel", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=50),
             ActivityCell(session=web, query_id="commit", state="idle", in_transaction=False, wait_class="client",
                          wait_event="", samples=9),
             ActivityCell(session=batch, query_id="commit", state="idle", in_transaction=False, wait_class="client",
                          wait_event="", samples=3)]
    statements = [StatementDelta(query_id="sel", database="shop", user="", calls=40, exec_time_s=20.0,
                                 command="select"),
                  StatementDelta(query_id="upd", database="shop", user="", calls=300, exec_time_s=0.3,
                                 command="update")]
    obs = observation(cells, statements)
    obs.intervals[0] = dataclasses.replace(obs.intervals[0], database={STATEMENT_USERS: [
        {"user": "app", "command": "update", "calls": 300.0}, {"user": "ops", "command": "update", "calls": 50.0},
        {"user": "bi", "command": "select", "calls": 40.0}]})
    use = attribute(obs, WorkloadRules()).intervals[0].workloads
    assert use["report"].calls == pytest.approx(40)
    assert use["web"].calls == pytest.approx(300 * 9 / 12)
    assert use["batch"].calls == pytest.approx(300 * 3 / 12)

def _two_apps_one_user(insert_calls: list[float]) -> Observation:
    """Four intervals of a long-running report and an order whose UPDATE is sampled and whose INSERT (given calls)
    never is, both apps under one user and database, six processes each."""
    from capmark.observations import SessionUse
    reports, orders = key(application="reports", user="u", database="d"), key(application="orders", user="u",
                                                                             database="d")
    intervals = []
    for k, n in enumerate([2000.0, 2400.0, 2100.0, 900.0]):
        cells = [ActivityCell(session=reports, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                              wait_event="", samples=30),
                 ActivityCell(session=orders, query_id="2", state="active", in_transaction=False, wait_class="cpu",
                              wait_event="", samples=2)]
        statements = [StatementDelta(query_id="1", database="d", user="u", calls=1500, exec_time_s=2.5),
                      StatementDelta(query_id="2", database="d", user="u", calls=n, exec_time_s=0.05),
                      StatementDelta(query_id="3", database="d", user="u", calls=insert_calls[k], exec_time_s=0.03)]
        sessions = [SessionUse(session=s, cpu_user_s=1.0, cpu_system_s=0.0, read_bytes=0, write_bytes=0, processes=6)
                    for s in (reports, orders)]
        intervals.append(Interval(ordinal=k, start=60.0 * k, end=60.0 * (k + 1), statements=statements,
                                  activity=cells, sessions=sessions, activity_samples=60))
    return Observation(observation_id="x", created_at="", status="ended", reason="",
                       settings=ObservationSettings(interval_s=60, sample_hz=1, top_statements=200,
                                                    store_query_text=False, host_metrics="none", planned_s=None),
                       target={}, host={}, host_cores=2, intervals=intervals)


def test_a_never_sampled_statement_that_runs_as_often_as_a_sampled_one_goes_with_it():
    """At 1 Hz an order's short INSERT can go unsampled for a whole observation; split by the active samples of its
    user and database it went 15:1 to a long report and doubled the report's transactions."""
    inserts = [2003.0, 2395.0, 2100.0, 908.0]  # the UPDATE's calls, give or take the orders in flight at the edges
    whole = (a := attribute(_two_apps_one_user(inserts), WorkloadRules())).over(a.intervals)
    assert whole["orders"].calls == pytest.approx(2000 + 2400 + 2100 + 900 + sum(inserts))
    assert whole["reports"].units == pytest.approx(4 * 1500)


def test_a_never_sampled_statement_that_runs_at_its_own_rate_is_split_by_user_and_database():
    """Calls close to the UPDATE's in most intervals but not in one (more than the 24 processes could hold in flight
    at its edges) are another loop's: no companion, the users' active samples split it (30:2)."""
    inserts = [2003.0, 2395.0, 2160.0, 908.0]
    whole = (a := attribute(_two_apps_one_user(inserts), WorkloadRules())).over(a.intervals)
    assert whole["reports"].calls == pytest.approx(4 * 1500 + sum(inserts) * 30 / 32)


def test_a_statement_rule_takes_the_statement_and_the_cpu_of_its_calls():
    a = key(application="a", user="u", database="d")
    cells = [ActivityCell(session=a, query_id=q, state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=10) for q in ("1", "2")]
    statements = [StatementDelta(query_id="1", database="d", user="u", calls=100, exec_time_s=3.0),
                  StatementDelta(query_id="2", database="d", user="u", calls=10, exec_time_s=1.0, text="select big")]
    obs = observation(cells, statements)
    from capmark.observations import SessionUse
    obs.intervals[0].sessions.append(SessionUse(session=a, cpu_user_s=4.0, cpu_system_s=0.0, read_bytes=0,
                                                write_bytes=0, processes=1))
    rules = parse_rules("[[workload]]\nname = 'big'\nstatement = '^select big'\nunit = 'query:^select big'\n"
                        "[[workload]]\nname = 'a'\napplication = 'a'")
    use = attribute(obs, rules).intervals[0].workloads
    assert use["big"].units == 10 and use["a"].units == 100
    assert use["big"].cpu_user_s == pytest.approx(1.0) and use["a"].cpu_user_s == pytest.approx(3.0)


def test_begin_and_end_go_only_to_workloads_seen_inside_transactions():
    obs, truth = build()
    att = attribute(obs, WorkloadRules())
    whole = att.over(att.intervals)
    assert whole["lookup-app"].transaction_ends == 0 and whole["report-app"].transaction_ends == 0
    assert whole["orders-app"].transaction_ends == pytest.approx(sum(u["orders"] for u in truth.values()))
    assert QUERY["end"] == "901"


def test_explicit_transactions_whose_begin_and_end_are_not_tracked_take_the_databases_remaining_commits():
    """pgbench -M prepared sends BEGIN and END that pg_stat_statements never records: the orders workload is known
    to run explicit transactions only by its samples idle inside one, and its transactions are then the database's
    commits less the autocommit workloads' statements; one stray such sample of another workload is no evidence."""
    lookups, orders = key(application="lookups", user="u", database="d"), key(application="orders", user="u", database="d")
    cells = [ActivityCell(session=lookups, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=200),
             ActivityCell(session=lookups, query_id="1", state="idle in transaction", in_transaction=True,
                          wait_class="client", wait_event="ClientRead", samples=1),  # below the evidence needed
             ActivityCell(session=orders, query_id="2", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=40),
             ActivityCell(session=orders, query_id="3", state="idle in transaction", in_transaction=True,
                          wait_class="client", wait_event="ClientRead", samples=6)]
    statements = [StatementDelta(query_id="1", database="d", user="u", calls=60_000, exec_time_s=3.0),
                  StatementDelta(query_id="2", database="d", user="u", calls=12_000, exec_time_s=2.0),
                  StatementDelta(query_id="3", database="d", user="u", calls=12_000, exec_time_s=1.5)]
    obs = observation(cells, statements)
    obs.intervals[0] = dataclasses.replace(obs.intervals[0], database={"database": [
        {"datname": "d", "xact_commit": 60_000 + 12_000, "xact_rollback": 0}]})
    attributed = attribute(obs, WorkloadRules())
    use = attributed.intervals[0].workloads
    assert use["lookups"].units == pytest.approx(60_000)
    assert use["orders"].units == pytest.approx(12_000)
    assert any("orders" in n and "explicit transactions" in n for n in attributed.notes)


@pytest.mark.parametrize("inside,per_transaction", [(1, 2), (1, 3), (0, 2)],
                         ids=["inside-once", "three-statements", "never-seen-inside"])
def test_a_workload_of_several_statements_per_transaction_caught_inside_too_rarely_takes_the_remaining_commits(
        inside: int, per_transaction: int):
    """Orders' transactions are an UPDATE and an INSERT (and a SELECT) between a BEGIN and an END that
    pg_stat_statements never records (pgbench -M prepared). Caught inside a transaction once (or never), below the
    evidence of explicit transactions, its statements stood for as many transactions; the database committed 12,000
    beyond the lookups', and that is what it ran. The lookups, one statement per commit with a stray sample inside a
    transaction too, stay counted by their statements, also where orders' excess leaves them seemingly fewer commits
    than statements (three statements per transaction)."""
    lookups, orders = key(application="lookups", user="u", database="d"), key(application="orders", user="u", database="d")
    cells = [ActivityCell(session=lookups, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=200),
             ActivityCell(session=lookups, query_id="1", state="idle in transaction", in_transaction=True,
                          wait_class="client", wait_event="ClientRead", samples=1),
             ActivityCell(session=orders, query_id="2", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=30),
             ActivityCell(session=orders, query_id="3", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=10)]
    if inside:
        cells.append(ActivityCell(session=orders, query_id="3", state="idle in transaction", in_transaction=True,
                                  wait_class="client", wait_event="ClientRead", samples=inside))
    statements = [StatementDelta(query_id="1", database="d", user="u", calls=60_000, exec_time_s=3.0),
                  StatementDelta(query_id="2", database="d", user="u", calls=12_000, exec_time_s=2.0),
                  StatementDelta(query_id="3", database="d", user="u", calls=12_000, exec_time_s=1.5)]
    if per_transaction == 3:
        statements.append(StatementDelta(query_id="4", database="d", user="u", calls=12_000, exec_time_s=0.5))
        cells.append(ActivityCell(session=orders, query_id="4", state="active", in_transaction=False,
                                  wait_class="cpu", wait_event="", samples=5))
    obs = observation(cells, statements)
    obs.intervals[0] = dataclasses.replace(obs.intervals[0], database={"database": [
        {"datname": "d", "xact_commit": 60_000 + 12_000, "xact_rollback": 0}]})
    attributed = attribute(obs, WorkloadRules())
    use = attributed.intervals[0].workloads
    if inside:
        assert use["orders"].units == pytest.approx(12_000)
        assert any("orders" in n and "several of them per transaction" in n for n in attributed.notes), attributed.notes
    else:  # never seen inside: nothing tells it from an autocommit workload but the commits, and it keeps its count
        assert use["orders"].units == pytest.approx(24_000)
    assert use["lookups"].units == pytest.approx(60_000)


@pytest.mark.parametrize("inside", [5, 1], ids=["seen-inside-transactions", "inside-once-below-the-evidence"])
def test_a_stray_commit_of_another_session_does_not_become_the_explicit_workloads_transactions(inside: int):
    """A COMMIT nobody's samples caught is split among the workloads seen inside transactions: for orders, whose own
    ends were never recorded, those 40 calls must not stand for its 12,000 transactions, also where the 1 Hz samples
    caught orders inside a transaction only once (short transactions at a low rate)."""
    lookups, orders = key(application="lookups", user="u", database="d"), key(application="orders", user="u", database="d")
    cells = [ActivityCell(session=lookups, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=200),
             ActivityCell(session=orders, query_id="3", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=35),
             ActivityCell(session=orders, query_id="3", state="idle in transaction", in_transaction=True,
                          wait_class="client", wait_event="ClientRead", samples=inside)]
    statements = [StatementDelta(query_id="1", database="d", user="u", calls=60_000, exec_time_s=3.0),
                  StatementDelta(query_id="3", database="d", user="u", calls=12_000, exec_time_s=1.5),
                  StatementDelta(query_id="7", database="d", user="u", calls=40, exec_time_s=0.001, text="COMMIT")]
    obs = observation(cells, statements)
    obs.intervals[0] = dataclasses.replace(obs.intervals[0], database={"database": [
        {"datname": "d", "xact_commit": 60_000 + 12_000 + 40, "xact_rollback": 0}]})
    attributed = attribute(obs, WorkloadRules())
    assert attributed.intervals[0].workloads["orders"].units == pytest.approx(12_040)
    assert any("explain less than 50%" in n for n in attributed.notes), attributed.notes


def test_commits_counted_an_interval_apart_from_their_statements_are_not_counted_twice():
    """The database's commits and the statements are read one after the other at an interval's edge: 500 lookups
    committed late in interval 0 show among interval 1's statements. Orders' transactions over both intervals are
    the database's less the lookups', whatever interval each fell in."""
    lookups, orders = key(application="lookups", user="u", database="d"), key(application="orders", user="u", database="d")
    cells = [ActivityCell(session=lookups, query_id="1", state="active", in_transaction=False, wait_class="cpu",
                          wait_event="", samples=100),
             ActivityCell(session=orders, query_id="3", state="idle in transaction", in_transaction=True,
                          wait_class="client", wait_event="ClientRead", samples=4)]
    obs = observation(cells, [])
    first = dataclasses.replace(obs.intervals[0], statements=[
        StatementDelta(query_id="1", database="d", user="u", calls=10_500, exec_time_s=1.0),
        StatementDelta(query_id="3", database="d", user="u", calls=1_000, exec_time_s=1.0)],
        database={"database": [{"datname": "d", "xact_commit": 10_000 + 300, "xact_rollback": 0}]})
    second = dataclasses.replace(first, ordinal=1, start=60.0, end=120.0, statements=[
        StatementDelta(query_id="1", database="d", user="u", calls=9_500, exec_time_s=1.0),
        StatementDelta(query_id="3", database="d", user="u", calls=1_000, exec_time_s=1.0)],
        database={"database": [{"datname": "d", "xact_commit": 10_000 + 700, "xact_rollback": 0}]})
    obs.intervals[:] = [first, second]
    use = attribute(obs, WorkloadRules()).intervals
    assert use[0].workloads["orders"].units + use[1].workloads["orders"].units == pytest.approx(1_000)
