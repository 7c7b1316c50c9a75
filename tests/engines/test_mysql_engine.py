"""capmark against a real MySQL/MariaDB server: bad input in one sentence, the statistics moving as each workload
claims, and the quick suite analysed end to end (demands, calibrated model, diagnosis) with no engine special case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from commandline import completed

from capmark.engines.mysql.describe import check_version
from capmark.errors import CapmarkError
from capmark.measure import kpm
from capmark.store import load_run

RUN_TIMEOUT_S = 600
# Group commit: at one job every commit flushes the redo log once; a 5 % slack covers the page cleaner's data-file
# fsyncs, which MariaDB 10.8+ counts with the log's (Innodb_data_fsyncs) and which a 4 s window may catch once or twice
ONE_JOB_FSYNCS = (0.95, 1.05)
# at 4 jobs commits that arrive during a flush share the next one: the helper measured 0.52 on this server
SHARED_FLUSH_MAX = 0.8
# an autocommit UPDATE is one commit (Handler_commit); capmark's own statistics reads commit nothing
COMMITS_PER_UNIT = (0.99, 1.01)
# a primary-key lookup in a cached B-tree of 100,000 rows touches its root, an inner page and a leaf
PAGES_PER_LOOKUP = (1.0, 5.0)
# The job is killed 2 s after both job connections show, which is 1 s into the window after the 1 s warm-up; the
# surviving job runs the window out before the step reports the failure, so the window only needs room for a late
# kill (a busy machine delaying the window's start by a few seconds)
KILLED_RUN_WINDOW_S = 5


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CAPMARK_DSN": ""}
    return subprocess.run([sys.executable, "-m", "capmark.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=RUN_TIMEOUT_S, env=env)


def _with_user(dsn: str, user: str, password: str) -> str:
    parts = urlsplit(dsn)
    return f"{parts.scheme}://{user}:{password}@{parts.hostname}:{parts.port or 3306}/"


def _refused(result: subprocess.CompletedProcess, results: Path, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    for needle in needles:
        assert needle in message, message
    assert not any(results.iterdir()) if results.exists() else True  # nothing half-built


def test_a_wrong_password_is_one_sentence_without_the_password(mysql_dsn: str, tmp_path: Path) -> None:
    parts = urlsplit(mysql_dsn)
    dsn = _with_user(mysql_dsn, parts.username or "root", "not-the-password-42")
    out = _cli("run", "srv-query1", "--dsn", dsn, "--jobs", "1", "--duration", "1", "--results-dir",
               str(tmp_path / "r"), cwd=tmp_path)
    _refused(out, tmp_path / "r", "rejected the login", "***")
    assert "not-the-password-42" not in out.stderr + out.stdout


def test_an_unreachable_server_is_one_sentence(tmp_path: Path) -> None:
    out = _cli("run", "srv-query1", "--dsn", "mysql://root@127.0.0.1:1/", "--jobs", "1", "--duration", "1",
               "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    _refused(out, tmp_path / "r", "Cannot connect to MySQL/MariaDB at mysql://root@127.0.0.1:1/")


@pytest.fixture()
def limited_user(mysql_dsn: str) -> Any:
    """A user with all privileges on database capmark but not PROCESS, dropped afterwards."""
    from capmark.engines.mysql.connection import connect

    conn = connect(mysql_dsn)
    for statement in ("DROP USER IF EXISTS 'capmark_noproc'@'%'", "CREATE USER 'capmark_noproc'@'%' IDENTIFIED BY 'pw'",
                      "GRANT ALL ON capmark.* TO 'capmark_noproc'@'%'"):
        conn.query(statement.encode())
    try:
        yield _with_user(mysql_dsn, "capmark_noproc", "pw")
    finally:
        conn.query(b"DROP USER IF EXISTS 'capmark_noproc'@'%'")
        conn.close()


def test_a_user_without_the_process_privilege_is_told_the_grant(limited_user: str, tmp_path: Path) -> None:
    out = _cli("run", "srv-query1", "--dsn", limited_user, "--jobs", "1", "--duration", "1", "--results-dir",
               str(tmp_path / "r"), cwd=tmp_path)
    _refused(out, tmp_path / "r", "lacks the PROCESS privilege", "GRANT PROCESS ON *.* TO 'capmark_noproc'@'%'")
    assert "'pw'" not in out.stderr and ":pw@" not in out.stderr


# --- MySQL URLs: parsed by the rules and the code of PostgreSQL ones ----------------------------------------------

def test_a_mysql_url_is_split_at_the_last_at_and_decoded() -> None:
    from capmark.engines.mysql.connection import parse

    target = parse("mariadb://b%40b:p@ss/w:rd@db.example:3307/my%20db%2Fx?socket=%2Frun%2Fmy.sock")
    assert (target.user, target.password, target.host, target.port, target.database, target.unix_socket) == (
        "b@b", "p@ss/w:rd", "db.example", 3307, "my db/x", "/run/my.sock")
    assert target.redacted() == "mariadb://b%40b:***@db.example:3307/my%20db%2Fx?socket=%2Frun%2Fmy.sock"
    assert "p@ss" not in repr(target)


@pytest.mark.parametrize("port", ["99999", "0", "65536", "port", "-1", "3306:1"])
def test_a_port_outside_1_to_65535_is_named_as_such(port: str) -> None:
    from capmark.engines.mysql.connection import parse

    with pytest.raises(CapmarkError) as err:
        parse(f"mysql://root:pw@db.example:{port}/app")
    assert str(err.value) == (f"The port '{port}' in mysql://root:***@db.example:{port}/app is not a number from 1 to "
                              "65535; write e.g. mysql://user:password@host:3306/dbname.")


def test_masking_keeps_the_servers_message_and_masks_the_url() -> None:
    """The password 'localhost' also occurs in the server's message: the message stays as the server wrote it."""
    from capmark.engines.mysql.connection import explain_connect_error, parse

    target = parse("mysql://root:localhost@127.0.0.1:3306/")
    err = explain_connect_error(Exception(1045, "Access denied for user 'root'@'localhost' (using password: YES)"),
                                target)
    assert str(err) == ("The server at mysql://root:***@127.0.0.1:3306/ rejected the login (Access denied for user "
                        "'root'@'localhost' (using password: YES)); correct the user or password in --dsn / "
                        "CAPMARK_DSN.")


