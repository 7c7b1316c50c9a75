"""The model library reproduces the published cases in ../shared/validation/queueing_cases.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capmark.model import mva, usl
from capmark.model.open import effective_servers, mmm, quick_response_time

CASES_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "validation" / "queueing_cases.json"
CASES = json.loads(CASES_FILE.read_text())["cases"]


def stations_of(model: dict) -> list[mva.Station]:
    out = []
    for s in model["stations"]:
        out.append(mva.Station(s["name"], demand=s.get("demand"), visits=s.get("visits", 1.0),
                               service_time=s.get("service_time"), servers=s.get("servers", 1),
                               service_time_with_n_present=s.get("service_time_with_n_present")))
    return out


def close(actual, expected, rel):
    if isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert a == pytest.approx(e, rel=rel), (actual, expected)
    else:
        assert actual == pytest.approx(expected, rel=rel)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_published_case(case):
    m, expect, rel = case["model"], case["expect"], case["rel_tol"]
    kind, method = case["kind"], case.get("method")
    if kind == "closed":
        stations = stations_of(m)
        solve = mva.schweitzer_mva if method == "schweitzer-amva" else mva.exact_mva
        res = solve(stations, m["population"], m.get("think_time", 0.0))
        got = {"throughput": res.throughput, "response_time": res.response_time, "queue_lengths": res.queue_lengths,
               "utilizations": res.utilizations, "residence_time_per_visit": res.residence_time_per_visit(stations)}
    elif kind == "closed-multiclass":
        res = mva.exact_mva_multiclass([s["demand"] for s in m["stations"]], m["population"], m.get("think_time"))
        got = {"throughput": res.throughput, "queue_lengths": res.queue_lengths}
    elif kind == "open":
        res = mmm(m["arrival_rate"], m["service_rate"], m["servers"])
        got = {"mean_queue_length_waiting": res.mean_queue_length_waiting, "response_time": res.response_time}
    elif kind == "usl-fit":
        f = usl.fit(m["concurrency"], m["throughput"])
        got = {"sigma": f.sigma, "kappa": f.kappa, "lambda": f.lam, "peak_concurrency": f.peak_concurrency,
               "peak_throughput": f.peak_throughput}
    elif kind == "quick-formula":
        got = {"response_time": quick_response_time(m["service_time"], m["arrival_rate"], m["servers"])}
    elif kind == "quick-formula-solve-servers":
        got = {"servers": effective_servers(m["service_time"], m["arrival_rate"], m["response_time"])}
    else:
        pytest.fail(f"case kind {kind} is not handled by capmark.model yet")
    for key, value in expect.items():
        close(got[key], value, rel)
