"""Secrets in connection strings and node_exporter addresses never reach the console, the results or the report.

Masking: every URL parameter and conninfo setting whose name holds "password", "token", "secret" or "key"; the
password of a URL up to the last '@' of its authority, the same split libpq is given. End to end: real short runs
against the machine's PostgreSQL 15 (trust authentication, so the passwords in the DSN are sent and ignored) with a
real node_exporter behind basic authentication, or behind a proxy that wants a bearer token; the bytes of stdout,
stderr, every file of the run's folder and every text column of results.sqlite are searched for each secret.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from node_exporter_process import EXPORTER, HTPASSWD, Recorder, install, running_exporter
from psycopg.conninfo import conninfo_to_dict

from capmark.config import RunSpec, redact_dsn, redact_text
from capmark.errors import CapmarkError
from capmark.store import load_run

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "capmark_test_secrets"  # kept between sessions: the data model is built once per machine
RUN_TIMEOUT_S = 300
TOKEN_ENV = "CAPMARK_NODE_EXPORTER_TOKEN"

SECRET_NAMES = ["password", "sslpassword", "PassWord", "SSLPASSWORD", "api_token", "token", "client_secret",
                "sslkey", "apikey"]


# --- masking ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SECRET_NAMES)
def test_every_secret_url_parameter_is_masked(name: str) -> None:
    dsn = f"postgresql://bob@db.example:5432/app?sslmode=require&{name}=TOPSECRET42&application_name=x"
    assert redact_dsn(dsn) == f"postgresql://bob@db.example:5432/app?sslmode=require&{name}=***&application_name=x"
    assert redact_text(f"cannot reach {dsn}: refused") == f"cannot reach {redact_dsn(dsn)}: refused"


@pytest.mark.parametrize("name", SECRET_NAMES)
@pytest.mark.parametrize(("setting", "masked"), [("{name}=TOPSECRET42", "{name}=***"),
                                                 ("{name} = 'TOP SECRET42'", "{name} = ***"),
                                                 ("{name}='TOP\\' SECRET42'", "{name}=***")])
def test_every_secret_conninfo_setting_is_masked(name: str, setting: str, masked: str) -> None:
    dsn = f"host=db {setting.format(name=name)} dbname=app"
    assert redact_dsn(dsn) == f"host=db {masked.format(name=name)} dbname=app"
    assert redact_text(f"could not connect with {dsn}: refused") == f"could not connect with {redact_dsn(dsn)}: refused"


def test_other_parameters_are_kept() -> None:
    dsn = "postgresql://bob@db/app?sslmode=require&keepalives=1&target_session_attrs=any&application_name=monkey"
    assert redact_dsn(dsn) == dsn
    assert redact_dsn("host=db keepalives=1 dbname=app") == "host=db keepalives=1 dbname=app"


@pytest.mark.parametrize("password", ["pa@ss", "p@ss@word", "pa@ss/wo:rd"])
@pytest.mark.parametrize("scheme", ["postgresql", "mysql", "http"])
def test_a_password_with_an_unencoded_at_is_masked_whole(password: str, scheme: str) -> None:
    url = f"{scheme}://bob:{password}@db.example:5432/app"
    assert redact_dsn(url) == f"{scheme}://bob:***@db.example:5432/app"
    assert redact_text(f"cannot reach {url} now") == f"cannot reach {scheme}://bob:***@db.example:5432/app now"


def test_libpq_is_given_the_password_that_capmark_masks() -> None:
    """libpq ends a URL's user part at the first '@' (or '/'), capmark at the last: the DSN a run uses has the
    user part %-encoded, so that the server gets the whole password and no part of it becomes the host name."""
    spec = RunSpec(workloads=["srv-query1"], dsn="postgresql://bob:pa@ss/wo:rd@db.example:5432/app").validate()
    assert spec.dsn is not None
    settings = conninfo_to_dict(spec.dsn)
    assert (settings["user"], settings["password"], settings["host"], settings["port"], settings["dbname"]) == (
        "bob", "pa@ss/wo:rd", "db.example", "5432", "app")
    assert redact_dsn(spec.dsn) == "postgresql://bob:***@db.example:5432/app"


def test_a_bad_percent_sign_in_a_password_is_named_without_the_password() -> None:
    with pytest.raises(CapmarkError) as err:
        RunSpec(workloads=["srv-query1"], dsn="postgresql://bob:pa%zzword@db.example/app").validate()
    assert str(err.value) == ("The password in --dsn postgresql://bob:***@db.example/app holds a '%' that does not "
                              "start a %-encoded character (two hex digits); write a '%' itself as %25.")


@pytest.mark.parametrize("value", ["two words", "tab\there", "line\nbreak", ""])
def test_a_token_in_the_environment_must_be_one_word(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, value)
    spec = RunSpec(workloads=["srv-query1"], dsn=LOCAL_PG, node_exporter="http://127.0.0.1:9100/metrics")
    if not value:  # an empty variable is no token
        assert spec.validate().node_exporter_token() is None
        return
    with pytest.raises(CapmarkError) as err:
        spec.validate()
    assert str(err.value) == (f"{TOKEN_ENV} holds spaces or control characters; set it to the node_exporter's "
                              "bearer token alone.")
    assert value not in str(err.value)


# --- end to end: nothing secret reaches the console, results.sqlite or report.html ------------------------------

def _secret(label: str) -> str:
    """A value that appears nowhere unless capmark copied it: the label and 12 random hex digits."""
    return f"{label}{secrets.token_hex(6)}"


PG_HEAD, PG_TAIL = _secret("pghead"), _secret("pgtail")  # the DSN's password is PG_HEAD@PG_TAIL, unencoded
QUERY_PASSWORD, SSL_PASSWORD = _secret("querypw"), _secret("sslpw")
NE_USER, NE_HEAD, NE_TAIL = "capmark", _secret("nehead"), _secret("netail")  # NE_HEAD@NE_TAIL, unencoded
URL_TOKEN, BEARER = _secret("urltoken"), _secret("bearer")
SECRETS = {"the DSN's password": PG_HEAD, "the tail of the DSN's password": PG_TAIL,
           "?password=": QUERY_PASSWORD, "sslpassword": SSL_PASSWORD, "the node_exporter password": NE_HEAD,
           "the tail of the node_exporter password": NE_TAIL, "?token=": URL_TOKEN, "the bearer token": BEARER}


@pytest.fixture(scope="module")
def database() -> str:
    try:
        with psycopg.connect(LOCAL_PG, autocommit=True, connect_timeout=3) as admin:
            if not admin.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone():
                admin.execute(f"create database {DATABASE}")
    except psycopg.Error as err:
        pytest.skip(f"the machine's PostgreSQL on 127.0.0.1:5432 does not answer: {err}")
    return DATABASE


@pytest.fixture(scope="module")
def exporters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A node_exporter behind basic authentication, one without, and a proxy in front of the latter that wants
    the bearer token: their addresses."""
    problem = install(EXPORTER, HTPASSWD)
    if problem:
        pytest.skip(problem)
    folder = tmp_path_factory.mktemp("exporters")
    (folder / "auth").mkdir()
    (folder / "open").mkdir()
    with running_exporter(folder / "auth", {NE_USER: f"{NE_HEAD}@{NE_TAIL}"}) as (auth, _), \
            running_exporter(folder / "open") as (open_, _):
        proxy = Recorder(open_, BEARER)
        try:
            yield {"basic": auth, "bearer": proxy.url, "proxy": proxy}  # type: ignore[dict-item]
        finally:
            proxy.close()


