"""No secret on the console: SDK failures are one scrubbed, rate-limited line each.

The Braintrust test runs the real SDK in a subprocess against a local HTTP server that answers 500
and echoes the request headers (so its replies carry the API key), with BRAINTRUST_API_KEY set to
a known value and BRAINTRUST_APP_URL/BRAINTRUST_API_URL pointed at it; everything the process
prints is captured. The Anthropic tests use the real SDK against tests/fake_anthropic.py.
"""
import http.server
import logging
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from agent import sdk_logs
from agent.judges.judge import Opinion
from agent.judges.llm_judge import LLMJudge
from agent.proposers.base import ProposalRequest
from agent.proposers.claude import ClaudeProposer
from tests.fake_anthropic import FakeAnthropic as F, fake_anthropic  # noqa: F401  (fixture)
from tests.loop_fixtures import REPO

BT_KEY = "bt-test-key-0123456789abcdefXYZ"
ANT_KEY = "sk-ant-test-secret-0123456789abcdef"


class _EchoHeaders(http.server.BaseHTTPRequestHandler):
    """Echoes the request headers in an error reply: 500 first (the SDK retries), then 401 (it
    gives up at once, which keeps the test fast)."""
    seen: list = []

    def _reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        _EchoHeaders.seen.append(self.headers.get("Authorization", ""))
        body = ("internal error; your request was:\n" +
                "".join(f"{k}: {v}\n" for k, v in self.headers.items())).encode()
        self.send_response(500 if len(_EchoHeaders.seen) == 1 else 401)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EchoHeaders)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    _EchoHeaders.seen = []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


TRACER_SCRIPT = textwrap.dedent("""
    import sys, time
    from agent import sdk_logs
    from agent.tracing import Tracer
    sdk_logs.install()
    t = Tracer(sys.argv[1])
    for i in range(5):
        with t.span("step", input={"i": i}):
            pass
    t.flush()
    time.sleep(float(sys.argv[2]))
    print("done")
""")


def test_braintrust_failures_never_print_the_key(tmp_path, echo_server):
    env = {"PATH": "/usr/bin:/bin", "BRAINTRUST_API_KEY": BT_KEY, "BRAINTRUST_APP_URL": echo_server,
           "BRAINTRUST_API_URL": echo_server, "BRAINTRUST_NUM_RETRIES": "0", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", TRACER_SCRIPT, str(tmp_path / "traces.jsonl"), "1.0"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "done" in p.stdout, out
    assert any(BT_KEY in h for h in _EchoHeaders.seen), "the SDK really sent the key to the server"
    assert BT_KEY not in out, out
    assert "Traceback" not in out and "Authorization" not in out, out
    lines = [l for l in out.splitlines() if l.strip() and l != "done"]
    assert 1 <= len(lines) <= sdk_logs.MAX_PER_WINDOW + 1, out
    assert all(l.startswith(("braintrust:", "tracing:")) for l in lines), out
    assert BT_KEY not in (tmp_path / "traces.jsonl").read_text()


def test_clean_line_removes_credentials_and_keeps_one_line(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789")
    text = ("500: failed tok-0123456789 Bearer abc.def-ghi ?api_key=zzz9&x=1\n"
            "Authorization: Bearer abc\nx-api-key: sk-ant-secret-value")
    line = sdk_logs.clean_line(text)
    assert "\n" not in line and "tok-0123456789" not in line and "abc.def" not in line and "zzz9" not in line
    assert line.startswith("500: failed [redacted]") and "x=1" in line
    assert sdk_logs.clean_line("x-api-key: abcdef") == "x-api-key: [redacted]"
    assert len(sdk_logs.clean_line("y" * 5000)) <= sdk_logs.MAX_CHARS + 3


def test_rate_limit_shows_a_few_lines_then_a_count(capfd, monkeypatch):
    monkeypatch.setattr(sdk_logs, "WINDOW_SECONDS", 0.3)
    lines = sdk_logs.SdkLines()
    shown = [lines.emit("braintrust", f"retry {i} failed") for i in range(10)]
    assert shown == [True] * sdk_logs.MAX_PER_WINDOW + [False] * (10 - sdk_logs.MAX_PER_WINDOW)
    time.sleep(0.35)
    assert lines.emit("braintrust", "later")
    err = capfd.readouterr().err.splitlines()
    assert len(err) == sdk_logs.MAX_PER_WINDOW + 1
    assert err[-1] == f"braintrust: later (+{10 - sdk_logs.MAX_PER_WINDOW} more lines suppressed)"


def test_sdk_loggers_lose_tracebacks_and_keys(capfd, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_KEY)
    sdk_logs.install()
    try:
        raise RuntimeError(f"server said: headers x-api-key: {ANT_KEY}\nmore reply")
    except RuntimeError:
        logging.getLogger("anthropic._base_client").exception("request failed for %s", ANT_KEY)
    logging.getLogger("httpx").warning("HTTP Request: POST /v1 \"500\" Authorization: Bearer %s", ANT_KEY)
    err = capfd.readouterr().err
    assert ANT_KEY not in err and "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("anthropic: request failed for [redacted] (RuntimeError:")
    assert lines[1].startswith("httpx: HTTP Request: POST /v1")


def _request(tmp_path):
    (tmp_path / "train.py").write_text("DEPTH = 4  # layers\n")
    (tmp_path / "prepare.py").write_text("X = 1\n")
    return ProposalRequest(n=2, worktree=tmp_path, train_source="DEPTH = 4  # layers\n", program="p",
                           history=[], best=None)


def test_anthropic_retries_are_one_scrubbed_line_each(fake_anthropic, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_KEY)
    monkeypatch.setattr(sdk_logs, "LINES", sdk_logs.SdkLines())
    fake_anthropic.default = F.error(529, f"overloaded; you sent x-api-key: {ANT_KEY}", retry_after_ms=20)
    p = ClaudeProposer(model="claude-sonnet-4-6", api_key=ANT_KEY, base_url=fake_anthropic.base_url,
                       sdk_max_retries=0, backoff_base=0.01, timeout=5.0, api_patience=0.6)
    with pytest.raises(Exception):
        p.propose(_request(tmp_path))
    assert len(fake_anthropic.message_requests()) >= 4
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert ANT_KEY not in err and "Traceback" not in err, err
    assert 1 <= len(lines) <= sdk_logs.MAX_PER_WINDOW and all(l.startswith("anthropic: ") for l in lines), err
    assert "retry 1" in lines[0]

    judge = LLMJudge(api_key=ANT_KEY, base_url=fake_anthropic.base_url, max_retries=0)
    monkeypatch.setattr(sdk_logs, "LINES", sdk_logs.SdkLines())
    res = judge.review(diff="-a\n+b", hypothesis="h", description="d", figures={},
                       rule=Opinion("rule", "keep", "better", 0.9), history=[])
    assert res.error
    err = capfd.readouterr().err
    assert ANT_KEY not in err and err.count("\n") == 1 and err.startswith("anthropic: LLM judge call failed")
