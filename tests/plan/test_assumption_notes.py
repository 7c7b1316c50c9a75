"""The model says where the measured steps show one of its assumptions failing: CPU per unit rising beyond the
cores, lock waits growing, a device with no room left. Each check on a stored run's steps, changed in the one way
that breaks the assumption (and left alone, where it must stay silent)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from storedruns import unpack

from capmark.histogram import LatencyHistogram
from capmark.plan import calibrate, dbhost
from capmark.results import WaitClass
from capmark.store import load_run


@pytest.fixture(scope="module")
def lookup(tmp_path_factory):
    """srv-query1 at 1 and 2 jobs on a 2-core host (tests/fixtures/README.md: run-format-1)."""
    results = tmp_path_factory.mktemp("runs")
    (run_id,) = unpack(results, "run-format-1")
    run = load_run(results / run_id)
    return run, next(t for t in run.tests if t.workload == "srv-query1")


def _at_four_jobs(step, *, units_factor=1.0, lock_share=None, disk_busy=None):
    """The 2-job step as if measured at 4 jobs: fewer units for the same CPU (a higher CPU per unit), a lock share in
    its waits, or its data disk busy for a share of the window."""
    measures = step.measures
    waits = dict(measures.waits)
    if lock_share is not None:
        waits[WaitClass.LOCK] = lock_share
    os = copy.deepcopy(step.os)
    if disk_busy is not None:
        os["disks"] = {"vda": {"reads": 1000, "writes": 1000, "io_ms": disk_busy * step.elapsed_s * 1000,
                               "weighted_io_ms": 0}}
    histograms = {name: LatencyHistogram({k: round(v * units_factor) for k, v in h.counts.items()},
                                         h.sum_s * units_factor, h.max_s) for name, h in step.histograms.items()}
    units = sum(h.total for h in histograms.values())
    return dataclasses.replace(step, jobs=4, histograms=histograms, os=os,
                               measures=dataclasses.replace(measures, units=units, waits=waits))


def test_a_steady_run_gets_no_note(lookup):
    run, test = lookup
    steps = [*test.steps, _at_four_jobs(test.steps[-1])]
    assert calibrate.assumption_notes(steps, 2, dbhost.database_host(run)) == []


def test_cpu_per_unit_rising_beyond_the_cores_is_named(lookup):
    run, test = lookup
    steps = [*test.steps, _at_four_jobs(test.steps[-1], units_factor=1 / 1.3)]
    (note,) = calibrate.assumption_notes(steps, 2, dbhost.database_host(run))
    assert note.startswith("CPU per unit rises 30% from 2 to 4 jobs")
    below = [*test.steps, _at_four_jobs(test.steps[-1], units_factor=1 / 1.1)]  # within a shared host's noise
    assert calibrate.assumption_notes(below, 2, dbhost.database_host(run)) == []


def test_growing_lock_waits_are_named(lookup):
    run, test = lookup
    steps = [*test.steps, _at_four_jobs(test.steps[-1], lock_share=0.35)]
    (note,) = calibrate.assumption_notes(steps, 2, dbhost.database_host(run))
    assert note.startswith("lock waits take 35% of the active time at 4 jobs (0% at 1)")


def test_a_device_with_no_room_left_is_named(lookup):
    run, test = lookup
    steps = [*test.steps, _at_four_jobs(test.steps[-1], disk_busy=0.95)]
    (note,) = calibrate.assumption_notes(steps, 2, dbhost.database_host(run))
    assert note.startswith("device vda is 95 % busy at 4 jobs")
    calm = [*test.steps, _at_four_jobs(test.steps[-1], disk_busy=0.5)]
    assert calibrate.assumption_notes(calm, 2, dbhost.database_host(run)) == []
