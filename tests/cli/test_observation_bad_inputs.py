"""Planning from an observation: every bad option or file gets one sentence and exit code 2, and stores nothing.

A table of malformed inputs to baseline, whatif, size, report and compare on an observation (and the options of the
other kind: an observation's given with a run, a run's with an observation), each run through the real command-line
entry point. For each: exit code 2, one line on stderr that is one sentence, nothing on stdout, and the results
folder unchanged (no report.html written into the observation). No database: the observation is the stored fixture
tests/fixtures/observation-production, the run tests/fixtures/run-quick.sqlite.gz.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest
from commandline import assert_one_sentence, invoke

from capmark import cli

FIXTURES = Path(__file__).parent.parent / "fixtures"
OBS = "obs-production"
SHORT = "obs-short"  # the same observation cut to its first intervals: too short for a peak window
SHORT_INTERVALS = 6  # fewer than the 10 a peak window needs
RUN = "20261122-000000-f1x7"

FILES: dict[str, str] = {
    "bad.toml": "[[workload]\nname = 'x'\n",
    "overlap.toml": '[[workload]]\nname = "all"\napplication = "*"\n[[workload]]\nname = "orders"\n'
                    'application = "orders"\n',
    "regex.toml": '[[workload]]\nname = "r"\nstatement = "select ("\n',
    "reserved.toml": '[[workload]]\nname = "SYSTEM"\nuser = "postgres"\n',
    "cidr.toml": '[[workload]]\nname = "net"\nclient = "10.0.0.0/33"\n',
    "unknown-key.toml": '[[workload]]\nname = "x"\nhost = "a"\n',
    "no-rule.toml": '[[workload]]\nname = "x"\n',
    "twice.toml": '[[workload]]\nname = "x"\nuser = "a"\n[[workload]]\nname = "x"\nuser = "b"\n',
    "unit.toml": '[[workload]]\nname = "x"\nuser = "a"\nunit = "rows"\n',
    "empty.toml": "",
}


def case(*args: str, word: str) -> pytest.param:
    return pytest.param(list(args), word, id=" ".join(args)[:90])


CASES = [
    # which stored thing
    case("baseline", "no-such-observation", word="no capmark observation"),
    case("baseline", RUN, word="measured run"),
    case("baseline", "--results-dir", "{EMPTY}", word="no observation"),
    case("demands", OBS, word="observation"),
    case("diagnose", OBS, word="observation"),
    case("calibrate", OBS, word="observation"),
    case("compare", OBS, RUN, word="not one of each"),
    case("compare", RUN, OBS, word="not one of each"),
    case("compare", OBS, OBS, OBS, word="two observations"),
    # the workloads file
    case("baseline", OBS, "--workloads", "{FILE:missing.toml}", word="workloads file"),
    case("baseline", OBS, "--workloads", "{FILE:bad.toml}", word="TOML"),
    case("baseline", OBS, "--workloads", "{FILE:overlap.toml}", word="never match"),
    case("baseline", OBS, "--workloads", "{FILE:regex.toml}", word="regular expression"),
    case("baseline", OBS, "--workloads", "{FILE:reserved.toml}", word="reserved"),
    case("baseline", OBS, "--workloads", "{FILE:cidr.toml}", word="CIDR"),
    case("baseline", OBS, "--workloads", "{FILE:unknown-key.toml}", word="unknown key"),
    case("baseline", OBS, "--workloads", "{FILE:no-rule.toml}", word="no rule"),
    case("baseline", OBS, "--workloads", "{FILE:twice.toml}", word="twice"),
    case("baseline", OBS, "--workloads", "{FILE:unit.toml}", word="unit"),
    case("baseline", OBS, "--workloads", "{FILE:empty.toml}", word="defines no workload"),
    case("baseline", OBS, "--workloads", "{FILE:overlap.toml}", "--group-by", "user", word="not both"),
    case("baseline", OBS, "--group-by", "host", word="--group-by"),
    # the peak
    case("baseline", OBS, "--peak", "yesterday", word="--peak"),
    case("baseline", OBS, "--peak", "2020-01-01T10:00/11:00", word="not inside the observation"),
    case("baseline", OBS, "--peak", "2026-11-26T10:00/09:00", word="before it starts"),
    case("baseline", OBS, "--peak", "{PEAK:3}", word="fewer than"),
    case("baseline", OBS, "--peak", "2026-11-26T00:24/00:25", "--peak-by", "cpu", word="--peak alone"),
    case("baseline", OBS, "--peak-by", "memory", word="--peak-by"),
    case("baseline", OBS, "--peak-length", "0", word="--peak-length"),
    case("baseline", OBS, "--peak-length", "soon", word="duration"),
    case("baseline", OBS, "--estimator", "magic", word="--estimator"),
    case("baseline", OBS, "--unattributed", "spread", word="--unattributed"),
    case("baseline", OBS, "--format", "xml", word="--format"),
    case("whatif", SHORT, word="fewer than the 10"),
    case("baseline", SHORT, word="fewer than the 10"),
    # what-if
    case("whatif", OBS, "--growth", "20", word="--growth"),
    case("whatif", OBS, "--growth", "20%x0", word="periods"),
    case("whatif", OBS, "--growth", "-100%", word="above -100"),
    case("whatif", OBS, "--growth", "nobody=20%", word="no modelled workload"),
    case("whatif", OBS, "--growth", "20%x3", "--growth", "10%x2", word="twice"),
    case("whatif", OBS, "--cpus", "0", word="--cpus"),
    case("whatif", OBS, "--cpus", "100000", word="--cpus"),
    case("whatif", OBS, "--cpu-speed", "0", word="--cpu-speed"),
    case("whatif", OBS, "--cpu-speed", "nan", word="--cpu-speed"),
    case("whatif", OBS, "--disk-speed", "-1", word="--disk-speed"),
    case("whatif", OBS, "--disk-speed", "1000", word="--disk-speed"),
    case("whatif", OBS, "--move", "nobody", word="no modelled workload"),
    case("whatif", OBS, "--move", "orders", "--move", "orders", word="twice"),
    case("whatif", OBS, "--sla", "orders<5", word="--sla"),
    case("whatif", OBS, "--sla", "orders:p95<0ms", word="positive"),
    case("whatif", OBS, "--sla", "nobody:p95<5ms", word="no modelled workload"),
    case("whatif", OBS, "--workloads", "{FILE:overlap.toml}", word="never match"),
    case("whatif", OBS, "--group-by", "db", word="--group-by"),
    case("whatif", OBS, "--peak", "now", word="--peak"),
    case("whatif", OBS, "--peak-by", "io", word="--peak-by"),
    case("whatif", OBS, "--peak-length", "-5s", word="--peak-length"),
    case("whatif", OBS, "--estimator", "guess", word="--estimator"),
    case("whatif", OBS, "--unattributed", "Load", word="--unattributed"),
    case("whatif", RUN, "--unattributed", "load", word="observation"),
    case("whatif", OBS, "--jobs", "3", word="measured run"),
    case("whatif", OBS, "--save", word="measured run"),
    case("whatif", OBS, "--solver", "sim", word="measured run"),
    case("whatif", RUN, "--move", "orders", word="observation"),
    case("whatif", RUN, "--sla", "orders:p95<5ms", word="observation"),
    case("whatif", RUN, "--peak-by", "cpu", word="observation"),
    case("whatif", RUN, "--growth", "20%", "--growth", "10%", word="one --growth"),
    # sizing
    case("size", OBS, "--growth", "lots", word="--growth"),
    case("size", OBS, "--growth", "nobody=5%x2", word="no modelled workload"),
    case("size", OBS, "--sla", "p95<5ms", word="--sla"),
    case("size", OBS, "--sla", "nobody:mean<5ms", word="no modelled workload"),
    case("size", OBS, "--target-tps", "500", word="measured run"),
    case("size", OBS, "--cores", "4", word="measured run"),
    case("size", OBS, "--workloads", "{FILE:regex.toml}", word="regular expression"),
    case("size", OBS, "--group-by", "x", word="--group-by"),
    case("size", OBS, "--peak", "x/y", word="--peak"),
    case("size", OBS, "--peak-by", "x", word="--peak-by"),
    case("size", OBS, "--peak-length", "1 fortnight", word="duration"),
    case("size", OBS, "--estimator", "x", word="--estimator"),
    case("size", OBS, "--unattributed", "", word="--unattributed"),
    case("size", RUN, "--growth", "orders=10%", word="observation"),
    case("size", RUN, "--sla", "p95<5ms", "--sla", "p99<9ms", word="one --sla"),
    # report
    case("report", OBS, "--growth", "20%y3", word="--growth"),
    case("report", OBS, "--sla", "orders:p50<5ms", word="--sla"),
    case("report", OBS, "--workloads", "{FILE:cidr.toml}", word="CIDR"),
    case("report", OBS, "--group-by", "x", word="--group-by"),
    case("report", OBS, "--peak", "2020-01-01T10:00/11:00", word="not inside"),
    case("report", OBS, "--peak-by", "x", word="--peak-by"),
    case("report", OBS, "--peak-length", "x", word="duration"),
    case("report", OBS, "--estimator", "x", word="--estimator"),
    case("report", OBS, "--unattributed", "x", word="--unattributed"),
    case("report", RUN, "--peak-by", "cpu", word="observation"),
    case("report", RUN, "--growth", "20%x3", word="observation"),
    # compare
    case("compare", OBS, OBS, "--format", "html", word="measured run"),
    case("compare", OBS, OBS, "--fail-on-regression", "5", word="measured run"),
    case("compare", OBS, OBS, "--workloads", "{FILE:twice.toml}", word="twice"),
    case("compare", OBS, OBS, "--group-by", "x", word="--group-by"),
    case("compare", OBS, OBS, "--peak-by", "x", word="--peak-by"),
    case("compare", OBS, OBS, "--peak-length", "x", word="duration"),
    case("compare", OBS, OBS, "--estimator", "x", word="--estimator"),
    case("compare", OBS, OBS, "--unattributed", "x", word="--unattributed"),
    case("compare", RUN, RUN, "--peak-by", "cpu", word="observation"),
]

# The options planning from an observation added to each command; each needs a case above.
OBSERVATION_OPTIONS = {
    "baseline": {"OBS", "--workloads", "--group-by", "--peak", "--peak-by", "--peak-length", "--estimator",
                 "--unattributed", "--format", "--results-dir"},
    "whatif": {"--growth", "--cpus", "--cpu-speed", "--disk-speed", "--move", "--sla", "--workloads", "--group-by",
               "--peak", "--peak-by", "--peak-length", "--estimator", "--unattributed"},
    "size": {"--growth", "--sla", "--workloads", "--group-by", "--peak", "--peak-by", "--peak-length", "--estimator",
             "--unattributed"},
    "report": {"--growth", "--sla", "--workloads", "--group-by", "--peak", "--peak-by", "--peak-length",
               "--estimator", "--unattributed"},
    "compare": {"--workloads", "--group-by", "--peak-by", "--peak-length", "--estimator", "--unattributed"},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with the observation, a shortened copy of it and a run."""
    folder = tmp_path_factory.mktemp("results")
    shutil.copytree(FIXTURES / "observation-production", folder / OBS, ignore=shutil.ignore_patterns("*.py", "*.md"))
    shutil.copytree(folder / OBS, folder / SHORT)
    db = sqlite3.connect(folder / SHORT / "results.sqlite")
    with db:
        db.execute("delete from interval where ordinal > (select min(ordinal) from interval) + ?",
                   (SHORT_INTERVALS - 1,))
    db.close()
    (folder / RUN).mkdir()
    (folder / RUN / "results.sqlite").write_bytes(gzip.decompress((FIXTURES / "run-quick.sqlite.gz").read_bytes()))
    (folder / "empty").mkdir()
    for name, text in FILES.items():
        (folder.parent / name).write_text(text)
    return folder


