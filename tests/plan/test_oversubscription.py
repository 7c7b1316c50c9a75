"""More runnable jobs than cores cost CPU per unit (time slices that start with a cold cache): measured at a probe
step above the cores, modelled as a CPU that slows towards a bound as the runnable jobs grow."""

from __future__ import annotations

import pytest
from test_assumption_notes import _at_four_jobs, lookup  # noqa: F401  (the stored run's fixture)

from capmark.plan import calibrate, cpuscaling, dbhost, dbmodel


@pytest.mark.parametrize("over", [0.3, 1.2])
@pytest.mark.parametrize("probe_jobs", [3, 4, 16])
def test_the_fit_inverts_the_cost_it_models(over, probe_jobs):
    cpu = 100e-6
    measured = cpu * cpuscaling.oversubscribed(over, probe_jobs, 2)
    assert cpuscaling.fit_oversubscription(cpu, measured, probe_jobs, 2) == pytest.approx(over)


def test_the_cost_is_none_at_the_cores_and_bounded_beyond():
    assert cpuscaling.oversubscribed(0.8, 2, 2) == 1.0
    assert cpuscaling.oversubscribed(0.8, 4, 2) == pytest.approx(1.4)
    assert cpuscaling.oversubscribed(0.8, 1e9, 2) == pytest.approx(1.8)
    assert cpuscaling.fit_oversubscription(100e-6, 104e-6, 4, 2) == 0.0  # within a step's noise
    assert cpuscaling.fit_oversubscription(100e-6, 900e-6, 4, 2) == cpuscaling.MAX_OVERSUBSCRIPTION


def _cpu_only(cores: int, over: float) -> dbmodel.DbModel:
    return dbmodel.DbModel(workload="w", unit="query", cores=cores, cpu_s=200e-6, devices={}, wal_device=None,
                           flush_requests=0.0, flush_cpu_s=0.0, flush_device_s=0.0, delay_s=0.0, client_s=0.0,
                           think_s=0.0, p95_over_mean=1.0, p99_over_mean=1.0, cpu_oversubscription=over)


@pytest.mark.parametrize("jobs", [1, 2, 3, 8, 32])
def test_a_cpu_bound_model_serves_at_the_cores_speed_slowed_by_the_runnable_jobs(jobs):
    """Every job is at the CPU (no IO, no think time), so the throughput is the cores' over the CPU per unit at that
    many runnable jobs: min(jobs, cores) / (cpu x cost(jobs))."""
    over, cores = 0.6, 2
    predicted = dbmodel.solve(_cpu_only(cores, over), jobs).throughput
    assert predicted == pytest.approx(min(jobs, cores) / (200e-6 * cpuscaling.oversubscribed(over, jobs, cores)),
                                      rel=1e-6)


def test_a_probe_step_above_the_cores_calibrates_the_cost_and_is_not_scored(lookup):  # noqa: F811
    run, test = lookup
    probe = _at_four_jobs(test.steps[-1], units_factor=1 / 1.3)  # CPU per unit 30 % above the 2-job step's
    test.steps.append(probe)
    try:
        host = dbhost.database_host(run)
        model = calibrate.calibrate(test, host=host)
        assert model.probe_jobs == [4]
        at_cores = model.cpu_s * (1 + model.cpu_growth * (model.cores - 1))
        assert at_cores * cpuscaling.oversubscribed(model.cpu_oversubscription, 4, 2) == pytest.approx(
            calibrate._step_parameters(probe, host).cpu, rel=0.01)
        assert not any(n.startswith("CPU per unit rises") for n in model.notes)  # modelled, not only named
        rows = calibrate.validate(test, host=host)["steps"]
        assert next(r for r in rows if r["jobs"] == 4)["calibration"]
    finally:
        test.steps.remove(probe)
