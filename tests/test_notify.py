"""Notifications (agent/notify.py) against a local webhook: what is posted, that a slow or dead
endpoint never holds the loop, and that no secret leaves."""
import json
import os
import re
import threading
import unicodedata
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.notify import Notifier, Watch, body, check_url, host_of
from harness.experiment_record import ExperimentRecord
from harness.secrets import scrub_env, scrub_text


class Hook:
    """A webhook on 127.0.0.1: records every POST body; `status` to answer; `hold` to stall."""

    def __init__(self):
        self.bodies, self.status, self.hold = [], 200, None
        self.requests = 0
        hook = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                hook.requests += 1
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if hook.hold is not None:
                    hook.hold.wait(30)
                if hook.status == 200:
                    hook.bodies.append(json.loads(data))
                self.send_response(hook.status)
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/services/T000/B000/secretpath123"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    if h.hold is not None:
        h.hold.set()
    h.close()


def test_a_message_reaches_slack_and_discord_shapes(hook):
    said = []
    n = Notifier(hook.url, said.append, backoff_s=0.01)
    n.post("new_best", "autoresearch t: new best 2.5")
    n.close()
    assert hook.bodies == [{"text": "autoresearch t: new best 2.5", "content": "autoresearch t: new best 2.5",
                            "event": "new_best", "allowed_mentions": {"parse": []}, "flags": 4,
                            "unfurl_links": False, "unfurl_media": False}]
    assert n.sent == 1 and said == []


def test_a_stalled_endpoint_never_holds_the_caller(hook):
    hook.hold = threading.Event()
    n = Notifier(hook.url, lambda s: None, backoff_s=0.01)
    done = threading.Event()

    def caller():
        for i in range(5):
            n.post("digest", f"m{i}")
        done.set()
    threading.Thread(target=caller, daemon=True).start()
    assert done.wait(10), "post() waited for the webhook"
    assert hook.bodies == [], "the first message is still held by the endpoint"
    hook.hold.set()
    n.close(timeout=20)
    assert [b["content"] for b in hook.bodies] == [f"m{i}" for i in range(5)]


def test_a_failing_endpoint_is_retried_then_dropped_and_said_once(hook):
    hook.status = 500
    said = []
    n = Notifier(hook.url, said.append, tries=3, backoff_s=0.01)
    n.post("stop", "one")
    n.post("stop", "two")
    n.close()
    assert hook.requests == 6, "each message tried 3 times"
    assert n.dropped == 2 and n.sent == 0
    assert len(said) == 2 and "HTTP 500" in said[0] and "127.0.0.1" in said[0]
    assert "did not answer again before the stop: 2 message(s) lost (HTTP 500)" in said[1], said
    assert "secretpath123" not in "".join(said), "the URL's path (its token) is never printed"
    hook.status = 200
    n2 = Notifier(hook.url, said.append, tries=3, backoff_s=0.01)
    n2._down, n2._lost = "HTTP 500", 4
    n2.post("stop", "three")
    n2.close()
    assert said[-1].endswith("answers again; 4 message(s) were lost while it did not")
    assert hook.bodies[-1]["content"] == "three"


def test_a_refusal_is_not_sent_again(hook):
    hook.status = 404
    n = Notifier(hook.url, lambda s: None, tries=4, backoff_s=0.01)
    n.post("stop", "x")
    n.close()
    assert hook.requests == 1 and n.dropped == 1


def test_an_unreachable_endpoint_drops_and_says_so():
    said = []
    n = Notifier("http://127.0.0.1:9/hook", said.append, tries=2, backoff_s=0.01, timeout_s=2)
    n.post("stop", "x")
    n.close()
    assert n.dropped == 1 and "did not take a message" in said[0] and "Connection refused" in said[0]
    assert said[1:] == ["notify: 127.0.0.1 did not answer again before the stop: 1 message(s) lost "
                        "(URLError: [Errno 111] Connection refused)"]


