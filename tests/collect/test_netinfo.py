"""Network per unit of work: the job connections' TCP counters (Linux TCP_INFO) on the machine's PostgreSQL.

Every figure is checked against the PostgreSQL wire protocol (protocol 3.0, "Message Formats"): a message is a
1-byte type, a 4-byte length and its body, so what a query moves is known to the byte."""

from __future__ import annotations

import io
from pathlib import Path

import psycopg
import pytest
from liveruns import run_without_report
from rich.console import Console

from capmark.analysis.demands import demands_of
from capmark.analysis.report import report_documents
from capmark.collect import netinfo
from capmark.config import RunSpec
from capmark.measure.demands import demands_of_test, step_demands
from capmark.report import demands as demands_report
from capmark.report.html import demands_section
from capmark.store import load_run
from capmark.workloads import registry

pytestmark = pytest.mark.db

TCP_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
SOCKET_DIR = "/var/run/postgresql"
# The end-to-end runs get a database of their own, so that capmark's data model does not meet another session's
# runs on the shared server's postgres database (it is kept, and reused, between test sessions).
RUN_DB = "capmark_nettest"

PAYLOAD = 100_000  # bytes of the text column fetched
QUERIES = 20
# A simple-protocol query answered by one row of one text column, besides the payload:
# RowDescription 'T' (1 + 4 + 2 + "repeat\0" 7 + 18 for the field) + DataRow 'D' (1 + 4 + 2 + 4) +
# CommandComplete 'C' (1 + 4 + "SELECT 1\0" 9) + ReadyForQuery 'Z' (1 + 4 + 1).
FETCH_OVERHEAD = 32 + 11 + 14 + 6
# The brief's band: the payload within 2 %; the protocol overhead above is exact, so this is ample.
TOLERANCE = 0.02
PARAM = 50_000  # bytes of a parameter sent


def _answers(dsn: str) -> bool:
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
        return True
    except psycopg.Error:
        return False


@pytest.fixture(scope="module")
def tcp() -> psycopg.Connection:
    if not _answers(TCP_DSN):
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432")
    # prepare_threshold=None: psycopg never switches a repeated query to a prepared statement, so every
    # execution moves the same messages
    with psycopg.connect(TCP_DSN, autocommit=True, prepare_threshold=None) as conn:
        yield conn


def _delta(conn: psycopg.Connection, before: netinfo.NetReading) -> netinfo.TcpCounters:
    delta = netinfo.summed_delta([before], [netinfo.read(conn)])
    assert delta.transport == "tcp" and delta.counters is not None, delta
    return delta.counters


def test_fetched_bytes_are_counted_as_received(tcp):
    before = netinfo.read(tcp)
    assert before.transport == "tcp" and before.counters is not None, before
    for _ in range(QUERIES):
        assert len(tcp.execute(f"select repeat('x', {PAYLOAD})").fetchone()[0]) == PAYLOAD
    got = _delta(tcp, before)
    expected = QUERIES * (PAYLOAD + FETCH_OVERHEAD)
    assert got.bytes_received >= QUERIES * PAYLOAD  # the payload itself is a hard floor
    assert abs(got.bytes_received - expected) <= TOLERANCE * QUERIES * PAYLOAD, (got, expected)
    # the queries are short: 'Q' + length + "select repeat('x', 100000)\0" each
    query = f"select repeat('x', {PAYLOAD})"
    assert got.bytes_sent == QUERIES * (1 + 4 + len(query) + 1), got
    # 100 kB do not fit one segment (loopback MTU 64 kB): at least two segments per answer
    assert got.segments_in >= 2 * QUERIES
    assert tcp.execute("select 1").fetchone() == (1,)  # the connection's own socket is untouched


def test_a_sent_parameter_is_counted_as_sent(tcp):
    before = netinfo.read(tcp)
    assert tcp.execute("select length(%s)", ("y" * PARAM,)).fetchone() == (PARAM,)
    got = _delta(tcp, before)
    # extended protocol: Parse (1 + 4 + 1 + "select length($1)\0" 18 + 2 + 4 for one type) + Bind (1 + 4 + 1 + 1
    # + 2 + 2 format codes + 2 + 4 + the parameter + 2 + 2 result formats) + Describe 7 + Execute 10 + Sync 5
    expected = 30 + (23 + PARAM) + 7 + 10 + 5
    assert got.bytes_sent >= PARAM
    assert abs(got.bytes_sent - expected) <= TOLERANCE * PARAM, (got, expected)
    assert got.bytes_received < 200  # five short answer messages


