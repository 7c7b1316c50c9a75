"""What capmark reads for a script test before anything runs: script files and their weights, suite and scenario
files (only regular files, and no larger than the documented limit, refused without reading past it), and the
script-only options, which mean nothing without a script."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from capmark.config import MAX_INPUT_FILE_BYTES, RunSpec, read_toml
from capmark.errors import CapmarkError
from capmark.workloads.scripts import MAX_WEIGHT, load_sources

FIFO_WRITER_DELAY_S = 0.5  # a reader that blocked on the FIFO is released by a writer after this


def script(folder: Path, name: str = "ok.sql", text: str = "SELECT 1;\n") -> Path:
    path = folder / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("weight", ["abc", "-1", "1.5", "", "\uff15", str(MAX_WEIGHT + 1)])
def test_a_weight_that_is_not_a_whole_number_in_range_is_called_a_wrong_weight(tmp_path, weight):
    path = script(tmp_path)
    with pytest.raises(CapmarkError) as err:
        load_sources([f"{path}@{weight}"])
    message = str(err.value)
    assert "weight" in message and f"whole number from 0 to {MAX_WEIGHT:,}" in message, message
    assert "does not exist" not in message


def test_a_file_whose_name_holds_an_at_sign_is_read_as_itself(tmp_path):
    odd = script(tmp_path, "mix@fast.sql")
    numbered = script(tmp_path, "v@2")
    sources = load_sources([str(odd), str(numbered), f"{odd}@3"])
    assert [(s.path, s.weight) for s in sources] == [(str(odd), 1), (str(numbered), 1), (str(odd), 3)]


def test_a_missing_script_is_named_as_missing_whatever_follows_its_at_sign(tmp_path):
    with pytest.raises(CapmarkError, match=r"nowhere@abc\.sql does not exist"):
        load_sources([f"{tmp_path}/nowhere@abc.sql"])
    with pytest.raises(CapmarkError, match=r"nowhere\.sql@abc does not exist"):
        load_sources([f"{tmp_path}/nowhere.sql@abc"])


def _release_reader(fifo: Path) -> threading.Thread:
    """A writer that opens the FIFO after a pause, so that a reader blocked on it is released (and fails its test
    rather than hanging it)."""
    def write() -> None:
        time.sleep(FIFO_WRITER_DELAY_S)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader waiting: the FIFO was refused without being opened
            return
        os.close(fd)
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(20)
def test_only_a_regular_file_is_a_script(tmp_path):
    fifo = tmp_path / "fifo.sql"
    os.mkfifo(fifo)
    writer = _release_reader(fifo)
    started = time.monotonic()
    with pytest.raises(CapmarkError, match=r"fifo\.sql is not a regular file"):
        load_sources([str(fifo)])
    assert time.monotonic() - started < FIFO_WRITER_DELAY_S, "the FIFO was opened and waited on"
    writer.join()
    for path, kind in (("/dev/zero", "device"), (str(tmp_path), "folder")):
        with pytest.raises(CapmarkError) as err:
            load_sources([path])
        assert "not a regular file" in str(err.value) and kind in str(err.value), str(err.value)


def test_a_script_over_the_size_limit_is_refused_and_one_at_it_is_read(tmp_path):
    statement = b"SELECT 1;\n"
    at_limit = tmp_path / "at.sql"
    at_limit.write_bytes(statement * (MAX_INPUT_FILE_BYTES // len(statement)))
    assert len(load_sources([str(at_limit)])) == 1
    over = tmp_path / "over.sql"
    over.write_bytes(b" " * (MAX_INPUT_FILE_BYTES - len(statement) + 1) + statement)
    with pytest.raises(CapmarkError) as err:
        load_sources([str(over)])
    assert "over.sql" in str(err.value) and "1 MiB" in str(err.value), str(err.value)


@pytest.mark.timeout(20)
def test_suite_and_scenario_files_are_regular_files_within_the_size_limit(tmp_path):
    fifo = tmp_path / "suite.toml"
    os.mkfifo(fifo)
    writer = _release_reader(fifo)
    with pytest.raises(CapmarkError, match=r"suite file .*suite\.toml is not a regular file"):
        read_toml(fifo, "suite file")
    writer.join()
    with pytest.raises(CapmarkError, match="not a regular file"):
        read_toml(Path("/dev/zero"), "scenario file")
    big = tmp_path / "big.toml"
    big.write_bytes(b'[[test]]\nworkload = "tp-light"\n' + b"#" * MAX_INPUT_FILE_BYTES + b"\n")
    with pytest.raises(CapmarkError, match="1 MiB"):
        read_toml(big, "suite file")


@pytest.mark.parametrize(("option", "changes"), [
    ("--define", {"defines": ["a=1"]}),
    ("--seed", {"seed": 1}),
    ("--query-mode", {"query_mode": "simple"}),
    ("--query-mode", {"query_mode": "prepared"}),
    ("--max-tries", {"max_tries": 3}),
    ("--max-tries", {"max_tries": 1}),
    ("--allow-shell", {"allow_shell": True}),
])
def test_script_only_options_without_a_script_are_refused(option, changes):
    with pytest.raises(CapmarkError) as err:
        RunSpec(workloads=["srv-query1"], **changes).validate()
    assert option in str(err.value) and "--script" in str(err.value), str(err.value)


@pytest.mark.parametrize(("option", "changes"), [
    ("--define", {"defines": ["a=1"]}),
    ("--seed", {"seed": 1}),
    ("--query-mode", {"query_mode": "simple"}),
    ("--max-tries", {"max_tries": 3}),
])
def test_a_suite_sets_the_script_options_of_its_own_tests(tmp_path, option, changes):
    suite = tmp_path / "suite.toml"
    suite.write_text('[[test]]\nscript = "ok.sql"\n')
    with pytest.raises(CapmarkError) as err:
        RunSpec(suite_file=suite, **changes).validate()
    assert option in str(err.value) and "suite file" in str(err.value), str(err.value)


def test_script_options_with_a_script_or_a_suite_are_accepted(tmp_path):
    path = str(script(tmp_path))
    RunSpec(scripts=[path], defines=["a=1"], seed=1, query_mode="simple", max_tries=3, allow_shell=True).validate()
    RunSpec(suite_file=tmp_path / "suite.toml", allow_shell=True).validate()
