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

A key written to slip past the shapes is still one: the scrubber also matches a skeleton of the
text (each character's compatibility form, NFKD, without accents; Cyrillic, Greek and Armenian
look-alikes read as the Latin letter; dashes as "-"; invisible characters, controls and soft
hyphens dropped), so full-width digits, look-alike letters, a zero-width space or a soft hyphen
inside a key change nothing. Only the span of the original text a key covers is replaced: the
rest is left as written.

`clean_text(text)` is what text proposed or imported (a description, a hypothesis, a judge's
reason, an imported results.tsv row) goes through before a person reads it (results.tsv,
report.md, a terminal, a webhook): terminal escape sequences, control characters (C0 but tab and
newline, C1, DEL, NUL), bidi overrides and every other invisible format character are removed,
lone surrogates become U+FFFD, and secrets are scrubbed. `one_line=True` also folds it to one
line; `mark=True` shows what was removed as <U+XXXX> (a diff, where the reader must see it).
"""
from __future__ import annotations

import html
import json
import os
import re
import threading
import unicodedata
from functools import lru_cache
from typing import Any

REDACTED = "[redacted]"
# Words in an environment variable's name that mark its value as a credential.
NAME_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
# Shorter values ("1", "true", "dev") are flags, not secrets; scrubbing them would mangle text.
MIN_SECRET_LEN = 8
# Secret shapes. A key glued to a word ("task-specific-...") is not one; after a JSON escape
# ("\nsk-...") it still is, since pages are scrubbed after JSON encoding.
_EDGE = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrtbf]))"
_KEYS = (r"(?:sk-ant-[A-Za-z0-9_\-]{8,}|sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,}"
         r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}"
         r"|xox[abprs]-[A-Za-z0-9\-]{10,}|glpat-[A-Za-z0-9_\-]{20,})")
SHAPES = re.compile(_EDGE + _KEYS)
# The same shapes without the edge: in a skeleton the edge is checked on the original text.
_KEYS_RE = re.compile(_KEYS)
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
    if _NOT_PLAIN.search(text) is not None:   # not all printable ASCII: match on the skeleton first,
        text = _scrub_skeleton(text, values)  # so a key split by an invisible character goes whole
    return SHAPES.sub(REDACTED, text)


# ---- look-alikes: the skeleton a key is matched on

# Characters that are their own skeleton and print as themselves: printable ASCII, tab, newline, CR.
_NOT_PLAIN = re.compile(r"[^\t\n\r\x20-\x7e]")
_RUNS = re.compile(r"[\t\n\r\x20-\x7e]+|.", re.S)
# Letters of other scripts that read as a Latin one (from Unicode's confusables for a-z and A-Z):
# Cyrillic, Greek, Armenian and Latin variants. NFKD already maps full-width and mathematical
# letters and digits, circled and superscript digits, ligatures.
_LOOKALIKE = str.maketrans(
    "\u0430\u0441\u0501\u0435\u04bb\u0456\u0458\u043a\u04cf\u043e\u0440\u051b\u0455\u0443\u0445\u051d\u04af"
    "\u0410\u0412\u0421\u0415\u041d\u0406\u0408\u041a\u041c\u041e\u0420\u0405\u0422\u0425\u0423\u04ae\u051a\u051c\u04c0"
    "\u03b1\u03bf\u03bd\u03ba\u03b9\u03c1\u03c5\u03c7\u03b3\u03f2\u03f3"
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7\u03f9\u037f"
    "\u0585\u057d\u0570\u0578\u0566\u0581\u054d\u0555"
    "\u0131\u0237\u0251\u01c0\u0261\u2212\u02d7\u2043",
    "acdehijklopqsyxwy"
    "ABCEHIJKMOPSTXYYQWI"
    "aovkipuxycj"
    "ABEZHIKMNOPTYXCJ"
    "ouhnqgUO"
    "ijalg---")
# Invisible characters that Unicode does not class as format characters (Hangul fillers, the
# combining grapheme joiner, Khmer inherent vowels, the braille blank): dropped like them.
_BLANKS = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5\u2800")


def _invisible(c: str) -> bool:
    return unicodedata.category(c) in ("Cc", "Cf", "Cs") or c in _BLANKS


class _Table(dict):
    """A str.translate table filled on first use by `of` (one character's text), so a text's
    characters are looked up at C speed after the first; reset past TABLE_MAX entries (a text of
    every code point must not grow memory without end)."""

    def __init__(self, of):
        super().__init__()
        self.of = of

    def __missing__(self, code: int):
        if len(self) > TABLE_MAX:
            self.clear()
        got = self[code] = self.of(chr(code))
        return got


# Characters remembered by each translate table.
TABLE_MAX = 1 << 16


@lru_cache(maxsize=4096)
def _skeleton_char(c: str) -> str:
    """What one character reads as, for matching: "" for an invisible one, else its NFKD form
    without combining marks, look-alike letters as the Latin one and dashes as "-"."""
    if c in "\t\n\r" or "\x20" <= c <= "\x7e":
        return c
    if _invisible(c):
        return ""
    out = []
    for d in unicodedata.normalize("NFKD", c):
        cat = unicodedata.category(d)
        if cat in ("Mn", "Me") or _invisible(d):
            continue
        out.append("-" if cat == "Pd" else d.translate(_LOOKALIKE))
    return "".join(out)


_SKELETON = _Table(_skeleton_char)


def _scrub_skeleton(text: str, values: list[str]) -> str:
    """`text` with every key its skeleton shows replaced: the span of the original it covers."""
    skel = text.translate(_SKELETON)
    if _KEYS_RE.search(skel) is None and not any(v in skel for v in values):
        return text
    origin: list[int] = []   # origin[i]: the index in `text` of the character skeleton char i comes from
    for m in _RUNS.finditer(text):
        if len(m.group()) > 1 or _NOT_PLAIN.match(m.group()) is None:
            origin.extend(range(m.start(), m.end()))
        else:
            origin.extend([m.start()] * len(_skeleton_char(m.group())))
    spans = []
    for v in values:
        i = skel.find(v)
        while i >= 0:
            spans.append((i, i + len(v)))
            i = skel.find(v, i + len(v))
    pos = 0
    while (m := _KEYS_RE.search(skel, pos)) is not None:
        if _at_edge(text, skel, origin, m.start()):
            spans.append(m.span())
            pos = m.end()
        else:
            pos = m.start() + 1
    out, end = [], len(text)
    for s, e in sorted(((origin[s], origin[e - 1] + 1) for s, e in spans), reverse=True):
        if e > end:          # overlaps the span replaced last: one [redacted] for both
            end = min(s, end)
            continue
        out.append(text[e:end])
        out.append(REDACTED)
        end = s
    out.append(text[:end])
    return "".join(reversed(out))


def _at_edge(text: str, skel: str, origin: list[int], s: int) -> bool:
    """SHAPES' edge, on the skeleton: a key glued to a letter or digit is not one; one after a
    JSON escape (\\n) or an invisible character is."""
    if s >= 2 and skel[s - 2] == "\\" and skel[s - 1] in "nrtbf":
        return True
    o = origin[s]
    if s > 0 and origin[s - 1] == o:   # inside one character's skeleton (a ligature's second letter)
        prev = skel[s - 1]
    elif o == 0:
        return True
    else:
        prev = _skeleton_char(text[o - 1])
    return not (prev and prev[-1].isascii() and prev[-1].isalnum())


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


# ---- text a person reads

# Terminal escape sequences, whole: CSI (ESC [ ... final byte), OSC (ESC ] ... BEL or ESC \), DCS,
# SOS, PM and APC strings (ESC P/X/^/_ ... ESC \), any other ESC sequence, and the 8-bit CSI and OSC.
# An unfinished one loses its introducer only: once ESC is gone the rest is plain text.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[PX^_][^\x1b]*\x1b\\"
                      r"|\x1b[ -/]*[0-~]|\x9b[0-?]*[ -/]*[@-~]|\x9d[^\x07\x9c]*[\x07\x9c]")
# Characters that end a line wherever they are read (CR alone moves a terminal's cursor back over
# what was printed): each becomes a newline.
_LINE_ENDS = re.compile("\r\n?|[\x85\u2028\u2029]")


def _shown(c: str) -> str | None:
    """A character as it may be shown: itself, U+FFFD for a lone surrogate (it cannot even be
    written as UTF-8), or None when it is removed (str.translate's "delete")."""
    if c in "\t\n":
        return c
    if unicodedata.category(c) == "Cs":
        return "\ufffd"
    return None if _invisible(c) else c


_SHOWN = _Table(_shown)
_MARKED = _Table(lambda c: _shown(c) if _shown(c) is not None else f"<U+{ord(c):04X}>")


def clean_text(text, *, one_line: bool = False, mark: bool = False) -> str:
    """`text` (any value: str() of it) as a person may read it: no terminal escape sequence, no
    control character but tab and newline, no bidi control or other invisible character, lone
    surrogates as U+FFFD, secrets scrubbed. `one_line`: whitespace runs, newlines and tabs too,
    fold to one space (a results.tsv cell, a markdown list item). `mark`: each removed character
    is shown as <U+XXXX> instead (a diff: the reader sees what the code holds). Plain text is
    left as it is, and nothing is escaped for a markup (each page escapes its own)."""
    text = text if isinstance(text, str) else str(text)
    if not mark:
        text = _ESCAPES.sub("", text)
    text = _LINE_ENDS.sub("\n", text)
    if _NOT_PLAIN.search(text) is not None:
        text = text.translate(_MARKED if mark else _SHOWN)
    if one_line:
        text = " ".join(text.split())
    return scrub_text(text)


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
