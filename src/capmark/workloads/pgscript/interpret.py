"""Run a parsed pgbench script once per call (one "transaction") on one connection, as a pgbench client does.

The runner talks to libpq through psycopg's pq layer, as the driver's ClientSession does, on a connection in
autocommit mode (as pgbench's: a script opens its transactions with BEGIN). Query modes:
`simple` (variables written into the text), `extended` (variables sent as parameters $1..$n, the text parsed
on every call) and `prepared` (each SQL command prepared once per connection, the first time it runs, then
executed with parameters). Pipelines (\\startpipeline ... \\endpipeline) use libpq's pipeline mode and need
extended or prepared mode, as in pgbench.

Failures follow pgbench 15+: a serialization failure (40001) or deadlock (40P01) rolls the transaction back;
`run(max_tries=n)` then retries the whole script from its first command, with the variables as they were
when it started and the random generator reset to where it was (so a retry draws the same values, as
pgbench does); after the last try the variables are restored again but the generator keeps its state. Any
other error (SQL, expression, undefined variable, an open transaction at the end of the script) rolls back
and raises ScriptRuntimeError, where pgbench would abort the client. Unlike pgbench, an undefined variable in
SQL is an error in every mode (pgbench sends NULL in extended and prepared mode), COPY is not supported, and
\\shell / \\setshell run their command without a shell (pgbench hands the line to /bin/sh): its words are the
arguments, so that a variable, also one set from the database by \\gset, is always one argument and never a command.

Per-command cost is two float additions: the seconds and the count of each command index, for `-r`-style
per-command latency, with the retries and failures per command beside them.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg import pq

from capmark.config import QUERY_MODES
from capmark.workloads.pgscript.errors import (
    ExprError,
    ScriptError,
    ScriptRuntimeError,
    ShellNotAllowed,
    sentence,
    where,
)
from capmark.workloads.pgscript.parse import (
    Command,
    ElseCommand,
    EndifCommand,
    IfCommand,
    PipelineCommand,
    Script,
    SetCommand,
    ShellCommand,
    SleepCommand,
    SqlCommand,
    valid_variable_name,
)
from capmark.workloads.pgscript.randoms import PgbenchSeeds, PgPrng, RandomSource, pgbench_seeds, to_int64
from capmark.workloads.pgscript.values import EvalContext, TextValue, Value, Variables, compile_expr, to_text, truth

RETRYABLE = {"40001": "serialization", "40P01": "deadlock"}  # the SQLSTATEs pgbench retries
SHELL_OUTPUT_CHARS = 63  # pgbench reads one line of at most this many characters from \setshell
SHELL_COMMAND_CHARS = 255  # and refuses a longer \shell command line (its words joined by spaces)
PIPELINE_IDLE_READS = 3  # empty reads in a row after which a pipeline's missing results will not come

_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY)
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_FATAL = pq.ExecStatus.FATAL_ERROR
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_ABORTED = pq.ExecStatus.PIPELINE_ABORTED
_IDLE = pq.TransactionStatus.IDLE
_PIPELINE_OFF = pq.PipelineStatus.OFF
_SYNC_MARK = -1  # a sync point in the queue of pipelined commands awaiting results
_ATOI = re.compile(r"\s*([+-]?\d+)")
_names = itertools.count()  # prepared-statement name prefixes, unique within the process


@dataclass(frozen=True)
class TxResult:
    """One run of the script: ok, or failed on a serialization failure or deadlock after `tries` tries."""

    ok: bool
    tries: int
    sqlstate: str | None = None
    failure: str | None = None  # "serialization" or "deadlock"


@dataclass
class CommandStats:
    """Per command index: seconds spent and times run (successful tries), retries and failures caused there."""

    seconds: list[float]
    counts: list[int]
    retries: list[int]
    failures: list[int]

    @classmethod
    def zeros(cls, n: int) -> CommandStats:
        return cls([0.0] * n, [0] * n, [0] * n, [0] * n)

    def merge(self, other: CommandStats, sign: int = 1) -> None:
        """Add another's figures to these (sign -1: take them away, as a window's end minus its start)."""
        _add_into(self.seconds, other.seconds, sign)
        _add_into(self.counts, other.counts, sign)
        _add_into(self.retries, other.retries, sign)
        _add_into(self.failures, other.failures, sign)


_Number = TypeVar("_Number", int, float)


def _add_into(mine: list[_Number], theirs: list[_Number], sign: int) -> None:
    for i, v in enumerate(theirs):
        mine[i] += sign * v


class _Retryable(Exception):
    def __init__(self, sqlstate: str, index: int) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate
        self.index = index


def pgbench_variables(*, client_id: int = 0, scale: int = 1, random_seed: int = 0, default_seed: int = 0,
                      defines: Mapping[str, str] | None = None) -> Variables:
    """The variables a pgbench client starts with: `-D` definitions (as text) win over the automatic
    :scale, :client_id, :default_seed and :random_seed."""
    out: Variables = {"scale": scale, "client_id": client_id, "default_seed": default_seed,
                           "random_seed": to_int64(random_seed)}
    for name, value in (defines or {}).items():
        out[name] = TextValue(value)
    return out


def pgbench_client(script: Script, conn: Any, *, client_id: int, random_seed: int, clients: int = 1,
                   scale: int = 1, defines: Mapping[str, str] | None = None, **options: Any) -> ScriptRunner:
    """A runner that draws what pgbench client `client_id` of `clients` draws with `--random-seed`."""
    seeds: PgbenchSeeds = pgbench_seeds(random_seed, clients)
    variables = pgbench_variables(client_id=client_id, scale=scale, random_seed=random_seed,
                                  default_seed=seeds.default_seed, defines=defines)
    return ScriptRunner(script, conn, variables=variables, rng=seeds.client_rng(client_id), **options)


@dataclass
class _State:
    branch_failed: bool = False
    pending: deque[int] = field(default_factory=deque)


def _static_error(script: Script, cmd: Command, message: str, kind: type[ScriptError] = ScriptError) -> ScriptError:
    return kind(f"{where(script.name, cmd.line, cmd.column)}: {sentence(message)}", source=script.name,
                line=cmd.line, column=cmd.column)


class ScriptRunner:
    """One pgbench client: a script, a connection, its variables and its random generator."""

    def __init__(self, script: Script, conn: Any, *, query_mode: str = "prepared",
                 variables: Mapping[str, Value | TextValue | str] | None = None, rng: RandomSource | None = None,
                 allow_shell: bool = False, statement_prefix: str | None = None,
                 shared: ScriptRunner | None = None) -> None:
        if query_mode not in QUERY_MODES:
            raise ScriptError(f"unknown query mode {query_mode!r}; use simple, extended or prepared.")
        self.script = script
        self.mode = query_mode
        self.pgconn: pq.abc.PGconn = getattr(conn, "pgconn", conn)
        self.check(script, query_mode, allow_shell)
        self.vars: Variables
        self.rng: RandomSource
        self.ctx: EvalContext
        if shared is not None:  # another script of the same client: one set of variables, one generator
            self.vars, self.rng, self.ctx = shared.vars, shared.rng, shared.ctx
        else:
            self.vars = {k: TextValue(v) if isinstance(v, str) else v for k, v in (variables or {}).items()}
            self.rng = rng if rng is not None else PgPrng(0)
            self.ctx = EvalContext(self.vars, self.rng)
        self.stats = CommandStats.zeros(len(script.commands))
        self.prefix = statement_prefix if statement_prefix is not None else f"capmark_pgs{next(_names)}_"
        self._prepared = [False] * len(script.commands)
        self.round_trips = 0  # times the client waited for the server, as ClientSession counts them
        self._state = _State()
        self._steps: list[Callable[[], int]] = [self._step(c) for c in script.commands]

    @staticmethod
    def check(script: Script, query_mode: str, allow_shell: bool) -> None:
        """Refuse, before anything runs, a script that the query mode or the shell rule cannot run."""
        shell = next((c for c in script.commands if isinstance(c, ShellCommand)), None)
        if shell is not None and not allow_shell:
            raise _static_error(script, shell, f"{shell.text.split()[0]} runs a shell command, which capmark "
                                               "runs only when the command line allows it; add --allow-shell to run "
                                               "this script", ShellNotAllowed)
        if query_mode == "simple" and script.uses_pipeline:
            pipe = next(c for c in script.commands if isinstance(c, PipelineCommand))
            raise _static_error(script, pipe, "a pipeline needs query mode extended or prepared, not simple")
        if query_mode != "simple" and script.compound_commands:
            raise _static_error(script, script.compound_commands[0], "a compound SQL command (\\;) runs only in "
                                                                     f"query mode simple, not {query_mode}")

    # -- running --

    def run(self, max_tries: int = 1) -> TxResult:
        """Run the script once; retry it on a serialization failure or deadlock until `max_tries` tries."""
        if max_tries < 1:
            raise ValueError("max_tries must be at least 1")
        saved_vars = dict(self.vars)
        saved_rng = self.rng.getstate()
        tries = 0
        while True:
            tries += 1
            try:
                self._attempt()
                return TxResult(True, tries)
            except _Retryable as failure:
                self._recover()
                self.vars.clear()
                self.vars.update(saved_vars)
                if tries < max_tries:
                    self.stats.retries[failure.index] += 1
                    self.rng.setstate(saved_rng)
                    continue
                self.stats.failures[failure.index] += 1
                return TxResult(False, tries, failure.sqlstate, RETRYABLE[failure.sqlstate])
            except BaseException:
                self._recover()
                raise

    def _attempt(self) -> None:
        steps = self._steps
        seconds, counts = self.stats.seconds, self.stats.counts
        n = len(steps)
        self._state = _State()
        pc = 0
        t0 = time.perf_counter()
        while pc < n:
            i = pc
            pc = steps[i]()
            t1 = time.perf_counter()
            seconds[i] += t1 - t0
            counts[i] += 1
            t0 = t1
        if self.pgconn.transaction_status != _IDLE:
            last = self.script.commands[-1]
            raise ScriptRuntimeError(f"{self.script.name} line {last.line}: the end of the script was reached with "
                                     "the transaction still open; end it with COMMIT or END.",
                                     source=self.script.name, line=last.line)

    def _recover(self) -> None:
        """Leave the connection idle: close an open pipeline, roll back an open transaction."""
        pgconn = self.pgconn
        try:
            if pgconn.pipeline_status != _PIPELINE_OFF:
                pending = self._state.pending
                pgconn.pipeline_sync()
                pending.append(_SYNC_MARK)
                self._collect(lambda index, res: None)
                pgconn.exit_pipeline_mode()
            if pgconn.transaction_status != _IDLE:
                self.round_trips += 1
                pgconn.exec_(b"ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection is broken; the original error says why
            pass

    def _fail(self, cmd: Command, message: str, sqlstate: str | None = None, line: int | None = None) -> ScriptRuntimeError:
        line = cmd.line if line is None else line
        return ScriptRuntimeError(f"{self.script.name} line {line}: {sentence(message)}", source=self.script.name,
                                  line=line, sqlstate=sqlstate)

    # -- one closure per command --

    def _step(self, cmd: Command) -> Callable[[], int]:
        if isinstance(cmd, SqlCommand):
            return self._sql_step(cmd)
        if isinstance(cmd, SetCommand):
            return self._set_step(cmd)
        if isinstance(cmd, IfCommand):
            return self._if_step(cmd)
        if isinstance(cmd, ElseCommand):
            return self._else_step(cmd)
        if isinstance(cmd, EndifCommand):
            return self._endif_step(cmd)
        if isinstance(cmd, SleepCommand):
            return self._sleep_step(cmd)
        if isinstance(cmd, PipelineCommand):
            return self._pipeline_step(cmd)
        if isinstance(cmd, ShellCommand):
            return self._shell_step(cmd)
        raise AssertionError(f"no step for {cmd!r}")

    def _set_step(self, cmd: SetCommand) -> Callable[[], int]:
        fn = compile_expr(cmd.expr, f"{self.script.name} line {cmd.line}")
        ctx, variables, name, nxt = self.ctx, self.vars, cmd.name, cmd.index + 1

        def step() -> int:
            try:
                variables[name] = fn(ctx)
            except ExprError as exc:
                raise self._fail(cmd, f"\\set {name}: {exc}") from None
            return nxt
        return step

    def _condition(self, cmd: IfCommand) -> Callable[[], bool]:
        fn = compile_expr(cmd.expr, f"{self.script.name} line {cmd.line}")
        ctx = self.ctx

        def test() -> bool:
            try:
                return truth(fn(ctx))
            except ExprError as exc:
                raise self._fail(cmd, f"\\{cmd.kind}: {exc}") from None
        return test

    def _if_step(self, cmd: IfCommand) -> Callable[[], int]:
        test = self._condition(cmd)
        body, other, after = cmd.index + 1, cmd.next_branch, cmd.endif + 1

        if cmd.kind == "if":
            def step() -> int:
                if test():
                    return body
                self._state.branch_failed = True
                return other
            return step

        def elif_step() -> int:
            st = self._state
            if not st.branch_failed:
                return after  # an earlier branch ran: skip to \endif
            if test():
                st.branch_failed = False
                return body
            return other
        return elif_step

    def _else_step(self, cmd: ElseCommand) -> Callable[[], int]:
        body, after = cmd.index + 1, cmd.endif + 1

        def step() -> int:
            st = self._state
            if st.branch_failed:
                st.branch_failed = False
                return body
            return after
        return step

    def _endif_step(self, cmd: EndifCommand) -> Callable[[], int]:
        nxt = cmd.index + 1

        def step() -> int:
            self._state.branch_failed = False
            return nxt
        return step

    def _sleep_step(self, cmd: SleepCommand) -> Callable[[], int]:
        nxt, variables = cmd.index + 1, self.vars

        def step() -> int:
            amount = cmd.amount
            if cmd.variable is not None:
                if cmd.variable not in variables:
                    raise self._fail(cmd, f'\\sleep: undefined variable "{cmd.variable}"')
                text = to_text(variables[cmd.variable])
                m = _ATOI.match(text)
                if m is None:
                    raise self._fail(cmd, f'\\sleep: invalid sleep time "{text}" in variable "{cmd.variable}"')
                amount = int(m.group(1))  # like C's atoi: the leading integer, the rest ignored
            us = amount * cmd.unit_us
            if us > 0:
                time.sleep(us / 1e6)
            return nxt
        return step

    # -- SQL --

    def _values(self, cmd: SqlCommand) -> list[bytes]:
        variables = self.vars
        out = []
        for name, line in zip(cmd.variables, cmd.variable_lines, strict=True):
            try:
                v = variables[name]
            except KeyError:
                raise self._fail(cmd, f'undefined variable "{name}" in an SQL command', line=line) from None
            out.append(b"%d" % v if type(v) is int else to_text(v).encode())
        return out

    def _sql_step(self, cmd: SqlCommand) -> Callable[[], int]:
        pgconn, nxt, i = self.pgconn, cmd.index + 1, cmd.index
        sql = cmd.parameterized.encode()
        name = f"{self.prefix}{i}".encode()
        chunks = [c.encode() for c in cmd.chunks]
        assign, mode = cmd.assign, self.mode
        values = self._values

        def text_with_values() -> bytes:
            vals = values(cmd)
            out = [chunks[0]]
            for v, c in zip(vals, chunks[1:], strict=True):
                out.append(v)
                out.append(c)
            return b"".join(out)

        def step() -> int:
            if pgconn.pipeline_status != _PIPELINE_OFF:
                if assign:
                    raise self._fail(cmd, f"\\{assign} is not allowed in a pipeline")
                if mode == "prepared":
                    pgconn.send_query_prepared(name, values(cmd))
                else:
                    pgconn.send_query_params(sql, values(cmd))
                self._state.pending.append(i)
                return nxt
            self.round_trips += 1
            if mode == "prepared":
                if not self._prepared[i]:
                    self._prepare(cmd)
                res = pgconn.exec_prepared(name, values(cmd))
            elif mode == "extended":
                res = pgconn.exec_params(sql, values(cmd))
            elif assign == "aset":
                pgconn.send_query(text_with_values())
                self._read_all(cmd)
                return nxt
            else:
                res = pgconn.exec_(text_with_values())  # the last result of a compound command, or its error
            if res.status not in _OK:
                self._sql_error(cmd, res)
            if assign:
                self._store(cmd, res, gset=assign == "gset")
            return nxt
        return step

    def _prepare(self, cmd: SqlCommand) -> None:
        self.round_trips += 1
        res = self.pgconn.prepare(f"{self.prefix}{cmd.index}".encode(), cmd.parameterized.encode())
        if res.status != _COMMAND_OK:
            self._sql_error(cmd, res)
        self._prepared[cmd.index] = True

    def _sql_error(self, cmd: SqlCommand, res: pq.abc.PGresult) -> None:
        code = res.error_field(pq.DiagnosticField.SQLSTATE)
        sqlstate = code.decode() if code else None
        if sqlstate in RETRYABLE:
            raise _Retryable(sqlstate, cmd.index)  # type: ignore[arg-type]
        if res.status == _FATAL or code:
            message = (res.error_message.decode(errors="replace").strip().splitlines() or ["error"])[0]
            message = message.removeprefix("ERROR:").strip()
            raise self._fail(cmd, f"SQL command failed ({sqlstate}): {message}", sqlstate)
        raise self._fail(cmd, f"SQL command returned {pq.ExecStatus(res.status).name}, which a script cannot use")

    def _read_all(self, cmd: SqlCommand) -> None:
        """Simple mode with \\aset: every result of the compound command; each one with rows sets variables."""
        error = None
        while (res := self.pgconn.get_result()) is not None:
            if res.status not in _OK:
                error = error or res
            elif res.status == _TUPLES_OK and res.ntuples > 0:
                self._store(cmd, res, gset=False)
        if error is not None:
            self._sql_error(cmd, error)

    def _store(self, cmd: SqlCommand, res: pq.abc.PGresult, gset: bool) -> None:
        """\\gset: the one row's columns become variables (an error unless exactly one row); \\aset: the last
        row's, and no rows is not an error."""
        rows = res.ntuples if res.status == _TUPLES_OK else 0
        if gset and rows != 1:
            raise self._fail(cmd, f"\\gset expected one row, got {rows}")
        if rows == 0:
            return
        for col in range(res.nfields):
            fname = res.fname(col)
            var = cmd.prefix + (fname.decode() if fname else "")
            if not valid_variable_name(var):
                raise self._fail(cmd, f"\\{cmd.assign} cannot store column {var!r}: not a valid variable name; "
                                      "name the column with AS")
            value = res.get_value(rows - 1, col)
            self.vars[var] = TextValue(value.decode() if value is not None else "")

    # -- pipelines --

    def _pipeline_step(self, cmd: PipelineCommand) -> Callable[[], int]:
        nxt, pgconn = cmd.index + 1, self.pgconn
        inside = self._pipeline_commands(cmd) if cmd.kind == "start" else []

        def step() -> int:
            on = pgconn.pipeline_status != _PIPELINE_OFF
            if cmd.kind == "start":
                if on:
                    raise self._fail(cmd, "\\startpipeline inside a pipeline")
                if self.mode == "prepared":
                    for c in inside:  # before the pipeline, so that no PREPARE runs inside a transaction it opens
                        if not self._prepared[c.index]:
                            self._prepare(c)
                pgconn.enter_pipeline_mode()
                return nxt
            if not on:
                raise self._fail(cmd, f"\\{cmd.kind}pipeline outside a pipeline")
            pgconn.pipeline_sync()
            self._state.pending.append(_SYNC_MARK)
            if cmd.kind == "end":
                self.round_trips += 1  # a pipeline waits once, for all its results
                self._drain(cmd)
            return nxt
        return step

    def _pipeline_commands(self, start: PipelineCommand) -> list[SqlCommand]:
        out = []
        for c in self.script.commands[start.index + 1:]:
            if isinstance(c, PipelineCommand) and c.kind == "end":
                break
            if isinstance(c, SqlCommand):
                out.append(c)
        return out

    def _drain(self, cmd: PipelineCommand) -> None:
        """Read every pipelined result up to the last sync, leave pipeline mode, then report the first error."""
        errors: list[tuple[int, Any]] = []

        def note(index: int, res: Any) -> None:
            if res.status not in _OK and res.status != _ABORTED:
                errors.append((index, res))

        if not self._collect(note):
            raise self._fail(cmd, "the server stopped sending the pipeline's results")
        self.pgconn.exit_pipeline_mode()
        first_error = errors[0] if errors else None
        if first_error is not None:
            index, res = first_error
            self._sql_error(self.script.commands[index], res)  # type: ignore[arg-type]

    def _collect(self, on_result: Callable[[int, Any], None]) -> bool:
        """Read the results of every pipelined command up to the last sync point; False if they stop coming."""
        pgconn, pending = self.pgconn, self._state.pending
        idle = 0
        while pending:
            res = pgconn.get_result()
            if res is None:
                idle += 1  # libpq returns one NULL between two commands' results, never more while some are due
                if idle > PIPELINE_IDLE_READS:
                    return False
                continue
            idle = 0
            if res.status == _SYNC:
                while pending and pending.popleft() != _SYNC_MARK:
                    pass
            else:
                on_result(pending.popleft(), res)
        return True

    # -- shell --

    def _shell_argv(self, cmd: ShellCommand) -> list[str]:
        """The command's words as its arguments: a word ':name' is the variable's value, whole, as one argument
        whatever it holds (no shell ever reads it); '::word' is the text ':word'; any other word is as written."""
        argv = []
        for arg in cmd.args:
            if arg.startswith("::"):
                argv.append(arg[1:])
            elif arg.startswith(":"):
                if arg[1:] not in self.vars:
                    raise self._fail(cmd, f'{cmd.text.split()[0]}: undefined variable "{arg[1:]}"')
                argv.append(to_text(self.vars[arg[1:]]))
            else:
                argv.append(arg)
        if len(" ".join(argv)) > SHELL_COMMAND_CHARS:
            raise self._fail(cmd, f"{cmd.text.split()[0]}: the command is longer than {SHELL_COMMAND_CHARS} "
                                  "characters, pgbench's limit")
        return argv

    def _start(self, cmd: ShellCommand, argv: list[str], output: bool) -> subprocess.Popen[bytes]:
        """The command started with its arguments as they are (no shell: a ';', '$' or space in a value is text),
        its input closed; its output piped back when \\setshell reads it."""
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL,  # noqa: S603 - allowed by the caller
                                    stdout=subprocess.PIPE if output else None)
        except FileNotFoundError:
            raise self._fail(cmd, f"{cmd.text.split()[0]}: the command {argv[0]} was not found; give its full path "
                                  "or a command on the PATH") from None
        except OSError as exc:
            raise self._fail(cmd, f"{cmd.text.split()[0]}: the command {argv[0]} cannot be run "
                                  f"({exc.strerror or exc})") from None

    def _shell_step(self, cmd: ShellCommand) -> Callable[[], int]:
        nxt = cmd.index + 1

        def step() -> int:
            argv = self._shell_argv(cmd)
            if cmd.target is None:
                if self._start(cmd, argv, output=False).wait() != 0:
                    raise self._fail(cmd, f"\\shell command failed: {' '.join(argv)}")
                return nxt
            first = self._first_line(cmd, argv)
            m = re.fullmatch(r"\s*([+-]?\d+)\s*", first)
            if m is None:
                raise self._fail(cmd, f'\\setshell: the command must print an integer (not "{first}")')
            self.vars[cmd.target] = int(m.group(1))
            return nxt
        return step

    def _first_line(self, cmd: ShellCommand, argv: list[str]) -> str:
        """The start of what \\setshell's command prints, as pgbench reads it: at most SHELL_OUTPUT_CHARS of the
        first line; the rest is never read (the command then ends on a closed pipe, as under pgbench)."""
        proc = self._start(cmd, argv, output=True)
        assert proc.stdout is not None
        with proc.stdout:
            head = proc.stdout.readline(SHELL_OUTPUT_CHARS + 1)
        proc.wait()  # its exit status is not checked, as pgbench does not: the output is what counts
        return head.decode(errors="replace").rstrip("\n")[:SHELL_OUTPUT_CHARS]
