"""pgbench custom scripts: parse them (`parse`), evaluate their expressions (`expr`, `values`), draw pgbench's
random numbers (`randoms`) and run them on a connection (`interpret`).

The driver calls `read_script` / `parse_script` once, then per client `pgbench_client` (or `ScriptRunner`) and
`runner.run(max_tries)` per transaction; `runner.stats` holds per-command seconds, counts, retries, failures.
"""

from capmark.workloads.pgscript.errors import ScriptError, ScriptRuntimeError
from capmark.workloads.pgscript.interpret import (
    CommandStats,
    ScriptRunner,
    TxResult,
    pgbench_client,
    pgbench_variables,
)
from capmark.workloads.pgscript.parse import Script, parse_define, parse_script, read_script
from capmark.workloads.pgscript.randoms import PgPrng, pgbench_seeds

__all__ = [
    "CommandStats", "PgPrng", "Script", "ScriptError", "ScriptRunner", "ScriptRuntimeError",
    "TxResult", "parse_define", "parse_script", "pgbench_client", "pgbench_seeds", "pgbench_variables",
    "read_script",
]
