"""Read and rewrite the hyperparameter lines of train.py: `NAME = literal  # comment`.

Only module-level lines whose target is a CAPS name and whose value is a simple literal (int,
float, str, bool) are knobs; everything else in train.py is code. Rewriting touches only the
value: the name, spacing and comment stay as the human (or Claude) wrote them, so a diff of a
knob change is one line. Every parse of train.py, here and in the guard, the reviewer and the
proposers' tools, goes through `parse` (one lock: see _PARSE_LOCK).
"""
from __future__ import annotations

import ast
import io
import re
import threading
import tokenize
from dataclasses import dataclass
from pathlib import Path

# NAME = value  (no indentation: module level only)
ASSIGN_RE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)(?P<eq>\s*=\s*)(?P<rest>.*)$")
KNOB_TYPES = (bool, int, float, str)

# Parsing Python source from several threads: CPython 3.11's AST construction is not safe when
# two threads parse at once ("SystemError: AST constructor recursion depth mismatch", seen with
# --workers 2 guarding two proposals together). Every parse of train.py in the harness and the
# agent goes through this one lock (parse, compile_source).
_PARSE_LOCK = threading.Lock()
# Floats are written with this many significant digits so search steps don't leave 0.30000000000000004.
FLOAT_DIGITS = 4

# The curated search ranges of the knobs every search knows (the offline proposer's, and
# search/space.py's default space). kind: "log" (log-uniform float), "lin" (uniform float),
# "int" (uniform integer), "choice".
# Ranges bracket train.py's defaults by roughly 4x each way for learning rates: wide enough that
# uniform random sampling often lands somewhere poor, which is what a search has to beat.
DEFAULT_SPECS = {
    "MATRIX_LR": ("log", 0.003, 0.12),
    "EMBEDDING_LR": ("log", 0.03, 1.5),
    "UNEMBEDDING_LR": ("log", 0.0005, 0.03),
    "SCALAR_LR": ("log", 0.05, 2.0),
    "WEIGHT_DECAY": ("lin", 0.0, 0.2),
    "ADAM_BETA1": ("lin", 0.6, 0.95),
    "MUON_MOMENTUM": ("lin", 0.85, 0.98),
    "LOGIT_SOFTCAP": ("log", 5.0, 50.0),
    "DEPTH": ("int", 2, 6),
}


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _PARSE_LOCK:
        return ast.parse(source, filename)


def compile_source(source: str, filename: str):
    with _PARSE_LOCK:
        return compile(source, filename, "exec")


@dataclass
class Knob:
    name: str
    value: object
    line: int        # 0-based index into source.splitlines()
    text: str        # the value as written
    comment: str     # "# ..." or ""


def _split_value_comment(rest: str) -> tuple[str, str]:
    """'0.04  # lr of x' -> ('0.04', '# lr of x'), aware of '#' inside string literals."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(rest).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return rest.strip(), ""
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            col = tok.start[1]
            return rest[:col].rstrip(), rest[col:]
    return rest.strip(), ""


def read_knobs(source: str) -> dict[str, Knob]:
    """All knob lines of a train.py source, in file order."""
    knobs: dict[str, Knob] = {}
    for i, line in enumerate(source.splitlines()):
        m = ASSIGN_RE.match(line)
        if not m:
            continue
        text, comment = _split_value_comment(m.group("rest"))
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if type(value) not in KNOB_TYPES:
            continue
        knobs[m.group("name")] = Knob(m.group("name"), value, i, text, comment)
    return knobs


def values(source: str) -> dict[str, object]:
    return {k.name: k.value for k in read_knobs(source).values()}


def format_literal(value) -> str:
    """Python literal for a knob value; floats rounded to FLOAT_DIGITS significant digits."""
    if isinstance(value, bool) or isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        text = f"{value:.{FLOAT_DIGITS}g}"
        if not any(c in text for c in ".en"):   # keep it a float: '2' -> '2.0' ('nan'/'inf' excluded)
            text += ".0"
        return text
    if isinstance(value, str):
        return repr(value)
    raise TypeError(f"knob values must be {KNOB_TYPES}, got {type(value).__name__}")


def normalize(value):
    """The value as it will read back after format_literal (for comparing configs)."""
    return ast.literal_eval(format_literal(value)) if isinstance(value, float) else value


def set_knobs(source: str, changes: dict[str, object]) -> str:
    """Return source with the given knobs' values replaced; unknown names raise KeyError."""
    knobs = read_knobs(source)
    lines = source.splitlines(keepends=True)
    for name, value in changes.items():
        if name not in knobs:
            raise KeyError(f"{name} is not a knob of train.py (knobs: {', '.join(knobs)})")
        k = knobs[name]
        old = type(k.value)
        if old is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not old:
            raise TypeError(f"{name} is {old.__name__}; refusing to write {value!r}")
        line = lines[k.line]
        ending = line[len(line.rstrip("\r\n")):]
        m = ASSIGN_RE.match(line.rstrip("\r\n"))
        spacer = ""
        if k.comment:
            # keep the original gap before the comment
            rest = m.group("rest")
            spacer = rest[len(k.text):rest.index(k.comment)] if k.comment in rest else "  "
        text = format_literal(value)
        if isinstance(value, str) and k.text.startswith('"') and '"' not in value and "\\" not in value:
            text = f'"{value}"'   # keep the file's quote style
        lines[k.line] = f"{name}{m.group('eq')}{text}{spacer}{k.comment}{ending}"
    return "".join(lines)


