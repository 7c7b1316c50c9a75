"""Every bad input gets one sentence and exit code 2, and creates nothing.

A table of malformed inputs across every command, option and file kind capmark reads, each run through the
real command-line entry point (capmark.cli.main, in this process). For each one: exit code 2, stderr is one
line that ends a sentence (no traceback, no "unexpected" error), nothing on stdout, no new file in the results
folder, and for run inputs no connection to the target database (its session counter stays at zero), so
nothing can have been created there. The analysis commands read one small real run stored once per module.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import psycopg.conninfo
import pytest
import storedruns
from commandline import assert_one_sentence, invoke
from test_observation_bad_inputs import CASES as OBSERVATION_CASES

from capmark import cli
from capmark.config import MAX_INPUT_FILE_BYTES

pytestmark = pytest.mark.db

# The machine's PostgreSQL 15, for the cases that need a server of their own to refuse against.
LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"

SUITE_OK = '[[test]]\nworkload = "tp-light"\n'
CLOSED = {"kind": "closed", "model": {"population": 3, "think_time": 1.0,
                                      "stations": [{"name": "cpu", "demand": 0.1}]}}
USL = {"kind": "usl-fit", "model": {"concurrency": [1, 2, 4, 8], "throughput": [100, 190, 350, 600]}}
MULTI = {"kind": "closed-multiclass", "model": {"classes": ["a", "b"], "population": [1, 1],
                                                "stations": [{"name": "s", "demand": [1.0, 2.0]}]}}


def lqn(**changes) -> dict:
    """A valid two-layer model (users -> server -> cpu) with changes to its tasks or processors."""
    model = {"processors": [{"name": "cpu", "multiplicity": 1}],
             "tasks": [{"name": "users", "reference": True, "population": 5, "think_time": 1.0,
                        "entries": [{"name": "request", "calls": {"server": 1}}]},
                       {"name": "server", "multiplicity": 2,
                        "entries": [{"name": "server", "phase1": {"cpu": 0.01}}]}]}
    model.update(changes)
    return {"kind": "lqn", "model": model}


def server_task(**changes) -> dict:
    return {"name": "server", "multiplicity": 2, "entries": [{"name": "server", "phase1": {"cpu": 0.01}}], **changes}


USERS = {"name": "users", "reference": True, "population": 5, "think_time": 1.0,
         "entries": [{"name": "request", "calls": {"server": 1}}]}


def closed(**model) -> dict:
    return {"kind": "closed", "model": {**CLOSED["model"], **model}}


def as_json(doc) -> bytes:
    return json.dumps(doc).encode()


# name -> bytes of the files the cases read ({FILE:name} in a case's arguments)
FILES: dict[str, bytes] = {
    "repeat-zero.toml": b'[defaults]\nrepeat = 0\n[[test]]\nworkload = "tp-light"\n',
    "repeat-float.toml": b'[[test]]\nworkload = "tp-light"\nrepeat = 2.5\n',
    "latin1.toml": '[[test]]\nworkload = "tp-light"  # caf\u00e9\n'.encode("latin-1"),
    "ok.sql": b"SELECT 1;\n",
    "ok-token": b"t0ken\n",
    "empty-token": b"\n",
    "two-word-token": b"t0ken t1ken\n",
    "huge-token": b"t" * (1 << 20),
    "bad-meta.sql": b"SELECT 1;\n\\sett x 1\n",
    "bad-expr.sql": b"\\set x 1 +* 2\n",
    "unclosed-if.sql": b"\\if 1\nSELECT 1;\n",
    "shell.sql": b"\\shell echo hi\n",
    "shell-suite.toml": b'[[test]]\nscript = "shell.sql"\nallow_shell = true\n',
    "no-script-suite.toml": SUITE_OK.encode(),
    "big.sql": b"SELECT 1;\n" * (MAX_INPUT_FILE_BYTES // 10 + 1),
    "big.toml": SUITE_OK.encode() + b"#" * MAX_INPUT_FILE_BYTES + b"\n",
    "pipeline.sql": b"\\startpipeline\nSELECT 1;\n\\endpipeline\n",
    "latin1.sql": "SELECT 'caf\u00e9';\n".encode("latin-1"),
    "script-and-workload.toml": b'[[test]]\nworkload = "tp-light"\nscript = "ok.sql"\n',
    "script-missing.toml": b'[[test]]\nscript = "nowhere.sql"\n',
    "script-server.toml": b'[[test]]\nscript = "ok.sql"\nmode = "server"\n',
    "script-defines.toml": b'[[test]]\nscript = "ok.sql"\ndefines = ["a=1"]\n',
    "broken.toml": b"[[test]\nworkload = 'x'\n",
    "params-string.toml": b'[[test]]\nworkload = "tp-light"\nparams = "update_pct=20"\n',
    "defaults-string.toml": b'defaults = "fast"\n' + SUITE_OK.encode(),
    "duration-short.toml": b'[defaults]\nduration = "0.5s"\n' + SUITE_OK.encode(),
    "duration-inf.toml": b"[defaults]\nduration = inf\n" + SUITE_OK.encode(),
    "duration-nan.toml": b'[[test]]\nworkload = "tp-light"\nduration = nan\n',
    "warmup-negative.toml": b'[[test]]\nworkload = "tp-light"\nwarmup = -1\n',
    "warmup-true.toml": b'[[test]]\nworkload = "tp-light"\nwarmup = true\n',
    "jobs-repeated.toml": b'[[test]]\nworkload = "tp-light"\njobs = [1, 1]\n',
    "jobs-bool.toml": b'[[test]]\nworkload = "tp-light"\njobs = [true]\n',
    "jobs-float.toml": b'[[test]]\nworkload = "tp-light"\njobs = [1, 2.0]\n',
    "test-numbers.toml": b"test = [1, 2]\n",
    "mode-number.toml": b'[[test]]\nworkload = "tp-light"\nmode = 5\n',
    "rate-nan.toml": b'[[test]]\nworkload = "tp-light"\nmode = "client"\nrate = nan\n',
    "rate-zero.toml": b'[[test]]\nworkload = "tp-light"\nmode = "client"\nrate = 0\n',
    "workload-number.toml": b"[[test]]\nworkload = 5\n",
    "unknown-key.toml": b'[[test]]\nworkload = "tp-light"\nspeed = 3\n',
    "top-level-key.toml": b'title = "mine"\n' + SUITE_OK.encode(),
    "param-list.toml": b'[[test]]\nworkload = "tp-light"\nparams = { update_pct = [10] }\n',
    "param-range.toml": b'[[test]]\nworkload = "tp-light"\nparams = { update_pct = 500 }\n',
    "defaults-workload.toml": b'[defaults]\nworkload = "tp-light"\n' + SUITE_OK.encode(),
    "no-tests.toml": b"[defaults]\njobs = [1]\n",
    "scenario-string.toml": b'scenario = "faster"\n',
    "scenario-nan.toml": b'[[scenario]]\nname = "fast"\ncpu_speed = nan\n',
    "scenario-inf-disk.toml": b'[[scenario]]\nname = "fast"\ndisk_speed = inf\n',
    "scenario-bool-jobs.toml": b'[[scenario]]\nname = "more"\njobs = true\n',
    "scenario-unknown.toml": b'[[scenario]]\nname = "x"\ncolour = 1\n',
    "scenario-name-number.toml": b"[[scenario]]\nname = 5\ncpus = 4\n",
    "scenario-growth-number.toml": b"[[scenario]]\nname = 'g'\ngrowth = 20\n",
    "scenario-think-negative.toml": b"[[scenario]]\nname = 'z'\nthink = -1\n",
    "scenario-numbers.toml": b"scenario = [1, 2]\n",
    "scenario-latin1.toml": "[[scenario]]\nname = 'caf\u00e9'\ncpus = 4\n".encode("latin-1"),
    "cases-latin1.json": '{"kind": "closed", "id": "caf\u00e9"}'.encode("latin-1"),
    "cases-broken.json": b'{"kind": "closed",',
    "cases-garbage.json": as_json([1, "x", None]),
    "cases-empty.json": as_json([]),
    "cases-string.json": as_json("closed"),
    "stations-object.json": as_json(closed(stations={"cpu": {"demand": 0.1}})),
    "stations-strings.json": as_json(closed(stations=["cpu", "disk"])),
    "population-missing.json": as_json({"kind": "closed", "model": {"stations": [{"name": "cpu", "demand": 1}]}}),
    "population-huge.json": as_json(closed(population=10**16)),
    "population-fraction.json": as_json(closed(population=2.5)),
    "demand-text.json": as_json(closed(stations=[{"name": "cpu", "demand": "fast"}])),
    "demand-nan.json": b'{"kind": "closed", "model": {"population": 2, "stations": [{"name": "cpu", "demand": NaN}]}}',
    "demand-infinity.json": b'{"kind": "closed", "model": {"population": 2, "stations": [{"name": "c", "demand": '
                            b'Infinity}]}}',
    "demand-huge-int.json": b'{"kind": "closed", "model": {"population": 2, "stations": [{"name": "c", "demand": 1'
                            + b"0" * 400 + b"}]}}",
    "demand-negative.json": as_json(closed(stations=[{"name": "cpu", "demand": -0.1}])),
    "demand-missing.json": as_json(closed(stations=[{"name": "cpu"}])),
    "demand-zero.json": as_json(closed(think_time=0, stations=[{"name": "cpu", "demand": 0}])),
    "think-negative.json": as_json(closed(think_time=-1)),
    "servers-bool.json": as_json(closed(stations=[{"name": "cpu", "demand": 0.1, "servers": True}])),
    "method-unknown.json": as_json({**CLOSED, "method": "magic"}),
    "kind-unknown.json": as_json({"kind": "petri-net", "model": {}}),
    "model-missing.json": as_json({"kind": "closed"}),
    "usl-lengths.json": as_json({"kind": "usl-fit", "model": {"concurrency": [1, 2, 4, 8],
                                                              "throughput": [100, 190, 350]}}),
    "usl-negative.json": as_json({"kind": "usl-fit", "model": {**USL["model"], "throughput": [100, -190, 350, 600]}}),
    "usl-zero.json": as_json({"kind": "usl-fit", "model": {**USL["model"], "throughput": [0, 0, 0, 0]}}),
    "usl-three.json": as_json({"kind": "usl-fit", "model": {"concurrency": [1, 2, 4], "throughput": [1, 2, 3]}}),
    "usl-string.json": as_json({"kind": "usl-fit", "model": {"concurrency": "1,2,4,8", "throughput": [1, 2, 3, 4]}}),
    "lqn-processors-string.json": as_json(lqn(processors="x")),
    "lqn-cycle.json": as_json(lqn(tasks=[USERS, server_task(entries=[{"name": "server", "calls": {"db": 1}}]),
                                         {"name": "db", "entries": [{"name": "db", "calls": {"server": 1},
                                                                     "phase1": {"cpu": 0.01}}]}])),
    "lqn-self-call.json": as_json(lqn(tasks=[USERS, server_task(entries=[{"name": "server",
                                                                          "calls": {"server": 1}}])])),
    "lqn-entries-missing.json": as_json(lqn(tasks=[USERS, {"name": "server"}])),
    "lqn-multiplicity-text.json": as_json(lqn(tasks=[USERS, server_task(multiplicity="many")])),
    "lqn-think-text.json": as_json(lqn(tasks=[{**USERS, "think_time": "1s"}, server_task()])),
    "lqn-negative-demand.json": as_json(lqn(tasks=[USERS, server_task(entries=[{"name": "server",
                                                                                "phase1": {"cpu": -0.01}}])])),
    "lqn-demand-text.json": as_json(lqn(tasks=[USERS, server_task(entries=[{"name": "server",
                                                                            "phase1": {"cpu": "x"}}])])),
    "lqn-population-huge.json": as_json(lqn(tasks=[{**USERS, "population": 10**16}, server_task()])),
    "lqn-no-reference.json": as_json(lqn(tasks=[server_task()])),
    "lqn-unknown-callee.json": as_json(lqn(tasks=[{**USERS, "entries": [{"name": "request",
                                                                         "calls": {"nobody": 1}}]}, server_task()])),
    "multi-fewer-populations.json": as_json({**MULTI, "model": {**MULTI["model"], "population": [2],
                                                                "stations": [{"name": "s", "demand": [1.0]}]}}),
    "multi-demand-scalar.json": as_json({**MULTI, "model": {**MULTI["model"], "stations": [{"name": "s",
                                                                                          "demand": 1.0}]}}),
    "multi-think-length.json": as_json({**MULTI, "model": {**MULTI["model"], "think_time": [1.0]}}),
    "multi-demand-missing.json": as_json({**MULTI, "model": {**MULTI["model"], "stations": [{"name": "s"}]}}),
    "multi-population-huge.json": as_json({**MULTI, "model": {**MULTI["model"], "population": [1, 10**16]}}),
    "open-zero-rate.json": as_json({"kind": "open", "model": {"arrival_rate": 0, "service_rate": 10}}),
    "open-unstable.json": as_json({"kind": "open", "model": {"arrival_rate": 20, "service_rate": 10}}),
    "quick-zero-servers.json": as_json({"kind": "quick-formula", "model": {"service_time": 0.01,
                                                                         "arrival_rate": 10, "servers": 0}}),
}


def run_case(*args: str, word: str) -> pytest.param:
    return pytest.param("run", list(args), word, id="run " + " ".join(args))


def stored(command: str, *args: str, word: str) -> pytest.param:
    return pytest.param("stored", [command, *args], word, id=" ".join([command, *args]))


def other(*args: str, word: str) -> pytest.param:
    return pytest.param("other", list(args), word, id=" ".join(args))


def solve(name: str, word: str) -> pytest.param:
    return pytest.param("other", ["solve", f"{{FILE:{name}}}"], word, id=f"solve {name}")


CASES = [
    # --- capmark run: options -------------------------------------------------------------------------
    run_case("tp-light", "--mode", "client", "--rate", "nan", word="rate"),
    run_case("tpcc", "--param", "keying=on", word="--mode client"),
    run_case("tpcc", "--mode", "client", "--param", "keying=on", "--think", "1s", word="drop --think"),
    run_case("tpcc", "--param", "warehouses=0", word="between 1 and 1000"),
    run_case("tpcc", "--param", "check=yes", word="one of {off, on}"),
    run_case("tp-light", "--mode", "client", "--rate", "inf", word="rate"),
    run_case("tp-light", "--mode", "client", "--rate", "0", word="closed loop"),
    run_case("tp-light", "--mode", "client", "--rate", "-5", word="rate"),
    run_case("tp-light", "--mode", "client", "--rate", "fast", word="arrivals per second"),
    run_case("tp-light", "--mode", "client", "--rate", "1e9", word="above the limit"),
    run_case("--script", "{DIR}/nowhere.sql", word="does not exist"),
    run_case("--script", "{FILE:bad-meta.sql}", word="line 2"),
    run_case("--script", "{FILE:bad-expr.sql}", word="line 1, column"),
    run_case("--script", "{FILE:unclosed-if.sql}", word="endif"),
    run_case("--script", "{FILE:shell.sql}", word="--allow-shell"),
    run_case("--script", "{FILE:pipeline.sql}", "--query-mode", "simple", word="pipeline"),
    run_case("--script", "{FILE:latin1.sql}", word="not UTF-8"),
    run_case("--script", "{FILE:ok.sql}@-1", word="weight"),
    run_case("--script", "{FILE:ok.sql}@2000000", word="weight"),
    run_case("--script", "{FILE:ok.sql}@0", word="weight 0"),
    run_case("--script", "{FILE:ok.sql}", "-D", "novalue", word="NAME=VALUE"),
    run_case("--script", "{FILE:ok.sql}", "-D", "9x=1", word="variable name"),
    run_case("--script", "{FILE:ok.sql}", "-D", "a=1", "-D", "a=2", word="defined twice"),
    run_case("--script", "{FILE:ok.sql}", "--query-mode", "fast", word="query-mode"),
    run_case("--script", "{FILE:ok.sql}", "--max-tries", "0", word="max-tries"),
    run_case("--script", "{FILE:ok.sql}", "--seed", "-1", word="seed"),
    run_case("--script", "{FILE:ok.sql}", "--suite", "{FILE:script-missing.toml}", word="suite file"),
    run_case("--suite", "{FILE:script-and-workload.toml}", word="unknown key"),
    run_case("--suite", "{FILE:script-missing.toml}", word="does not exist"),
    run_case("--suite", "{FILE:script-server.toml}", word="client-side"),
    run_case("--suite", "{FILE:script-defines.toml}", word="defines"),
    run_case("srv-query1", "--mode", "client", "--cluster", "my cluster", word="Ray cluster address"),
    run_case("srv-query1", "--mode", "client", "--cluster", "http://head:10001", word="Ray cluster address"),
    run_case("srv-query1", "--cluster", "ray://head:10001", word="add --mode client"),
    # nothing listens there: joining fails before anything is created
    run_case("srv-query1", "--mode", "client", "--cluster", "ray://127.0.0.1:9", word="could not join"),
    run_case("srv-query1", "--jobs", "1,,2", word="job list"),
    run_case("srv-query1", "--jobs", "", word="job list"),
    run_case("srv-query1", "--jobs", "0", word="at least 1 job"),
    run_case("srv-query1", "--jobs=-1", word="job list"),
    run_case("srv-query1", "--jobs", "4,2", word="strictly increasing"),
    run_case("srv-query1", "--jobs", "1.5", word="job list"),
    run_case("srv-query1", "--jobs", "1000", word="512"),
    run_case("srv-query1", "--jobs", "\u0661,\u0662", word="job list"),  # Arabic-Indic digits pass str.isdigit
    run_case("srv-query1", "--repeat", "0", word="repetitions"),
    run_case("srv-query1", "--repeat", "11", word="from 1 to 10"),
    run_case("srv-query1", "--repeat", "twice", word="--repeat"),
    run_case("srv-query1", "--jobs", "auto", "--max-jobs", "600", word="--max-jobs"),
    run_case("srv-query1", "--jobs", "auto", "--max-jobs", "0", word="--max-jobs"),
    run_case("srv-query1", "--jobs", "1,2", "--max-jobs", "8", word="--jobs auto"),
    run_case("srv-query1", "--jobs", "automatic", word="job list"),
    run_case("srv-query1", "--jobs", "auto", "--soak", "1m", word="one job count"),
    run_case("srv-query1", "--repeat", "2", "--soak", "1m", word="not repeated"),
    run_case("--suite", "{FILE:repeat-zero.toml}", word="repetitions"),
    run_case("--suite", "{FILE:repeat-float.toml}", word="repetitions"),
    run_case("tp-light", "--param", "update_pct=20", "--param", "update_pct=30", word="given twice"),
    run_case("tp-light", "--param", "update_pct=500", word="between 0 and 100"),
    run_case("tp-light", "--param", "update_pct=lots", word="integer"),
    run_case("srv-query1", "--param", "colour=blue", word="Unknown parameter"),
    run_case("tp-light", "--param", "=5", word="name=value"),
    run_case("tp-light", "--param", "update_pct", word="name=value"),
    run_case("srv-query1", "--duration", "0.5s", word="at least 1 second"),
    run_case("srv-query1", "--duration", "inf", word="not a duration"),
    run_case("srv-query1", "--duration", "1e3", word="not a duration"),
    run_case("srv-query1", "--duration", "-5s", word="not a duration"),
    run_case("srv-query1", "--duration", "5 parsecs", word="not a duration"),
    run_case("srv-query1", "--duration", "10h", word="soak"),
    run_case("srv-query1", "--duration", "9" * 40 + "h", word="one hour"),
    run_case("srv-query1", "--warmup", "inf", word="not a duration"),
    run_case("srv-query1", "--warmup", "2h", word="one hour"),
    run_case("tp-light", "--mode", "client", "--think", "nan", word="not a duration"),
    run_case("tp-light", "--mode", "client", "--think", "5m", word="think time"),
    run_case("tp-light", "--think", "10ms", word="--mode client"),
    run_case("tp-light", "--mode", "client", "--think", "10ms", "--rate", "50", word="not both"),
    run_case("srv-query1", "--scale", "1000000000", word="10^9 rows"),
    run_case("srv-query1", "--scale", "0", word="positive whole number"),
    run_case("srv-query1", "--scale", "lots", word="--scale"),
    run_case("srv-query1", "--mode", "bogus", word="mode"),
    run_case("pls-add", "--mode", "client", word="server-side only"),
    run_case("no-such-workload", word="Unknown workload"),
    run_case("srv-query1", "--dsn", "oracle://scott@localhost/orcl", word="not one capmark measures"),
    run_case("srv-query1", "--dsn", "mysql://root@localhost:port/db", word="not a number"),
    run_case("srv-query1", "--dsn", "mariadb://root@localhost/db?sslmode=require", word="does not know (sslmode)"),
    run_case("srv-query1", "--dsn", "just some words", word="neither"),
    run_case("srv-query1", "--dsn", "host=localhost colour=blue", word="not a valid PostgreSQL connection"),
    run_case("srv-query1", "--dsn", "", word="empty"),
    run_case("srv-query1", "--data-dir", "{FILE:latin1.toml}", word="is a file"),
    run_case("srv-query1", "--data-dir", "{FILE:latin1.toml}/pg", word="is a file"),
    run_case("srv-query1", "--soak", "5s", word="between 10 seconds and 7 days"),
    run_case("srv-query1", "--soak", "200h", word="7 days"),
    run_case("srv-query1", "--soak", "1m", "--jobs", "1,2", word="one job count"),
    run_case("srv-query1", "tp-light", "--soak", "1m", word="one workload"),
    run_case("srv-query1", "--results-dir", "{FILE:latin1.toml}/results", word="Cannot write results"),
    run_case("srv-query1", "--format", "yaml", word="--format"),
    run_case("srv-query1", "--colour", word="No such option"),
    # --- capmark run --suite FILE ------------------------------------------------------------------------
    run_case("--suite", "{DIR}/missing.toml", word="Cannot read"),
    run_case("--suite", "{FILE:latin1.toml}", word="not UTF-8"),
    run_case("--suite", "{FILE:broken.toml}", word="not valid TOML"),
    run_case("--suite", "{FILE:params-string.toml}", word="not a table"),
    run_case("--suite", "{FILE:defaults-string.toml}", word="not a table"),
    run_case("--suite", "{FILE:duration-short.toml}", word="at least 1 second"),
    run_case("--suite", "{FILE:duration-inf.toml}", word="finite"),
    run_case("--suite", "{FILE:duration-nan.toml}", word="finite"),
    run_case("--suite", "{FILE:warmup-negative.toml}", word="negative"),
    run_case("--suite", "{FILE:warmup-true.toml}", word="must be a duration"),
    run_case("--suite", "{FILE:jobs-repeated.toml}", word="strictly increasing"),
    run_case("--suite", "{FILE:jobs-bool.toml}", word="whole numbers"),
    run_case("--suite", "{FILE:jobs-float.toml}", word="whole numbers"),
    run_case("--suite", "{FILE:test-numbers.toml}", word="not a table"),
    run_case("--suite", "{FILE:mode-number.toml}", word="mode"),
    run_case("--suite", "{FILE:rate-nan.toml}", word="rate"),
    run_case("--suite", "{FILE:rate-zero.toml}", word="rate"),
    run_case("--suite", "{FILE:workload-number.toml}", word="string"),
    run_case("--suite", "{FILE:unknown-key.toml}", word="unknown key"),
    run_case("--suite", "{FILE:top-level-key.toml}", word="unknown top-level key"),
    run_case("--suite", "{FILE:param-list.toml}", word="number or a string"),
    run_case("--suite", "{FILE:param-range.toml}", word="between 0 and 100"),
    run_case("--suite", "{FILE:defaults-workload.toml}", word="may not set workload"),
    run_case("--suite", "{FILE:no-tests.toml}", word="names no tests"),
    run_case("tp-light", "--suite", "{FILE:param-range.toml}", word="drop --suite"),
    run_case("--param", "update_pct=20", "--suite", "{FILE:param-range.toml}", word="drop --suite"),
    # --- commands on a stored run ----------------------------------------------------------------------------
    stored("report", "no-such-run", word="No capmark run"),
    stored("report", "{FILE:latin1.toml}", word="No capmark run"),
    stored("report", "{RUN}", "extra", word="Too many arguments"),
    stored("demands", "{RUN}:no-such-test", word="has no test"),
    stored("diagnose", "{RUN}:99", word="has no test"),
    stored("calibrate", "--up-to", "0", word="--up-to"),
    stored("calibrate", "--up-to", "-3", word="--up-to"),
    stored("calibrate", "--up-to", "many", word="--up-to"),
    stored("calibrate", "--from-steps", "", word="job list"),
    stored("calibrate", "--from-steps", "1,,2", word="job list"),
    stored("calibrate", "--from-steps", "64", word="valid step with [64] jobs"),
    stored("calibrate", "--format", "xml", word="--format"),
    stored("whatif", "--cpu-speed", "nan", word="--cpu-speed"),
    stored("whatif", "--cpu-speed", "0", word="--cpu-speed"),
    stored("whatif", "--disk-speed", "inf", word="--disk-speed"),
    stored("whatif", "--cpus", "0", word="--cpus"),
    stored("whatif", "--disks", "-1", word="--disks"),
    stored("whatif", "--jobs", "0", word="--jobs"),
    stored("whatif", "--at", "0", "--cpus", "4", word="--at"),
    stored("whatif", "--think", "nan", word="not a duration"),
    stored("whatif", "--growth", "lots", word="growth"),
    stored("whatif", "--growth", "20%x0", word="periods"),
    stored("whatif", word="at least one change"),
    stored("whatif", "--scenarios", "{DIR}/missing.toml", word="Cannot read"),
    stored("whatif", "--scenarios", "{FILE:scenario-latin1.toml}", word="not UTF-8"),
    stored("whatif", "--scenarios", "{FILE:scenario-string.toml}", word="no [[scenario]] tables"),
    stored("whatif", "--scenarios", "{FILE:scenario-numbers.toml}", word="not a table"),
    stored("whatif", "--scenarios", "{FILE:scenario-nan.toml}", word="cpu speed"),
    stored("whatif", "--scenarios", "{FILE:scenario-inf-disk.toml}", word="disk speed"),
    stored("whatif", "--scenarios", "{FILE:scenario-bool-jobs.toml}", word="number of jobs"),
    stored("whatif", "--scenarios", "{FILE:scenario-unknown.toml}", word="Unknown scenario setting"),
    stored("whatif", "--scenarios", "{FILE:scenario-name-number.toml}", word="name"),
    stored("whatif", "--scenarios", "{FILE:scenario-growth-number.toml}", word="growth"),
    stored("whatif", "--scenarios", "{FILE:scenario-think-negative.toml}", word="negative"),
    stored("size", "--sla", "fast", word="SLA"),
    stored("size", "--sla", "p50<5ms", word="p50"),
    stored("size", "--sla", "p95<0ms", word="positive"),
    stored("size", "--target-tps", "nan", word="--target-tps"),
    stored("size", "--target-tps", "inf", word="--target-tps"),
    stored("size", "--target-tps", "-5", word="--target-tps"),
    stored("anticipate", "--servers", "-1", word="--servers"),
    stored("anticipate", "--servers", "0", word="--servers"),
    stored("anticipate", "--rate", "nan", word="--rate"),
    stored("anticipate", "--service", "inf", word="--service"),
    stored("anticipate", "--at", "0", word="--at"),
    # --- capmark solve FILE ----------------------------------------------------------------------------------
    other("solve", "{DIR}/missing.json", word="Cannot read"),
    other("solve", word="Missing argument"),
    solve("cases-latin1.json", "not UTF-8"),
    solve("cases-broken.json", "not valid JSON"),
    solve("cases-garbage.json", "Case 1"),
    solve("cases-empty.json", "neither a case nor a list"),
    solve("cases-string.json", "neither a case nor a list"),
    solve("stations-object.json", "stations"),
    solve("stations-strings.json", "Station 1"),
    solve("population-missing.json", "population"),
    solve("population-huge.json", "limit"),
    solve("population-fraction.json", "whole number"),
    solve("demand-text.json", "must be a number"),
    solve("demand-nan.json", "NaN"),
    solve("demand-infinity.json", "Infinity"),
    solve("demand-huge-int.json", "finite"),
    solve("demand-negative.json", "zero or more"),
    solve("demand-missing.json", "needs a demand"),
    solve("demand-zero.json", "takes no time"),
    solve("think-negative.json", "think time"),
    solve("servers-bool.json", "servers"),
    solve("method-unknown.json", "Unknown method"),
    solve("kind-unknown.json", "Unknown case kind"),
    solve("model-missing.json", "model"),
    solve("usl-lengths.json", "one throughput per concurrency"),
    solve("usl-negative.json", "positive"),
    solve("usl-zero.json", "positive"),
    solve("usl-three.json", "at least 4"),
    solve("usl-string.json", "concurrency"),
    solve("lqn-processors-string.json", "processors"),
    solve("lqn-cycle.json", "cycle"),
    solve("lqn-self-call.json", "calls itself"),
    solve("lqn-entries-missing.json", "entries"),
    solve("lqn-multiplicity-text.json", "multiplicity"),
    solve("lqn-think-text.json", "think time"),
    solve("lqn-negative-demand.json", "zero or more"),
    solve("lqn-demand-text.json", "must be a number"),
    solve("lqn-population-huge.json", "limit"),
    solve("lqn-no-reference.json", "reference task"),
    solve("lqn-unknown-callee.json", "nobody"),
    solve("multi-fewer-populations.json", "one population per class"),
    solve("multi-demand-scalar.json", "one number per class"),
    solve("multi-think-length.json", "one per class"),
    solve("multi-demand-missing.json", "no demand"),
    solve("multi-population-huge.json", "limit"),
    solve("open-zero-rate.json", "positive"),
    solve("open-unstable.json", "unstable"),
    solve("quick-zero-servers.json", "servers"),
    # --- the rest of the command line --------------------------------------------------------------------------
    other("no-such-command", word="No such command"),
    other("list", "--format", "yaml", word="--format"),
    other("results", "--format", "yaml", word="--format"),
    other("results", "--results-dir", "{FILE:latin1.toml}", word="is not a folder"),
    other("db", "start", "--data-dir", "{FILE:latin1.toml}", word="is a file"),
    other("db", "url", "--data-dir", "{DIR}/no-server", word="not running"),
    # --- run references, output formats and solvers of the analysis commands
    *[stored(command, "--format", "yaml", word="--format") for command in
      ("report", "demands", "diagnose", "calibrate", "whatif", "size", "anticipate")],
    other("db", "status", "--format", "yaml", word="--format"),
    *[stored(command, "no-such-run", word="No capmark run") for command in ("calibrate", "size", "anticipate")],
    stored("whatif", "no-such-run", "--cpus", "4", word="No capmark run"),
    *[stored(command, "--results-dir", "{DIR}/no-such-folder", word="no run under") for command in
      ("report", "demands", "diagnose", "calibrate", "size", "anticipate")],
    stored("whatif", "--cpus", "4", "--results-dir", "{DIR}/no-such-folder", word="no run under"),
    *[stored(command, "--solver", "magic", word="--solver") for command in ("calibrate", "whatif", "size")],
    stored("compare", "no-such-run", "{RUN}", word="No capmark run"),
    stored("compare", "{RUN}", "no-such-run", word="No capmark run"),
    stored("compare", "{RUN}", "{RUN}", "--results-dir", "{DIR}/no-such-folder", word="No capmark run"),
    stored("compare", "{RUN}", "{RUN}", "--format", "pdf", word="--format"),
    run_case("srv-query1", "--host-metrics", "magic", word="--host-metrics"),
    # --- scripts and suite files: shell commands, script size and kind, weights, script-only options
    run_case("--suite", "{FILE:shell-suite.toml}", word="--allow-shell"),
    run_case("--suite", "{FILE:no-script-suite.toml}", "--allow-shell", word="--allow-shell"),
    run_case("--script", "{DIR}/fifo.sql", word="not a regular file"),
    run_case("--script", "/dev/zero", word="not a regular file"),
    run_case("--script", "{DIR}", word="not a regular file"),
    run_case("--script", "{FILE:big.sql}", word="1 MiB"),
    run_case("--suite", "{DIR}/fifo.sql", word="not a regular file"),
    run_case("--suite", "/dev/zero", word="not a regular file"),
    run_case("--suite", "{FILE:big.toml}", word="1 MiB"),
    stored("whatif", "--scenarios", "/dev/zero", word="not a regular file"),
    run_case("--script", "{FILE:ok.sql}@abc", word="weight"),
    run_case("--script", "{FILE:ok.sql}@", word="weight"),
    run_case("srv-query1", "-D", "a=1", word="--define"),
    run_case("srv-query1", "--seed", "1", word="--seed"),
    run_case("srv-query1", "--query-mode", "prepared", word="--query-mode"),
    run_case("srv-query1", "--max-tries", "3", word="--max-tries"),
    run_case("srv-query1", "--allow-shell", word="--allow-shell"),
    run_case("--suite", "{FILE:no-script-suite.toml}", "--seed", "1", word="--seed"),
    run_case("--suite", "{FILE:no-script-suite.toml}", "-D", "a=1", word="--define"),
    # --- URLs and secrets: PostgreSQL and MySQL URLs, node_exporter URLs
    run_case("srv-query1", "--dsn", "mysql://root@127.0.0.1:99999/db", word="not a number from 1 to 65535"),
    run_case("srv-query1", "--dsn", "mariadb://root@127.0.0.1:0/db", word="not a number from 1 to 65535"),
    run_case("srv-query1", "--dsn", "postgresql://postgres@127.0.0.1:99999/db", word="not a number from 1 to 65535"),
    run_case("srv-query1", "--dsn", "postgresql://h1:5432,h2:70000/db", word="not a number from 1 to 65535"),
    run_case("srv-query1", "--dsn", "host=127.0.0.1 port=0 dbname=db", word="not a number from 1 to 65535"),
    run_case("srv-query1", "--dsn", "postgresql://postgres@127.0.0.1/db?port=123456", word="from 1 to 65535"),
    run_case("srv-query1", "--dsn", "mysql://root:pa%zz@127.0.0.1/db", word="write a '%' itself as %25"),
    run_case("srv-query1", "--dsn", "postgresql://bob:pa%zz@127.0.0.1/db", word="write a '%' itself as %25"),
    run_case("srv-query1", "--dsn", "mysql://root@127.0.0.1/my%zzdb", word="The database name"),
    run_case("srv-query1", "--dsn", "mysql://root@h1,h2/db", word="one host"),
    run_case("srv-query1", "--dsn", "mysql://root@[::1/db", word="closing ']'"),
    run_case("srv-query1", "--node-exporter", "http://127.0.0.1:0/metrics", word="not a number from 1 to 65535"),
    run_case("srv-query1", "--node-exporter", "http://ops:pw@127.0.0.1:99999/metrics", word="from 1 to 65535"),
    run_case("srv-query1", "--node-exporter", "ftp://127.0.0.1/metrics", word="not the address of a node_exporter"),
    run_case("srv-query1", "--node-exporter", "127.0.0.1:9100", word="not the address of a node_exporter"),
    run_case("srv-query1", "--node-exporter", "http://ops:pa%zz@127.0.0.1:9100/metrics", word="%25"),
    run_case("srv-query1", "--host-metrics", "none", "--node-exporter", "http://127.0.0.1:9100/metrics",
             word="drop one"),
    *[run_case("srv-query1", "--node-exporter", "http://127.0.0.1:9100/metrics", "--node-exporter-token-file", path,
               word=word) for path, word in [("{DIR}/no-token", "does not exist"), ("{DIR}", "not a regular file"),
                                             ("{FILE:empty-token}", "holds no token"),
                                             ("{FILE:two-word-token}", "spaces or control characters"),
                                             ("{FILE:huge-token}", "larger than"), ("{FILE:latin1.sql}", "not UTF-8")]],
    run_case("srv-query1", "--node-exporter-token-file", "{FILE:ok-token}", word="add --node-exporter"),
    run_case("srv-query1", "--node-exporter", "http://ops:pw@127.0.0.1:9100/metrics", "--node-exporter-token-file",
             "{FILE:ok-token}", word="not both"),
    # --- data directories
    run_case("srv-query1", "--data-dir", "", word="--data-dir is empty"),
    other("db", "start", "--data-dir", "", word="--data-dir is empty"),
    other("db", "status", "--data-dir", "", word="--data-dir is empty"),
    run_case("srv-query1", "--data-dir", "{DIR}", word="is not empty"),
    other("db", "start", "--data-dir", "{DIR}", word="is not empty"),
    other("db", "stop", "--data-dir", "{DIR}", word="is not empty"),
    other("db", "status", "--data-dir", "{DIR}", word="is not empty"),
    other("db", "stop", "--data-dir", "{FILE:latin1.toml}", word="is a file"),
    other("db", "status", "--data-dir", "{FILE:latin1.toml}", word="is a file"),
    run_case("srv-query1", "--data-dir", '{DIR}/say "cheese"', word="a double quote"),
    other("db", "start", "--data-dir", "{DIR}/cost$HOME", word="a dollar sign"),
    # --- numeric options of every command, compare
    run_case("srv-query1", "--mode", "client", "--driver-procs", "0", word="--driver-procs"),
    run_case("srv-query1", "--mode", "client", "--driver-procs", "-2", word="--driver-procs"),
    run_case("srv-query1", "--mode", "client", "--driver-procs", "many", word="--driver-procs"),
    *[stored(*command, "--cores", value, word="--cores") for command in (["calibrate"], ["whatif", "--cpus", "4"],
                                                                          ["size"])
      for value in ("0", "-1", "eight")],
    *[stored(*command, "--from-steps", value, word=word) for command in (["whatif", "--cpus", "4"], ["size"])
      for value, word in (("1,,2", "job list"), ("0", "at least 1 job"), ("64", "valid step with [64] jobs"))],
    *[stored("compare", "{RUN}", "{RUN}", "--fail-on-regression", value, word="finite percentage")
      for value in ("inf", "nan", "-1", "1e400")],
    stored("compare", "{RUN}", "{RUN}", "--fail-on-regression", "lots", word="--fail-on-regression"),
    # huge values: each message says the limit, never that a whole number is not one
    stored("whatif", "--cpus", "9" * 20, word="at most 4,096"),
    stored("whatif", "--disks", "9" * 20, word="at most 1,024"),
    stored("whatif", "--jobs", "9" * 20, word="at most 100,000"),
    stored("whatif", "--at", "9" * 20, "--cpus", "4", word="between 1 and 100,000 jobs"),
    stored("whatif", "--think", "9" * 20, word="at most 24 hours"),
    stored("calibrate", "--up-to", "9" * 20, word="between 1 and 100,000 jobs"),
    # not numbers at all: what the option takes
    *[stored(command, option, value, *extra, word=f"{option} takes a {kind}")
      for command, option, kind, extra in (("calibrate", "--up-to", "whole number", ()),
                                           ("whatif", "--cores", "whole number", ("--cpus", "4")),
                                           ("whatif", "--cpus", "whole number", ()),
                                           ("anticipate", "--at", "whole number", ()))
      for value in ("inf", "1e400")],
    run_case("srv-query1", "--scale", "nan", word="--scale takes a whole number"),
    stored("whatif", "--cpu-speed", "fast", word="--cpu-speed takes a finite number"),
    stored("compare", "{RUN}", "{RUN}", "--output", "{DIR}/x.html", word="--format html"),
    stored("compare", "{RUN}", "{RUN}", "--format", "html", "--output", "{FILE:latin1.toml}/x.html",
           word="is not a folder"),
    stored("compare", "{RUN}", "{RUN}", "--format", "html", "--output", "{DIR}", word="is a folder"),
    stored("compare", "{RUN}", "{RUN}", "--format", "html", "--output", "{DIR}/no-such-folder/x.html",
           word="does not exist"),
    # --- Ray cluster addresses
    run_case("srv-query1", "--client-engine", "rocket", word="The client engine 'rocket' is unknown"),
    # --- the platform the embedded server is confined to
    run_case("srv-query1", "--server-cpus", "2", word="not capmark's to confine"),
    run_case("srv-query1", "--data-dir", "{DIR}/pg", "--server-cpus", "999", word="is not between 1 and this host's"),
    run_case("srv-query1", "--data-dir", "{DIR}/pg", "--server-cpu-quota", "0", word="is not between 0.01 and"),
    run_case("srv-query1", "--data-dir", "{DIR}/pg", "--server-iops", "0", word="--server-iops needs positive rates"),
    run_case("srv-query1", "--data-dir", "{DIR}/pg", "--server-mbps", "1,2,3", word="takes a read rate and optionally"),
    # --- capmark observe (checked before any server is contacted)
    other("observe", "--interval", "0s", word="--interval 0s is out of range"),
    other("observe", "--for", "soon", word="is not a duration"),
    other("observe", "--sample-hz", "0", word="--sample-hz 0 is out of range"),
    other("observe", "--top-statements", "0", word="--top-statements 0 is out of range"),
    other("observe", "--host-metrics", "bogus", word="--host-metrics 'bogus' is unknown"),
    other("observe", "--node-exporter", "ftp://x", word="is not the address of a node_exporter"),
    other("observe", "--node-exporter-token-file", "{DIR}/missing", word="is the bearer token of a node_exporter"),
    other("observe", "--dsn", "mysql://root@127.0.0.1:1/x", word="Cannot connect to MySQL/MariaDB"),
    other("observe", "--data-dir", "{FILE:latin1.toml}", word="is a file, not a folder"),
    other("observe", "--dsn", "postgresql://x@127.0.0.1:1/x", "--results-dir", "{FILE:latin1.toml}",
          word="Cannot write results"),
]


@pytest.fixture(scope="module")
def admin_dsn(request: pytest.FixtureRequest) -> str:
    """The machine's PostgreSQL when it answers (fastest: a kept database), else the embedded one."""
    try:
        psycopg.connect(LOCAL_PG, connect_timeout=3).close()
        return LOCAL_PG
    except psycopg.Error:
        return request.getfixturevalue("embedded_dsn")


