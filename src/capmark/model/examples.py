"""The two-tier Stress layered model of the CITI PeopleSoft report (Tables 31-32), as a ready-made example and
test case."""

from __future__ import annotations

from capmark.model.lqn import Entry, Processor, Task

MS = 1e-3
# Table 25, "redo blks written" per Stress update request, for 1..10 clients (N_log-blk-wrt of Table 32)
REDO_BLOCKS = (2.000, 1.989, 1.931, 1.837, 1.773, 1.735, 1.703, 1.679, 1.660, 1.639)
# Table 34 of CITI Technical Report 98-3, its LQM outputs for 1..10 clients: completion time (ms), Oracle CPU, disk busy (%)
TABLE34_MODEL = {
    "response_ms": (78, 102, 126, 150, 174, 200, 225, 252, 278, 304),
    "oracle_cpu_pct": (31.6, 49.0, 60.0, 67.7, 72.9, 76.5, 79.2, 81.2, 82.8, 84.2),
    "oracle_disk_pct": (39.5, 60.4, 71.1, 76.5, 79.7, 81.7, 83.1, 84.0, 84.7, 85.2),
}


def stress_lqm(clients: int, redo_blocks: float | None = None) -> tuple[list[Processor], list[Task]]:
    """Stress update requests: the client task (WinFrame CPUs, network), a dedicated Oracle server per client
    (rendezvous: 15.080 ms CPU in phase 1, 6.681 ms OS overhead in phase 2), DBWR and LGWR as single FCFS
    tasks called with the blocks written per request as visits."""
    redo = REDO_BLOCKS[clients - 1] if redo_blocks is None else redo_blocks
    processors = [Processor("winframe_cpu1"), Processor("winframe_cpu2"), Processor("ethernet"),
                  Processor("oracle_cpu"), Processor("oracle_disk")]
    tasks = [
        Task("stress_update", [Entry("request", calls={"stress": 1, "oracle": 1, "dbwr": 0.152, "lgwr": redo})],
             reference=True, population=clients),
        Task("stress", [Entry("stress", phase1={"winframe_cpu1": 0.5 * 22.721 * MS, "winframe_cpu2": 0.5 * 22.721 * MS,
                                                "ethernet": 8 * 0.034 * MS})], multiplicity=clients),
        Task("oracle", [Entry("oracle", phase1={"oracle_cpu": 15.080 * MS, "ethernet": 8 * 0.056 * MS,
                                                "oracle_disk": 0.037 * 0.047 * MS},
                              phase2={"oracle_cpu": 6.681 * MS})], multiplicity=clients),
        Task("dbwr", [Entry("dbwr", phase1={"oracle_cpu": 5.813 * MS, "oracle_disk": 21.967 * MS})], multiplicity=1),
        Task("lgwr", [Entry("lgwr", phase1={"oracle_cpu": 0.996 * MS, "oracle_disk": 13.860 * MS})], multiplicity=1),
    ]
    return processors, tasks