def test_a_wrong_password_found_in_the_message_leaves_the_message_whole(mysql_dsn: str, tmp_path: Path) -> None:
    parts = urlsplit(mysql_dsn)
    user = parts.username or "root"
    out = _cli("run", "srv-query1", "--dsn", _with_user(mysql_dsn, user, "YES"), "--jobs", "1", "--duration", "1",
               "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    _refused(out, tmp_path / "r", "rejected the login", f"Access denied for user '{user}'@'", "(using password: YES)",
             f"mysql://{user}:***@")
    assert ":YES@" not in out.stderr


@pytest.fixture()
def awkward_login(mysql_dsn: str) -> Any:
    """A user whose password holds '@', '/' and ':', with its own database whose name holds a space; dropped
    afterwards."""
    from capmark.engines.mysql.connection import connect

    conn = connect(mysql_dsn)
    for statement in ("DROP USER IF EXISTS 'capmark_url'@'%'", "CREATE USER 'capmark_url'@'%' IDENTIFIED BY 'p@ss/w:rd'",
                      "CREATE DATABASE IF NOT EXISTS `capmark url test`",
                      "GRANT ALL ON `capmark url test`.* TO 'capmark_url'@'%'"):
        conn.query(statement.encode())
    try:
        yield _with_user(mysql_dsn, "capmark_url", "p@ss/w:rd") + "capmark%20url%20test"
    finally:
        conn.query(b"DROP USER IF EXISTS 'capmark_url'@'%'")
        conn.query(b"DROP DATABASE IF EXISTS `capmark url test`")
        conn.close()


def test_an_unencoded_password_and_an_encoded_database_name_connect(awkward_login: str) -> None:
    from capmark.engines.mysql.connection import connect

    conn = connect(awkward_login)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT DATABASE(), CURRENT_USER()")
        assert cursor.fetchone() == ("capmark url test", "capmark_url@%")
    finally:
        conn.close()


@pytest.mark.parametrize(("version", "supported"), [
    ("10.5.23-MariaDB", False), ("10.6.0-MariaDB-log", True), ("10.11.19-MariaDB-0+deb12u1", True),
    ("5.7.44", False), ("8.0.36", True), ("9.1.0", True)])
