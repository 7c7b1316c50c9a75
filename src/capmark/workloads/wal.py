"""WAL family (the peakmarks guide's log writer, LGWR): synchronous commits of a given WAL size, and WAL throughput."""

from __future__ import annotations

from capmark.workloads import client as c
from capmark.workloads import units as u
from capmark.workloads.base import Workload, kpms, procedure_sql

WAL_KPMS = kpms("wal_kb_per_txn", "wal_flush_ms_per_commit", "wal_writes_per_commit", "wal_fsyncs_per_commit",
                drop=("logical_reads_per_s", "physical_reads_per_s", "buffer_hit_pct"))


def _wal(name: str, rows: int, description: str, session: dict[str, str], batch: int = 1) -> Workload:
    unit = u.wal_update(rows)
    proc = "slice_" + name.replace("-", "_")
    return Workload(
        name=name, family="WAL", description=description, unit="transaction", throughput_label="tps",
        txn_types=("commit",), procedure=proc, procedure_sql=procedure_sql(proc, unit.declare, unit.body, batch=batch),
        kpms=WAL_KPMS, writes=True, session=lambda p: session, warm=("wal_ring",),
        per_unit=lambda p, s: {"rows": rows},
        **c.fields(c.wal_update(rows)),
    )


SYNC = {"synchronous_commit": "on"}
WAL_LAT1 = _wal("wal-lat1", 1, "Synchronous commits of ~1 kB of WAL each: maximum commit rate, minimum latency.", SYNC)
WAL_LAT25 = _wal("wal-lat25", 25, "Synchronous commits of ~25 kB of WAL each.", SYNC)
WAL_LAT125 = _wal("wal-lat125", 125, "Synchronous commits of ~125 kB of WAL each (payment-system size).", SYNC)
WAL_THR = _wal("wal-thr", 500, "Large transactions (~500 kB of WAL) with synchronous_commit=off: WAL MB/s.",
               {"synchronous_commit": "off"})

WORKLOADS = (WAL_LAT1, WAL_LAT25, WAL_LAT125, WAL_THR)
