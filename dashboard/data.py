"""Readers for the files a run folder holds (docs/contracts.md, "A run's folder").

The loop writes these files while the dashboard reads them, so every reader expects the worst:
a half-written last line, a line that is not valid TSV or JSON, a file that is missing or
being replaced. Readers never raise on bad content; they return what they could read plus a
list of problems to show on the page.

Parsed files are cached by (size, mtime) so a page view with 1,000 experiments does not re-parse
unchanged files; JSONL files are read incrementally (only the bytes appended since last time).
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from harness import records

# Lines of a log shown on an experiment's page.
LOG_TAIL_LINES = 60
# Bytes read from the end of a log to find its tail (logs of long runs can be large).
LOG_TAIL_BYTES = 64 * 1024
# Bytes compared at the end of what a JSONL reader consumed, to notice a rewritten file.
TAIL_CHECK_BYTES = 256

_lock = threading.Lock()
_results_cache: dict[str, tuple] = {}
_jsonl_cache: dict[str, "_JsonlState"] = {}


def file_key(path: Path):
    """(size, mtime_ns) of a file, or None when it does not exist: what caches are keyed on."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------- results.tsv

@dataclass
class Results:
    rows: list[dict] = field(default_factory=list)   # file order; row["n"] is 1-based
    problems: list[str] = field(default_factory=list)
    missing: bool = False
    complete: int = 0     # rows that end with a newline (the last one may still be being written)


def parse_results(text: str) -> Results:
    """harness/records.parse_results (the one parser), as the dicts the pages show: a malformed
    row stays in the table, flagged, with its cells as far as they could be read."""
    table = records.parse_results(text)
    out = Results(problems=list(table.problems), complete=table.complete)
    out.rows = [_row(ln) for ln in table.lines]
    bad = sum(1 for r in out.rows if r["problem"])
    if bad:
        out.problems.append(f"{bad} row(s) of results.tsv are malformed or incomplete; shown flagged")
    return out


def _row(ln: records.ResultLine) -> dict:
    bpb, mem = ln.row.val_bpb, ln.row.memory_gb
    problems = list(ln.problems)
    if ln.partial:
        problems.append("last line has no newline yet (being written?)")
    # inf/-inf/nan are numbers, not figures: never plotted or compared, shown as written.
    return {"n": ln.n, "line": ln.line, "raw": ln.raw, "commit": ln.row.commit,
            "val_bpb": records.fnum(bpb), "val_text": _word(bpb),
            "memory_gb": records.fnum(mem), "status": ln.row.status or "?", "description": ln.row.description,
            "problem": "; ".join(problems) or None, "partial": ln.partial}


def _word(v: float | None) -> str | None:
    """What to show instead of a number that is not finite; None for a finite one (or none)."""
    if v is None or math.isfinite(v):
        return None
    return "nan" if v != v else ("inf" if v > 0 else "-inf")


def read_results(path: Path) -> Results:
    """results.tsv, parsed; cached until the file changes."""
    key = file_key(path)
    if key is None:
        return Results(problems=[f"{path.name} not found"], missing=True)
    with _lock:
        hit = _results_cache.get(str(path))
        if hit and hit[0] == key:
            return hit[1]
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        return Results(problems=[f"cannot read {path.name}: {e.strerror}"], missing=True)
    res = parse_results(text)
    with _lock:
        _results_cache[str(path)] = (key, res)
    return res


# ---------------------------------------------------------------- JSONL (journal, traces)

class _JsonlState:
    def __init__(self):
        self.offset = 0          # bytes consumed (always at a line boundary)
        self.ino = None
        self.records: list[dict] = []
        self.bad = 0             # lines that did not parse
        self.tail = b""          # the last bytes consumed: if they change, the file was rewritten
        self.mtime = None        # touched without growing: rewritten too (appends always grow)


@dataclass
class Jsonl:
    records: list[dict]
    bad: int
    missing: bool


def read_jsonl(path: Path) -> Jsonl:
    """All parseable objects of a JSONL file; a partial last line waits for its newline."""
    try:
        st = os.stat(path)
    except OSError:
        return Jsonl([], 0, True)
    with _lock:
        state = _jsonl_cache.get(str(path))
        if (state is None or state.ino != st.st_ino or st.st_size < state.offset
                or (st.st_size == state.offset and st.st_mtime_ns != state.mtime)
                or (state.offset and _bytes_at(path, state.offset - len(state.tail), len(state.tail)) != state.tail)):
            state = _JsonlState()      # new or rewritten file: start over
            state.ino = st.st_ino
            _jsonl_cache[str(path)] = state
        state.mtime = st.st_mtime_ns
        if st.st_size > state.offset:
            try:
                with open(path, "rb") as f:
                    f.seek(state.offset)
                    chunk = f.read(st.st_size - state.offset)
            except OSError:
                chunk = b""
            end = chunk.rfind(b"\n") + 1   # only whole lines
            for line in chunk[:end].split(b"\n"):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line.decode("utf-8", errors="replace"))
                except json.JSONDecodeError:
                    state.bad += 1
                    continue
                if isinstance(obj, dict):
                    state.records.append(obj)
                else:
                    state.bad += 1
            state.offset += end
            if end:
                state.tail = chunk[max(0, end - TAIL_CHECK_BYTES):end]
        return Jsonl(list(state.records), state.bad, False)


def _bytes_at(path: Path, offset: int, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(n)
    except OSError:
        return b""


def journal_records(path: Path, kind: str = "experiment") -> list[dict]:
    """Journal records of one kind ("experiment" is the default when a record has no kind)."""
    return [r for r in read_jsonl(path).records if r.get("kind", "experiment") == kind]


# ---------------------------------------------------------------- small JSON files, logs

def read_json(path: Path) -> tuple[dict | None, str | None]:
    """(object, problem). state.json and run.json are rewritten atomically, so a parse error
    means a real problem (or a writer that is not atomic), shown as such."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None, f"{Path(path).name} not found"
    except OSError as e:
        return None, f"cannot read {Path(path).name}: {e.strerror}"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"{Path(path).name} is not valid JSON ({e.msg} at line {e.lineno})"
    if not isinstance(obj, dict):
        return None, f"{Path(path).name} is not a JSON object"
    return obj, None


def inside(base: Path, rel: str) -> Path | None:
    """base/rel if it stays inside base (journal paths are data, never trusted as paths)."""
    try:
        p = (Path(base) / rel).resolve()
        p.relative_to(Path(base).resolve())
    except (ValueError, OSError, RuntimeError):
        return None
    return p


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> tuple[str | None, str | None]:
    """(last lines, problem)."""
    if path is None:
        return None, "log path points outside the run folder"
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            data = f.read()
    except FileNotFoundError:
        return None, f"log {Path(path).name} not found"
    except OSError as e:
        return None, f"cannot read log: {e.strerror}"
    text = data.decode("utf-8", errors="replace")
    # Progress bars rewrite one line with \r; show the latest state of each.
    out = [ln.rsplit("\r", 1)[-1] for ln in text.split("\n")]
    return "\n".join(out[-lines:]), None
