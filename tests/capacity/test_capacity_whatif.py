"""What-if and sizing on a baseline model: growth compounding, the threshold and SLAs, hardware changes, moves."""

from __future__ import annotations

import math
import re

import pytest

from capmark.capacity import UTILISATION_THRESHOLD, WhatIfRequest, parse_growth, parse_sla
from capmark.capacity.baseline import BaselineModel, Station
from capmark.capacity.sizing import size_model as size
from capmark.capacity.whatif import whatif_model as whatif
from capmark.errors import CapmarkError


def base(rates: dict[str, float], cpu: dict[str, float], cores: int = 1, disk: dict[str, float] | None = None,
         residual: dict[str, float] | None = None, background: float = 0.0) -> BaselineModel:
    """A hand-made baseline model: one CPU station (and a disk), known rates and demands."""
    stations = [Station(name="cpu", kind="cpu", servers=cores, background_busy=background, demands=cpu)]
    if disk:
        stations.append(Station(name="sda", kind="device", servers=1, background_busy=0.0, demands=disk))
    return BaselineModel(estimator="measured", rates=rates, stations=stations,
                         residual_s=residual or dict.fromkeys(rates, 0.0), measured_response_s=dict.fromkeys(rates, 0.0))


def test_growth_compounds_per_period():
    doc = base({"a": 60.0}, {"a": 0.01})  # one core at 60 %
    w = whatif(doc, WhatIfRequest(growth=(parse_growth("20%x3"),)))
    assert [s.name for s in w.scenarios] == ["baseline", "+20 %", "+44 %", "+72.8 %"]
    assert [s.workloads[0].rate for s in w.scenarios] == pytest.approx([60, 72, 86.4, 103.68], rel=1e-12)
    # M/M/1: R = D / (1 - rho)
    assert w.scenarios[2].workloads[0].response_s == pytest.approx(0.01 / (1 - 0.864), rel=1e-12)
    assert w.scenarios[2].over_threshold == ["cpu"] and not w.scenarios[1].over_threshold
    assert w.first_breaking == "+44 %" and w.runs_out_in_period == 2
    assert math.isinf(w.scenarios[3].workloads[0].response_s)  # 103.68 % of one core: saturated


def test_growth_per_workload_and_hardware_changes():
    doc = base({"orders": 40.0, "reports": 10.0}, {"orders": 0.01, "reports": 0.02}, cores=1,
               disk={"orders": 0.005, "reports": 0.0})
    w = whatif(doc, WhatIfRequest(growth=(parse_growth("orders=30%x2"),), cpus=2, disk_speed=2.0))
    names = [s.name for s in w.scenarios]
    assert names == ["baseline", "2 cores, disk speed x2", "period 1", "period 2"]
    last = {r.name: r for r in w.scenarios[-1].workloads}
    assert last["orders"].rate == pytest.approx(40 * 1.69) and last["reports"].rate == pytest.approx(10)
    assert w.scenarios[-1].utilisation["cpu"] == pytest.approx((40 * 1.69 * 0.01 + 10 * 0.02) / 2)
    assert w.scenarios[-1].utilisation["sda"] == pytest.approx(40 * 1.69 * 0.0025)


def test_a_moved_workload_leaves_the_host():
    doc = base({"orders": 40.0, "reports": 10.0}, {"orders": 0.01, "reports": 0.02})
    w = whatif(doc, WhatIfRequest(move=("reports",)))
    assert w.scenarios[1].utilisation["cpu"] == pytest.approx(0.4)
    assert [r.name for r in w.scenarios[1].workloads] == ["orders"]


def test_an_sla_on_p95_breaks_by_the_exponential_assumption():
    doc = base({"a": 50.0}, {"a": 0.01})  # R = 20 ms, p95 = 20 ms x ln 20 = 59.9 ms
    ok = whatif(doc, WhatIfRequest(slas=(parse_sla("a:p95<60ms"),), growth=(parse_growth("1%"),)))
    assert not ok.scenarios[0].breaks and ok.scenarios[0].workloads[0].p95_s == pytest.approx(0.02 * math.log(20))
    assert ok.scenarios[1].workloads[0].slas_broken == ["a:p95<60ms"]  # 50.5/s: R = 20.2 ms, p95 = 60.5 ms


def test_sizing_finds_the_period_capacity_runs_out_and_the_least_change():
    doc = base({"a": 50.0}, {"a": 0.01})  # one core at 50 %: 60, 72, 86.4 %
    s = size(doc, (parse_growth("20%x3"),))
    assert s.runs_out_in_period == 3 and not s.fits
    changes = {c.what: c.value for c in s.changes}
    assert changes["cpus"] == 2
    assert changes["cpu_speed"] == pytest.approx(0.864 / UTILISATION_THRESHOLD, abs=0.011)  # searched to 1 %
    assert "disk_speed" not in changes  # no disk in this model: no disk speed helps


def one_sentence(message: str) -> bool:
    return message.endswith(".") and not re.search(r"\.\s+[A-Z]", message) and "\n" not in message


@pytest.mark.parametrize("call, words", [
    (lambda: parse_growth("20"), "is not a growth"),
    (lambda: parse_growth("20%x0"), "periods must be 1 to"),
    (lambda: parse_growth("-100%"), "above -100 %"),
    (lambda: parse_sla("p95<50ms"), "is not an SLA"),
    (lambda: parse_sla("orders:p95<0ms"), "positive time limit"),
    (lambda: whatif(base({"a": 1.0}, {"a": 0.01}), WhatIfRequest(move=("b",))), "no modelled workload is named 'b'"),
    (lambda: whatif(base({"a": 1.0}, {"a": 0.01}), WhatIfRequest(cpus=0)), "--cpus must be 1 to"),
    (lambda: whatif(base({"a": 1.0}, {"a": 0.01}), WhatIfRequest(cpu_speed=0)), "--cpu-speed must be a factor"),
    (lambda: whatif(base({"a": 1.0}, {"a": 0.01}), WhatIfRequest(growth=(parse_growth("1%"), parse_growth("2%")))),
     "same workloads twice"),
    (lambda: size(base({"a": 1.0}, {"a": 0.01}), ()), "needs a growth"),
])
def test_bad_what_if_input_gets_one_sentence(call, words):
    with pytest.raises(CapmarkError) as err:
        call()
    assert words in str(err.value) and one_sentence(str(err.value))
