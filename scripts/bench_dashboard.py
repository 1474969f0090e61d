"""Dashboard speed: `uv run scripts/bench_dashboard.py [--n 1000] [--trials 5]`.

1. Server time for the main page and /api/results of a tag with N experiments (target < 300 ms),
   measured in-process through Flask's test client: the first (cold: files parsed) request and
   the median/p90 of warm ones.
2. Latency from a row being appended to results.tsv to it being in the page's DOM
   (target < 2 s), with the real server and headless Chromium (or, without Chromium, to the
   row's event arriving on the server-sent-events stream).
Figures vary with machine load; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dashboard.app import create_app
from dashboard.browser import Chromium, find_chromium
from dashboard.demo import build

ROOT = Path(__file__).resolve().parent.parent

# Targets: every endpoint served in under 300 ms, an appended row on screen within 2 s.
PAGE_TARGET_MS, APPEND_TARGET_S = 300.0, 2.0
# Warm requests timed per endpoint.
WARM_REQUESTS = 20
TAG = "bench"


def time_endpoints(repo: Path) -> list[tuple[str, float, float, float]]:
    app = create_app(repo=repo, token="bench-token-123456")
    c = app.test_client()
    out = []
    for url in (f"/t/{TAG}/", f"/api/results?tag={TAG}", f"/t/{TAG}/chart.svg", f"/t/{TAG}/e/5"):
        t = time.perf_counter()
        r = c.get(url)
        cold = (time.perf_counter() - t) * 1000
        assert r.status_code == 200, (url, r.status_code)
        warm = []
        for _ in range(WARM_REQUESTS):
            t = time.perf_counter()
            c.get(url)
            warm.append((time.perf_counter() - t) * 1000)
        warm.sort()
        out.append((url, cold, statistics.median(warm), warm[int(0.9 * (len(warm) - 1))]))
    return out


def start_server(repo: Path):
    proc = subprocess.Popen([sys.executable, str(ROOT / "dashboard" / "app.py"), "--repo", str(repo),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().split()[1]        # "dashboard: http://127.0.0.1:PORT/"
    return proc, url


def append_row(run: Path, i: int) -> str:
    desc = f"bench append {i}"
    with open(run / "results.tsv", "a") as f:
        f.write(f"{i:07x}\t1.050000\t44.0\tdiscard\t{desc}\n")
    return desc


def latency_browser(run: Path, url: str, trials: int) -> list[float]:
    out = []
    with Chromium() as b:
        b.open(f"{url}t/{TAG}/")
        b.wait_for("document.getElementById('live').className === 'live on'")
        for i in range(trials):
            time.sleep(0.5)
            t = time.perf_counter()
            desc = append_row(run, 9_000_000 + i)
            b.wait_for(f"document.querySelector('#rows tr').textContent.includes('{desc}')",
                       timeout=30, interval=0.01)
            out.append(time.perf_counter() - t)
    return out


def latency_stream(run: Path, url: str, trials: int) -> list[float]:
    host, port = url.split("//")[1].strip("/").split(":")
    count = sum(1 for _ in open(run / "results.tsv")) - 1
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", f"/api/stream?tag={TAG}&since={count}")
    resp = conn.getresponse()
    out, buf = [], b""
    for i in range(trials):
        time.sleep(0.5)
        t = time.perf_counter()
        desc = append_row(run, 9_000_000 + i).encode()
        while desc not in buf:
            buf += resp.read1(65536)
        out.append(time.perf_counter() - t)
        buf = b""
    conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--n", type=int, default=1000, help="experiments in the fixture")
    ap.add_argument("--trials", type=int, default=5, help="appends timed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        run = build(Path(tmp), TAG, n=args.n, seed=0, git_upto=10)
        print(f"fixture: {args.n} experiments built in {time.perf_counter() - t:.1f}s")
        repo = run.parent.parent
        print(f"\nserver time (ms), {args.n} experiments, target < {PAGE_TARGET_MS:.0f}:")
        print(f"  {'endpoint':32} {'cold':>8} {'median':>8} {'p90':>8}")
        for url, cold, med, p90 in time_endpoints(repo):
            print(f"  {url:32} {cold:8.1f} {med:8.1f} {p90:8.1f}")
        proc, url = start_server(repo)
        try:
            if find_chromium():
                kind, lat = "in the page's DOM (Chromium)", latency_browser(run, url, args.trials)
            else:
                kind, lat = "on the SSE stream (no Chromium)", latency_stream(run, url, args.trials)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        print(f"\nappend -> {kind}, {args.trials} trials, target < {APPEND_TARGET_S:.0f} s:")
        print(f"  median {statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms")
        print("\n(provisional: the machine is shared; figures move with its load)")


if __name__ == "__main__":
    main()
