"""The `capmark` command's entry point: the signal handlers come before the command line's libraries load.

Loading the command line (typer, rich, psycopg, numpy) takes about a second. A Ctrl-C or SIGTERM in that time used
to end the process silently with 143, or with a traceback from inside an import; an interrupt raised inside an
import can also be swallowed by the import machinery, or fail a C extension's initialisation, or make Python end by
the signal after all. So while the command line loads, a signal ends the process at once with the documented exit
(130) and one line: nothing has been opened or written yet that would need cleaning up. Once it has loaded, an
interrupt is an exception the command handles (cancelling statements, keeping completed steps).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED_EXIT = 130  # capmark.errors.RunInterrupted.exit_code, without importing anything before the handlers
INTERRUPTED_LINE = b"capmark: interrupted.\n"


def _quit_while_loading(signum: int, frame: FrameType | None) -> None:
    os.write(2, INTERRUPTED_LINE)
    os._exit(INTERRUPTED_EXIT)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    # a shell starts a background job with SIGINT ignored: it stays ignored, as Python leaves it
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    if interruptible:
        signal.signal(signal.SIGINT, _quit_while_loading)
    signal.signal(signal.SIGTERM, _quit_while_loading)
    from capmark.cli import main as run_command

    if interruptible:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        run_command()
    except KeyboardInterrupt:  # in the instant before the command's own handling begins
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.stderr.write(INTERRUPTED_LINE.decode())
        sys.exit(INTERRUPTED_EXIT)