def code_fingerprint(source: str) -> str:
    """Hash of train.py with the knob values blanked: same code, any knob values -> same print.

    With the knob values it identifies a configuration: (code_fingerprint, values) tried twice is
    a repeat, even if a proposer reached it through different edits.
    """
    import hashlib
    lines = source.splitlines()
    for k in read_knobs(source).values():
        lines[k.line] = f"{k.name} = ?"
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# --- the cpu/tiny profiles' knob values (runtime.PROFILE_KNOBS) --------------------------------
# train.py's knobs are the reference's (gpu) values; runtime.py maps some of them to the values
# the small profiles run. Read from runtime.py's text, so the loop needs no torch import.
RUNTIME_PY = Path(__file__).resolve().parents[1] / "runtime.py"


def profile_table(runtime_source: str | None = None) -> tuple[dict, tuple]:
    """(PROFILE_KNOBS, SMALL_PROFILES) of a runtime.py source (default: this checkout's)."""
    source = RUNTIME_PY.read_text() if runtime_source is None else runtime_source
    found = {}
    for node in parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("PROFILE_KNOBS", "SMALL_PROFILES"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found.get("PROFILE_KNOBS", {}), tuple(found.get("SMALL_PROFILES", ()))


def profile_changes(source: str, profile: str, runtime_source: str | None = None) -> dict[str, object]:
    """{knob: value} the profile runs instead of train.py's own: only knobs still at train.py's
    (the reference's) value; one already moved keeps its value (as runtime.profile_changes)."""
    table, small = profile_table(runtime_source)
    if profile not in small:
        return {}
    have = values(source)
    return {k: v for k, (ref, v) in table.items()
            if k in have and type(have[k]) is type(ref) and have[k] == ref}


# The line of the repository's train.py that gives a bare run on a small profile that profile's
# values in memory (runtime.use_profile_knobs). A source with the values written in drops it, so
# that file runs as it reads, by hand or by the harness.
PROFILE_CALL = "runtime.use_profile_knobs("
PROFILE_CALL_DONE = "# this train.py carries its profile's knob values: they run as written"


def for_profile(source: str, profile: str, runtime_source: str | None = None) -> tuple[str, dict]:
    """(train.py with the profile's values written in, the changes): what every harness path that
    runs a train.py of the repository runs on that profile, and what a tag's base commit holds.
    On a small profile the in-memory rewrite of a bare run (PROFILE_CALL) goes too. The gpu
    profile: unchanged."""
    changes = profile_changes(source, profile, runtime_source)
    new = set_knobs(source, changes) if changes else source
    if profile in profile_table(runtime_source)[1]:
        new = "\n".join(_without_profile_call(line) for line in new.split("\n"))
    return new, changes


def _without_profile_call(line: str) -> str:
    body = line.strip()
    if not body.startswith(PROFILE_CALL):
        return line
    return line[:len(line) - len(line.lstrip())] + PROFILE_CALL_DONE


def describe_changes(changes: dict, source: str) -> str:
    """'DEPTH 8 -> 4, ...' for a commit message or a log line."""
    old = values(source)
    return ", ".join(f"{k} {format_literal(old[k])} -> {format_literal(v)}" for k, v in changes.items())


def load_train(profile: str, path: Path | None = None, name: str = "train_for_profile"):
    """A train.py (default this checkout's) imported as a fresh module with the profile's values
    written in (for_profile): what tools and tests that import train.py's model use."""
    import importlib.util
    import sys
    import tempfile
    path = Path(path) if path is not None else RUNTIME_PY.with_name("train.py")
    if str(path.resolve().parent) not in sys.path:       # its prepare.py and runtime.py
        sys.path.insert(0, str(path.resolve().parent))
    source, _ = for_profile(path.read_text(), profile)
    folder = Path(tempfile.mkdtemp(prefix="train-profile-"))
    (folder / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
