"""A headless Chromium driven over the Chrome DevTools Protocol, for tests that look at the HTML report as a
browser shows it: what the page logs as errors, what its DOM holds, and a screenshot."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import packages
import websocket  # websocket-client: the DevTools Protocol speaks over a websocket

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PACKAGES = {"chromium": "chromium"}  # Debian's package of the first, by the program it provides
START_TIMEOUT_S = 30  # a cold start of Chromium on a busy two-core machine takes a few seconds
LOAD_TIMEOUT_S = 60  # the report inlines dozens of SVG charts (a few MB); parsing and layout take seconds
VIEWPORT = (1280, 900)  # a laptop screen: what a person sees first when the report opens


def find_browser() -> str | None:
    """The browser's path, once the suite's background install (when one runs) has ended: a program dpkg has
    unpacked but not yet configured is not one to start."""
    packages.wait()
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def install_browser() -> str:
    """Debian's chromium, installed with apt-get where the tests run as root; '' with the reason otherwise."""
    if path := find_browser():
        return path
    if os.geteuid() != 0:
        return ""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES.values()]):
        if subprocess.run(cmd, env=env, capture_output=True, timeout=900).returncode != 0:
            return ""
    return find_browser() or ""


@dataclass
class PageLoad:
    """What loading one page produced: its errors (console errors, uncaught exceptions, failed loads) and the
    value the probe script returned."""

    errors: list[str] = field(default_factory=list)
    probe: Any = None
    screenshot: Path | None = None


class Browser:
    """One headless Chromium with a fresh profile; use as a context manager."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.profile = tempfile.TemporaryDirectory(prefix="capmark-chromium-")
        self.proc: subprocess.Popen | None = None
        self.ws: websocket.WebSocket | None = None
        self.next_id = 0
        self.events: list[dict] = []

    def __enter__(self) -> Browser:
        args = [self.path, "--headless=new", "--remote-debugging-port=0", "--remote-allow-origins=*",
                f"--user-data-dir={self.profile.name}", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--hide-scrollbars", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._devtools_port()
        page = self._page_target(port)
        self.ws = websocket.create_connection(page, timeout=LOAD_TIMEOUT_S, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        # the window's size less the browser's own bars would be the page's: fix the page's instead
        self.call("Emulation.setDeviceMetricsOverride", width=VIEWPORT[0], height=VIEWPORT[1], deviceScaleFactor=1,
                  mobile=False)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ws:
            self.ws.close()
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr:
                self.proc.stderr.close()
        self._remove_profile()

    PROFILE_REMOVE_TRIES = 20  # Chromium's helper processes outlive the browser by a moment and still write there

    def _remove_profile(self) -> None:
        for _ in range(self.PROFILE_REMOVE_TRIES):
            try:
                shutil.rmtree(self.profile.name)
                break
            except FileNotFoundError:
                break
            except OSError:  # a helper wrote a file while the folder was being emptied: try again
                time.sleep(0.1)
        shutil.rmtree(self.profile.name, ignore_errors=True)
        self.profile.cleanup()

    def _devtools_port(self) -> int:
        assert self.proc and self.proc.stderr
        deadline = time.monotonic() + START_TIMEOUT_S
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("Chromium did not open its DevTools port: " + "".join(seen[-10:]))

    @staticmethod
    def _page_target(port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        return next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")

    def call(self, method: str, **params: Any) -> dict:
        """Send one command and wait for its reply, keeping the events that arrive meanwhile."""
        assert self.ws
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str, timeout_s: float = LOAD_TIMEOUT_S) -> None:
        assert self.ws
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {timeout_s:g} s")
            self.events.append(json.loads(self.ws.recv()))

    def load(self, page: Path, probe: str, screenshot: Path | None = None) -> PageLoad:
        """Open a file, wait for its load event, run the probe (a JavaScript expression whose value comes back
        as JSON) and collect every error the page reported."""
        self.events.clear()
        self.call("Page.navigate", url=page.resolve().as_uri())
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", expression="new Promise(r => requestAnimationFrame(() => r(1)))",
                  awaitPromise=True)  # one frame laid out
        result = PageLoad(probe=self.call("Runtime.evaluate", expression=probe, returnByValue=True)
                          ["result"].get("value"))
        if screenshot:
            shot = self.call("Page.captureScreenshot", format="png")
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            result.screenshot = screenshot
        result.errors = page_errors(self.events)
        return result


def page_errors(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions and browser-logged errors (a resource that failed to load)."""
    errors = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            errors.append("uncaught: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif e.get("method") == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(f"log ({p['entry']['source']}): {p['entry']['text']}")
    return errors
