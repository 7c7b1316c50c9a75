"""A real prometheus-node-exporter for the tests: installed on first use (as root), started on a free port of
127.0.0.1, with or without basic authentication (its --web.config.file, the users' passwords as bcrypt hashes made
by Apache's htpasswd)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import packages

EXPORTER = "/usr/bin/prometheus-node-exporter"
HTPASSWD = "/usr/bin/htpasswd"
PACKAGES = {EXPORTER: "prometheus-node-exporter", HTPASSWD: "apache2-utils"}
READY_TIMEOUT_S = 15.0
# bcrypt's lowest cost: the exporter checks the hash at every request, and the tests guard no real secret
BCRYPT_COST = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install(*paths: str) -> str | None:
    """None once the programs at these paths are installed, else why not."""
    packages.wait()  # the suite's background install, when one runs
    missing = [PACKAGES[p] for p in paths if not os.path.exists(p)]
    if not missing:
        return None
    command = f"apt-get update && apt-get install -y {' '.join(missing)}"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not all(os.path.exists(p) for p in paths):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"{', '.join(missing)} is not installed and '{command}' failed: {tail[0]}"
    return None


def bcrypt_hash(user: str, password: str) -> str:
    """The bcrypt hash of a password as node_exporter's basic_auth_users expects it (password read from stdin)."""
    done = subprocess.run([HTPASSWD, "-niB", "-C", str(BCRYPT_COST), user], input=f"{password}\n", capture_output=True,
                          text=True, timeout=30, check=True)
    return done.stdout.strip().split(":", 1)[1]


def _answers(url: str) -> bool:
    """An HTTP answer of any kind (401 included: the exporter is up and asks for a login)."""
    try:
        urllib.request.urlopen(url, timeout=1).close()
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@contextmanager
def running_exporter(folder: Path, users: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """A node_exporter on a free port (behind basic authentication for these users and passwords): its /metrics
    address without credentials, and its pid. Raises RuntimeError when it does not start."""
    port = free_port()
    args = [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.cpu.info"]
    if users:
        config = folder / "web-config.yml"
        config.write_text("basic_auth_users:\n" + "".join(f"  {user}: '{bcrypt_hash(user, password)}'\n"
                                                          for user, password in users.items()))
        args.append(f"--web.config.file={config}")
    log_path = folder / "node-exporter.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _answers(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node_exporter did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Recorder:
    """An HTTP server in this process that serves another server's pages (a real node_exporter's), recording the
    Authorization header of every request; with a token, only to requests that bear it (node_exporter itself has no
    bearer tokens: an operator puts a proxy like this one in front of it)."""

    def __init__(self, upstream: str, token: str | None = None) -> None:
        import http.server
        import threading
        import urllib.parse

        self.seen: list[str | None] = []
        origin = urllib.parse.urlsplit(upstream)
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                header = self.headers.get("Authorization")
                recorder.seen.append(header)
                if token is not None and header != f"Bearer {token}":
                    self.send_response(401, "Unauthorized")
                    self.end_headers()
                    return
                with urllib.request.urlopen(f"{origin.scheme}://{origin.netloc}{self.path}", timeout=10) as page:
                    body = page.read()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
