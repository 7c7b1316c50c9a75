"""TP family: OLTP transactions, one commit each, reads and updates via index."""

from __future__ import annotations

from capmark.errors import CapmarkError
from capmark.workloads import client as c
from capmark.workloads import units as u
from capmark.workloads.base import ParamSpec, Workload, kpms, mix, percent, procedure_sql, weighted_mix

TP_KPMS = kpms("wal_kb_per_txn")
UPDATE_PCT = percent("update_pct", 20, "percent of transactions that lock and update the rows they read")


def _single(name: str, description: str, unit: u.Unit, **kw) -> Workload:
    proc = "slice_" + name.replace("-", "_")
    return Workload(name=name, family="TP", description=description, unit="transaction", throughput_label="tps",
                    txn_types=("transaction",), procedure=proc,
                    procedure_sql=procedure_sql(proc, unit.declare, unit.body, batch=4),
                    kpms=TP_KPMS, warm=("account", "booking", "callrec"), **kw)


def _read_update(name: str, description: str, unit: u.Unit, **kw) -> Workload:
    proc = "slice_" + name.replace("-", "_")
    return Workload(name=name, family="TP", description=description, unit="transaction", throughput_label="tps",
                    txn_types=("read", "update"), procedure=proc,
                    procedure_sql=procedure_sql(proc, unit.declare, u.as_two_types(unit), ntypes=2),
                    params=(UPDATE_PCT,), kpms=TP_KPMS, writes=True, warm=("account", "booking", "callrec"), **kw)


TP_LOOKUP = _single("tp-lookup", "Read 1 account row via primary key; 1 commit.", u.LOOKUP,
                    **c.fields(c.read_only("account")))
TP_REPORT = _single("tp-report", "Read ~25 bookings of an account via index; 1 commit.", u.TP_REPORT,
                    **c.fields(c.read_only("booking")))
TP_LIGHT = _read_update(
    "tp-light", "Read 1 row via index; update_pct % of transactions lock it (FOR UPDATE) and update it.", u.LIGHT,
    **c.fields(c.read_update("account")))
TP_MEDIUM = _read_update("tp-medium", "Read ~25 bookings via index; update_pct % lock and update them.", u.MEDIUM,
                         **c.fields(c.read_update("booking")))
TP_HEAVY = _read_update("tp-heavy", "Read ~125 call records via index; update_pct % lock and update them.", u.HEAVY,
                        **c.fields(c.read_update("callrec")))


def _mixed(name: str, description: str, branches: list[tuple[float, str, u.Unit]], update_pct: int,
           client: tuple[c.Statements, c.ClientFn]) -> Workload:
    decl, body = mix([(w, unit) for w, _, unit in branches])
    proc = "slice_" + name.replace("-", "_")
    return Workload(
        name=name, family="TP", description=description, unit="transaction", throughput_label="tps",
        txn_types=tuple(t for _, t, _ in branches), procedure=proc,
        procedure_sql=procedure_sql(proc, decl, body, ntypes=len(branches)),
        params=(percent("update_pct", update_pct, "update percentage of the read/update transactions"),),
        kpms=TP_KPMS, writes=True, warm=("account", "booking", "callrec"),
        prepare_sql=("truncate capmark.dl_row",), **c.fields(client),
    )


TP_MIXED1 = _mixed("tp-mixed1", "Read-intensive mix: tp-report, tp-lookup, tp-medium (40 % updates), "
                   "dl-buffer (2 rows), equally weighted.",
                   [(1, "report", u.TP_REPORT), (1, "lookup", u.LOOKUP), (1, "medium", u.as_one_type(u.MEDIUM)),
                    (1, "insert", u.load("2"))], update_pct=40,
                   client=c.weighted([(1, c.read_only("booking")), (1, c.read_only("account")),
                                      (1, c.read_update("booking", 0, 0)), (1, c.load(2))]))
TP_MIXED2 = _mixed("tp-mixed2", "Write-intensive mix: tp-light 40 %, tp-medium 30 %, tp-heavy 20 %, "
                   "dl-buffer (3 rows) 10 %.",
                   [(40, "light", u.as_one_type(u.LIGHT)), (30, "medium", u.as_one_type(u.MEDIUM)),
                    (20, "heavy", u.as_one_type(u.HEAVY)), (10, "insert", u.load("3"))], update_pct=100,
                   client=c.weighted([(40, c.read_update("account", 0, 0)), (30, c.read_update("booking", 0, 0)),
                                      (20, c.read_update("callrec", 0, 0)), (10, c.load(3))]))

_CUSTOM_TYPES = (("lookup", u.LOOKUP, 20), ("report", u.TP_REPORT, 20), ("light", u.as_one_type(u.LIGHT), 20),
                 ("medium", u.as_one_type(u.MEDIUM), 20), ("heavy", u.as_one_type(u.HEAVY), 10),
                 ("insert", u.load("rpi"), 10))
_CUSTOM_DECL, _CUSTOM_BODY = weighted_mix([(f"w_{name}", unit) for name, unit, _ in _CUSTOM_TYPES])
TP_CUSTOM = Workload(
    name="tp-custom", family="TP",
    description="Your own transaction mix: weights w_lookup, w_report, w_light, w_medium, w_heavy, w_insert, "
                "with update_pct and rows_per_insert.",
    unit="transaction", throughput_label="tps", txn_types=tuple(name for name, _, _ in _CUSTOM_TYPES),
    procedure="slice_tp_custom",
    procedure_sql=procedure_sql("slice_tp_custom", _CUSTOM_DECL + " rpi int := (p_params->>'rows_per_insert')::int;",
                                _CUSTOM_BODY, ntypes=len(_CUSTOM_TYPES)),
    params=(*(ParamSpec(f"w_{name}", weight, f"weight of {name} transactions", minimum=0, maximum=1000)
              for name, _, weight in _CUSTOM_TYPES),
            percent("update_pct", 20, "update percentage of the light/medium/heavy transactions"),
            ParamSpec("rows_per_insert", 2, "rows per insert transaction", choices=(1, 2, 3, 4, 5, 10, 20, 25, 50, 100))),
    kpms=TP_KPMS, writes=True, warm=("account", "booking", "callrec"), prepare_sql=("truncate capmark.dl_row",),
    check=lambda p: _positive_weights(p))


def _positive_weights(params: dict) -> None:
    if sum(params[f"w_{name}"] for name, _, _ in _CUSTOM_TYPES) <= 0:
        raise CapmarkError("tp-custom needs at least one positive weight (w_lookup, w_report, w_light, w_medium, "
                           "w_heavy, w_insert).")


WORKLOADS = (TP_LOOKUP, TP_REPORT, TP_LIGHT, TP_MEDIUM, TP_HEAVY, TP_MIXED1, TP_MIXED2, TP_CUSTOM)
