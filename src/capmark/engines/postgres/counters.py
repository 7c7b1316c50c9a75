"""PostgreSQL's statistics views as engine-neutral counters: pg_stat_io where the server has it (16+, WAL rows from
18), else pg_stat_database, pg_stat_bgwriter and pg_stat_wal (14-15)."""

from __future__ import annotations

from capmark.engines.base import DbCounters, Delta, Row
from capmark.engines.deltas import total

BLOCK = 8192  # PostgreSQL's block size as built by every distribution capmark meets
# pg_stat_io's backend types that write data blocks, as capmark names the writers
WRITERS = {"client backend": "backends", "checkpointer": "checkpointer", "background writer": "background writer"}
# pg_stat_bgwriter's columns (14-15) for the same writers
LEGACY_WRITERS = {"buffers_checkpoint": "checkpointer", "buffers_clean": "background writer",
                  "buffers_backend": "backends"}


def counters(delta: Delta) -> DbCounters:
    db = delta.get("database", [])
    hit, read = total(db, "blks_hit"), total(db, "blks_read")
    relation = [r for r in delta.get("io", []) if r.get("object") == "relation"]
    wal = delta.get("wal", [])
    log_bytes = total(wal, "wal_bytes")
    if log_bytes is None:
        log_bytes = total(delta.get("lsn", []), "wal_lsn_bytes")
    return DbCounters(
        commits=total(db, "xact_commit"),
        logical_reads=hit + read if hit is not None and read is not None else None,
        physical_reads=read,
        read_ios=_reads(relation, read),
        read_bytes=_read_bytes(relation, read),
        read_time_ms=total(relation, "read_time") if relation else total(db, "blk_read_time"),
        page_bytes=BLOCK,
        io_operations=bool(relation),
        data_writes=_writes(relation, delta.get("bgwriter", [])),
        data_written_bytes=_written_bytes(relation, delta.get("bgwriter", [])),
        data_extends=total(relation, "extends") or 0.0 if relation else None,
        data_extend_bytes=_extend_bytes(relation),
        data_time_ms=({kind: total(relation, f"{kind}_time") for kind in ("read", "write", "extend", "fsync")}
                      if relation else {"read": total(db, "blk_read_time"), "write": total(db, "blk_write_time")}),
        io_time_ms=(sum(total(delta["io"], f"{kind}_time") or 0.0 for kind in ("read", "write", "extend", "fsync"))
                    if delta.get("io") else (total(db, "blk_read_time") or 0.0) + (total(db, "blk_write_time") or 0.0)),
        log_bytes=log_bytes,
        log_records=total(wal, "wal_records"),
        log_full_pages=total(wal, "wal_fpi"),
        **_wal_io(delta),
    )


def _reads(relation: list[Row], blks_read: float | None) -> float | None:
    return (total(relation, "reads") or 0.0) if relation else blks_read


def _read_bytes(relation: list[Row], blks_read: float | None) -> float | None:
    if relation:
        if any("read_bytes" in r for r in relation):
            return total(relation, "read_bytes") or 0.0
        return float(sum((r.get("reads") or 0) * (r.get("op_bytes") or BLOCK) for r in relation))
    return blks_read * BLOCK if blks_read is not None else None


def _written_bytes(relation: list[Row], bgwriter: list[Row]) -> float | None:
    """Data-file bytes written, extensions included: pg_stat_io (16+), else the writers' blocks (14-15)."""
    if relation:
        written = ((total(relation, "write_bytes") or 0.0) if any("write_bytes" in r for r in relation)
                   else float(sum((r.get("writes") or 0) * (r.get("op_bytes") or BLOCK) for r in relation)))
        return written + sum((r.get("extends") or 0) * (r.get("op_bytes") or BLOCK) for r in relation
                             if "extend_bytes" not in r) + (total(relation, "extend_bytes") or 0.0)
    if bgwriter:
        return sum(total(bgwriter, c) or 0.0 for c in LEGACY_WRITERS) * BLOCK
    return None


def _extend_bytes(relation: list[Row]) -> float | None:
    if not relation:
        return None
    if any("extend_bytes" in r for r in relation):
        return total(relation, "extend_bytes") or 0.0
    return float(sum((r.get("extends") or 0) * (r.get("op_bytes") or BLOCK) for r in relation))


def _writes(relation: list[Row], bgwriter: list[Row]) -> dict[str, float] | None:
    if relation:
        return {who: total(relation, "writes", backend_type=backend_type) or 0.0
                for backend_type, who in WRITERS.items()}
    if bgwriter and "buffers_checkpoint" in bgwriter[0]:
        return {who: total(bgwriter, column) or 0.0 for column, who in LEGACY_WRITERS.items()}
    return None


def _wal_io(delta: Delta) -> dict[str, float | None]:
    """WAL writes, fsyncs and their times: pg_stat_io's WAL rows (18+), else pg_stat_wal's (14-17)."""
    io = [r for r in delta.get("io", []) if r.get("object") == "wal"]
    written = total(io, "write_bytes") if io and any("write_bytes" in r for r in io) else None
    if io:
        return {"log_writes": total(io, "writes") or 0.0, "log_fsyncs": total(io, "fsyncs") or 0.0,
                "log_write_ms": total(io, "write_time") or 0.0, "log_fsync_ms": total(io, "fsync_time") or 0.0,
                "log_written_bytes": written}
    wal = delta.get("wal", [])
    if wal and "wal_write" in wal[0]:
        return {"log_writes": total(wal, "wal_write") or 0.0, "log_fsyncs": total(wal, "wal_sync") or 0.0,
                "log_write_ms": total(wal, "wal_write_time") or 0.0,
                "log_fsync_ms": total(wal, "wal_sync_time") or 0.0, "log_written_bytes": None}
    return {"log_written_bytes": None}