def test_the_delta_sums_the_connections(tcp):
    """The units of a step are all its jobs', so the traffic must be all their sockets', not one of them."""
    with psycopg.connect(TCP_DSN, autocommit=True, prepare_threshold=None) as other:
        conns = [tcp, other]
        before = netinfo.read_all(conns)
        for conn, n in zip(conns, (3, 2), strict=True):
            for _ in range(n):
                conn.execute(f"select repeat('x', {PAYLOAD})").fetchone()
        delta = netinfo.summed_delta(before, netinfo.read_all(conns))
    assert delta.connections == 2 and delta.counters is not None
    assert delta.counters.bytes_received == 5 * (PAYLOAD + FETCH_OVERHEAD)
    assert delta.to_dict()["bytes_received"] == delta.counters.bytes_received


def test_unix_socket_has_no_counters():
    if not Path(SOCKET_DIR).is_dir() or not _answers(f"host={SOCKET_DIR} user=postgres dbname=postgres"):
        pytest.skip(f"no PostgreSQL answers on a Unix socket in {SOCKET_DIR}")
    with psycopg.connect(f"host={SOCKET_DIR} user=postgres dbname=postgres", autocommit=True) as conn:
        reading = netinfo.read(conn)
        assert reading.counters is None
        assert (reading.transport, reading.reason) == ("unix", "n/a: Unix socket")
        delta = netinfo.summed_delta([reading], [netinfo.read(conn)]).to_dict()
        assert delta == {"transport": "unix", "connections": 1, "reason": "n/a: Unix socket"}
        assert conn.execute("select 1").fetchone() == (1,)


def test_a_short_tcp_info_has_no_counters():
    """A kernel before 4.2 returns a struct tcp_info that ends before the byte and segment counters."""
    assert netinfo.parse_tcp_info(bytes(netinfo.TCP_INFO_NEEDED - 1)) is None
    assert netinfo.parse_tcp_info(bytes(netinfo.TCP_INFO_NEEDED)) == netinfo.TcpCounters(0, 0, 0, 0, 0)


# --- end to end: a client-side run over TCP, its demands per unit against the wire protocol ----------------------

JOBS = 2  # more than one: a per-connection figure instead of the sum would be half of it
SHORT = {"warmup_s": 0.5, "duration_s": 2.0}


