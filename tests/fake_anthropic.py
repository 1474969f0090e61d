"""A local HTTP server that speaks the Anthropic Messages API, for tests.

The real `anthropic` client talks to it through `base_url`, so the SDK's own request building,
retries, error classes and tool-use parsing all run for real; only the model is scripted.

Usage (pytest):

    from tests.fake_anthropic import FakeAnthropic, fake_anthropic   # the fixture, re-exported

    def test_x(fake_anthropic):
        fake_anthropic.push(
            FakeAnthropic.tool_use("read_file", {"path": "train.py"}),
            FakeAnthropic.error(429, retry_after_ms=10),
            FakeAnthropic.text("done", usage={"input_tokens": 50, "output_tokens": 5}),
        )
        client = anthropic.Anthropic(api_key="test", base_url=fake_anthropic.base_url)
        ...
        body = fake_anthropic.requests[0].body          # the JSON the SDK sent
        tool_results = fake_anthropic.requests[1].tool_results()

Each POST /v1/messages pops the next scripted reply (FIFO). A reply is a `Reply` (built by the
helpers below) or a callable `handler(request) -> Reply` that can inspect what was sent. When the
queue is empty the server answers `fake.default` (by default a 500 that says the script ran out,
so a test that under-scripts fails loudly instead of hanging). Every request is recorded, also
those answered with an error.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

# Usage reported when a scripted reply does not say: small round numbers easy to sum in asserts.
DEFAULT_USAGE = {"input_tokens": 100, "output_tokens": 20,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
# The error "type" the real API uses for each status code (docs: API errors).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               500: "api_error", 503: "api_error", 529: "overloaded_error"}

_ids = itertools.count(1)


@dataclass
class Reply:
    """One scripted HTTP answer. status 200 → `body` is a Message; otherwise an error body."""
    status: int
    body: dict
    headers: dict = field(default_factory=dict)
    delay: float = 0.0          # seconds to wait before answering (client timeouts)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict               # names lower-cased
    body: Any                   # parsed JSON (or the raw text when it did not parse)
    reply_status: int = 0

    def api_key(self) -> str | None:
        """The key the client sent (x-api-key, or a Bearer token as newer SDKs send it)."""
        auth = self.headers.get("authorization", "")
        return self.headers.get("x-api-key") or (auth[7:] if auth.startswith("Bearer ") else None)

    def last_user_content(self) -> list:
        """Content blocks of the last user message (strings are turned into one text block)."""
        msgs = [m for m in self.body.get("messages", []) if m.get("role") == "user"]
        if not msgs:
            return []
        content = msgs[-1]["content"]
        return [{"type": "text", "text": content}] if isinstance(content, str) else content

    def tool_results(self) -> list[dict]:
        """The tool_result blocks of the last user message."""
        return [b for b in self.last_user_content() if b.get("type") == "tool_result"]


def _usage(usage: dict | None) -> dict:
    out = dict(DEFAULT_USAGE)
    out.update(usage or {})
    return out


class FakeAnthropic:
    """A threaded Messages API server on 127.0.0.1 with a random port."""

    def __init__(self):
        self.requests: list[RecordedRequest] = []
        self.default: Reply | Callable = FakeAnthropic.error(500, "fake server: no scripted reply left")
        self._queue: list = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._make_handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    # ---- lifecycle ----
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeAnthropic":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- scripting ----
    def push(self, *replies) -> None:
        """Append replies (Reply or callable(RecordedRequest) -> Reply) to the script."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/messages")]

    # ---- reply builders ----
    @staticmethod
    def message(content: list[dict], stop_reason: str = "end_turn", usage: dict | None = None,
                model: str = "claude-fake", delay: float = 0.0) -> Reply:
        body = {"id": f"msg_fake{next(_ids):06d}", "type": "message", "role": "assistant",
                "model": model, "content": content, "stop_reason": stop_reason,
                "stop_sequence": None, "usage": _usage(usage)}
        return Reply(200, body, {"request-id": f"req_fake{next(_ids):06d}"}, delay)

    @staticmethod
    def text(text: str, usage: dict | None = None, stop_reason: str = "end_turn") -> Reply:
        return FakeAnthropic.message([{"type": "text", "text": text}], stop_reason, usage)

    @staticmethod
    def tool_use(name: str, input: Any, usage: dict | None = None, text: str | None = None,
                 tool_id: str | None = None) -> Reply:
        """An assistant turn that calls one tool (`input` may be any JSON, to test bad input)."""
        return FakeAnthropic.tool_uses([(name, input)], usage=usage, text=text, ids=[tool_id])

    @staticmethod
    def tool_uses(calls: list[tuple[str, Any]], usage: dict | None = None, text: str | None = None,
                  ids: list | None = None) -> Reply:
        """An assistant turn with several tool_use blocks (parallel tool use)."""
        content = [{"type": "text", "text": text}] if text else []
        ids = ids or [None] * len(calls)
        for (name, inp), tid in zip(calls, ids):
            content.append({"type": "tool_use", "id": tid or f"toolu_fake{next(_ids):06d}",
                            "name": name, "input": inp})
        return FakeAnthropic.message(content, "tool_use", usage)

    @staticmethod
    def error(status: int, message: str = "", error_type: str | None = None,
              retry_after: float | None = None, retry_after_ms: int | None = None,
              delay: float = 0.0) -> Reply:
        """An API error with the real body shape and (optionally) retry-after headers."""
        etype = error_type or ERROR_TYPES.get(status, "api_error")
        body = {"type": "error", "error": {"type": etype, "message": message or etype}}
        headers = {"request-id": f"req_fake{next(_ids):06d}"}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        return Reply(status, body, headers, delay)

    # ---- the HTTP side ----
    def _next_reply(self, req: RecordedRequest) -> Reply:
        with self._lock:
            item = self._queue.pop(0) if self._queue else self.default
        reply = item(req) if callable(item) else item
        if not isinstance(reply, Reply):
            raise TypeError(f"scripted handler returned {type(reply).__name__}, not Reply")
        return reply

    def _make_handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):     # keep pytest output clean
                pass

            def _send(self, reply: Reply):
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                req = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with fake._lock:
                    fake.requests.append(req)
                if not self.path.startswith("/v1/messages"):
                    reply = FakeAnthropic.error(404, f"fake server: no route {self.path}")
                elif not isinstance(body, dict) or "messages" not in body or "model" not in body:
                    reply = FakeAnthropic.error(400, "fake server: body needs model and messages")
                else:
                    try:
                        reply = fake._next_reply(req)
                    except Exception as e:           # a broken handler is a test bug: say so
                        reply = FakeAnthropic.error(500, f"fake server handler failed: {e!r}")
                req.reply_status = reply.status
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass                              # the client gave up (timeout test)

        return Handler


@pytest.fixture
def fake_anthropic():
    """A started FakeAnthropic; stopped after the test."""
    with FakeAnthropic() as fake:
        yield fake
