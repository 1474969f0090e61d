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
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from runfiles.matching import match_rows
from harness.experiment_record import ExperimentRecord, experiment_records
from harness.results_table import ResultLine, ResultTable, read_table

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

# Fields of a row as the pages and /api/results show it (row_view).
ROW_VIEW_KEYS = ("n", "line", "raw", "commit", "val_bpb", "val_text", "memory_gb", "status", "description",
                 "problem", "partial", "why")
# What a line that stands for no experiment says about itself (numbered: its number is 0).
EXTRA_LINE = ("no experiment number: every experiment of the journal has its own row here (a line left "
              "beside the row that replaced it?)")


def read_results(path: Path) -> ResultTable:
    """results.tsv as the one table (harness/results_table.py), each line numbered by the
    experiment it stands for (`numbered`, with the journal beside it); cached until either file
    changes. The pages show every line (`.lines`), the malformed ones flagged."""
    key = file_key(path)
    if key is None:
        return read_table(path)           # says it is missing
    journal = Path(path).with_name("journal.jsonl")
    key = (key, file_key(journal))
    with _lock:
        hit = _results_cache.get(str(path))
        if hit and hit[0] == key:
            return hit[1]
    res = read_table(path)
    if not res.missing:                   # an unreadable file is read again next time
        res = numbered(res, journal_records(journal) if key[1] is not None else [])
        with _lock:
            _results_cache[str(path)] = (key, res)
    return res


def numbered(table: ResultTable, records: list[ExperimentRecord]) -> ResultTable:
    """The table with each line's `n` the experiment it stands for, so a hand-corrupted line never
    shifts the numbers after it. A line matched to a journal record (dashboard/matching.py, as
    recovery matches them) takes that record's place among the rows the loop writes; a line
    between two matched ones takes the next number when there is room for it, and otherwise
    (a corrupted line left beside the row recovery wrote back for its experiment, a line split in
    two) stands for no experiment: n 0, flagged. Without a journal the numbers are the lines'
    places, as parsed."""
    tabled = [r for r in records if r.in_results]
    if not tabled or not table.lines:
        return table
    fixed, last = {}, 0
    for i, j in sorted(match_rows(table.lines, tabled, loose=True).items()):
        if j + 1 > last:                  # numbers only grow down the file
            fixed[i] = last = j + 1
    upcoming, nxt = [None] * len(table.lines), None   # the next matched line's number, from each line on
    for i in range(len(table.lines) - 1, -1, -1):
        upcoming[i] = nxt
        nxt = fixed.get(i, nxt)
    out, last = [], 0
    for i, ln in enumerate(table.lines):
        if i in fixed:
            n = fixed[i]
        else:
            n = last + 1 if upcoming[i] is None or last + 1 < upcoming[i] else 0
        last = n or last
        if n == 0:
            out.append(replace(ln, n=0, problems=ln.problems + [EXTRA_LINE]))
        else:
            out.append(ln if ln.n == n else replace(ln, n=n))
    return replace(table, lines=out)


def row_view(ln: ResultLine, record: ExperimentRecord | None = None) -> dict:
    """One row as templates and JSON receive it: plain values built from the typed line (a
    number that is not finite is None, with its word in val_text; an empty status is "?"); a
    keep says why it was kept (`record`: its journal record)."""
    why = record.why_kept if record is not None and ln.status == "keep" and record.status == "keep" else None
    return {"n": ln.n, "line": ln.line, "raw": ln.raw, "commit": ln.commit, "val_bpb": ln.val_bpb,
            "val_text": ln.val_text, "memory_gb": ln.memory_gb, "status": ln.status or "?",
            "description": ln.description, "problem": ln.problem, "partial": ln.partial, "why": why}


def page_problems(table: ResultTable) -> list[str]:
    """What the page says about results.tsv: the file's own problems, and how many rows are
    flagged (each row carries its own reason)."""
    bad = len(table.flagged)
    return table.file_problems + ([f"{bad} row(s) of results.tsv are malformed or incomplete; shown flagged"]
                                  if bad else [])


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


def journal_records(path: Path) -> list[ExperimentRecord]:
    """The journal's experiment records, typed (harness/experiment_record.py ExperimentRecord)."""
    return experiment_records(read_jsonl(path).records)


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