def _peak_of(results: Path, intervals: int) -> str:
    """A window over the observation's first few intervals, in local time as --peak takes it."""
    from datetime import datetime

    db = sqlite3.connect(results / OBS / "results.sqlite")
    try:
        import json
        import zlib

        rows = [json.loads(zlib.decompress(d)) for (d,) in db.execute("select data from interval order by ordinal")]
    finally:
        db.close()
    start, end = rows[1]["start"], rows[intervals]["end"]
    return (f"{datetime.fromtimestamp(start).isoformat(timespec='seconds')}/"
            f"{datetime.fromtimestamp(end).isoformat(timespec='seconds')}")


def _arguments(args: list[str], results: Path) -> list[str]:
    out = []
    for a in args:
        if a.startswith("{FILE:"):
            a = str(results.parent / a[6:-1])
        elif a == "{EMPTY}":
            a = str(results / "empty")
        elif a.startswith("{PEAK:"):
            a = _peak_of(results, int(a[6:-1]))
        out.append(a)
    if "--results-dir" not in out:
        out += ["--results-dir", str(results)]
    return out


def _tree(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in folder.rglob("*")}


@pytest.mark.parametrize("args,word", CASES)
def test_bad_input(args, word, results, capsys, monkeypatch):
    before = _tree(results)
    code, out, err = invoke(_arguments(args, results), capsys, monkeypatch)
    assert_one_sentence(code, out, err, word)
    assert _tree(results) == before


def test_every_observation_option_has_a_bad_value_case():
    """An option added to an observation's command without a case above fails here."""
    import typer.main

    group = typer.main.get_command(cli.app)
    for command, options in OBSERVATION_OPTIONS.items():
        params = {p.opts[0] if p.param_type_name == "option" else p.metavar or p.name.upper(): p
                  for p in group.commands[command].params}  # type: ignore[attr-defined]
        assert options <= set(params), f"{command}: {sorted(options - set(params))} not options any more"
        covered = {word.split("=")[0] for c in CASES if c.values[0][0] == command for word in c.values[0][1:]}
        if command == "baseline":
            covered.add("OBS")  # the positional: the cases naming a missing observation or a run
        assert options <= covered, f"{command}: no bad-value case for {sorted(options - covered)}"
