"""Third-party SDK chatter (Braintrust, Anthropic, httpx) on the console: one scrubbed line each, rate-limited.

The SDKs report their own failures: Braintrust prints tracebacks to its background logger's
output stream (and logs through `logging`), the HTTP clients log retries. Left alone, a failing
endpoint fills the console with tracebacks that quote the server's reply, and a server that
echoes request headers puts the API key on the console (and into anything that tees it).

Everything they say goes through `SdkLines` instead: only the first line of each message (no
traceback frames, no multi-line server replies), secrets removed (`harness.secrets.scrub` plus
Authorization headers and bearer tokens), cut to MAX_CHARS, and at most MAX_PER_WINDOW lines per
source per WINDOW_SECONDS (the count of suppressed lines is given with the next one shown).

    install()                          # once, at start: logging handlers on the SDK loggers
    quiet_braintrust(bt_logger)        # after braintrust.init_logger: its printed output too
    report("anthropic", "retry 2: 529 overloaded")   # our own one-liners about SDK failures
"""
from __future__ import annotations

import io
import logging
import re
import sys
import threading
import time

from harness.secrets import REDACTED, scrub

# Loggers of the SDKs we use (children such as anthropic._base_client included).
SDK_LOGGERS = ("braintrust", "anthropic", "httpx", "httpcore", "urllib3", "requests")
# Lines shown per source in a window; a retry storm shows a few, then a count.
MAX_PER_WINDOW = 3
WINDOW_SECONDS = 60.0
# A line longer than this is cut: server replies can be long and are not for the console.
MAX_CHARS = 240
# Credentials that may not come from our environment: HTTP auth headers, bearer tokens, key params.
CREDENTIAL_PATTERNS = (
    (re.compile(r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|cookie)\s*[:=]\s*.*"),
     r"\1: " + REDACTED),
    (re.compile(r"(?i)\bbearer\s+\S+"), "Bearer " + REDACTED),
    (re.compile(r"(?i)([?&](?:api_?key|token|key)=)[^&\s]+"), r"\1" + REDACTED),
)
# Chunks of a printed traceback that carry no message of their own.
TRACEBACK_NOISE = ("Traceback (most recent call last)", "The above exception was the direct cause",
                   "During handling of the above exception", "File \"")


def clean_line(text: str) -> str:
    """The first meaningful line of `text`, with credentials removed and cut to MAX_CHARS."""
    first = ""
    for line in str(text).splitlines():
        if line.strip():
            first = line.strip()
            break
    first = scrub(first)
    for pattern, replacement in CREDENTIAL_PATTERNS:
        first = pattern.sub(replacement, first)
    if len(first) > MAX_CHARS:
        first = first[:MAX_CHARS] + "..."
    return first


class SdkLines:
    """Rate-limited one-line reports per source, written to the current sys.stderr."""

    def __init__(self):
        self._lock = threading.Lock()
        self._window: dict[str, tuple[float, int, int]] = {}   # source -> (start, shown, suppressed)

    def emit(self, source: str, text: str) -> bool:
        line = clean_line(text)
        if not line:
            return False
        now = time.monotonic()
        with self._lock:
            start, shown, suppressed = self._window.get(source, (now, 0, 0))
            if now - start >= WINDOW_SECONDS:
                start, shown = now, 0
            if shown >= MAX_PER_WINDOW:
                self._window[source] = (start, shown, suppressed + 1)
                return False
            self._window[source] = (start, shown + 1, 0)
        extra = f" (+{suppressed} more lines suppressed)" if suppressed else ""
        try:
            print(f"{source}: {line}{extra}", file=sys.stderr, flush=True)
        except (OSError, ValueError):   # stderr closed at exit
            return False
        return True


LINES = SdkLines()


def report(source: str, text: str) -> bool:
    """One scrubbed, rate-limited console line about an SDK failure; False when suppressed."""
    return LINES.emit(source, text)


class _Handler(logging.Handler):
    """Logging handler of the SDK loggers: the message's first line, plus the exception's."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:
            msg = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            msg = f"{clean_line(msg)} ({type(exc).__name__}: {clean_line(str(exc))})"
        report(record.name.split(".")[0], msg)


_installed = False


def install(level: int = logging.WARNING) -> None:
    """Route the SDK loggers through the scrubbing, rate-limited handler (idempotent)."""
    global _installed
    if _installed:
        return
    handler = _Handler(level)
    for name in SDK_LOGGERS:
        lg = logging.getLogger(name)
        lg.addHandler(handler)
        lg.propagate = False   # nothing reaches the root handlers unscrubbed
        if lg.level == logging.NOTSET or lg.level < level:
            lg.setLevel(level)
    _installed = True


class ScrubbedStream(io.TextIOBase):
    """A stream for an SDK that prints: each write's first line is reported, frames are dropped."""

    def __init__(self, source: str):
        self.source = source

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        text = str(s)
        stripped = text.strip()
        if stripped and not stripped.startswith(TRACEBACK_NOISE) and not text.startswith((" ", "\t")):
            report(self.source, text)
        return len(text)

    def flush(self) -> None:
        pass


def quiet_braintrust(bt_logger) -> bool:
    """Send what the Braintrust background logger prints to a ScrubbedStream; False if not found."""
    install()
    try:
        state = getattr(bt_logger, "state", None)
        if state is None:
            import braintrust.logger as bl
            state = bl._state
        bg = state.global_bg_logger()
        bg.outfile = ScrubbedStream("braintrust")
        return True
    except Exception:
        return False
