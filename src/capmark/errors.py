"""User-facing errors: one sentence that says what is wrong and how to fix it.

Exit codes: 0 every test complete; 1 the run failed (a test failed, or the server, the connection or the
results disk gave way mid-run; completed steps are kept); 2 bad input or environment, nothing measured;
130 interrupted (Ctrl-C or SIGTERM, at any moment of any command).
"""


class CapmarkError(Exception):
    """An error caused by input or environment; the CLI prints it without a traceback."""

    exit_code = 2


class RunFailed(Exception):
    """The run ended with a failure; what was measured is stored and the run is marked failed."""

    exit_code = 1


class RunInterrupted(Exception):
    """The run was stopped by SIGINT/SIGTERM; completed steps are already stored."""

    exit_code = 130


class LockBlocked(CapmarkError):
    """capmark gave up waiting for a lock another session holds; the message names that session and what to do."""
