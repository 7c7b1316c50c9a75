"""pgbench's three built-in workloads (tpcb-like, simple-update, select-only), run server-side on pgbench's tables.

The tables are pgbench's own, made by the data model in schema capmark and sized by --scale as `pgbench -i -s`
sizes them, so a capmark result compares with a pgbench one at the same scale. Each slice procedure runs the
statements of pgbench 18's built-in script, one transaction per unit with one commit, with the script's random
draws (pgbench's random(lb, ub): an integer drawn uniformly from lb..ub, both included). The scripts' own text is
kept here too, with the tables in schema capmark: client-side, capmark's pgbench script interpreter runs them
as they are (prepared statements, one connection per job), so that client-side less server-side shows the client
and network tier, and a capmark result compares with pgbench's own on the same server.
"""

from __future__ import annotations

from capmark.config import MAX_SEED
from capmark.engines.postgres.datamodel import PGBENCH_ACCOUNTS, PGBENCH_BRANCHES, PGBENCH_TELLERS
from capmark.workloads.base import ParamSpec, Unit, Workload, kpms, procedure_sql
from capmark.workloads.scripts import ScriptOptions, ScriptRecipe, ScriptSource, script_functions

# pgbench 18's built-in scripts as `pgbench --show-script=NAME` prints them (less its "-- NAME: ..." title line),
# with the tables qualified by schema capmark.
TPCB_LIKE_SCRIPT = r"""\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE capmark.pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM capmark.pgbench_accounts WHERE aid = :aid;
UPDATE capmark.pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE capmark.pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO capmark.pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
"""

SIMPLE_UPDATE_SCRIPT = r"""\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE capmark.pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM capmark.pgbench_accounts WHERE aid = :aid;
INSERT INTO capmark.pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
"""

SELECT_ONLY_SCRIPT = r"""\set aid random(1, 100000 * :scale)
SELECT abalance FROM capmark.pgbench_accounts WHERE aid = :aid;
"""

# pgbench's name of each built-in script (pgbench -b NAME) -> its text
BUILTIN_SCRIPTS = {"tpcb-like": TPCB_LIKE_SCRIPT, "simple-update": SIMPLE_UPDATE_SCRIPT,
                   "select-only": SELECT_ONLY_SCRIPT}

# The scripts' \set delta random(-DELTA, DELTA)
DELTA = 5000

PGBENCH_KPMS = kpms("wal_kb_per_txn")
# Read into the buffer cache before a test, as the TP family does, so that a short step measures pgbench's
# transactions and not the first reads of its tables.
PGBENCH_WARM = ("pgbench_accounts", "pgbench_tellers", "pgbench_branches")
# What pgbench does before every run unless -n: vacuum the two small tables every transaction updates, and empty
# the history, so that a writing test starts from the same state however many ran before it. Select-only touches
# none of them, so it needs none of it.
PGBENCH_PREPARE = ("vacuum capmark.pgbench_branches", "vacuum capmark.pgbench_tellers",
                   "truncate capmark.pgbench_history")

# The key ranges at the data model's pgbench scale (p_params.pgbench_scale), read once per slice.
_RANGES = (f"n_aid int := {PGBENCH_ACCOUNTS} * (p_params->>'pgbench_scale')::int; "
           f"n_bid int := {PGBENCH_BRANCHES} * (p_params->>'pgbench_scale')::int; "
           f"n_tid int := {PGBENCH_TELLERS} * (p_params->>'pgbench_scale')::int;")
# v_ names: PL/pgSQL would find a variable named like a column (aid, delta) ambiguous in the statements.
_VARS = "v_aid int; v_bid int; v_tid int; v_delta int; v_abalance int;"


def _uniform(var: str, low: int, count: str) -> str:
    """PL/pgSQL for pgbench's random(low, low + count - 1): one of `count` integers from low on, each as likely
    (random() is below 1, so the floor stays below count)."""
    return f"{var} := {low} + floor(random() * {count})::int;"


_DRAW_AID = _uniform("v_aid", 1, "n_aid")
_DRAW_ALL = "\n      ".join((_DRAW_AID, _uniform("v_bid", 1, "n_bid"), _uniform("v_tid", 1, "n_tid"),
                             _uniform("v_delta", -DELTA, str(2 * DELTA + 1))))
