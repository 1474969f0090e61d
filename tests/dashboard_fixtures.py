"""Shared by the dashboard's tests (tests/test_dashboard.py: pages; tests/test_dashboard_api.py:
the JSON API, the stream, decisions and the token): demo run folders built by dashboard/demo.py (a
git repo with a worktree, kept commits, discarded refs and every run file) and a test client."""

import pytest

from dashboard.app import create_app
from dashboard.demo import build

TOKEN = "test-token-0123456789"
HEADER = "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A read-only demo run shared by the tests that only look."""
    return build(tmp_path_factory.mktemp("demo"), "demo", n=12, seed=1)


@pytest.fixture
def fresh(tmp_path):
    """A demo run a test may change."""
    return build(tmp_path / "d", "demo", n=6, seed=2)


def repo_of(run):
    return run.parent.parent


def client(run, **kw):
    app = create_app(repo=repo_of(run), token=TOKEN, **kw)
    app.config["STREAM_MAX_S"] = 5.0     # a stream that misses its event ends instead of hanging
    return app, app.test_client()


def rows_of(run):
    return [ln.split("\t") for ln in (run / "results.tsv").read_text().splitlines()[1:]]


def stream_events(c, url, want: bytes, headers=None, action=None):
    """Read an SSE response until `want` appears (the app ends streams after STREAM_MAX_S)."""
    resp = c.get(url, buffered=False, headers=headers or {})
    assert resp.status_code == 200 and resp.mimetype == "text/event-stream"
    got = []
    try:
        for chunk in resp.response:
            got.append(chunk if isinstance(chunk, bytes) else chunk.encode())
            if action and b"event: hello" in got[-1]:
                action()
            if want in b"".join(got):
                break
    finally:
        resp.close()
    return got
