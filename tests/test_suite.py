from pathlib import Path

import pytest

from capmark import api
from capmark.config import RunSpec
from capmark.errors import CapmarkError
from capmark.suite import from_file

SUITE = """
[defaults]
jobs = [1, 2]
warmup = "0s"
duration = "1s"

[[test]]
workload = "tp-light"
params = { update_pct = 50 }
mode = "client"
jobs = [1]

[[test]]
workload = "pls-fibo"
params = { n = 12 }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_suite_file_sets_each_test(tmp_path):
    plans = from_file(write(tmp_path, SUITE), [1, 2, 4], 5.0, 15.0, "server")
    light, fibo = plans
    assert (light.workload.name, light.mode, light.jobs, light.params["update_pct"]) == ("tp-light", "client", [1], 50)
    assert (fibo.mode, fibo.jobs, fibo.duration_s, fibo.warmup_s, fibo.params["n"]) == ("server", [1, 2], 1.0, 0.0, 12)
    assert fibo.expected_s == pytest.approx(2 * (0 + 1 + 1.5))


@pytest.mark.parametrize("text,words", [
    ("[[test]]\nworkload = 'nope'", "Unknown workload"),
    ("[[test]]\nparams = {}", "has no workload"),
    ("[defaults]\njobs = [1]", "names no tests"),
    ("[[test]]\nworkload = 'tp-light'\nspeed = 3", "unknown key"),
    ("[[test]]\nworkload = 'tp-light'\nparams = { update_pct = 7 }", "one of"),
    ("[[test]]\nworkload = 'pls-add'\nmode = 'client'", "server-side only"),
    ("[[test]\nworkload = 'x'", "not valid TOML"),
])
def test_bad_suite_files(tmp_path, text, words):
    with pytest.raises(CapmarkError, match=words):
        from_file(write(tmp_path, text), [1], 1.0, 1.0, "server")


@pytest.mark.db
def test_suite_file_run(embedded_dsn, tmp_path):
    run = api.run(RunSpec(suite_file=write(tmp_path, SUITE), dsn=embedded_dsn, results_dir=tmp_path / "r"))
    light, fibo = run.tests
    assert light.mode == "client" and [s.jobs for s in light.steps] == [1]
    assert fibo.mode == "server" and [s.jobs for s in fibo.steps] == [1, 2]
    assert light.steps[0].round_trips >= light.steps[0].units
    assert run.spec["expected_s"] > 0


def test_suite_file_repeats_and_steps_automatically(tmp_path):
    text = ('[defaults]\nrepeat = 2\nduration = "1s"\nwarmup = "0s"\n[[test]]\nworkload = "srv-query1"\njobs = [1, 4]\n'
            '[[test]]\nworkload = "pls-fibo"\njobs = "auto"\nrepeat = 1\n')
    fixed, auto = from_file(write(tmp_path, text), [1, 2], 5.0, 15.0, "server", auto_max=12)
    assert fixed.repeat == 2 and fixed.auto_max is None
    assert fixed.order() == [(1, 1), (1, 4), (2, 4), (2, 1)]
    assert fixed.expected_s == pytest.approx(4 * (0 + 1 + 1.5))
    assert auto.repeat == 1 and auto.auto_max == 12 and auto.jobs == [1, 2, 4, 8, 12]
    assert auto.steps == 5 + 2  # the doubling steps and at most one halfway point per bend
    plans = api.plan_tests(RunSpec(workloads=["srv-query1"], jobs_auto=True, repeat=3), cores=2)
    assert plans[0].auto_max == 8 and plans[0].repeat == 3  # 4 x the cores without --max-jobs


SHELL_SUITE = '[[test]]\nscript = "shell.sql"\nallow_shell = true\nduration = "1s"\n'


def _shell_suite(tmp_path: Path, text: str = SHELL_SUITE) -> Path:
    (tmp_path / "shell.sql").write_text("\\shell true\nSELECT 1;\n")
    return write(tmp_path, text)


def test_a_suite_file_cannot_allow_shell_commands_without_the_command_line(tmp_path):
    path = _shell_suite(tmp_path)
    with pytest.raises(CapmarkError) as err:
        from_file(path, [1], 0.0, 1.0, "server")
    assert "--allow-shell" in str(err.value) and "shell.sql line 1" in str(err.value), str(err.value)
    with pytest.raises(CapmarkError, match="--allow-shell"):
        api.plan_tests(RunSpec(suite_file=path))
    (plan,) = from_file(path, [1], 0.0, 1.0, "server", allow_shell=True)
    assert plan.workload.recipe.options.allow_shell
    (plan,) = api.plan_tests(RunSpec(suite_file=path, allow_shell=True), cores=1)
    assert plan.workload.recipe.options.allow_shell


def test_a_suite_test_may_keep_its_scripts_from_shell_commands(tmp_path):
    path = _shell_suite(tmp_path, SHELL_SUITE.replace("true", "false"))
    with pytest.raises(CapmarkError, match="allow_shell = false"):
        from_file(path, [1], 0.0, 1.0, "server", allow_shell=True)
    path = _shell_suite(tmp_path, SHELL_SUITE.replace("allow_shell = true\n", ""))
    assert from_file(path, [1], 0.0, 1.0, "server", allow_shell=True)[0].workload.recipe.options.allow_shell


def test_allow_shell_with_a_suite_that_has_no_script_is_refused(tmp_path):
    with pytest.raises(CapmarkError, match="--allow-shell"):
        from_file(write(tmp_path, SUITE), [1], 0.0, 1.0, "server", allow_shell=True)