_UPDATE_ACCOUNT = """update capmark.pgbench_accounts set abalance = abalance + v_delta where aid = v_aid;
      select abalance into v_abalance from capmark.pgbench_accounts where aid = v_aid;"""
_INSERT_HISTORY = """insert into capmark.pgbench_history (tid, bid, aid, delta, mtime)
        values (v_tid, v_bid, v_aid, v_delta, current_timestamp);"""

# pgbench's transactions cannot deadlock (each locks one row of each table, in the same order of tables), so the
# units catch no errors: an exception block would start a subtransaction per unit, work that pgbench's do not do.
TPCB_LIKE = Unit(_RANGES + " " + _VARS, f"""
      {_DRAW_ALL}
      {_UPDATE_ACCOUNT}
      update capmark.pgbench_tellers set tbalance = tbalance + v_delta where tid = v_tid;
      update capmark.pgbench_branches set bbalance = bbalance + v_delta where bid = v_bid;
      {_INSERT_HISTORY}
      commit;
      {{rec}}""")

SIMPLE_UPDATE = Unit(_RANGES + " " + _VARS, f"""
      {_DRAW_ALL}
      {_UPDATE_ACCOUNT}
      {_INSERT_HISTORY}
      commit;
      {{rec}}""")

# pgbench runs the lone SELECT in autocommit: a transaction of its own, committed
SELECT_ONLY = Unit(_RANGES + " " + _VARS, f"""
      {_DRAW_AID}
      select abalance into v_abalance from capmark.pgbench_accounts where aid = v_aid;
      commit;
      {{rec}}""")


SEED = ParamSpec("seed", 0, "client side: random seed (pgbench --random-seed); 0 draws a new one for each job",
                 minimum=0, maximum=MAX_SEED)


def _pgbench(name: str, description: str, unit: Unit, script: str, *, writes: bool, batch: int) -> Workload:
    proc = "slice_" + name.replace("-", "_")
    builtin = name.removeprefix("pgbench-").replace("tpcb", "tpcb-like")
    # the script as pgbench runs it, for pgbench itself as the client-side engine (--client-engine pgbench)
    recipe = ScriptRecipe((ScriptSource("transaction", f"pgbench's built-in {builtin} script", script),),
                          ScriptOptions(zero_seed_is_fresh=True))
    client_unit, client_stats = script_functions(recipe.sources, recipe.options)
    return Workload(name=name, family="pgbench", description=description, unit="transaction",
                    throughput_label="tps", txn_types=("transaction",), procedure=proc,
                    procedure_sql=procedure_sql(proc, unit.declare, unit.body, batch=batch), kpms=PGBENCH_KPMS,
                    writes=writes, warm=PGBENCH_WARM, prepare_sql=PGBENCH_PREPARE if writes else (),
                    client_unit=client_unit, client_stats=client_stats, params=(SEED,), recipe=recipe)


# batch: units between two deadline checks; a read-only unit takes a few microseconds, an updating one far longer
PGBENCH_TPCB = _pgbench(
    "pgbench-tpcb",
    "pgbench's default TPC-B-like transaction on pgbench's tables: add a random amount to an account's, a teller's "
    "and a branch's balance, read the account's back, record it in the history; one commit.",
    TPCB_LIKE, TPCB_LIKE_SCRIPT, writes=True, batch=1)
PGBENCH_SIMPLE_UPDATE = _pgbench(
    "pgbench-simple-update",
    "pgbench's simple update (pgbench -N) on pgbench's tables: add a random amount to an account's balance, read it "
    "back, record it in the history; one commit.",
    SIMPLE_UPDATE, SIMPLE_UPDATE_SCRIPT, writes=True, batch=1)
PGBENCH_SELECT_ONLY = _pgbench(
    "pgbench-select-only",
    "pgbench's select only (pgbench -S) on pgbench's tables: read a random account's balance via primary key; "
    "one commit.",
    SELECT_ONLY, SELECT_ONLY_SCRIPT, writes=False, batch=4)

WORKLOADS = (PGBENCH_TPCB, PGBENCH_SIMPLE_UPDATE, PGBENCH_SELECT_ONLY)