def _with_db(dsn: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=dbname)


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real stored run whose every step is valid (srv-query1 and wal-lat1 at 1, 2 and 4 jobs), in a results folder
    of its own: a job list that names no step is then refused for that reason, not because no step is valid."""
    results = tmp_path_factory.mktemp("stored")
    (run_id,) = storedruns.unpack(results, "plan-cpu-commit")
    return results, run_id


@pytest.fixture(scope="module")
def throwaway_db(admin_dsn: str):
    """A fresh, empty database the run cases point --dsn at; dropped afterwards."""
    name = f"capmark_bad_{secrets.token_hex(4)}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"create database {name}")
    yield name
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"drop database if exists {name} with (force)")


def sessions(admin_dsn: str, dbname: str) -> int:
    """Sessions ever opened on a database (pg_stat_database.sessions, PostgreSQL 14+)."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("select pg_stat_clear_snapshot()")
        row = admin.execute("select coalesce(sessions, 0) from pg_stat_database where datname = %s",
                            (dbname,)).fetchone()
    return row[0] if row else 0


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    os.mkfifo(folder / "fifo.sql")  # a script or suite that is a FIFO: refused, never opened and waited on
    return folder


@pytest.mark.parametrize("kind,args,word", CASES)
def test_bad_input(kind, args, word, files, tmp_path, capsys, monkeypatch, request):
    monkeypatch.delenv("CAPMARK_DSN", raising=False)
    monkeypatch.delenv("CAPMARK_DATA_DIR", raising=False)
    empty = tmp_path / "results"
    empty.mkdir()
    values = {"DIR": str(files), **{f"FILE:{name}": str(files / name) for name in FILES}}
    target = None
    if kind == "stored":
        results, run_id = request.getfixturevalue("stored_run")
        values["RUN"] = run_id
        if "--results-dir" not in args:
            args = [*args, "--results-dir", str(results)]
        watched = results
    elif kind == "run":
        admin, target = request.getfixturevalue("admin_dsn"), request.getfixturevalue("throwaway_db")
        if "--dsn" not in args and "--data-dir" not in args:
            args = [*args, "--dsn", _with_db(admin, target)]
        if "--results-dir" not in args:
            args = [*args, "--results-dir", str(empty)]
        args = ["run", *args]
        watched = empty
    else:
        watched = empty
    args = [re.sub(r"\{([^}]+)\}", lambda m: values[m.group(1)], a) for a in args]
    before = tree(watched)
    sessions_before = sessions(request.getfixturevalue("admin_dsn"), target) if target else 0
    started = time.monotonic()
    code, out, err = invoke(args, capsys, monkeypatch)
    assert_one_sentence(code, out, err, word)
    assert tree(watched) == before, "a bad input created files"
    assert time.monotonic() - started < 5, "a bad input must be refused at once"
    if target:
        assert sessions(request.getfixturevalue("admin_dsn"), target) == sessions_before, \
            "capmark connected to the target before refusing the input"


