"""--client-engine pgbench: a script test's steps run by pgbench itself give what capmark's own driver gives.

Against the real pgbench on the same scripts and seed: the same share of each script (binomial bounds), the
server's own count of a script's statement agreeing with its units, serialization failures counted by class and
retried as the Python engine counts them, latency from the intended start with --rate, an error pgbench does not
retry failing the step by name, the stored run reading and reporting like any other, and the combinations pgbench
cannot run refused in one sentence."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from commandline import assert_one_sentence, invoke
from liveruns import run_without_report
from scipy.stats import binom, norm

from capmark import store
from capmark.config import RunSpec
from capmark.driver import pgbench_engine
from capmark.report import console

pytestmark = pytest.mark.db

TAIL = 1e-6  # chance that a correct mix falls outside its bounds
# Two hot rows updated under repeatable read by two clients: serialization failures within a second.
HOT = """\\set k random(1, 2)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM capmark.test_pgbench_hot WHERE k = :k;
UPDATE capmark.test_pgbench_hot SET v = v + 1 WHERE k = :k;
COMMIT;
"""
LIGHT = "SELECT count(*) AS light_marker FROM capmark.test_pgbench_hot;\n"
SLEEP = "SELECT pg_sleep(0.01);\n"
UNIQUE = "\\set k random(1, 1000000000)\nINSERT INTO capmark.test_pgbench_unique VALUES (:k % 3);\n"
# Each client's random numbers and hashes, recorded in insertion order: the two engines must draw the same ones
VALUES = """\\set k random(1, 1000000000)
\\set g random_gaussian(1, 1000, 2.5)
\\set h hash(:k)
\\set p permute(:k % 1000, 1000)
INSERT INTO capmark.test_pgbench_values (client, k, g, h, p) VALUES (:client_id, :k, :g, :h, :p);
"""
SAME_VALUES_JOBS = 3  # more than one, so that a client other than the last shows how the seeds are drawn
SAME_VALUES_COMPARED = 200  # per client: well under what either engine inserts in its window
SERVICE_S = 0.01  # SLEEP's own duration
ROUND_TRIP_ALLOWANCE_S = 0.005  # pgbench's round trip and its own work per transaction, on a loaded 2-core host
LOG_ROUNDING_S = 2e-6  # pgbench logs latency and lag in whole microseconds
# The runner's two pauses around the window (statistics flush, snapshots, host counters, the sampler's login), in
# which pgbench goes on: the statements they hold are the server's but not the window's. Well under a second.
PAUSES_S = 1.0
DURATION_S = 3.0


@pytest.fixture(scope="module")
def tables(embedded_dsn):
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute("create schema if not exists capmark")
        conn.execute("drop table if exists capmark.test_pgbench_hot, capmark.test_pgbench_unique, "
                     "capmark.test_pgbench_values")
        conn.execute("create table capmark.test_pgbench_hot (k int primary key, v int not null)")
        conn.execute("insert into capmark.test_pgbench_hot values (1, 0), (2, 0)")
        conn.execute("create table capmark.test_pgbench_unique (k int primary key)")
        conn.execute("create table capmark.test_pgbench_values (n bigint generated always as identity, client int, "
                     "k bigint, g bigint, h bigint, p bigint)")
    yield embedded_dsn


def _scripts(folder: Path, **texts: str) -> dict[str, Path]:
    out = {}
    for name, text in texts.items():
        out[name] = folder / f"{name}.sql"
        out[name].write_text(text)
    return out


def _run(dsn: str, results: Path, scripts: list[str], engine: str = "pgbench", **options):
    """No warm-up unless a test needs one: the counts are of the window, which pgbench's logs cut by time, and each
    second of warm-up is a second more of pgbench's -T."""
    spec = RunSpec(scripts=scripts, jobs=[options.pop("jobs", 2)], warmup_s=options.pop("warmup_s", 0.0),
                   duration_s=DURATION_S, dsn=dsn,
                   results_dir=results, client_engine=engine, mode="client", **options)
    return run_without_report(spec)


def _calls(step, text: str) -> int:
    return int(sum(r["calls"] for r in step.db_delta.get("statements", []) if text in (r.get("query") or "")))


