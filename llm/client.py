"""One LLM client: the Anthropic Messages API built, retried and accounted in one place.

The Claude proposer (agent/proposers/claude.py), the LLM judge (agent/judges/llm_judge.py) and
the arms (search/arms_llm.py: the claude policy and the hybrid's code ideas) all go
through `LLMClient`. It lives in harness/ because the arms need it and harness/ may not import
agent/.

- Client: `anthropic.Anthropic`, key from ANTHROPIC_API_KEY and endpoint from ANTHROPIC_BASE_URL
  unless given (tests point ANTHROPIC_BASE_URL at tests/fake_anthropic.py, the local Messages
  API stand-in).
- Model: DEFAULT_MODEL for every role, overridden per role by its environment variable
  (ROLE_ENV: AUTORESEARCH_PROPOSER_MODEL, AUTORESEARCH_JUDGE_MODEL, AUTORESEARCH_ARMS_MODEL) and
  by an explicit model (a CLI flag) over both.
- Retries: the SDK retries each request `sdk_max_retries` times (0.5-8 s backoff, honouring
  retry-after). After that, with `patience` > 0, we go on retrying what can pass (408/409/429,
  5xx, timeouts, connection errors) with exponential backoff that honours retry-after, until the
  API has been down `patience` seconds in a row: LLMUnavailable. With patience 0 (the judge, the
  arms) the first failure after the SDK's retries is LLMUnavailable. 401/403 are LLMUnavailable
  at once (a bad key does not heal); other 4xx are LLMRequestError (this request is wrong).
- Accounting: every reply carries its tokens (llm/pricing.usage_dict) and dollars
  (llm/pricing.cost_usd); the client keeps running totals (`totals`).
"""
from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from llm import pricing

if TYPE_CHECKING:
    import anthropic

# One default model for every role: Claude Sonnet 5 ($2/$10 per MTok, llm/pricing.py), a good
# cost/skill balance for many small code edits and short structured verdicts overnight; the
# proposer, the judge and the arms used to default to three different models.
DEFAULT_MODEL = "claude-sonnet-5"
# Per-role model overrides (the existing names kept working).
ROLE_ENV = {"proposer": "AUTORESEARCH_PROPOSER_MODEL", "judge": "AUTORESEARCH_JUDGE_MODEL",
            "arms": "AUTORESEARCH_ARMS_MODEL"}
# Retries inside the SDK per request (it backs off 0.5 s..8 s and honours retry-after).
SDK_MAX_RETRIES = 2
# Seconds one HTTP request may take (a full rewrite of train.py at 16k output tokens takes minutes).
REQUEST_TIMEOUT_S = 300.0
# Our own backoff between failed requests when patience > 0: BASE * 2**k seconds, capped, jittered.
BACKOFF_BASE = 2.0
BACKOFF_MAX = 60.0
# Statuses worth retrying below 500 (the SDK uses the same set); every 5xx is retried too.
RETRY_STATUSES = (408, 409, 429)
# Statuses that mean we cannot use the API at all.
UNAVAILABLE_STATUSES = (401, 403)
# The key sent when only ANTHROPIC_BASE_URL is set (a local stand-in or a proxy that adds its own
# credentials): the SDK refuses to send a request without one.
NO_KEY = "no-key-set"


class LLMError(Exception):
    """A call that produced no reply. `cause` is the SDK's exception, when there was one."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause


class LLMUnavailable(LLMError):
    """The API cannot be used now: a refused key, or down longer than the client's patience."""


class LLMRequestError(LLMError):
    """The API rejected this request (a 4xx other than 401/403/408/409/429): retrying cannot help."""


@dataclass(frozen=True)
class RetryPolicy:
    sdk_max_retries: int = SDK_MAX_RETRIES
    timeout: float = REQUEST_TIMEOUT_S
    patience: float = 0.0          # seconds of our own retries after the SDK's (0: none)
    backoff_base: float = BACKOFF_BASE
    backoff_max: float = BACKOFF_MAX


@dataclass
class ToolCall:
    id: str
    name: str
    input: Any                      # whatever JSON the model sent (not always an object)


@dataclass
class LLMReply:
    """One Messages API reply: its text, tool calls, tokens and cost; `content` = the SDK blocks."""
    text: str
    tool_calls: list[ToolCall]
    tokens: dict
    cost_usd: float
    model: str
    stop_reason: str | None
    retries: int = 0                # failed tries we retried before this reply (not the SDK's own)
    seconds: float = 0.0
    content: list = field(default_factory=list, repr=False)


