"""Remove secrets from anything the dashboard sends.

Everything the dashboard shows was written by the loop, the judges or a model, and any of them
may have echoed an API key into a log, a diff or a trace. The app runs every response body
through one Scrubber, so no page, JSON answer or event can carry a key, whatever produced it.
"""

from __future__ import annotations

import html
import json
import os
import re

# An env var whose name contains one of these holds a secret (ANTHROPIC_API_KEY, ..._TOKEN, ...).
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET")
# Shorter values ("1", "true", "dev") are flags, not secrets; scrubbing them would mangle pages.
MIN_SECRET_LEN = 8
# Anthropic/OpenAI-style keys that may appear without being in our env (pasted into a log).
SK_PATTERN = re.compile(r"sk-[A-Za-z0-9_\-]{16,}")
# ...unless glued to a word ("task-specific-..."); a JSON escape such as the "\n" before it still
# counts as a boundary, since bodies are scrubbed after JSON encoding.
JSON_ESCAPES = ("\\n", "\\r", "\\t", "\\b", "\\f")
# What a secret is replaced with.
REDACTED = "[redacted]"


def env_secrets(environ=None) -> list[str]:
    """Values of env vars whose names look secret, long enough to be real secrets."""
    environ = os.environ if environ is None else environ
    return [v for k, v in environ.items()
            if any(p in k.upper() for p in SECRET_NAME_PARTS) and len(v) >= MIN_SECRET_LEN]


class Scrubber:
    def __init__(self, extra=(), environ=None):
        values = set()
        for v in [*env_secrets(environ), *[e for e in extra if e and len(e) >= MIN_SECRET_LEN]]:
            # The raw value plus the forms it takes once escaped into HTML or JSON.
            values.update({v, html.escape(v), html.escape(v, quote=False), json.dumps(v)[1:-1]})
        # Longest first, so a value that contains another is removed whole.
        self._values = sorted(values, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        # Plain substring replacement: far faster than one big regex on a 200 KB page.
        for v in self._values:
            if v in text:
                text = text.replace(v, REDACTED)
        if "sk-" in text:
            text = SK_PATTERN.sub(lambda m: _sk(text, m), text)
        return text

    def bytes(self, data: bytes) -> bytes:
        return self(data.decode("utf-8", errors="replace")).encode("utf-8")


def _sk(text: str, m: re.Match) -> str:
    i = m.start()
    glued = i > 0 and text[i - 1].isalnum() and text[max(0, i - 2):i] not in JSON_ESCAPES
    return m.group(0) if glued else REDACTED
