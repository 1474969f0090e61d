"""Line-oriented append-only files (results.tsv, journal.jsonl, traces.jsonl): whole lines or none.

A record is written as ONE os.write of the complete line, newline included, after checking that
the file ends with a newline. A write that fails part-way (a full disk) is cut back to the old
size, so the file never keeps half a record. A file that does end in a torn line (power cut, a
file cut by hand) is repaired before anything is appended: a tail that is a complete record
(a JSON object, when the caller says how to tell) gets its newline; any other tail is moved to
`<file>.torn-<time>` beside it and cut off, with a message. Nothing is ever glued onto a torn line.

Out of space (ENOSPC, EDQUOT, EFBIG, EIO on write) is an expected failure: `is_out_of_space`
names it so the loop can stop through its normal stop path.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

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
