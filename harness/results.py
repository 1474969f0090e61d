"""The run's records: results.tsv (the user's 5 columns), journal.jsonl, state.json, run.json.

Durability rules: every append is flushed and fsynced before the function returns, because the
loop resets git right after recording and a power cut must not lose a result; an append writes a
whole line or nothing and never glues onto a torn last line (append_line, at the end of this
file). Readers are tolerant: a malformed line is reported, never fatal, and nothing is rewritten behind the user.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from harness.results_table import (
    RESULT_HEADER,
    ResultRow,
    ResultTable,
    read_table,
)

# The column list, the row format, the parser and the table live in harness/results_table.py.
RESULTS_HEADER = RESULT_HEADER


def format_row(commit: str, val_bpb: float | None, memory_gb: float | None, status: str,
               description: str) -> str:
    """One results.tsv line; crashes carry 0.000000 and 0.0 as program.md says."""
    return ResultRow(commit, val_bpb, memory_gb, status, description).format()


def init_results(path: Path) -> None:
    """Create results.tsv with the header only (refuses to clobber an existing file)."""
    path = Path(path)
    if path.exists() and path.stat().st_size > 0:
        return
    append_line(path, RESULTS_HEADER)


def append_result(path: Path, commit: str, val_bpb, memory_gb, status: str, description: str) -> str:
    line = format_row(commit, val_bpb, memory_gb, status, description)
    append_line(Path(path), line)
    return line


def append_record(path: Path, rec) -> str | None:
    """The results.tsv row of a journal record (harness/experiment_record.py ExperimentRecord):
    its figure is `row_bpb` (trusted when there is one; none for a crash or a figure-less
    discard), and a record without a row by design (`in_results`: a baseline try that was not
    kept) writes nothing and returns None."""
    if not rec.in_results:
        return None
    return append_result(path, rec.commit, rec.row_bpb, rec.memory_gb, rec.status, rec.description)


def read_results(path: Path) -> ResultTable:
    """The loop's read-back: the one table (harness/results_table.py). `.rows` are the
    well-formed lines (each with its line number), `.problems` every malformed line as
    "line N: why"; nothing is rewritten."""
    return read_table(path)


def append_journal(path: Path, record: dict) -> None:
    append_line(Path(path), json.dumps(record, default=str, sort_keys=False), complete=is_json_object)


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


def rewrite_results(path: Path, lines: list[str]) -> None:
    """Replace results.tsv by the header and `lines` (each ending in a newline), atomically."""
    write_text_atomic(path, RESULTS_HEADER + "\n" + "".join(lines))


# ---- Line-oriented append-only files (results.tsv, journal.jsonl, traces.jsonl): whole lines or none.
#
# A record is written as ONE os.write of the complete line, newline included, after checking that
# the file ends with a newline. A write that fails part-way (a full disk) is cut back to the old
# size, so the file never keeps half a record. A file that does end in a torn line (power cut, a
# file cut by hand) is repaired before anything is appended: a tail that is a complete record
# (a JSON object, when the caller says how to tell) gets its newline; any other tail is moved to
# `<file>.torn-<time>` beside it and cut off, with a message. Nothing is ever glued onto a torn line.
#
# Out of space (ENOSPC, EDQUOT, EFBIG, EIO on write) is an expected failure: `is_out_of_space`
# names it so the loop can stop through its normal stop path.

# Write errors that mean "the disk (or the quota, or the file size limit) is full"; EIO is what
# some network and FUSE filesystems return for the same thing.
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
# Marker of a quarantined torn tail: <file>.torn-<YYYYmmddTHHMMSS>. Git-ignored in the worktree.
TORN_SUFFIX = ".torn-"
# How far back we look for the last newline of a torn file (a record is far shorter).
MAX_TAIL_BYTES = 64 * 1024 * 1024


class OutOfSpace(OSError):
    """A write failed because the filesystem is full; carries the path and errno."""


def is_out_of_space(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS:
        return True
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


def is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


def _tail_after_last_newline(fd: int, size: int) -> tuple[int, bytes]:
    """(offset where the torn tail starts, the tail's bytes)."""
    pos, chunk = size, 4096
    while pos > 0 and size - pos < MAX_TAIL_BYTES:
        start = max(0, pos - chunk)
        data = os.pread(fd, pos - start, start)
        nl = data.rfind(b"\n")
        if nl >= 0:
            start += nl + 1
            return start, os.pread(fd, size - start, start)
        pos = start
        chunk *= 2
    return pos, os.pread(fd, size - pos, pos)


def repair_torn(path: Path, complete: Callable[[bytes], bool] | None = None) -> str | None:
    """Make `path` end with a newline; returns a message when something was repaired."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        return _repair_fd(fd, path, complete)
    finally:
        os.close(fd)


def _repair_fd(fd: int, path: Path, complete) -> str | None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start, tail = _tail_after_last_newline(fd, size)
    if complete is not None and tail.strip() and complete(tail):
        os.lseek(fd, 0, os.SEEK_END)
        _write_all(fd, b"\n", path)
        os.fsync(fd)
        return f"{path.name}: the last line had no newline but was a whole record; added the newline"
    base = f"{path.name}{TORN_SUFFIX}{time.strftime('%Y%m%dT%H%M%S')}"
    quarantine, n = path.with_name(base), 0
    while quarantine.exists():   # two repairs in one second keep both tails
        n += 1
        quarantine = path.with_name(f"{base}.{n}")
    with open(quarantine, "wb") as q:
        q.write(tail)
        q.flush()
        os.fsync(q.fileno())
    os.ftruncate(fd, start)
    os.fsync(fd)
    preview = tail[:80].decode("utf-8", errors="replace")
    return (f"{path.name}: cut a torn last line of {len(tail)} bytes ({preview!r}...); "
            f"kept it in {quarantine.name}")


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as exc:
            if is_out_of_space(exc):
                raise OutOfSpace(exc.errno, f"{exc.strerror} (writing {path})", str(path)) from exc
            raise
        if n == 0:
            raise OutOfSpace(errno.ENOSPC, f"short write (writing {path})", str(path))
        view = view[n:]


def append_line(path: Path, line: str, complete: Callable[[bytes], bool] | None = None,
                fsync: bool = True, warn=None) -> None:
    """Append one whole line (a newline is added if missing); all of it or none of it lands."""
    path = Path(path)
    data = (line if line.endswith("\n") else line + "\n").encode("utf-8")
    with _APPENDING:   # a torn tail repaired by one thread must never be another's line being written
        _append_locked(path, data, complete, fsync, warn)


# One append at a time in this process: the loop's threads (--workers N) share the journal, and
# an append first repairs a torn tail (which a line another thread is writing looks like).
_APPENDING = threading.Lock()


def _append_locked(path: Path, data: bytes, complete, fsync: bool, warn) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        note = _repair_fd(fd, path, complete)
        if note:
            (warn or _stderr)(f"warning: {note}")
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, data, path)
            if fsync:
                os.fsync(fd)
        except BaseException:
            try:   # cut a partial record back off: the file holds whole records only
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
