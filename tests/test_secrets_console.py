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


# ---- look-alike keys, and text a person reads (harness/secrets.py clean_text)

from harness import secrets as sec  # noqa: E402

# One key of each shape the scrubber knows, and the part of it that must never leave.
KEYS = ["sk-ant-api03-Qm4Tz8Wv2Yx6Bn0Lk3Jh", "sk-proj-Hq5Rk9Tm2Wz7Yb4Nv1Lx", "hf_Pk4Rt8Wm2Zq6Yx0Bn3Lv9Jh",
        "ghp_Mw7Kq2Zr5Tx9Bn4Vh1Ly8Pd3", "github_pat_11ABCDEFG0Zq7Rk2Tm9Wx4Yv", "AKIAQZ7RK2TM9WX4YV6N",
        "xoxb-2Qk7Rm4Tz9-Wx3Yv", "glpat-Zq7Rk2Tm9Wx4Yv6Nb1Lh"]


def _fullwidth(s):
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


def _math_sans(s):   # mathematical sans-serif letters and digits (NFKC folds them)
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr(0x1D5BA + ord(c) - 97))
        elif "A" <= c <= "Z":
            out.append(chr(0x1D5A0 + ord(c) - 65))
        elif "0" <= c <= "9":
            out.append(chr(0x1D7E2 + ord(c) - 48))
        else:
            out.append(c)
    return "".join(out)


def _every(s, ch, k=3):   # `ch` after every k-th character
    return "".join(c + (ch if i % k == k - 1 else "") for i, c in enumerate(s))


LOOKALIKES = {
    "full-width": _fullwidth,
    "math sans-serif": _math_sans,
    "zero-width spaces": lambda s: _every(s, "\u200b"),
    "zero-width joiners": lambda s: _every(s, "\u200d", 4),
    "word joiner and BOM": lambda s: _every(s, "\u2060", 5).replace("-", "-\ufeff"),
    "soft hyphens": lambda s: _every(s, "\u00ad", 6),
    "NUL and DEL": lambda s: _every(s, "\x00", 7).replace("_", "_\x7f"),
    "bidi isolates": lambda s: "\u2066" + s[:6] + "\u2069" + s[6:],
    "combining marks": lambda s: _every(s, "\u0301", 5),
    "Cyrillic and Greek letters": lambda s: s.translate(str.maketrans("aeopckxyABEHKMOPTX",
                                                                        "\u0430\u0435\u043e\u0440\u0441\u043a\u0445\u0443"
                                                                        "\u0391\u0392\u0395\u0397\u039a\u039c\u039f\u03a1\u03a4\u03a7")),
    "other dashes": lambda s: s.replace("-", "\u2011"),
    "mixed": lambda s: _fullwidth(s[:4]) + "\u200b" + s[4:10].translate(str.maketrans("ae", "\u0430\u0435")) + "\u00ad" + s[10:],
}


def _skeleton(text):
    import unicodedata
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text if c == "\n" or unicodedata.category(c) not in ("Cc", "Cf", "Mn"))


@pytest.mark.parametrize("how", sorted(LOOKALIKES))
def test_a_key_written_in_look_alikes_is_scrubbed_whole(how):
    for key in KEYS:
        text = f"before {LOOKALIKES[how](key)} after\nnext line"
        out = sec.scrub_text(text, [])
        shown = _skeleton(out)   # an invisible character at the key's edge may stay: it shows nothing
        assert shown.startswith("before [redacted]") and shown.endswith(" after\nnext line"), (how, key, out)
        back = _skeleton(out).translate(str.maketrans("\u0430\u0435\u043e\u0440\u0441\u043a\u0445\u0443\u0391\u0392"
                                                      "\u0395\u0397\u039a\u039c\u039f\u03a1\u03a4\u03a7",
                                                      "aeopckxyABEHKMOPTX")).replace("\u2011", "-")
        for i in range(0, len(key) - 6):
            assert key[i:i + 7] not in back, (how, key, out)


def test_a_remembered_secret_split_by_invisible_characters_is_scrubbed():
    token = "dash-token-Rk2Tm9Wx4"
    out = sec.scrub_text("token: " + _every(token, "\u200b", 2) + " end", [token])
    assert _skeleton(out) == "token: [redacted] end" and "Rk2" not in out


NORMAL = [
    "café, naïve, Ångström, São Paulo, Łódź: the accents stay",
    "日本語のテキストと中文文本, 한국어 텍스트",
    "Привет, мир: обучение модели; Ελληνικά: α = 0.9, β = 0.95",
    "שלום עולם and مرحبا بالعالم (right-to-left words, no control characters)",
    "emoji 😀 👍🏽 ❤️ 🇫🇷 and ｆｕｌｌ－ｗｉｄｔｈ ｔｅｘｔ, x² − y², ﬁle ½",
    "task-specific-warmup-schedule-v2 and risk-averse-lr-decay-variant (keys glued to a word are not keys)",
    "sk-learn style, hf_hub small, AKIA short, xoxb- short, ghp_short",
    "json \"desc\": \"line\\nnext\" and a tab\there",
    "−0.0123 bpb (minus sign), 1e-3 lr, 10–20% (en dash), «quotes», „quotes“",
]


def test_normal_text_is_left_as_written():
    for text in NORMAL:
        assert sec.scrub_text(text, []) == text, text
        assert sec.clean_text(text) == text, text


def test_clean_text_removes_what_a_terminal_or_a_reader_would_be_fooled_by():
    cases = {
        "red \x1b[31mtext\x1b[0m": "red text",
        "clear\x1b[2J\x1b[H screen": "clear screen",
        "title \x1b]0;owned\x07 and \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\": "title  and link",
        "c1 \x9b31m csi and \x9d0;t\x9c osc": "c1  csi and  osc",
        "nul\x00 bell\x07 bs\x08 del\x7f esc\x1b": "nul bell bs del esc",
        "exe.\u202etxt\u202c \u2066iso\u2069 \u200e\u200f marks \u061c alm": "exe.txt iso  marks  alm",
        "zw\u200b\u200c\u200d\u2060\ufeff \u00adsoft \U000e0041\U000e0074tags": "zw soft tags",
        "hangul\u3164filler \u115f and braille\u2800blank": "hangulfiller  and brailleblank",
        "a\r\nb\rc\u2028d\u2029e\x85f": "a\nb\nc\nd\ne\nf",
        "lone \ud800 surrogate": "lone \ufffd surrogate",
    }
    for raw, want in cases.items():
        assert sec.clean_text(raw) == want, (raw, sec.clean_text(raw))
        assert sec.clean_text(raw, one_line=True) == " ".join(want.split())
    assert sec.clean_text("a\u202eb\x00c\x1b[1m", mark=True) == "a<U+202E>b<U+0000>c<U+001B>[1m"
    assert sec.clean_text("tab\tand\nnewline") == "tab\tand\nnewline"
    assert sec.clean_text("one\n\tline  \u2028 now", one_line=True) == "one line now"
    assert sec.clean_text(None) == "None" and sec.clean_text(3.5) == "3.5"
    assert sec.clean_text("key " + KEYS[0]) == "key [redacted]", "the one function scrubs as well"
    sec.clean_text("\ud800").encode("utf-8")   # always writable as UTF-8