@pytest.fixture(scope="module")
def run_db() -> str:
    if not _answers(TCP_DSN):
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432")
    with psycopg.connect(TCP_DSN, autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", (RUN_DB,)).fetchone():
            conn.execute(f"create database {RUN_DB}")
    return RUN_DB


@pytest.fixture(scope="module")
def tcp_run(run_db, tmp_path_factory):
    dsn = f"postgresql://postgres@127.0.0.1:5432/{run_db}"
    return run_without_report(RunSpec(workloads=["srv-query1"], jobs=[JOBS], mode="client", dsn=dsn,
                                      results_dir=tmp_path_factory.mktemp("net"), **SHORT))


def _query1_bytes(dsn: str) -> tuple[float, float]:
    """Bytes one srv-query1 unit sends and receives on average: libpq's PQexecPrepared sends Bind, Describe
    (portal), Execute and Sync, and reads BindComplete, RowDescription, DataRow, CommandComplete and
    ReadyForQuery. The row's text and the key's digits vary; their means over the table are the expectation
    (the keys are uniform over it)."""
    ((name, statement),) = registry.get("srv-query1").client_statements.items()
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(statement.replace("$1", "1"))
        columns = [c.name for c in cur.description]
        texts = ", ".join(f"{c}::text" for c in columns)
        payload, digits = conn.execute(f"select avg(octet_length(concat({texts}))), avg(octet_length(id::text)) "
                                       "from capmark.item").fetchone()
    bind = 1 + 4 + 1 + len(name) + 1 + 2 + 2 + 4 + float(digits) + 2 + 2
    sent = bind + 7 + 10 + 5
    row_description = 1 + 4 + 2 + sum(len(c) + 1 + 18 for c in columns)
    data_row = 1 + 4 + 2 + 4 * len(columns) + float(payload)
    received = 5 + row_description + data_row + 14 + 6
    return sent, received


def test_client_run_bytes_per_unit_match_the_protocol(tcp_run):
    test = tcp_run.tests[0]
    step = test.steps[0]
    assert step.status == "ok", step.notes
    net = step.network
    assert net["transport"] == "tcp" and net["connections"] == JOBS, net
    sent, received = _query1_bytes(f"postgresql://postgres@127.0.0.1:5432/{RUN_DB}")
    d, comps = step_demands(step)
    # the window also holds each job's closing statistics flush: a few hundred bytes per job over thousands of
    # units, well inside the band
    assert d["net_bytes_received"] == pytest.approx(received, rel=TOLERANCE), (d["net_bytes_received"], received)
    assert d["net_bytes_sent"] == pytest.approx(sent, rel=TOLERANCE), (d["net_bytes_sent"], sent)
    assert d["client_round_trips"] == pytest.approx(1.0)  # one prepared statement per query
    # every round trip's answer arrives in at least one segment; a query and its answer fit one each
    assert 1.0 <= d["net_segments_in"] <= 3.0
    assert 1.0 <= d["net_segments_out"] <= 3.0
    assert d["net_retransmits"] is not None and d["net_retransmits"] >= 0
    assert {comps[k].group for k in ("net_bytes_sent", "net_bytes_received", "client_round_trips")} == {"network"}
    print(f"\nsrv-query1 over TCP, {JOBS} jobs, {step.units} units: sent {d['net_bytes_sent']:.2f} B/unit "
          f"(protocol {sent:.2f}), received {d['net_bytes_received']:.2f} B/unit (protocol {received:.2f}), "
          f"segments out {d['net_segments_out']:.3f} in {d['net_segments_in']:.3f}, retransmits {net['retransmits']}")


def test_network_demands_survive_the_store_and_reach_both_reports(tcp_run):
    stored = load_run(Path(tcp_run.folder))
    assert stored.tests[0].steps[0].network == tcp_run.tests[0].steps[0].network
    doc = demands_of_test(stored.tests[0])
    rows = {r["key"]: r for r in doc["components"]}
    assert rows["net_bytes_received"]["group"] == "network" and rows["net_bytes_received"]["unit"] == "B"
    text = _console_text(stored.tests[0])
    assert "network bytes received by the client" in text and "network bytes sent by the client" in text
    section = demands_section(report_documents(stored).tests[0])
    assert section is not None and "network bytes received by the client" in section.html


def test_runs_stored_before_the_network_was_measured_still_load(tcp_run):
    step = tcp_run.tests[0].steps[0]
    raw = step.to_dict()
    raw.pop("network")
    old = type(step).from_dict(raw)
    assert old.network == {}
    d, _ = step_demands(old)
    assert not any(k.startswith("net_") for k in d)


def test_unix_socket_run_says_why_network_is_na(run_db, tmp_path):
    if not Path(SOCKET_DIR).is_dir():
        pytest.skip(f"no Unix socket directory {SOCKET_DIR}")
    dsn = f"host={SOCKET_DIR} user=postgres dbname={run_db}"
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[1], mode="client", dsn=dsn, results_dir=tmp_path,
                                     warmup_s=0.0, duration_s=1.0))
    step = run.tests[0].steps[0]
    assert step.network == {"transport": "unix", "connections": 1, "reason": "n/a: Unix socket"}
    rows = {r["key"]: r for r in demands_of_test(run.tests[0])["components"]}
    assert not any(k.startswith("net_bytes") for k in rows)
    na = rows["net_traffic"]
    assert na["reason"] == "n/a: Unix socket" and na["values"] == [None] and na["mean"] is None
    assert "client_round_trips" in rows  # the driver still counts its round trips
    assert "n/a: Unix socket" in _console_text(run.tests[0])
    section = demands_section(report_documents(run).tests[0])
    assert section is not None and "(n/a: Unix socket)" in section.html


def _console_text(test) -> str:
    out = io.StringIO()
    demands_report.print_demands(demands_of(test), Console(file=out, width=200, color_system=None))
    return out.getvalue()

