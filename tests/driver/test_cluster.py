"""Client-side jobs on a real two-node Ray cluster (both nodes on this machine): the jobs are spread over both
nodes, every unit the server ran is counted once, the nodes' clocks are pinned down, the load matches the
single-host driver's, and a node that dies fails its step with the node named and leaves no session behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from liveruns import run_without_report

from capmark.config import RunSpec
from capmark.measure import validity
from capmark.runner import RunObserver

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.db

JOBS = 4
CPUS_PER_NODE = 2  # logical CPUs each node offers: two job processes per node for 4 jobs
ROUNDS = 5  # alternating single-host and cluster rounds, median judged (one CI run's three gave 0.60, 0.80, 1.17)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    patch = pytest.MonkeyPatch()
    patch.setenv("CAPMARK_LOG_DIR", str(tmp_path_factory.mktemp("logs")))  # Ray's log file, not in the home folder
    cluster = ray_cluster_utils.Cluster(initialize_head=True,
                                        head_node_args={"num_cpus": CPUS_PER_NODE, "include_dashboard": False})
    cluster.add_node(num_cpus=CPUS_PER_NODE)
    cluster.wait_for_nodes()
    yield cluster
    import ray

    # this process joined the cluster as its driver; its Ray threads would go on taking CPU from the tests after
    # (the latency sampling comparison read the server's lookups 30 % slower with them running)
    ray.shutdown()
    cluster.shutdown()
    patch.undo()


def _run(dsn: str, results: Path, workload: str, cluster: str | None, duration: float = 2.0,
         observer: RunObserver | None = None):
    run = run_without_report(RunSpec(workloads=[workload], jobs=[JOBS], mode="client", warmup_s=0.5, duration_s=duration,
                                     dsn=dsn, results_dir=results, cluster=cluster), observer)
    steps = run.tests[0].steps
    return run, steps[0] if steps else None


def _calls(step, match) -> int:
    return int(sum(r["calls"] for r in step.db_delta.get("statements", []) if match(r.get("query") or "")))


def _job_sessions(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select count(*) from pg_stat_activity where application_name like 'capmark job %'"
                            ).fetchone()[0]


@pytest.fixture(scope="module")
def load_rounds(embedded_dsn, tmp_path_factory, ray_cluster) -> list[tuple[tuple, tuple]]:
    """ROUNDS alternating pairs of srv-query1 runs, (single host, cluster) each as (run, step): the load comparison
    judges them all, and the first cluster run is also the one whose spread and counts are checked."""
    pairs = []
    for _ in range(ROUNDS):
        single = _run(embedded_dsn, tmp_path_factory.mktemp("single"), "srv-query1", None)
        spread = _run(embedded_dsn, tmp_path_factory.mktemp("spread"), "srv-query1", ray_cluster.address)
        pairs.append((single, spread))
    return pairs


def test_lookups_spread_over_both_nodes_count_every_unit(load_rounds, ray_cluster):
    run, step = load_rounds[0][1]
    assert step.status == "ok", step.notes
    nodes = step.instruments["cluster"]["nodes"]
    assert len(nodes) == 2 and sorted(j for n in nodes for j in n["jobs"]) == list(range(1, JOBS + 1))
    assert all(len(n["jobs"]) == JOBS // 2 for n in nodes)  # SPREAD: as many job processes on each node
    # one prepared lookup per unit: the server's own count equals the units merged from both nodes
    assert step.units > 1000
    assert _calls(step, lambda q: "from capmark.item where id = $1" in q) == step.units
    assert sum(step.series_units) == step.units
    # the sampler saw the jobs' sessions, wherever they ran, in nearly every sample
    assert sum(step.waits.values()) >= step.wait_samples * JOBS * 0.9
    workers = [p for p in step.driver_cpu["processes"] if p["jobs"]]
    assert {p["node"] for p in workers} == {n["node_id"] for n in nodes}
    assert all(p["user_s"] + p["sys_s"] > 0 for p in workers)
    # both nodes run this machine's kernel: all the driver's CPU was the database host's
    assert step.driver_cpu["database_host_s"] == pytest.approx(step.driver_cpu["user_s"] + step.driver_cpu["sys_s"])
    for n in nodes:
        # same machine, same clock: the offset is within its own uncertainty (a loopback round trip)
        assert 0 < n["uncertainty_s"] < 0.01 and abs(n["offset_s"]) <= n["uncertainty_s"] + 1e-3
    assert validity.cluster_problems(step) == []
    assert any(note.startswith("jobs on 2 Ray nodes: ") for note in step.notes)
    assert run.environment["cluster"]["address"] == ray_cluster.address


def test_transactions_on_the_cluster_match_the_servers_statement_counts(embedded_dsn, tmp_path, ray_cluster):
    """tp-light: each type's histogram holds exactly the transactions whose statements the server ran."""
    _, step = _run(embedded_dsn, tmp_path, "tp-light", ray_cluster.address)
    assert step.status == "ok", step.notes
    reads = _calls(step, lambda q: "from capmark.account where" in q and "for update" not in q)
    locks = _calls(step, lambda q: "from capmark.account where" in q and "for update" in q)
    updates = _calls(step, lambda q: q.lower().startswith("update capmark.account"))
    totals = {name: h.total for name, h in step.histograms.items()}
    assert sorted(totals.values()) == sorted([reads, locks]) and locks == updates > 0, (totals, reads, locks)