def model_for(role: str, model: str | None = None) -> str:
    """The explicit model, else the role's environment variable, else DEFAULT_MODEL."""
    env = ROLE_ENV.get(role)
    return model or (os.environ.get(env) if env else None) or DEFAULT_MODEL


def available() -> bool:
    """Whether the environment names an API to call (a key, or a base URL such as a test server)."""
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_BASE_URL"))


def make_client(*, api_key: str | None = None, base_url: str | None = None,
                retry: RetryPolicy = RetryPolicy()) -> anthropic.Anthropic:
    """The one place an `anthropic.Anthropic` is built (the SDK is imported here, on first use: a
    night with the offline proposer never pays for it)."""
    import anthropic
    base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or (NO_KEY if base_url else None)
    return anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=retry.sdk_max_retries,
                               timeout=retry.timeout)


def retry_after(response) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms or retry-after), if it said."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name))
        except (TypeError, ValueError):
            continue
        if value >= 0:
            return value * scale
    return None


def reply_from(resp, model: str, retries: int = 0, seconds: float = 0.0) -> LLMReply:
    """An SDK Message as an LLMReply, priced for `model`."""
    tokens = pricing.usage_dict(resp.usage)
    text = "".join(b.text for b in resp.content if getattr(b, "type", "") == "text")
    calls = [ToolCall(b.id, b.name, b.input) for b in resp.content if getattr(b, "type", "") == "tool_use"]
    return LLMReply(text, calls, tokens, pricing.cost_usd(model, tokens), model, resp.stop_reason,
                    retries, seconds, list(resp.content))


class LLMClient:
    """Messages API calls for one role, with the retry policy and running token/cost totals."""

    def __init__(self, role: str = "default", model: str | None = None, *, api_key: str | None = None,
                 base_url: str | None = None, retry: RetryPolicy = RetryPolicy(), client=None,
                 on_retry: Callable[[str], None] | None = None):
        self.role = role
        self.model = model_for(role, model)
        self.retry = retry
        self.client = client or make_client(api_key=api_key, base_url=base_url, retry=retry)
        self.on_retry = on_retry            # told one line about each failure we retry
        self.totals = {"calls": 0, "retries": 0, "tokens": {}, "cost_usd": 0.0}
        self._lock = threading.Lock()

    def create(self, **kwargs) -> LLMReply:
        """messages.create with our retries; raises LLMUnavailable or LLMRequestError."""
        kwargs.setdefault("model", self.model)
        t0 = time.monotonic()
        resp, retries = self._create_with_retries(kwargs)
        reply = reply_from(resp, kwargs["model"], retries, time.monotonic() - t0)
        with self._lock:
            self.totals["calls"] += 1
            self.totals["retries"] += retries
            pricing.add_tokens(self.totals["tokens"], reply.tokens)
            self.totals["cost_usd"] += reply.cost_usd
        return reply

    def _create_with_retries(self, kwargs: dict):
        import anthropic
        down_since: float | None = None
        failures = 0
        while True:
            attempt_start = time.monotonic()
            try:
                return self.client.messages.create(**kwargs), failures
            except anthropic.APIStatusError as e:
                status = e.status_code
                if status in UNAVAILABLE_STATUSES:
                    raise LLMUnavailable(f"Anthropic API refused our key ({status}): {e.message}", e) from e
                if status not in RETRY_STATUSES and status < 500:
                    raise LLMRequestError(f"Anthropic API rejected the request ({status}): {e.message}", e) from e
                wait, last, cause = retry_after(e.response), f"{status} {e.message}", e
            except anthropic.APIConnectionError as e:      # includes APITimeoutError
                wait, last, cause = None, f"{type(e).__name__}: {e}", e
            if self.retry.patience <= 0:
                raise LLMUnavailable(f"{type(cause).__name__}: {getattr(cause, 'message', cause)}", cause) from cause
            failures += 1
            if self.on_retry is not None:
                self.on_retry(f"{self.role} call failed, retry {failures}: {last}")
            down_since = attempt_start if down_since is None else down_since
            down = time.monotonic() - down_since
            if down >= self.retry.patience:
                raise LLMUnavailable(f"Anthropic API down for {down:.0f}s (patience "
                                     f"{self.retry.patience:.0f}s); last error: {last}", cause) from cause
            if wait is None:
                wait = (min(self.retry.backoff_base * 2 ** (failures - 1), self.retry.backoff_max)
                        * random.uniform(0.75, 1.0))
            time.sleep(max(0.0, min(wait, self.retry.patience - down)))