def test_throwaway_database_has_no_capmark_schema(admin_dsn, throwaway_db):
    """After every run case: the target database never got schema capmark (runs last in this module)."""
    with psycopg.connect(_with_db(admin_dsn, throwaway_db)) as conn:
        assert conn.execute("select count(*) from pg_namespace where nspname = 'capmark'").fetchone()[0] == 0


def test_the_table_covers_at_least_80_inputs():
    assert len(CASES) >= 80
    assert {c.values[0] for c in CASES} == {"run", "stored", "other"}


def _strict_json(text: str):
    def refuse(token: str):
        raise AssertionError(f"{token} in JSON output")
    return json.loads(text, parse_constant=refuse)


def test_report_json_of_a_run_stored_with_a_non_finite_rate_is_valid_json(stored_run, tmp_path, capsys, monkeypatch):
    """Runs stored before the rate was checked hold NaN in their spec: the JSON output says null, not bare NaN."""
    results, run_id = stored_run
    copy = tmp_path / run_id
    shutil.copytree(results / run_id, copy)
    db = sqlite3.connect(copy / "results.sqlite")
    spec = json.loads(db.execute("select spec from run").fetchone()[0])
    db.execute("update run set spec = ?", (json.dumps({**spec, "rate": float("nan"), "think_s": float("inf")}),))
    db.commit()
    db.close()
    code, out, err = invoke(["report", str(copy), "--format", "json"], capsys, monkeypatch)
    assert code == 0, err
    doc = _strict_json(out)
    assert doc["run"]["spec"]["rate"] is None and doc["run"]["spec"]["think_s"] is None
    assert doc["run"]["id"] == run_id