def _dsn(form: str, database: str) -> str:
    if form == "url":
        return (f"postgresql://postgres:{PG_HEAD}@{PG_TAIL}@127.0.0.1:5432/{database}?sslpassword={SSL_PASSWORD}"
                f"&password={QUERY_PASSWORD}&application_name=capmark-secrets")
    return (f"host=127.0.0.1 port=5432 user=postgres dbname={database} password='{PG_HEAD}@{PG_TAIL}' "
            f"sslpassword={SSL_PASSWORD}")


def _node_exporter(auth: str, exporters: dict[str, str]) -> str:
    if auth == "basic":
        return exporters["basic"].replace("http://", f"http://{NE_USER}:{NE_HEAD}@{NE_TAIL}@", 1) + \
            f"?token={URL_TOKEN}"
    return exporters["bearer"] + f"?token={URL_TOKEN}"


def _leaks(data: bytes) -> list[str]:
    return [what for what, value in SECRETS.items() if value.encode() in data]


def _text_columns(db: Path) -> Iterator[tuple[str, str, str]]:
    """(table, column, value) of every text value in every table."""
    conn = sqlite3.connect(db)
    try:
        for (table,) in conn.execute("select name from sqlite_master where type = 'table'").fetchall():
            for row in conn.execute(f'select * from "{table}"'):
                for column, value in zip((d[0] for d in conn.execute(f'select * from "{table}"').description),
                                         row, strict=True):
                    if isinstance(value, str | bytes):
                        yield table, column, value if isinstance(value, str) else value.decode("utf-8", "replace")
    finally:
        conn.close()


@pytest.mark.db
@pytest.mark.parametrize(("form", "auth"), [("url", "basic"), ("conninfo", "token-file"), ("url", "token-env")])
def test_no_secret_reaches_the_console_the_results_or_the_report(form: str, auth: str, database: str,
                                                                 exporters: dict, tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = ["run", "srv-query1", "--jobs", "1", "--warmup", "0", "--duration", "1", "--dsn", _dsn(form, database),
            "--node-exporter", _node_exporter(auth, exporters), "--results-dir", str(results)]
    env = {k: v for k, v in os.environ.items() if k not in ("CAPMARK_DSN", TOKEN_ENV)}
    if auth == "token-file":
        (tmp_path / "token").write_text(f"{BEARER}\n")
        args += ["--node-exporter-token-file", str(tmp_path / "token")]
    elif auth == "token-env":
        env[TOKEN_ENV] = BEARER
    proxy: Recorder = exporters["proxy"]
    proxy.seen.clear()
    done = subprocess.run([sys.executable, "-m", "capmark.cli", *args], capture_output=True, timeout=RUN_TIMEOUT_S,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert _leaks(done.stdout) == [] and _leaks(done.stderr) == []

    (folder,) = results.iterdir()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert {"results.sqlite", "report.html"} <= {p.name for p in files}
    for path in files:
        assert _leaks(path.read_bytes()) == [], path.name
    for table, column, value in _text_columns(folder / "results.sqlite"):
        assert _leaks(value.encode()) == [], f"{table}.{column}"

    run = load_run(folder)
    assert run.environment["database_host"]["source"] == "node-exporter"  # the exporter was read, logged in
    assert run.spec["node_exporter"].endswith("/metrics?token=***")
    if form == "url":
        assert run.spec["dsn"] == (f"postgresql://postgres:***@127.0.0.1:5432/{database}?sslpassword=***"
                                   "&password=***&application_name=capmark-secrets")
    else:
        assert run.spec["dsn"] == (f"host=127.0.0.1 port=5432 user=postgres dbname={database} password=*** "
                                   "sslpassword=***")
    if auth == "basic":
        assert run.spec["node_exporter"].startswith(f"http://{NE_USER}:***@127.0.0.1:")
    else:
        assert proxy.seen and set(proxy.seen) == {f"Bearer {BEARER}"}