def test_versions_outside_the_supported_range_are_refused_by_name(version: str, supported: bool) -> None:
    if supported:
        check_version(version)
        return
    with pytest.raises(CapmarkError, match=r"supports MariaDB 10\.6 or newer, or MySQL 8\.0 or newer"):
        check_version(version)


@pytest.fixture(scope="module")
def measured(mysql_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick suite and srv-query1 at 1 and 4 jobs on the MySQL/MariaDB server, stored."""
    folder = tmp_path_factory.mktemp("mysql-run")
    out = _cli("run", "quick", "srv-query1", "--dsn", mysql_dsn, "--jobs", "1,4", "--warmup", "1", "--duration", "2",
               "--results-dir", str(folder), cwd=folder)
    assert out.returncode == 0, out.stderr
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


def _steps(run: Path, workload: str) -> dict[int, Any]:
    test = next(t for t in load_run(run).tests if t.workload == workload)
    return {s.jobs: s for s in test.steps}


def test_a_commit_workload_flushes_the_redo_log_once_per_commit_at_one_job_and_less_with_more(measured: Path) -> None:
    steps = _steps(measured, "wal-lat1")
    per_commit = {}
    for jobs, step in steps.items():
        values, _ = kpm.of(step)
        per_commit[jobs] = values["wal_fsyncs_per_commit"]
        low, high = COMMITS_PER_UNIT
        assert low <= kpm.workload_commits(step) / step.units <= high, (jobs, kpm.workload_commits(step), step.units)
    assert ONE_JOB_FSYNCS[0] <= per_commit[1] <= ONE_JOB_FSYNCS[1], per_commit
    assert per_commit[4] < SHARED_FLUSH_MAX * per_commit[1], per_commit


def test_cached_lookups_hit_the_buffer_pool_and_read_a_few_pages_each(measured: Path) -> None:
    for jobs, step in _steps(measured, "srv-query1").items():
        values, _ = kpm.of(step)
        assert values["physical_reads_per_s"] == 0, (jobs, values["physical_reads_per_s"])
        assert values["buffer_hit_pct"] == 100.0
        pages = values["logical_reads_per_s"] / values["throughput"]
        assert PAGES_PER_LOOKUP[0] <= pages <= PAGES_PER_LOOKUP[1], (jobs, pages)


def test_the_quick_suite_is_decomposed_modelled_and_diagnosed(measured: Path) -> None:
    answers = {}
    for command in ("demands", "calibrate", "diagnose"):
        out = completed(command, str(measured), "--format", "json", env={"CAPMARK_DSN": ""})  # reads the stored run
        assert out.returncode == 0, out.stderr
        answers[command] = {t["workload"]: t for t in json.loads(out.stdout)["tests"]}
    for workload in ("srv-mixed", "tp-mixed1", "wal-lat1"):
        calibration = answers["calibrate"][workload]
        assert calibration["answered"], calibration
        cpu = calibration["calibration"]["cpu_s"]
        assert cpu > 0, calibration
        assert answers["diagnose"][workload]["summary"], answers["diagnose"][workload]
        components = {c["key"]: c for c in answers["demands"][workload]["components"]}
        server_cpu = components["cpu_server_threads_s"]["values"]  # the server process's CPU, per unit
        assert all(v is not None and v > 0 for v in server_cpu), server_cpu
        assert components["wal_fsyncs"]["label"] == "redo log fsyncs"
    wal = answers["calibrate"]["wal-lat1"]["calibration"]
    assert wal["flush_requests"] > 0, wal  # the redo flush is the model's group-commit server
    run = load_run(measured)
    assert run.spec["mode"] == "client" and {t.mode for t in run.tests} == {"client"}  # as the run summary shows
    report = (measured / "report.html").read_text()
    assert "At a glance" in report and "redo log" in report


def test_every_engines_advice_answers_a_signature_that_exists() -> None:
    """Advice is looked up by the signature's key: a key that no detector uses would never be shown, and the user
    would read the engine-neutral text instead of the engine's settings."""
    import inspect
    import re

    from capmark.diagnose import signatures
    from capmark.engines.mysql.advice import ADVICE as MYSQL
    from capmark.engines.postgres.advice import ADVICE as POSTGRES

    keys = set(re.findall(r'Finding\(key="(\w+)"', inspect.getsource(signatures)))
    assert set(POSTGRES) <= keys and set(MYSQL) <= keys, (set(POSTGRES) | set(MYSQL)) - keys
    assert set(POSTGRES) == set(MYSQL)  # each engine says what to try for the same signatures
    assert not any("shared_buffers" in line or "synchronous_commit" in line for lines in MYSQL.values()
                   for line in lines)


@pytest.mark.parametrize(("lines", "process"), [
    (["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"], True),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT PROCESS, SELECT ON *.* TO `u`@`%`"], True),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `capmark`.* TO `u`@`%`"], False),  # a database's ALL
    (["GRANT SELECT ON `performance_schema`.* TO `u`@`%`", "GRANT PROCESS ON `capmark`.`item` TO `u`@`%`"], False),
])
def test_the_process_privilege_counts_only_when_granted_on_every_database(lines: list[str], process: bool) -> None:
    from capmark.engines.mysql import grants

    assert grants.has_global(lines, "PROCESS") is process