def test_secrets_and_the_url_stay_out(hook, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-notify-test-key-0123456789")
    n = Notifier(hook.url, lambda s: None, backoff_s=0.01)
    n.post("new_best", "desc quoting sk-ant-notify-test-key-0123456789 and ghp_" + "a" * 30)
    n.close()
    text = hook.bodies[0]["text"]
    assert "sk-ant-notify" not in text and "ghp_" not in text and "[redacted]" in text
    # the URL is a secret from now on: no child's environment carries it, under any name
    env = scrub_env({"AUTORESEARCH_NOTIFY_URL": hook.url, "SOME_HOOK": hook.url, "PATH": os.environ["PATH"]})
    assert set(env) == {"PATH"}
    assert len(json.loads(body("x" * 5000, "digest"))["content"]) == 2000


def test_an_error_quoting_the_url_s_path_says_no_token(hook):
    """The path is the credential (Slack's and Discord's tokens live there) and an HTTP stack's
    messages may quote it alone (http.client's InvalidURL for a stray space): it is remembered as a
    secret of its own, so nothing said or scrubbed carries it; nor does the refusal of a URL that is
    no webhook."""
    url = hook.url.replace("secretpath123", "secret path123")   # a stray space: every try fails at once
    said = []
    n = Notifier(url, said.append, tries=1, backoff_s=0.01)
    n.post("stop", "x")
    n.close()
    assert n.dropped == 1 and said and "InvalidURL" in said[0], said
    assert not [line for line in said if "path123" in line or "B000" in line], said
    # whatever else quotes the path alone (a log line of an HTTP stack) loses it in the scrub
    assert "path123" not in scrub_text("POST /services/T000/B000/secret path123 failed: 500")
    refusal = check_url("ftp://hooks.example/services/T000/B000/tokentoken")
    assert refusal and "hooks.example" in refusal and "T000" not in refusal and "tokentoken" not in refusal


def test_urls_are_checked():
    assert check_url("https://hooks.slack.com/services/x") is None
    assert check_url("ftp://x/y") and check_url("not a url") and check_url("")
    assert host_of("https://discord.com/api/webhooks/1/abc") == "discord.com"


def _rec(n, status, bpb=None, **kw):
    verdicts = kw.pop("verdicts", {})
    return ExperimentRecord.of(n=n, status=status, commit=f"{n:07d}abc", trusted_bpb=bpb, description=f"exp {n}",
                            proposer=kw.pop("proposer", "offline"), verdicts=verdicts, **kw)


def test_the_watch_says_what_a_researcher_wants_to_hear():
    posts, now = [], [1000.0]
    w = Watch("may29", lambda e, t: posts.append((e, t)), clock=lambda: now[0], digest_every_s=3600)
    history = []

    def decide(rec):
        history.append(rec)
        w.record(rec, history)
    decide(_rec(1, "keep", 3.0, proposer="baseline"))
    decide(_rec(2, "discard", 3.1))
    decide(_rec(3, "keep", 2.9, evidence={"call": "keep", "candidate": {"runs": [{"bpb": 2.9}, {"bpb": 2.91}]},
                                           "comparison": {"p_better": 0.995, "gain": 0.1}}))
    decide(_rec(4, "discard", 2.95, decision_reason="contested: P(better) 0.93",
                verdicts={"judge": {"escalations": [{"kind": "contested", "id": 7}]}}))
    for n in (5, 6, 7, 8):
        decide(_rec(n, "crash", crash_class="exception"))
    events = [e for e, _ in posts]
    assert events == ["baseline", "new_best", "queue", "crash_streak"], events
    best = dict(posts)["new_best"]
    assert "2.900000" in best and "+0.100000 over 3.000000" in best and "P(better) 0.9950" in best
    assert "review_queue.py show 7" in dict(posts)["queue"]
    w.tick("exp 9 training")
    assert len(posts) == 4, "no digest before an hour has passed"
    now[0] += 3601
    w.tick("exp 9 training")
    digest = posts[-1][1]
    assert posts[-1][0] == "digest" and "2 kept, 2 discarded, 4 crashed" in digest and "best 2.900000" in digest
    assert "running: exp 9 training" in digest
    w.tick()
    assert len(posts) == 5, "at most one digest an hour"
    w.stopped("reached --max-experiments 8", "kept 2")
    assert posts[-1] == ("stop", "autoresearch may29 stopped: reached --max-experiments 8\nkept 2")


# ---- hostile text: what a proposal's description can put in a channel

KEY_BODY = "api03-Zq7Xw2Lp9Rt4Vb8Nm1Kd"          # the part of a key that must never leave
HOSTILE = [
    "<!everyone> <!channel> <!here|here> <!subteam^S0123> <@U0123ABC> <#C0123|general>",
    "@everyone @here @channel @EVERYONE @Here and @every\u200bone, @\u200deveryone, @her\u00ade",
    "<https://evil.example/phish|click to approve> [approve](https://evil.example/x) ||spoiler|| `code` **b** # big",
    "<@&123456> <@!123456> <t:1700000000:R> <:pwn:123456> & &amp; > quote",
    "term \x1b[2J\x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x07link\x1b]8;;\x07 \x9b31m c1 \x07 bell \x7f del \x00 nul",
    "bidi \u202eexe.txt\u202c \u2066iso\u2069 \u200f rlm \ufeff bom \U000e0041\U000e0042 tags \u2028 sep",
    "key \uff53\uff4b-ant-" + KEY_BODY,                                   # full-width letters
    "key s\u200bk-ant-api03-Zq7Xw2\u200cLp9Rt4Vb8Nm1Kd",                  # zero-width inside
    "key sk-ant-api03-Zq7Xw2\u00adLp9Rt4Vb8Nm1Kd",                         # a soft hyphen inside
    "key \u0455k\u2011\u0430nt-api03-Zq7Xw2Lp9Rt4Vb8Nm1Kd",                # Cyrillic s, a, a non-breaking hyphen
    "key sk-ant-api03-Zq7Xw2Lp9Rt4Vb8Nm1Kd".replace("7", "\uff17").replace("9", "\U0001d7eb"),   # look-alike digits
]


def _skeleton(text):
    import unicodedata
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Cc"))
    return unicodedata.normalize("NFKC", text).translate(str.maketrans("\u0455\u0430", "sa"))


def test_hostile_text_reaches_no_channel_as_markup_control_or_key(hook):
    n = Notifier(hook.url, lambda s: None, backoff_s=0.01)
    for i, text in enumerate(HOSTILE):
        n.post("new_best", f"exp {i}: {text}")
    n.close()
    assert len(hook.bodies) == len(HOSTILE)
    for raw, b in zip(HOSTILE, hook.bodies):
        assert b["allowed_mentions"] == {"parse": []}, "Discord pings nobody, whatever the content says"
        for field in ("text", "content"):
            sent = b[field]
            bad = [c for c in sent if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0
                   or (unicodedata.category(c) == "Cf" and c != "\u200b")]
            assert not bad, (field, raw, bad)
            assert not re.search(r"@(everyone|here|channel)", sent, re.I), (field, sent)
            assert KEY_BODY not in _skeleton(sent) and "Zq7Xw2" not in _skeleton(sent), (field, sent)
        slack = b["text"]
        assert "<" not in slack and ">" not in slack, slack
        assert not re.search(r"&(?!amp;|lt;|gt;)", slack), slack
        content = b["content"]
        assert not re.search(r"(?<!\\)[<\[\]`*|_~#]", content), content
    slack = hook.bodies[0]["text"]
    assert slack.startswith("exp 0: &lt;!everyone&gt; &lt;!channel&gt;"), "escaped, still readable"
    assert "@\u200beveryone @\u200bhere @\u200bchannel @\u200bEVERYONE" in hook.bodies[1]["text"]
    assert "\\@\u200beveryone" in hook.bodies[1]["content"]
    assert "term red link c1" in hook.bodies[4]["text"].replace("  ", " ")
    assert all("[redacted]" in b["text"] for b in hook.bodies[6:]), [b["text"] for b in hook.bodies[6:]]


def test_escaping_never_pushes_content_past_discords_limit():
    for text in ("<" * 5000, "a" * 1999 + "<", "@everyone " * 400, "&" * 3000):
        b = json.loads(body(text, "digest"))
        assert len(b["content"]) <= 2000 and len(b["text"]) <= 2000
        assert not b["content"].endswith("\\") or b["content"].endswith("\\\\"), "an escape is never cut in half"
        assert not re.search(r"&(?!amp;|lt;|gt;)", b["text"])


def test_every_keep_says_why_and_imported_figures_are_never_the_best():
    posts = []
    w = Watch("may29", lambda e, t: posts.append((e, t)))
    history = []

    def decide(rec):
        history.append(rec)
        w.record(rec, history)
    imported = _rec(1, "keep", 0.1, imported="exp/H100/mar8 line 2")   # another machine's figure
    decide(imported)
    decide(_rec(2, "keep", 3.0, proposer="baseline", decision_reason="baseline: 3 runs, spread 0.01"))
    decide(_rec(3, "keep", 2.9, verdicts={"judge": {"basis": "metric"}},
                decision_reason="trusted val_bpb 2.900000 beats best 3.000000 by 0.1"))
    decide(_rec(4, "keep", 2.905, verdicts={"judge": {"basis": "efficiency"}},
                decision_reason="efficiency: 30% fewer FLOPs per token at an equal result"))
    decide(_rec(5, "keep", 2.895, verdicts={"judge": {"basis": "simplicity"}},
                decision_reason="simplicity: 40 fewer lines of code with an equal result"))
    decide(_rec(6, "keep", None, decision_reason="kept by hand from the review queue"))
    events = [e for e, _ in posts]
    assert events == ["baseline", "new_best", "keep", "new_best", "keep"], posts
    text = dict(enumerate(t for _, t in posts))
    assert "new best 2.900000, +0.100000 over 3.000000" in text[1] and "Kept on metric: trusted val_bpb" in text[1]
    assert "exp 4" in text[2] and "kept at 2.905000, the best stays 2.900000" in text[2]
    assert "Kept on efficiency: efficiency: 30% fewer FLOPs per token" in text[2]
    assert "new best 2.895000" in text[3] and "Kept on simplicity: simplicity: 40 fewer lines" in text[3]
    assert "kept without a figure" in text[4] and "Kept on the judge's call: kept by hand" in text[4]
    assert "Evidence" not in text[2], "no evidence recorded: the reason is all there is, said once"
    assert posts[0][0] == "baseline" and not any("over 0.100000" in t or "stays 0.100000" in t for _, t in posts), \
        "the imported 0.1 is neither announced nor the bar a keep is measured against"
