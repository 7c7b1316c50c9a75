"""The Debian packages some tests need (a browser, node_exporter, htpasswd), installed in the background while the
suite's first tests run, so that a fresh machine does not wait for the download in the middle of the suite.

On a fresh machine `apt-get install chromium` took 40-45 s of the suite's wall time inside the first browser test.
The conftest starts the install once the tests are collected, runs the tests that read stored runs first (they
measure nothing, so the install's CPU and disk use cannot disturb a figure), and waits for the install to end before
the first test that measures or starts a server. The helpers that need a package (browser.install_browser,
node_exporter_process.install) wait for it too, then install on their own what is still missing, as before.
"""

from __future__ import annotations

import os
import shutil
import subprocess

INSTALL_TIMEOUT_S = 900  # apt-get update and a 100 MB download on a slow mirror

_install: subprocess.Popen[bytes] | None = None


def _there(program: str) -> bool:
    return os.path.exists(program) if program.startswith("/") else shutil.which(program) is not None


def start(packages: dict[str, str]) -> None:
    """Start installing, as root, the packages (by the program each provides: a path, or a name on the PATH) whose
    program is missing; once per suite."""
    global _install
    missing = sorted({package for program, package in packages.items() if not _there(program)})
    if _install is not None or not missing or os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    command = f"apt-get update -qq && apt-get install -y -qq {' '.join(missing)}"
    _install = subprocess.Popen(["sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def wait() -> None:
    """Until the background install (if any was started) has ended, however it ended: a helper that still misses
    its program installs it on its own and says why it could not (the background install's output is not kept)."""
    if _install is not None and _install.poll() is None:
        try:
            _install.wait(timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _install.kill()
            _install.wait()