def _real_pgbench(dsn: str, folder: Path, scripts: list[str], seed: int) -> dict[int, int]:
    """Transactions per script number of pgbench run directly, as capmark's step runs it."""
    logs = folder / "real"
    logs.mkdir()
    args = [str(pgbench_engine.program()), "-n", "-M", "prepared", "-c", "2", "-j", "2", "-T", str(int(DURATION_S)),
            "--random-seed", str(seed), "--max-tries", "2", "-l", "--log-prefix", str(logs / "log"),
            "--failures-detailed", *[a for s in scripts for a in ("-f", s)], dsn]
    subprocess.run(args, check=True, capture_output=True, timeout=60)
    counts: dict[int, int] = {}
    for path in logs.iterdir():
        for line in path.read_text().splitlines():
            script = int(line.split()[3])
            counts[script] = counts.get(script, 0) + 1
    return counts


def test_a_weighted_mix_matches_pgbench_and_the_servers_counts(tables, tmp_path):
    s = _scripts(tmp_path, hot=HOT, light=LIGHT)
    mix = [f"{s['hot']}@3", str(s["light"])]
    run = _run(tables, tmp_path / "results", mix, seed=17, max_tries=2)
    step = run.tests[0].steps[0]
    assert step.status == "ok", step.notes
    assert step.instruments["client_engine"]["name"] == "pgbench"
    hot = step.histograms["hot"].total + step.errors["hot"]
    light = step.histograms["light"].total + step.errors["light"]
    assert light > 200, (hot, light)

    # the same share of each script as pgbench's own run: the difference of two binomial proportions
    real = _real_pgbench(tables, tmp_path, mix, seed=17)
    n1, n2 = hot + light, real[0] + real.get(1, 0)
    p1, p2 = hot / n1, real[0] / n2
    pooled = (hot + real[0]) / (n1 + n2)
    sd = (pooled * (1 - pooled) * (1 / n1 + 1 / n2)) ** 0.5
    assert abs(p1 - p2) <= norm.isf(TAIL / 2) * sd, (p1, p2, n1, n2)
    assert binom.ppf(TAIL, n1, 0.75) <= hot <= binom.isf(TAIL, n1, 0.75), (hot, n1)

    # the server ran light's statement once per unit: every unit of the window, and what pgbench ran in the pauses
    calls = _calls(step, "light_marker")
    assert light <= calls <= light * (1 + PAUSES_S / DURATION_S), (calls, light)

    # serialization failures: retried (max 2 tries), and the rest failed and counted by class as the Python engine
    scripts = step.instruments["unit_stats"]["scripts"]
    assert scripts["hot"]["retries"] > 0
    assert step.errors["hot"] == scripts["hot"]["failures_by_class"].get("40", 0)
    assert step.errors["light"] == 0 and scripts["light"]["failures_by_class"] == {}
    assert sum(step.series_units) == step.histograms["hot"].total + step.histograms["light"].total

    # the sampler knows pgbench's sessions as the jobs: no other capmark run is seen, and their waits are sampled
    assert step.interference["sessions"]["capmark_samples"] == 0, step.interference
    assert step.wait_samples > 0 and step.waits

    # stored, it loads and reports like any run; what pgbench cannot measure is n/a, not zero
    loaded = store.load_run(Path(run.folder))
    again = loaded.tests[0].steps[0]
    assert again.histograms["hot"].total == step.histograms["hot"].total
    assert again.measured.units == step.histograms["hot"].total + step.histograms["light"].total
    assert again.measured.traffic.bytes_sent is None and again.round_trips == 0
    assert console.command_rows(again) == []
    assert any("not measured with the pgbench engine" in n for n in again.notes)


def test_serialization_failures_are_counted_alike_by_both_engines(tables, tmp_path):
    s = _scripts(tmp_path, hot=HOT)
    run = _run(tables, tmp_path / "results", [str(s["hot"])], engine="python", seed=3)
    step = run.tests[0].steps[0]
    python = step.instruments["unit_stats"]["scripts"]["hot"]["failures_by_class"]
    assert step.errors["hot"] > 0 and python == {"40": step.errors["hot"]}
    # the same keys from pgbench (the first test's run has them with retries; here one try, as above)
    run = _run(tables, tmp_path / "results", [str(s["hot"])], seed=3)
    step = run.tests[0].steps[0]
    assert step.status == "ok", step.notes
    assert step.errors["hot"] > 0
    assert step.instruments["unit_stats"]["scripts"]["hot"]["failures_by_class"] == {"40": step.errors["hot"]}


