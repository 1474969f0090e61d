"""The run's records: results.tsv (the user's 5 columns), journal.jsonl, state.json, run.json.

Durability rules: every append is flushed and fsynced before the function returns, because the
loop resets git right after recording and a power cut must not lose a result; an append writes a
whole line or nothing and never glues onto a torn last line (harness/appendlog.py). Readers are
tolerant: a malformed line is reported, never fatal, and nothing is rewritten behind the user.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.appendlog import append_line, is_json_object

# The header of program.md, exactly; never extra columns (richer data goes to the journal).
RESULTS_COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")
RESULTS_HEADER = "\t".join(RESULTS_COLUMNS)
STATUSES = ("keep", "discard", "crash")
# Descriptions are one line and tab-free so the TSV stays 5 columns.
MAX_DESCRIPTION = 200


@dataclass
class Results:
    rows: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # "line 7: 4 columns, expected 5"


def _fsync_append(path: Path, text: str, complete=None) -> None:
    """One whole line or nothing (harness/appendlog.py): a torn last line is repaired first."""
    append_line(path, text, complete=complete)


def clean_description(text: str) -> str:
    one = " ".join(str(text).replace("\t", " ").split())
    return one[:MAX_DESCRIPTION] or "(no description)"


def format_row(commit: str, val_bpb: float | None, memory_gb: float | None, status: str,
               description: str) -> str:
    """One results.tsv line; crashes carry 0.000000 and 0.0 as program.md says."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    bpb = 0.0 if val_bpb is None or status == "crash" else float(val_bpb)
    mem = 0.0 if memory_gb is None or status == "crash" else float(memory_gb)
    if bpb != bpb:   # NaN never reaches the table
        bpb = 0.0
    return f"{commit[:7]}\t{bpb:.6f}\t{mem:.1f}\t{status}\t{clean_description(description)}\n"


def init_results(path: Path) -> None:
    """Create results.tsv with the header only (refuses to clobber an existing file)."""
    path = Path(path)
    if path.exists() and path.stat().st_size > 0:
        return
    _fsync_append(path, RESULTS_HEADER + "\n")


def append_result(path: Path, commit: str, val_bpb, memory_gb, status: str, description: str) -> str:
    line = format_row(commit, val_bpb, memory_gb, status, description)
    _fsync_append(Path(path), line)
    return line


def read_results(path: Path) -> Results:
    """All well-formed rows; malformed lines are listed in .problems with their line number."""
    out = Results()
    path = Path(path)
    if not path.exists():
        out.problems.append(f"{path}: missing")
        return out
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if i == 1:
            if tuple(cols) != RESULTS_COLUMNS:
                out.problems.append(f"line 1: header is {line!r}, expected {RESULTS_HEADER!r}")
            continue
        if len(cols) != len(RESULTS_COLUMNS):
            out.problems.append(f"line {i}: {len(cols)} columns, expected {len(RESULTS_COLUMNS)}")
            continue
        row = dict(zip(RESULTS_COLUMNS, cols))
        try:
            row["val_bpb"] = float(row["val_bpb"])
            row["memory_gb"] = float(row["memory_gb"])
        except ValueError:
            out.problems.append(f"line {i}: val_bpb/memory_gb not numbers")
            continue
        if row["status"] not in STATUSES:
            out.problems.append(f"line {i}: status {row['status']!r} not one of {STATUSES}")
            continue
        row["line"] = i
        out.rows.append(row)
    return out


def append_journal(path: Path, record: dict) -> None:
    _fsync_append(Path(path), json.dumps(record, default=str, sort_keys=False) + "\n",
                  complete=is_json_object)


def read_journal(path: Path, kind: str | None = "experiment") -> tuple[list[dict], list[str]]:
    """Records of `kind` (None: all); lines that don't parse are skipped and reported."""
    records, problems = [], []
    path = Path(path)
    if not path.exists():
        return records, problems
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {i}: not JSON ({exc.msg})")
            continue
        if not isinstance(rec, dict):
            problems.append(f"line {i}: not an object")
            continue
        if kind is None or rec.get("kind", "experiment") == kind:
            records.append(rec)
    return records, problems


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, rename: readers see old or new, never half."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


def write_state(path: Path, **state) -> dict:
    state["updated_at"] = time.time()
    write_json_atomic(path, state)
    return state


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def rewrite_results(path: Path, lines: list[str]) -> None:
    """Replace results.tsv by the header and `lines` (each ending in a newline), atomically."""
    write_text_atomic(path, RESULTS_HEADER + "\n" + "".join(lines))
