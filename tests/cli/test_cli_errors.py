"""Bad input: one sentence, exit code 2, no traceback, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import psycopg.conninfo
import pytest
from commandline import assert_one_sentence

from capmark.engines.postgres import explain_connect_error


def capmark(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capmark.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def assert_clean_error(out: subprocess.CompletedProcess, *words: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    text = " ".join(out.stderr.split())
    for w in words:
        assert w in text, text


@pytest.mark.parametrize("args,words", [
    (["run", "no-such-workload"], ["Unknown workload", "capmark list"]),
    (["run", "--jobs", "4,2"], ["strictly increasing"]),
    (["run", "--jobs", "x"], ["job list"]),
    (["run", "--duration", "soon"], ["duration", "30s"]),
    (["run", "tp-light", "--param", "update_pct=500"], ["between 0 and 100"]),
    (["run", "srv-query1", "--param", "colour=blue"], ["Unknown parameter"]),
    (["run", "--mode", "psychic"], ["mode"]),
])
def test_bad_arguments(args, words, tmp_path):
    out = capmark(*args, "--results-dir", str(tmp_path))
    assert_clean_error(out, *words)
    assert not any(tmp_path.iterdir())  # nothing stored for a run that never began


def test_unreachable_dsn(tmp_path):
    out = capmark("run", "--dsn", "postgresql://u:TopSecret1@127.0.0.1:1/db", "--results-dir", str(tmp_path))
    assert_clean_error(out, "Cannot connect", "127.0.0.1")
    assert "TopSecret1" not in out.stderr + out.stdout
    assert not any(tmp_path.iterdir())


def test_unwritable_results_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    out = capmark("run", "--results-dir", str(blocker / "sub"))
    assert_clean_error(out, "Cannot write results", "--results-dir")


def test_report_of_missing_run(tmp_path):
    assert_clean_error(capmark("report", "--results-dir", str(tmp_path)), "no run")
    assert_clean_error(capmark("report", "nope", "--results-dir", str(tmp_path)), "No capmark run")


def test_wrong_password_message_names_the_fix():
    err = psycopg.OperationalError('connection failed: FATAL:  password authentication failed for user "bob"')
    msg = str(explain_connect_error(err, "postgresql://bob:hunter2@db/app"))
    assert "rejected the login" in msg and "hunter2" not in msg and "--dsn" in msg


@pytest.mark.db
def test_role_without_privileges_gets_one_sentence_and_no_schema(embedded_dsn, tmp_path):
    with psycopg.connect(embedded_dsn, autocommit=True) as admin:
        admin.execute("drop database if exists capmark_priv_test")
        admin.execute("create database capmark_priv_test")
        admin.execute("drop role if exists capmark_noperm")
        admin.execute("create role capmark_noperm login")
    dsn = psycopg.conninfo.make_conninfo(embedded_dsn, user="capmark_noperm", dbname="capmark_priv_test")
    out = capmark("run", "srv-query1", "--jobs", "1", "--duration", "1", "--dsn", dsn, "--results-dir", str(tmp_path))
    assert_clean_error(out, "may not create schema capmark", "GRANT CREATE")
    assert not any(tmp_path.iterdir())
    check = psycopg.conninfo.make_conninfo(embedded_dsn, dbname="capmark_priv_test")
    with psycopg.connect(check) as conn:
        assert conn.execute("select count(*) from pg_namespace where nspname = 'capmark'").fetchone()[0] == 0


# Installed before capmark loads, in the child process: the finder makes importing the MySQL driver fail as it does
# where the MySQL extra is missing (ModuleNotFoundError) or where its client library cannot load (ImportError).
# capmark itself runs unchanged; nothing it measures is replaced.
WITHOUT_DRIVER = """
import runpy, sys
class NoDriver:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "MySQLdb":
            raise {error}
sys.meta_path.insert(0, NoDriver())
sys.argv = ["capmark", *sys.argv[1:]]
runpy.run_module("capmark", run_name="__main__")
"""


@pytest.mark.parametrize("error,words", [
    ("ModuleNotFoundError(f'No module named {name!r}', name=name)", ["not installed"]),
    ("ImportError('libmariadb.so.3: cannot open shared object file: No such file or directory')",
     ["does not load", "libmariadb.so.3"]),
])
def test_mysql_url_without_the_driver_names_what_to_install(error, words, tmp_path):
    script = WITHOUT_DRIVER.format(error=error)
    out = subprocess.run([sys.executable, "-c", script, "run", "--dsn", "mysql://root:Hidden9@127.0.0.1:1/",
                          "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    line = assert_one_sentence(out.returncode, out.stdout, out.stderr, "pip install 'capmark[mysql]'",
                               "libmariadb-dev", "pkg-config", *words)
    assert "Hidden9" not in line
    assert not any(tmp_path.iterdir())