def test_solve_prints_an_undefined_figure_as_null(tmp_path, capsys, monkeypatch):
    """Equal throughputs at every concurrency (a fully serialized system) fit sigma = 1, but leave R^2 (and the
    standard errors) undefined: they print as null, and the rest as numbers."""
    case = tmp_path / "serial.json"
    case.write_text(json.dumps({"kind": "usl-fit", "model": {"concurrency": [1, 2, 4, 8],
                                                             "throughput": [100, 100, 100, 100]}}))
    code, out, err = invoke(["solve", str(case)], capsys, monkeypatch)
    assert code == 0, err
    doc = _strict_json(out)
    assert doc["r_squared"] is None
    assert doc["sigma"] == pytest.approx(1.0, abs=1e-6) and doc["lambda"] == pytest.approx(100.0, rel=1e-6)


def test_report_of_a_run_in_a_folder_named_like_markup(stored_run, tmp_path, capsys, monkeypatch):
    """User text (here the folder path) is printed as text: '[/x]' is not a closing markup tag."""
    results, run_id = stored_run
    folder = tmp_path / "[" / "x]" / run_id  # the path reads .../[/x]/<run>
    shutil.copytree(results / run_id, folder)
    code, out, err = invoke(["report", str(folder)], capsys, monkeypatch)
    assert code == 0, err
    assert f"[/x]/{run_id}" in out.replace("\n", "")


