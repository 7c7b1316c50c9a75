"""DBWR family: the writers of dirty buffers (checkpointer, background writer, backends) under load."""

from __future__ import annotations

from capmark.workloads.base import Workload, kpms, procedure_sql

DBWR_KPMS = kpms("ckpt_blocks_per_s", "bgwriter_blocks_per_s", "backend_blocks_per_s", "written_mb_per_s",
                 drop=("logical_reads_per_s", "physical_reads_per_s", "buffer_hit_pct"))
ROWS_PER_TXN = 50

# Job 1 requests a checkpoint in the first transaction of every slice (about once a second) so that dirty
# buffers are written continuously; a role that may not checkpoint leaves it to checkpoint_timeout. The
# checkpoint is inside that measured transaction, not before the slice's clock starts: a job then spends
# all its time in measured units, so Little's law (jobs = throughput x response time) holds and the
# step can calibrate a model, whose response time then carries the checkpoint's share.
_CHECKPOINT = """
      if checkpoint_due then
        checkpoint_due := false;
        begin
          checkpoint;
        exception when insufficient_privilege then null;
        end;
      end if;"""

_DECLARE = ("r2 int; k int; s2 int; n_bacc int := (p_params->>'booking_accounts')::int; "
            "checkpoint_due boolean := (p_params->>'job')::int = 1;")
_BODY = f"""{_CHECKPOINT}
      for r2 in 1..{ROWS_PER_TXN} loop
        k := 1 + floor(random() * n_bacc)::int;
        s2 := 1 + floor(random() * 25)::int;
        update capmark.booking set amount = amount + 1 where account_id = k and seq = s2;
      end loop;
      commit;
      {{rec}}"""

DBWR_THR = Workload(
    name="dbwr-thr", family="DBWR",
    description=f"Massive buffer changes ({ROWS_PER_TXN} random rows per transaction) with a checkpoint about "
                "every second (inside job 1's first transaction of each slice): blocks written by checkpointer, "
                "background writer and backends.",
    unit="transaction", throughput_label="tps", txn_types=("update",), procedure="slice_dbwr_thr",
    procedure_sql=procedure_sql("slice_dbwr_thr", _DECLARE, _BODY),
    kpms=DBWR_KPMS, writes=True, warm=("booking",), per_unit=lambda p, s: {"rows": ROWS_PER_TXN})

WORKLOADS = (DBWR_THR,)
