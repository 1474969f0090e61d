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
from pathlib import Path

from harness.appendlog import append_line, is_json_object
from harness.results_table import (MAX_DESCRIPTION, RESULT_COLUMNS, RESULT_HEADER, STATUSES,  # noqa: F401
                                   ResultRow, ResultTable, clean_description, parse_results, read_table)

# The column list, the row format, the parser and the table live in harness/results_table.py.
RESULTS_COLUMNS = RESULT_COLUMNS
RESULTS_HEADER = RESULT_HEADER


def _fsync_append(path: Path, text: str, complete=None) -> None:
    """One whole line or nothing (harness/appendlog.py): a torn last line is repaired first."""
    append_line(path, text, complete=complete)


def format_row(commit: str, val_bpb: float | None, memory_gb: float | None, status: str,
               description: str) -> str:
    """One results.tsv line; crashes carry 0.000000 and 0.0 as program.md says."""
    return ResultRow(commit, val_bpb, memory_gb, status, description).format()


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


def append_record(path: Path, rec) -> str | None:
    """The results.tsv row of a journal record (harness/experiment_record.py ExperimentRecord):
    its figure is `row_bpb` (trusted when there is one; none for a crash or a figure-less
    discard), and a record without a row by design (`in_results`: a baseline try that was not
    kept) writes nothing and returns None."""
    if not rec.in_results:
        return None
    return append_result(path, rec.commit, rec.row_bpb, rec.run.memory_gb, rec.status, rec.description)


def read_results(path: Path) -> ResultTable:
    """The loop's read-back: the one table (harness/results_table.py). `.rows` are the
    well-formed lines (each with its line number), `.problems` every malformed line as
    "line N: why"; nothing is rewritten."""
    return read_table(path)


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
    except (OSError, ValueError):   # absent, torn, not JSON, not UTF-8
        return None


def rewrite_results(path: Path, lines: list[str]) -> None:
    """Replace results.tsv by the header and `lines` (each ending in a newline), atomically."""
    write_text_atomic(path, RESULTS_HEADER + "\n" + "".join(lines))
