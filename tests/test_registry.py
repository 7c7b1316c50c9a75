import pytest

from capmark.errors import CapmarkError
from capmark.workloads import registry


def test_default_suite_and_declarations():
    for w in registry.select(None):
        assert w.unit and w.throughput_label and w.kpms
        assert f"capmark.{w.procedure}" in w.procedure_sql
        assert w.client_statements


def test_unknown_workload_names_the_fix():
    with pytest.raises(CapmarkError, match="capmark list"):
        registry.get("nope")


def test_params_are_checked():
    ws = registry.select(["tp-light"])
    assert registry.check_params(ws, {})["tp-light"]["update_pct"] == 20
    assert registry.check_params(ws, {"update_pct": "100"})["tp-light"]["update_pct"] == 100
    with pytest.raises(CapmarkError, match="between 0 and 100"):
        registry.check_params(ws, {"update_pct": "101"})
    with pytest.raises(CapmarkError, match="integer"):
        registry.check_params(ws, {"update_pct": "lots"})
    with pytest.raises(CapmarkError, match="Unknown parameter"):
        registry.check_params(ws, {"rows": "1"})
