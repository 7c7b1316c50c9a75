"""The command line starts without the libraries only some commands use: scipy took 0.85 s of every command's
2.3 s start (capmark --help, median of five runs) while only the fits, tests and solvers that call it need it."""

from __future__ import annotations

import subprocess
import sys

# Imported where they are called (inside the function), never on the command line's import path.
LOADED_ON_USE = ("scipy", "matplotlib")


def test_the_command_line_imports_neither_scipy_nor_matplotlib():
    probe = ("import sys, capmark.cli; "
             f"print(' '.join(m for m in {LOADED_ON_USE!r} if m in sys.modules or any(k.startswith(m + '.') "
             "for k in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert not loaded, f"importing capmark.cli loaded {loaded}: move their imports into the functions that use them"
