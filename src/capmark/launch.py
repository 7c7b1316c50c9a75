"""The `capmark` command's entry point: the signal handlers come before the command line's libraries load.

Loading the command line (typer, rich, psycopg, numpy) takes about a second; a Ctrl-C or SIGTERM in that time
used to end the process silently with 143, or with a traceback from inside an import. Here both are turned into
the documented exit (130) and one line from the first moment Python runs capmark's code.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

INTERRUPTED_EXIT = 130  # capmark.errors.RunInterrupted.exit_code, without importing anything before the handlers


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _end_interrupted() -> None:
    """One line and the exit code; a second signal while saying it changes nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stderr.write("capmark: interrupted.\n")
    sys.exit(INTERRUPTED_EXIT)


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)  # SIGINT already raises KeyboardInterrupt in Python
    try:
        from capmark.cli import main as run_command
    except KeyboardInterrupt:
        _end_interrupted()
    run_command()
