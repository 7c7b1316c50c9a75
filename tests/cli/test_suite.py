from pathlib import Path

import pytest
from liveruns import run_without_report

from capmark import api
from capmark.config import RunSpec
from capmark.errors import CapmarkError
from capmark.suite import ScriptSettings, Stepping, TestSettings, from_file, settings_of

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


def given(jobs: list[int], warmup_s: float, duration_s: float, mode: str = "server", max_jobs: int | None = None,
          allow_shell: bool = False) -> TestSettings:
    """What the command line gives the tests of a suite file."""
    return TestSettings(Stepping(tuple(jobs), max_jobs=max_jobs), warmup_s, duration_s, mode,
                        script=ScriptSettings(allow_shell=allow_shell))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_suite_file_sets_each_test(tmp_path):
    plans = from_file(write(tmp_path, SUITE), given([1, 2, 4], 5.0, 15.0))
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
        from_file(write(tmp_path, text), given([1], 1.0, 1.0))


@pytest.mark.db
def test_suite_file_run(embedded_dsn, tmp_path):
    run = run_without_report(RunSpec(suite_file=write(tmp_path, SUITE), dsn=embedded_dsn, results_dir=tmp_path / "r"))
    light, fibo = run.tests
    assert light.mode == "client" and [s.jobs for s in light.steps] == [1]
    assert fibo.mode == "server" and [s.jobs for s in fibo.steps] == [1, 2]
    assert light.steps[0].round_trips >= light.steps[0].units
    assert run.spec["expected_s"] > 0


def test_suite_file_repeats_and_steps_automatically(tmp_path):
    text = ('[defaults]\nrepeat = 2\nduration = "1s"\nwarmup = "0s"\n[[test]]\nworkload = "srv-query1"\njobs = [1, 4]\n'
            '[[test]]\nworkload = "pls-fibo"\njobs = "auto"\nrepeat = 1\n')
    fixed, auto = from_file(write(tmp_path, text), given([1, 2], 5.0, 15.0, max_jobs=12))
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
        from_file(path, given([1], 0.0, 1.0))
    assert "--allow-shell" in str(err.value) and "shell.sql line 1" in str(err.value), str(err.value)
    with pytest.raises(CapmarkError, match="--allow-shell"):
        api.plan_tests(RunSpec(suite_file=path))
    (plan,) = from_file(path, given([1], 0.0, 1.0, allow_shell=True))
    assert plan.workload.recipe.options.allow_shell
    (plan,) = api.plan_tests(RunSpec(suite_file=path, allow_shell=True), cores=1)
    assert plan.workload.recipe.options.allow_shell


def test_a_suite_test_may_keep_its_scripts_from_shell_commands(tmp_path):
    path = _shell_suite(tmp_path, SHELL_SUITE.replace("true", "false"))
    with pytest.raises(CapmarkError, match="allow_shell = false"):
        from_file(path, given([1], 0.0, 1.0, allow_shell=True))
    path = _shell_suite(tmp_path, SHELL_SUITE.replace("allow_shell = true\n", ""))
    assert from_file(path, given([1], 0.0, 1.0, allow_shell=True))[0].workload.recipe.options.allow_shell


def test_allow_shell_with_a_suite_that_has_no_script_is_refused(tmp_path):
    with pytest.raises(CapmarkError, match="--allow-shell"):
        from_file(write(tmp_path, SUITE), given([1], 0.0, 1.0, allow_shell=True))


def test_the_command_line_and_a_suite_file_give_the_same_settings(tmp_path):
    spec = RunSpec(workloads=["tp-light"], jobs=[1, 2], warmup_s=0.0, duration_s=1.0, repeat=2, mode="client",
                   think_s=0.01, params={"update_pct": "50"})
    (from_options,) = api.plan_tests(spec)
    text = ('[defaults]\njobs = [1, 2]\nwarmup = "0s"\nduration = "1s"\nrepeat = 2\nmode = "client"\nthink = "10ms"\n'
            '[[test]]\nworkload = "tp-light"\nparams = { update_pct = 50 }\n')
    (from_suite,) = api.plan_tests(RunSpec(suite_file=write(tmp_path, text)))
    assert from_options.settings == from_suite.settings == settings_of(spec)
    assert from_options.params == from_suite.params


def test_default_job_counts_follow_the_database_hosts_cores_once_known(tmp_path):
    path = write(tmp_path, '[[test]]\nworkload = "srv-query1"\n[[test]]\nworkload = "pls-fibo"\njobs = [1, 3]\n'
                           '[[test]]\nworkload = "srv-query1"\njobs = "auto"\n')
    default, listed, auto = api.plan_tests(RunSpec(suite_file=path))
    path.unlink()  # planned once: the host's cores need no second reading of the suite file
    assert default.follows_cores and auto.follows_cores and not listed.follows_cores
    assert [p.on_host(3).jobs for p in (default, listed)] == [[1, 2, 4, 6], [1, 3]]
    assert (auto.on_host(3).auto_max, auto.on_host(3).jobs) == (12, [1, 2, 4, 8, 12])
    assert default.on_host(1).expected_s == pytest.approx(2 * (5 + 15 + 1.5))
    (bounded,) = api.plan_tests(RunSpec(workloads=["srv-query1"], jobs_auto=True, max_jobs=6))
    assert not bounded.follows_cores and bounded.on_host(64).auto_max == 6
    (soak,) = api.plan_tests(RunSpec(workloads=["srv-query1"], soak_s=60.0))
    assert soak.follows_cores and soak.on_host(6).jobs == [6] and soak.duration_s == 60.0


def test_a_script_test_from_the_command_line_keeps_its_chosen_seed(tmp_path):
    script = tmp_path / "one.sql"
    script.write_text("SELECT 1;\n")
    spec = RunSpec(scripts=[str(script)], defines=["a=1"], max_tries=3, jobs=[2])
    (plan,) = api.plan_tests(spec)
    assert spec.seed is not None and plan.mode == "client" and plan.jobs == [2]
    options = plan.workload.recipe.options
    assert (options.seed, options.defines, options.max_tries) == (spec.seed, (("a", "1"),), 3)
