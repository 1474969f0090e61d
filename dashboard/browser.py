"""A tiny headless-Chromium driver over the DevTools protocol, for the browser test and the
benchmark: no Selenium, no websocket library.

Chromium's `--remote-debugging-pipe` reads protocol commands from fd 3 and writes replies and
events to fd 4, each message a JSON object ended by a NUL byte. We hand it two pipes there and
speak the protocol directly: open a page, evaluate JavaScript, click with real mouse events,
take a screenshot.

As a command, it screenshots one page (how docs/dashboard*.png are made):
    uv run dashboard/browser.py http://127.0.0.1:8000/t/<tag>/ docs/dashboard-run.png
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

# The Debian package's binary (CI installs it when absent: .ci/run).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Flags that keep a headless run quiet, offline and independent of the machine's profile.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")
# Seconds one protocol command may take.
COMMAND_TIMEOUT_S = 30.0
# A click that did not reach its element (the live page moved it) is tried this many times in all,
# this far apart.
CLICK_TRIES = 5
CLICK_RETRY_S = 0.2


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Chromium:
    def __init__(self, width: int = 1300, height: int = 1000, binary: str | None = None):
        binary = binary or find_chromium()
        if binary is None:
            raise BrowserError("chromium not found; install the Debian package `chromium`")
        self.profile = tempfile.mkdtemp(prefix="dash-chromium-")
        cmd_r, self._cmd_w = os.pipe()     # we write commands; Chromium reads them as fd 3
        self._res_r, res_w = os.pipe()     # Chromium writes replies as fd 4; we read them
        args = [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                "about:blank"]
        # bash puts our pipe ends at fds 3 and 4, where Chromium expects them.
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$@" 3<&{cmd_r} 4>&{res_w}', "chromium", *args],
                                     pass_fds=(cmd_r, res_w), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(res_w)
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session: str | None = None
        self.width, self.height = width, height

    # ------------------------------------------------------------ protocol plumbing

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._res_r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: bool = True,
             timeout: float = COMMAND_TIMEOUT_S) -> dict:
        with self._cond:
            self._next_id += 1
            mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise BrowserError(f"no reply to {method} ({'browser exited' if self._closed else 'timeout'})")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    # ------------------------------------------------------------ what tests use

    def open(self, url: str, timeout: float = 30.0) -> None:
        """A new tab at url, attached; returns once the document has loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", timeout)

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"JS error in {expression!r}: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 10.0, interval: float = 0.05):
        """Poll a JS expression until it is truthy; returns its value, or raises with the last one."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval)
        raise BrowserError(f"timed out after {timeout}s waiting for {expression!r} (last value {value!r})")

    def click(self, selector: str, tries: int = CLICK_TRIES) -> None:
        """A real mouse click (press + release) at the centre of the element, made only while the
        element is what lies at that point, and checked to have reached it: a live page may move
        the element between finding it and pressing (a panel above re-rendered), and a click that
        lands elsewhere is tried again rather than taken for this one."""
        find = (f"(() => {{ const el = document.querySelector({json.dumps(selector)}); if (!el) return null;"
                f" el.scrollIntoView({{block: 'center'}}); const r = el.getBoundingClientRect();"
                f" const x = r.left + r.width / 2, y = r.top + r.height / 2;"
                f" const at = document.elementFromPoint(x, y); if (!at || !el.contains(at)) return 'covered';"
                f" window.__clickLanded = false;"
                f" el.addEventListener('click', () => {{ window.__clickLanded = true; }}, {{once: true}});"
                f" return [x, y]; }})()")
        last = None
        for attempt in range(tries):
            if attempt:
                time.sleep(CLICK_RETRY_S)
            last = self.evaluate(find)
            if last is None:
                raise BrowserError(f"nothing matches {selector!r}")
            if last == "covered":
                continue
            for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
                self.send("Input.dispatchMouseEvent", {"type": kind, "x": last[0], "y": last[1],
                                                       "button": "left", "clickCount": 1})
            if self.evaluate("window.__clickLanded === true"):
                return
        raise BrowserError(f"a click on {selector!r} did not reach it in {tries} tries (last: {last!r})")

    def type_text(self, selector: str, text: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        if full_page:
            h = int(self.evaluate("document.documentElement.scrollHeight") or self.height)
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": self.width, "height": h, "deviceScaleFactor": 1, "mobile": False})
        self.evaluate("window.scrollTo(0, 0)")
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))
        if full_page:
            self.send("Emulation.clearDeviceMetricsOverride")

    def close(self) -> None:
        try:
            if not self._closed:
                self.send("Browser.close", session=False, timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Screenshot a dashboard page with headless Chromium.", allow_abbrev=False)
    ap.add_argument("url")
    ap.add_argument("out", help="PNG file to write")
    ap.add_argument("--width", type=int, default=1300)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--viewport-only", action="store_true", help="only the first screen, not the full page")
    args = ap.parse_args(argv)
    with Chromium(width=args.width, height=args.height) as browser:
        browser.open(args.url)
        # The live dot turns green once the event stream is up (pages without one: skip).
        try:
            browser.wait_for("!document.getElementById('live') || !document.body.dataset.stream"
                             " || document.getElementById('live').className === 'live on'", timeout=10)
        except BrowserError:
            pass
        browser.screenshot(Path(args.out), full_page=not args.viewport_only)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
