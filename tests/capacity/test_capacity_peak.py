"""The peak window: found at its true start, never across a broken interval or a restart, given windows checked."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from capacity.synthetic import build

from capmark.capacity.peak import PeakOptions, find_peak, parse_peak
from capmark.capacity.workloads import WorkloadRules, attribute
from capmark.errors import CapmarkError


def peak(obs, **kw):
    return find_peak(obs, attribute(obs, WorkloadRules()), PeakOptions(**kw))


@pytest.mark.parametrize("by", ["cpu", "disk", "commits"])
def test_the_peak_is_found_at_its_true_start(by):
    obs, _ = build(peak_start=23, peak_len=10)
    p = peak(obs, by=by, length_s=600)
    assert p.ordinals == list(range(23, 33))
    assert p.start == obs.intervals[23].start and p.length_s == 600
    if by == "disk":
        assert p.busiest_device == "sda"


def test_a_window_never_holds_a_broken_interval_or_a_restart():
    obs, _ = build(peak_start=30, peak_len=12, broken=(33,))
    p = peak(obs, length_s=600)
    assert 33 not in p.ordinals and len(p.ordinals) == 10
    obs, _ = build(peak_start=30, peak_len=12, events=((35, "restart"),))
    p = peak(obs, length_s=600)
    assert not (p.ordinals[0] <= 35 <= p.ordinals[-1])
    obs, _ = build(peak_start=30, peak_len=10, events=((35, "reconnected"),))  # a reconnect breaks nothing
    assert peak(obs, length_s=600).ordinals[0] == 30


def test_a_window_holds_at_least_ten_intervals_and_a_short_observation_its_whole_length():
    obs, _ = build(peak_start=30, peak_len=10)
    assert len(peak(obs, length_s=60).ordinals) == 10  # one minute asked: ten intervals at least
    obs, _ = build(intervals=12, peak_start=3, peak_len=4)
    assert len(peak(obs, length_s=3600).ordinals) == 12
    obs, _ = build(intervals=9)
    with pytest.raises(CapmarkError, match="9 usable intervals, fewer than the 10"):
        peak(obs)


def test_steadiness_and_littles_law_inside_the_window():
    obs, _ = build(peak_start=30, peak_len=10)
    rows = {s.name: s for s in peak(obs, length_s=600).steadiness}
    # the builder samples rate x execution time seconds of active sessions (Little's law) per 60 one-second samples
    for name in ("lookup-app", "orders-app", "report-app"):
        assert rows[name].little_ratio == pytest.approx(1, abs=0.02), name
        assert rows[name].rate_cv == pytest.approx(0.11, abs=0.02)  # the builder's +-15 % sine wobble
        assert rows[name].steady


def test_a_given_window():
    obs, _ = build(peak_start=30, peak_len=10)
    start, end = obs.intervals[40].start, obs.intervals[51].end
    p = peak(obs, given=(start, end))
    assert p.by == "given" and p.ordinals == list(range(40, 52))
    late = obs.intervals[-1].end + 7200
    with pytest.raises(CapmarkError, match="is not inside the observation"):
        peak(obs, given=(late, late + 3600))
    broken, _ = build(broken=(45,))
    with pytest.raises(CapmarkError, match="broken interval"):
        peak(broken, given=(start, end))


def test_peak_texts():
    start, end = parse_peak("2026-11-24T10:00/11:00")
    assert datetime.fromtimestamp(start) == datetime(2026, 11, 24, 10, 0)
    assert end - start == 3600
    for text, words in (("10:00", "not a window"), ("yesterday/11:00", "not a date and time"),
                        ("2026-11-24T10:00/09:00", "ends")):
        with pytest.raises(CapmarkError, match=words) as err:
            parse_peak(text)
        assert not re.search(r"\.\s+[A-Z]", str(err.value))