def test_every_step_of_a_run_has_a_process_per_job_up_to_the_clusters_cpus(embedded_dsn, tmp_path, ray_cluster):
    """Steps one after another: each step's jobs get an actor each, up to the CPUs the cluster has, whatever the
    previous step's actors, released a moment before, still held (counted from the CPUs free at that moment, the
    second of two back-to-back steps ran all its 4 jobs on one actor)."""
    run = run_without_report(RunSpec(workloads=["srv-query1"], jobs=[2, JOBS, JOBS], mode="client", warmup_s=0.5,
                                     duration_s=1.0, dsn=embedded_dsn, results_dir=tmp_path,
                                     cluster=ray_cluster.address))
    steps = run.tests[0].steps
    assert [s.status for s in steps] == ["ok"] * 3, [s.notes for s in steps]
    layouts = [sorted(len(p["jobs"]) for p in s.driver_cpu["processes"] if p["jobs"]) for s in steps]
    assert layouts == [[1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], layouts


def test_the_cluster_offers_the_load_of_the_single_host_driver(load_rounds):
    """Five alternating rounds: the two-node cluster's 4 jobs reach at least 0.8 of the single-host worker
    processes' (benchmarks/cluster_scaling.py measured 0.89 to 1.35 in its rounds); jobs serialised on one process
    (Python's global lock) gave 0.55, and all 4 on one actor 0.63 (median of 4 rounds): a clean-clone run's median
    of 0.785 was the cluster placing a step's 4 jobs on one or two actors while the previous step's still held their
    CPUs. The median of the rounds' ratios, each round's pair measured side by side: best against best was not
    enough on the shared CI host, where one lucky single-host round (28,546 against 22,213-23,951 queries/s in the
    others) set the bar."""
    single, spread = [], []
    for pair in load_rounds:
        for (_, step), into in zip(pair, (single, spread), strict=True):
            assert step.status == "ok", step.notes
            into.append(step.units / step.elapsed_s)
    ratios = sorted(c / s for c, s in zip(spread, single, strict=True))
    assert ratios[ROUNDS // 2] >= 0.8, (f"cluster over single host: {', '.join(f'{r:.2f}' for r in ratios)}",
                                        spread, single)


class _WhenMeasuring(RunObserver):
    def __init__(self, action) -> None:
        self.action = action
        self.done = False

    def step_progress(self, test, jobs, phase, seconds_left) -> None:
        if phase == "measure" and not self.done:
            self.done = True
            threading.Thread(target=self.action, daemon=True).start()


def test_a_node_that_dies_fails_its_step_naming_it(embedded_dsn, tmp_path, ray_cluster):
    """Runs last: it takes the second node away (and puts a fresh one back)."""
    worker = next(n for n in ray_cluster.list_all_nodes() if not n.head)
    run, step = _run(embedded_dsn, tmp_path, "srv-query1", ray_cluster.address, duration=6.0,
                     observer=_WhenMeasuring(lambda: (time.sleep(1.0), ray_cluster.remove_node(worker))))
    test = run.tests[0]
    assert run.status == "failed" and test.status == "failed" and step is None
    assert "stopped answering" in test.reason and "load node" in test.reason, test.reason
    assert worker.address.split(":")[0] in test.reason
    deadline = time.time() + 30
    while _job_sessions(embedded_dsn) and time.time() < deadline:
        time.sleep(0.2)
    assert _job_sessions(embedded_dsn) == 0
    ray_cluster.add_node(num_cpus=CPUS_PER_NODE)
    ray_cluster.wait_for_nodes()