def _values(dsn: str) -> dict[int, list[tuple[int, int, int, int]]]:
    """Each client's rows in the order it inserted them; the table is emptied for the next run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("select client, k, g, h, p from capmark.test_pgbench_values order by n").fetchall()
        conn.execute("truncate capmark.test_pgbench_values")
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for client, *values in rows:
        out.setdefault(client, []).append(tuple(values))
    return out


def test_both_engines_draw_the_same_values_from_the_same_seed(tables, tmp_path):
    """capmark's interpreter is the reference that checks pgbench's values: with one seed, each client of either
    engine draws the same random numbers and gets the same hashes and permutation (:default_seed) in the same
    order, whichever client it is."""
    s = _scripts(tmp_path, values=VALUES)
    drawn = {}
    for engine in ("pgbench", "python"):
        run = _run(tables, tmp_path / engine, [str(s["values"])], engine=engine, jobs=SAME_VALUES_JOBS, seed=29)
        assert run.tests[0].steps[0].status == "ok", run.tests[0].steps[0].notes
        drawn[engine] = _values(tables)
    assert sorted(drawn["pgbench"]) == sorted(drawn["python"]) == list(range(SAME_VALUES_JOBS))
    for client in range(SAME_VALUES_JOBS):
        a, b = drawn["pgbench"][client], drawn["python"][client]
        assert min(len(a), len(b)) >= SAME_VALUES_COMPARED, (client, len(a), len(b))
        first = next((i for i in range(SAME_VALUES_COMPARED) if a[i] != b[i]), None)
        assert first is None, f"client {client}, row {first}: pgbench drew {a[first]}, capmark {b[first]}"


def test_rate_latency_counts_from_the_intended_start(tables, tmp_path):
    """Three times what one job can do: each transaction waits behind the ones before, and its latency says so."""
    s = _scripts(tmp_path, sleep=SLEEP)
    run = _run(tables, tmp_path / "results", [str(s["sleep"])], jobs=1, rate=3 / SERVICE_S, warmup_s=0.5)
    step = run.tests[0].steps[0]
    assert step.status == "ok", step.notes
    units = step.histograms["sleep"].total
    assert step.schedule_lag is not None and step.schedule_lag.total == units > 0
    latency, lag = step.histograms["sleep"].summary(), step.schedule_lag.summary()
    # the backlog grows through the window: the median is far above one service time; each transaction's latency is its
    # lag plus its service, so the exact means (sums, not buckets: a bucket is 4 % wide, 57 ms at the 1.4 s median)
    # differ by the mean service: the sleep and one round trip
    assert latency["p50_s"] > 20 * SERVICE_S, latency
    service = latency["mean_s"] - lag["mean_s"]
    assert SERVICE_S - LOG_ROUNDING_S <= service <= SERVICE_S + ROUND_TRIP_ALLOWANCE_S, (service, latency, lag)


# How long before its planned end (its -T: warm-up, window and PAUSE_ALLOWANCE_S) pgbench must have ended when it is
# told to end with the window: the allowance less the two pauses of a busy host, with room to spare.
ENDS_BEFORE_ITS_TIME_S = 0.5


def test_pgbench_ends_with_the_window_not_at_its_planned_end(tables, tmp_path, monkeypatch):
    """pgbench's -T leaves room for the pause before the window; once the window is over it is told to end, so that
    a step does not wait out the rest of that room (2-3 s a step before), and its logs still hold every transaction
    of the window."""
    ends = []
    finish = pgbench_engine.PgbenchGroup.finish

    def timed(group):  # the real finish, and when it returned against pgbench's planned end
        outcome = finish(group)
        ends.append((time.time(), group.started + group.seconds, group.proc.returncode))
        return outcome

    monkeypatch.setattr(pgbench_engine.PgbenchGroup, "finish", timed)
    s = _scripts(tmp_path, light=LIGHT)
    step = _run(tables, tmp_path / "results", [str(s["light"])], jobs=1).tests[0].steps[0]
    assert step.status == "ok", step.notes
    ((ended, planned, code),) = ends
    assert code == 0, code  # it ended as at its -T (killed by the signal, it would say so)
    assert ended <= planned - ENDS_BEFORE_ITS_TIME_S, f"ended {planned - ended:.2f} s before its planned end"
    # every transaction of the window is in the logs: the server ran the statement once for each (and in the pauses)
    units, calls = step.histograms["light"].total, _calls(step, "light_marker")
    assert units > 200 and units <= calls <= units * (1 + PAUSES_S / DURATION_S), (units, calls)


def test_an_error_pgbench_does_not_retry_fails_the_step_by_name(tables, tmp_path):
    s = _scripts(tmp_path, unique=UNIQUE)
    run = _run(tables, tmp_path / "results", [str(s["unique"])], warmup_s=0.5)
    test = run.tests[0]
    # both clients end within the warm-up: the step fails as a job of capmark's own driver that fails does
    assert test.status == "failed" and not test.steps
    assert "duplicate key" in test.reason and "--client-engine python" in test.reason, test.reason


def test_a_statement_that_cannot_be_prepared_fails_the_step_with_the_servers_reason(tables, tmp_path):
    """pgbench -M prepared says only that the prepared statement P_0 does not exist; the reason is the server's."""
    s = _scripts(tmp_path, misspelt="SELECT no_such_column FROM capmark.test_pgbench_hot;\n")
    test = _run(tables, tmp_path / "results", [str(s["misspelt"])], jobs=1).tests[0]
    assert test.status == "failed" and not test.steps
    assert 'column "no_such_column" does not exist' in test.reason and "P_0" not in test.reason, test.reason


