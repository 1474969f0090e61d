"""The dashboard end to end in headless Chromium: the real entry point serves a demo run, the page
updates live when results.tsv grows, a queue item is approved by a mouse click, and a
screenshot is taken (into tmp_path: the tracked docs/*.png are made by hand, see
dashboard/browser.py). Chromium is driven over the DevTools pipe (dashboard/browser.py); the
Debian package `chromium` must be installed (.ci/run does it).

The last test checks that the repository's `git status` is what it was when the tests were
collected: no test here may write into the checkout."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dashboard.browser import BrowserError, Chromium
from dashboard.demo import build
from runfiles.queue_store import QueueStore

ROOT = Path(__file__).resolve().parent.parent


def git_status() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


# Taken at collection, before any test of the session ran.
STATUS_AT_START = git_status()
# Seconds allowed for the dashboard process to print its address.
START_TIMEOUT_S = 30
# Seconds a page may take to show the answer to a click (a POST to the server) on a loaded CI box.
ANSWER_WAIT_S = 30


@pytest.fixture
def server(tmp_path):
    """The real `dashboard/app.py` on a free loopback port, over a demo run."""
    run = build(tmp_path / "demo", "may29", n=16, seed=4)
    env = {k: v for k, v in os.environ.items() if k != "AUTORESEARCH_DASHBOARD_TOKEN"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "dashboard" / "app.py"), "--repo", str(run.parent.parent),
                             "--port", "0"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    # Its start-up lines, read in a thread (the process keeps running, so no read may block us).
    lines = []
    threading.Thread(target=lambda: lines.extend(ln.strip() for ln in proc.stdout), daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not any(ln.startswith("action token:") for ln in lines):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"dashboard did not start: {lines}")
        time.sleep(0.05)
    url = next(ln.split()[1] for ln in lines if ln.startswith("dashboard:"))
    token = next(ln.split()[2] for ln in lines if ln.startswith("action token:"))
    yield run, url, token
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_live_page_in_chromium(server, tmp_path):
    run, url, token = server
    screenshot = tmp_path / "dashboard.png"
    assert url.startswith("http://127.0.0.1:")        # loopback by default
    store = QueueStore(run / "queue.sqlite")
    pending = store.list("pending")
    assert len(pending) == 2
    with Chromium(width=1300, height=1000) as browser:
        # Without the token (a fresh tab has none): the click is refused and nothing changes.
        browser.open(url + "t/may29/")
        browser.wait_for("document.getElementById('live').className === 'live on'")
        assert browser.evaluate("document.querySelectorAll('#rows tr').length") == 16
        browser.click(f'button.decide.reject[data-id="{pending[0].id}"]')
        msg = browser.wait_for("document.getElementById('queue-msg').textContent", ANSWER_WAIT_S)
        assert "token" in msg and "refused" in msg
        assert store.get(pending[0].id).status == "pending"

        # With the start-up link (#token=...): live rows, then approve by clicking.
        browser.open(url + "t/may29/#token=" + token)
        browser.wait_for("document.getElementById('live').className === 'live on'")
        assert "token=" not in browser.evaluate("location.href")        # dropped from the URL
        with open(run / "results.tsv", "a") as f:
            f.write("abcdef1\t1.070000\t45.5\tkeep\tappended while the page was open\n")
        first = browser.wait_for(
            "(() => { const tr = document.querySelector('#rows tr');"
            " return tr && tr.textContent.includes('appended while the page was open') && tr.className; })()")
        assert "st-keep" in first
        assert browser.evaluate("document.querySelectorAll('#rows tr').length") == 17
        assert browser.evaluate("document.getElementById('count').textContent") == "17"
        # The chart was redrawn with the new kept point labelled.
        assert browser.evaluate("document.querySelector('#chart svg').textContent"
                                ".includes('appended while the page was open')")

        browser.type_text(f'.qitem[data-id="{pending[0].id}"] .note', "clicked in chromium")
        browser.click(f'button.decide.approve[data-id="{pending[0].id}"]')
        browser.wait_for(f"!!document.querySelector('.decided .qitem[data-id=\"{pending[0].id}\"]')", ANSWER_WAIT_S)
        item = store.get(pending[0].id)
        assert (item.status, item.decision.by, item.decision.note) == ("approved", "dashboard", "clicked in chromium")
        assert browser.evaluate("document.querySelectorAll('.qitem.pending').length") == 1

        browser.screenshot(screenshot)
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000

        # An experiment's page: diff from git and the trace timeline render in the browser too.
        browser.open(url + "t/may29/e/2")
        assert browser.evaluate("document.querySelector('pre.diff').textContent").count("diff --git") == 1
        assert browser.evaluate("document.querySelectorAll('.span-row').length") >= 5


def test_a_click_is_made_only_where_its_element_is(tmp_path):
    """Browser.click presses only while its element is what lies under the point, and checks the
    press reached it: a button under an overlay is never pressed through it (the overlay's own
    handler never fires) and says so; once the overlay goes, the same click lands."""
    page = tmp_path / "p.html"
    page.write_text('<button id="b" onclick="window.hits=(window.hits||0)+1">go</button>'
                    '<div id="cover" onclick="window.covered=true" style="position:fixed;inset:0"></div>')
    with Chromium(width=400, height=300) as browser:
        browser.open(page.as_uri())
        with pytest.raises(BrowserError, match="did not reach it"):
            browser.click("#b", tries=2)
        assert browser.evaluate("window.covered === undefined && window.hits === undefined")
        browser.evaluate("setTimeout(() => document.getElementById('cover').remove(), 300)")
        browser.click("#b")   # covered on the first try, pressed once the cover is gone
        assert browser.evaluate("window.hits") == 1
        with pytest.raises(BrowserError, match="nothing matches"):
            browser.click("#absent")


def test_zz_the_checkout_is_left_as_it_was():
    """Runs last in this file (pytest keeps file order): the tests above (and any test of the
    session before it) left `git status` of the checkout unchanged."""
    assert git_status() == STATUS_AT_START, "a test wrote into the repository's checkout"