# --- a job's failure: what it was doing and the server's message, never the driver's tuple ------------------------

def _job_threads(run: subprocess.Popen, mysql_dsn: str) -> list[int]:
    """The server's connection ids of this run's jobs: the connections of its worker processes (forked by the
    forkserver, a child of capmark), matched by their client ports, that are running the workload's lookup."""
    import psutil

    from capmark.engines.mysql.connection import connect

    ports = set()
    for child in psutil.Process(run.pid).children(recursive=True):
        try:
            if child.ppid() != run.pid:
                ports.update(c.laddr.port for c in child.net_connections("tcp") if c.raddr)
        except psutil.Error:
            continue
    if not ports:
        return []
    conn = connect(mysql_dsn)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE HOST LIKE '%:%'")
        return [int(i) for i, host in cursor.fetchall() if int(host.rsplit(":", 1)[1]) in ports]
    finally:
        conn.close()


def test_a_killed_job_connection_fails_the_step_with_the_phase_and_the_servers_message(mysql_dsn: str,
                                                                                        tmp_path: Path) -> None:
    import re
    import time

    from capmark.engines.mysql.connection import connect

    env = {**os.environ, "CAPMARK_DSN": "", "COLUMNS": "1000"}
    run = subprocess.Popen([sys.executable, "-m", "capmark.cli", "run", "srv-query1", "--mode", "client", "--jobs",
                            "2", "--warmup", "1", "--duration", str(KILLED_RUN_WINDOW_S), "--dsn", mysql_dsn,
                            "--results-dir",
                            str(tmp_path / "r")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path, env=env)
    deadline = time.time() + RUN_TIMEOUT_S
    threads: list[int] = []
    while time.time() < deadline and run.poll() is None and len(threads) < 2:
        time.sleep(0.2)
        threads = _job_threads(run, mysql_dsn)
    assert len(threads) == 2, run.communicate(timeout=60)
    time.sleep(2)  # into the measured window
    killer = connect(mysql_dsn)
    try:
        killer.query(b"KILL CONNECTION %d" % threads[0])
    finally:
        killer.close()
    out, err = run.communicate(timeout=RUN_TIMEOUT_S)
    text = " ".join((out + err).split())
    assert run.returncode == 1, text
    assert "step 1 (2 jobs) failed: job " in text and " while measuring: MySQL error " in text, text
    assert not re.search(r"\(\d{4}, ['\"]", text), text  # the driver's (code, message) tuple
    assert "Traceback" not in err and "unexpected" not in text.lower(), text


def test_a_mysql_error_reads_as_its_code_and_message() -> None:
    MySQLdb = pytest.importorskip("MySQLdb", reason="mysqlclient (capmark's MySQL extra) is not installed")
    from capmark.engines.mysql.engine import MysqlEngine

    engine = MysqlEngine()
    assert engine.error_text(MySQLdb.OperationalError(2013, "Lost connection to server during query")) == (
        "MySQL error 2013: Lost connection to server during query")
    assert engine.error_text(MySQLdb.OperationalError("no code")) == "no code"