def test_pgbenchs_own_tpcb_like_runs_on_the_pgbench_engine(embedded_dsn, tmp_path):
    """The catalogue's pgbench-tpcb client-side, run by pgbench: one history row per transaction, as the server
    counts its INSERTs (and what pgbench ran in the pauses)."""
    spec = RunSpec(workloads=["pgbench-tpcb"], jobs=[2], warmup_s=0.0, duration_s=DURATION_S, dsn=embedded_dsn,
                   results_dir=tmp_path / "results", client_engine="pgbench", mode="client")
    step = run_without_report(spec).tests[0].steps[0]
    assert step.status == "ok", step.notes
    assert step.instruments["client_engine"]["name"] == "pgbench"
    units = step.histograms["transaction"].total
    calls = _calls(step, "INSERT INTO capmark.pgbench_history")
    assert units > 100 and units <= calls <= units * (1 + PAUSES_S / DURATION_S), (units, calls)
    assert step.errors.get("transaction", 0) == 0


# Each lookup of srv-mixed, and a text only its statement holds
SRV_STATEMENTS = {"query1": "from capmark.item where id", "query25": "from capmark.booking where",
                  "report": "from capmark.callrec where", "scan": "sum(qty) from capmark.item"}


def test_the_catalogues_lookups_run_on_the_pgbench_engine(embedded_dsn, tmp_path):
    """srv-mixed client-side, run by pgbench from its four lookups as scripts: each transaction type's units as the
    server counts that type's statement (a script mapped to another type fails), every key lookup finding its row
    (a key drawn beyond the table, from a size pgbench was not given, finds none), and a quarter of the units
    each within binomial bounds."""
    spec = RunSpec(workloads=["srv-mixed"], jobs=[2], warmup_s=0.0, duration_s=DURATION_S, dsn=embedded_dsn,
                   results_dir=tmp_path / "results", client_engine="pgbench", mode="client")
    step = run_without_report(spec).tests[0].steps[0]
    assert step.status == "ok", step.notes
    assert step.instruments["client_engine"]["name"] == "pgbench"
    units = {t: step.histograms[t].total for t in SRV_STATEMENTS}
    total = sum(units.values())
    low, high = binom.ppf(TAIL / 2, total, 0.25), binom.isf(TAIL / 2, total, 0.25)
    for txn_type, text in SRV_STATEMENTS.items():
        calls = _calls(step, text)
        assert 0 < units[txn_type] <= calls <= units[txn_type] * (1 + PAUSES_S / DURATION_S), (txn_type, units, calls)
        assert low <= units[txn_type] <= high, (txn_type, units, low, high)
    rows = sum(r["rows"] for r in step.db_delta.get("statements", []) if SRV_STATEMENTS["query1"] in (r.get("query") or ""))
    assert rows == _calls(step, SRV_STATEMENTS["query1"])


@pytest.mark.parametrize(("args", "words"), [
    (["tp-light", "--mode", "client"], ["pgbench-tpcb", "srv-query1", "tp-light"]),
    (["pgbench-tpcb"], ["--mode client"]),
    (["--script", "{s}", "--dsn", "mysql://root@127.0.0.1:3306/capmark"], ["PostgreSQL"]),
    (["--script", "{s}", "--cluster", "auto"], ["--cluster"]),
    (["--script", "{s}", "--driver-procs", "2"], ["--driver-procs"]),
    (["--script", "{s}", "--mode", "client", "--think", "10ms"], ["--think"]),
])
def test_combinations_pgbench_cannot_run_are_refused(args, words, tmp_path, capsys, monkeypatch):
    script = _scripts(tmp_path, light=LIGHT)["light"]
    results = tmp_path / "results"
    code, out, err = invoke(["run", *[a.format(s=script) for a in args], "--client-engine", "pgbench",
                             "--results-dir", str(results)], capsys, monkeypatch)
    assert_one_sentence(code, out, err, "--client-engine", *words)
    assert not results.exists() or not any(results.iterdir())