def test_report_writes_nothing_to_stderr(stored_run, tmp_path):
    """The charts of a report add no matplotlib warning to stderr, even where its cache folder is not writable."""
    results, run_id = stored_run
    env = {**os.environ, "MPLCONFIGDIR": "/proc/capmark-no-such-folder",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-m", "capmark.cli", "report", run_id, "--results-dir", str(results)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_help_shows_percent_signs_once(capsys, monkeypatch):
    code, out, _ = invoke(["whatif", "--help"], capsys, monkeypatch)
    assert code == 0
    assert "%%" not in out and "50 % faster" in " ".join(out.split())


def test_scenario_names_are_printed_as_text():
    """A scenario named '[/x]' (or '[bold]') shows as written in the what-if table."""
    from rich.console import Console

    from capmark.analysis.document import TestAnswer
    from capmark.analysis.planning import WhatIf
    from capmark.report.planning import print_whatif

    prediction = {"saturated": False, "throughput": 100.0, "response_time_s": 0.01, "p95_s": 0.02, "stretch": 1.0,
                  "headroom": 0.5, "bottleneck": "CPU", "utilizations": {"CPU": 0.5}, "model": "closed MVA"}
    doc = WhatIf(unit="query", platform={}, model=[1], baseline={"jobs": 1, "throughput": 100.0}, converged=True,
                 unconverged_scenarios=[],
                 scenarios=[{"name": name, "prediction": prediction, "change_vs_baseline_pct": {}}
                            for name in ("Baseline", "[/x]", "[bold]loud")])
    console = Console(file=io.StringIO(), width=200)
    print_whatif(TestAnswer(workload="srv-query1", ordinal=1, answer=doc), console)
    text = console.file.getvalue()
    assert "[/x]" in text and "[bold]loud" in text


def test_knee_phrase():
    from capmark.report.planning import knee_phrase

    rule = "response time >= 2 x its one-job value"
    assert knee_phrase({"knee_jobs": None, "knee_rule": rule}) == f"knee ({rule}) not reached"
    assert knee_phrase({"knee_jobs": 8, "knee_rule": rule}) == f"knee ({rule}) at 8 jobs"


# Parameters that take no value of their own, so no malformed value exists for them: a flag is either given or not.
# Misplaced flags (a flag that needs another option) are cases of their own where they exist.
def _command_parameters() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every command's options and arguments, read from the real command line: {command: {name: aliases}}, where a
    flag's entry is empty (it has no value to get wrong)."""
    import typer.main

    found: dict[str, dict[str, tuple[str, ...]]] = {}

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        params: dict[str, tuple[str, ...]] = {}
        for p in command.params:
            if p.param_type_name == "option":
                params[p.opts[0]] = () if p.is_flag else tuple(p.opts + p.secondary_opts)
            else:
                params[p.name.upper()] = ("<positional>",)
        found[" ".join(path)] = params

    walk(typer.main.get_command(cli.app), [])
    return found


def _case_command(case) -> tuple[str, list[str]]:
    kind, args, _ = case.values
    if kind == "run":
        return "run", list(args)
    words = list(args)
    if words and words[0] == "db":
        return " ".join(words[:2]), words[2:]
    return words[0], words[1:]


def _covered(params: dict[str, tuple[str, ...]], args: list[str]) -> set[str]:
    """The parameters a case's arguments give a value to: options by any of their names (--opt VALUE or --opt=VALUE),
    arguments by position."""
    by_alias = {alias: name for name, aliases in params.items() for alias in aliases if alias != "<positional>"}
    flags = {name for name, aliases in params.items() if not aliases}
    positional = [name for name, aliases in params.items() if aliases == ("<positional>",)]
    covered: set[str] = set()
    words = iter(args)
    for word in words:
        option = word.split("=", 1)[0]
        if option in by_alias:
            covered.add(by_alias[option])
            if "=" not in word:
                next(words, None)
        elif option in flags or word.startswith("-"):
            continue
        elif positional:
            covered.add(positional[0])
            if len(positional) > 1:  # the last argument of a command takes all the remaining words
                positional.pop(0)
    return covered


def test_every_option_of_every_command_has_a_malformed_value_case():
    """A new option (or command) without a bad-input case fails here: each one needs at least one malformed value
    in CASES that the command answers with one sentence."""
    commands = _command_parameters()
    covered: dict[str, set[str]] = {name: set() for name in commands}
    for case in CASES:
        command, args = _case_command(case)
        if command in commands:
            covered[command] |= _covered(commands[command], args)
    for case in OBSERVATION_CASES:  # the commands that take an observation: their own table, on a stored one
        command, *args = case.values[0]
        if command in commands:
            covered[command] |= _covered(commands[command], args)
    missing = sorted(f"{command} {name}" for command, params in commands.items()
                     for name, aliases in params.items() if aliases and name not in covered[command])
    assert not missing, f"options and arguments with no malformed-value case: {', '.join(missing)}"
