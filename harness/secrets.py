"""The one scrubber: everything the loop writes and the dashboard serves, and every child's environment.

A secret is known two ways:

- by value: every environment variable of the loop's own process whose name marks it as a
  credential (ANTHROPIC_API_KEY, BRAINTRUST_API_KEY, HF_TOKEN, ...), read when the scrubber is
  first used and again on every call (a key set later is still known), plus any value code
  registers with `remember()` (a key passed on the command line, a dashboard token);
- by shape: Anthropic/OpenAI `sk-...`, Hugging Face `hf_...`, GitHub `ghp_...`, AWS `AKIA...`,
  Slack `xox?-...` keys, wherever they come from (a proposal that pastes one, a log).

`scrub(obj)` replaces both by "[redacted]" through dicts, lists and strings; `scrub_env(env)` is
the environment a child process gets: no variable with a secret's name, and none whose value
holds a known secret or a secret's shape, whatever it is called. The journal, results.tsv,
traces, commit messages, git notes, pending files, state.json, run logs and the dashboard's
pages all pass through here (docs/contracts.md, "The trust boundary").
"""
from __future__ import annotations

import html
import json
import os
import re
import threading
from typing import Any

REDACTED = "[redacted]"
# Words in an environment variable's name that mark its value as a credential.
NAME_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
# Shorter values ("1", "true", "dev") are flags, not secrets; scrubbing them would mangle text.
MIN_SECRET_LEN = 8
# Secret shapes. A key glued to a word ("task-specific-...") is not one; after a JSON escape
# ("\nsk-...") it still is, since pages are scrubbed after JSON encoding.
_EDGE = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrtbf]))"
SHAPES = re.compile(_EDGE + r"(?:sk-ant-[A-Za-z0-9_\-]{8,}|sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}"
                    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}"
                    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|glpat-[A-Za-z0-9_\-]{20,})")
# Strings longer than this are cut when a caller asks for a limit (traces hold summaries).
CUT_MARK = "...[{n} chars cut]"

_lock = threading.Lock()
_remembered: set[str] = set()


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in NAME_MARKERS)


def remember(value: str | None) -> None:
    """Treat `value` as a secret from now on (a key that never was in the environment)."""
    if value and len(value) >= MIN_SECRET_LEN:
        with _lock:
            _remembered.add(value)


def known_values(environ=None) -> list[str]:
    """Every secret value known now, longest first (so a value containing another goes whole)."""
    environ = os.environ if environ is None else environ
    found = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN}
    with _lock:
        _remembered.update(found)      # a key removed from the environment later is still known
        found = set(_remembered)
    return sorted(found, key=len, reverse=True)


def scrub_text(text: str, values: list[str] | None = None) -> str:
    values = known_values() if values is None else values
    for v in values:
        if v in text:
            text = text.replace(v, REDACTED)
    return SHAPES.sub(REDACTED, text)


def scrub(obj: Any, limit: int | None = None, _values: list[str] | None = None) -> Any:
    """A copy of `obj` with secrets replaced, recursively through dicts, lists and tuples.
    Non-JSON leaves (paths, numpy scalars...) become their str(); `limit` cuts long strings."""
    values = known_values() if _values is None else _values
    if isinstance(obj, str):
        out = scrub_text(obj, values)
        if limit is not None and len(out) > limit:
            out = out[:limit] + CUT_MARK.format(n=len(out) - limit)
        return out
    if isinstance(obj, dict):
        return {scrub_text(str(k), values): scrub(v, limit, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [scrub(v, limit, values) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    return scrub(str(obj), limit, values)


def holds_secret(value: str, values: list[str] | None = None) -> bool:
    values = known_values() if values is None else values
    return any(v in value for v in values) or SHAPES.search(value) is not None


def scrub_env(env: dict) -> dict:
    """The environment a child may have: `env` without credentials, by name, value or shape."""
    values = known_values()
    return {k: v for k, v in env.items() if not is_secret_name(k) and not holds_secret(v, values)}


class Scrubber:
    """For text that was escaped after it was written (HTML pages, JSON bodies): a secret is
    removed in each form it takes there. `extra` are values of the caller's own (a token)."""

    def __init__(self, extra=(), environ=None):
        forms = set()
        for v in known_values(environ) + [e for e in extra if e and len(e) >= MIN_SECRET_LEN]:
            forms.update({v, html.escape(v), html.escape(v, quote=False), json.dumps(v)[1:-1]})
        self._values = sorted(forms, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        return scrub_text(text, self._values)

    def bytes(self, data: bytes) -> bytes:
        return self(data.decode("utf-8", errors="replace")).encode("utf-8")
