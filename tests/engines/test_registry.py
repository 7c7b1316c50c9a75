from pathlib import Path

import pytest

from capmark.engines import registry as engines
from capmark.engines.base import RunsProcedures, WatchesLocks, procedures_of
from capmark.errors import CapmarkError
from capmark.workloads import registry
from capmark.workloads.base import ParamSpec


def test_every_workload_declares_what_the_report_needs():
    assert len(registry.WORKLOADS) >= 35
    for w in registry.WORKLOADS.values():
        assert w.unit and w.throughput_label and w.txn_types and "elapsed_s" in w.kpms
        assert f"capmark.{w.procedure}(" in w.procedure_sql
        assert "{rec" not in w.procedure_sql and "{err}" not in w.procedure_sql  # every marker replaced
        assert not w.client_statements or w.client_side  # statements prepared for a unit that never runs
        if w.client_side and not w.client_statements:  # only a script prepares its own statements
            assert w.client_stats is not None and w.family in ("pgbench", "SCRIPT"), w.name


def test_suites():
    assert [w.name for w in registry.select(None)] == ["srv-mixed", "tp-mixed1", "wal-lat1"]
    full = {w.name for w in registry.select(["full"])}
    assert full == set(registry.WORKLOADS) - registry.DIAGNOSTIC  # diagnostic reproductions are not benchmarks
    assert sorted(registry.DIAGNOSTIC) == ["diag-hot", "diag-serial"]
    assert [w.name for w in registry.select(["quick", "pls-fibo"])][-1] == "pls-fibo"


def test_unknown_workload_names_the_fix():
    with pytest.raises(CapmarkError, match="capmark list"):
        registry.get("nope")


def test_params_are_checked():
    ws = registry.select(["tp-light"])
    assert registry.check_params(ws, {})["tp-light"]["update_pct"] == 20
    assert registry.check_params(ws, {"update_pct": "100"})["tp-light"]["update_pct"] == 100
    with pytest.raises(CapmarkError, match="between 0 and 100"):
        registry.check_params(ws, {"update_pct": "101"})
    with pytest.raises(CapmarkError, match=r"one of \{0,10,...,100\}"):
        registry.check_params(ws, {"update_pct": "15"})
    with pytest.raises(CapmarkError, match="integer"):
        registry.check_params(ws, {"update_pct": "lots"})
    with pytest.raises(CapmarkError, match="Unknown parameter"):
        registry.check_params(ws, {"rows": "1"})


def test_choice_parameters():
    dl = registry.select(["dl-buffer"])
    assert registry.check_params(dl, {"rows_per_insert": "25"})["dl-buffer"]["rows_per_insert"] == 25
    with pytest.raises(CapmarkError, match="one of"):
        registry.check_params(dl, {"rows_per_insert": "7"})
    pls = registry.select(["pls-add"])
    assert registry.check_params(pls, {"dtype": "numeric"})["pls-add"]["dtype"] == "numeric"
    with pytest.raises(CapmarkError, match="one of"):
        registry.check_params(pls, {"dtype": "text"})  # additions on text are not a thing
    assert ParamSpec("x", 1, "", choices=(1, 2)).allowed() == "{1, 2}"


def test_stress_weights_must_add_up():
    ws = registry.select(["stress-mixed"])
    assert registry.check_params(ws, {})["stress-mixed"]["pct_update"] == 60
    with pytest.raises(CapmarkError, match="add up to 100"):
        registry.check_params(ws, {"pct_query": "50"})


def test_client_mode_needs_a_client_side_workload():
    registry.check_mode(registry.select(["srv-query1", "stress-mixed"]), "client")
    with pytest.raises(CapmarkError, match="server-side only"):
        registry.check_mode(registry.select(["pls-add"]), "client")


def test_an_engine_runs_procedures_exactly_when_it_says_it_runs_workloads_server_side():
    """server_side steers planning (runner, workloads.registry), RunsProcedures the install: an engine whose two
    disagree fails the run after planning, or leaves server-side workloads translated for nothing."""
    for engine in engines.all_engines():
        assert engine.server_side == isinstance(engine, RunsProcedures), engine.name
    assert procedures_of(engines.named("postgresql")) is engines.named("postgresql")
    with pytest.raises(CapmarkError, match=r"^capmark runs MySQL/MariaDB workloads client-side only; drop --mode "
                                           r"server\.$"):
        procedures_of(engines.named("mysql"))


def test_the_overrun_watch_finds_the_lock_methods_it_asks_for_by_name():
    """driver/step.py asks the engine for lock_blockers and cancel_backends by name: a renamed method would leave a
    step stuck on a lock without naming the holder or cancelling the jobs."""
    assert isinstance(engines.named("postgresql"), WatchesLocks)
    step = (Path(__file__).parents[2] / "src/capmark/driver/step.py").read_text()
    assert all(f'"{name}"' in step for name in ("lock_blockers", "cancel_backends"))


@pytest.mark.parametrize("name", ["pgbench-tpcb", "pgbench-select-only", "tpcc"])
def test_postgresql_only_workloads_refuse_another_engine_in_one_sentence(name):
    workload = registry.get(name)
    with pytest.raises(CapmarkError) as refused:
        registry.for_engine(workload, engines.named("mysql"), workload.resolve_params({}))
    text = str(refused.value)
    assert text.startswith(f"{name} cannot run on MySQL/MariaDB: ") and "PostgreSQL" in text
    assert "\n" not in text and text.count(". ") == 1  # the reason, then where to look
    assert registry.for_engine(workload, engines.named("postgresql"), workload.resolve_params({})) is workload
