"""User-facing errors: one sentence that says what is wrong and how to fix it."""


class CapmarkError(Exception):
    """An error caused by input or environment; the CLI prints it without a traceback."""

    exit_code = 2


class RunInterrupted(Exception):
    """The run was stopped by SIGINT/SIGTERM; completed steps are already stored."""

    exit_code = 130
