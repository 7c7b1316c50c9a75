"""A MariaDB server of the test's own, with performance_schema on: the machine's server has it off (MariaDB's
default), and switching it on there needs a restart of a server other tests use. Started from the machine's
mariadbd in a temporary folder, on a free port and its own socket, and stopped when the test module ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_PROGRAMS = ("mariadbd", "mysqld")
INSTALL_PROGRAMS = ("mariadb-install-db", "mysql_install_db")
START_TIMEOUT_S = 60  # a new data directory's first start: InnoDB makes its files (about 3 s here)
STOP_TIMEOUT_S = 30


def _program(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}")
                                            if os.access(p, os.X_OK)), None)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A private MariaDB: its URL, and a restart in place (the same data, port and options)."""

    url: str
    command: list[str]
    folder: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.folder / "server.log", "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        _wait_for(self.url, self.proc, self.folder)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def server(*options: str) -> Iterator[Server]:
    """A private MariaDB with `options` (mariadbd's command line), root without a password. The calling test skips,
    saying why, where this machine has no MariaDB server programs."""
    pytest.importorskip("MySQLdb", reason="mysqlclient (capmark's MySQL extra) is not installed")
    found, install = _program(SERVER_PROGRAMS), _program(INSTALL_PROGRAMS)
    if found is None or install is None:
        pytest.skip("this machine has no MariaDB server programs (mariadbd and mariadb-install-db)")
    folder = Path(tempfile.mkdtemp(prefix="capmark-test-mariadb-"))
    data, sock, port = folder / "data", folder / "mysqld.sock", _free_port()
    subprocess.run([install, "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db",
                    "--auth-root-authentication-method=normal"], check=True, capture_output=True, timeout=120)
    private = Server(f"mysql://root@127.0.0.1:{port}/",
                     [found, "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
                      "--bind-address=127.0.0.1", "--user=root", f"--pid-file={folder / 'mysqld.pid'}",
                      "--innodb-buffer-pool-size=64M", "--skip-log-bin", *options], folder)
    try:
        private.start()
        yield private
    finally:
        private.stop()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def running(*options: str) -> Iterator[str]:
    """A private MariaDB with `options`; yields its mysql:// URL for root (no password)."""
    with server(*options) as private:
        yield private.url


def _wait_for(url: str, proc: subprocess.Popen[bytes], folder: Path) -> None:
    from capmark.engines.mysql.connection import connect
    from capmark.errors import CapmarkError

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the private MariaDB ended at start: {(folder / 'server.log').read_text()[-2000:]}")
        try:
            connect(url, timeout_s=2).close()
            return
        except CapmarkError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
