"""A run's output, as the harness reads it: the log copied from the child's pipe (lines cut,
secrets removed, step lines stamped on the harness clock) and the caps on what a run may write, past
which the runner ends it as a flood."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from harness.clock import LogClock
from harness.secrets import known_values, scrub_text

# What a run may write: its log (as read from its output), any one line of it, and its output
# folder (bytes and entries). Beyond any of them the run is ended as a flood.
LOG_CAP_BYTES = 32 << 20
LINE_CAP_BYTES = 16 << 10
OUT_CAP_BYTES = 8 << 30
OUT_MAX_ENTRIES = 1000
READ_CHUNK = 1 << 16


class OutputReader(threading.Thread):
    """Copies a child's output into its log as it comes: lines cut at LINE_CAP_BYTES, secrets
    removed, step lines stamped on the clock; past LOG_CAP_BYTES nothing more is written and
    `flood` says why (the runner then ends the run)."""

    def __init__(self, stream, log, clock: LogClock):
        super().__init__(daemon=True)
        self.stream, self.log, self.clock = stream, log, clock
        self.written, self.read, self.flood = 0, 0, None
        self._partial, self._cut = b"", False
        self._secrets = known_values()

    def run(self) -> None:
        try:
            while True:
                chunk = self.stream.read1(READ_CHUNK) if hasattr(self.stream, "read1") else self.stream.read(READ_CHUNK)
                if not chunk:
                    break
                self.read += len(chunk)
                if self.read > LOG_CAP_BYTES and not self.flood:   # lines cut away count too
                    self.flood = f"its output passed {LOG_CAP_BYTES >> 20} MiB"
                    self.log.write(f"[runner] output cut at {LOG_CAP_BYTES >> 20} MiB\n".encode())
                self._take(chunk, time.monotonic())
            if self._partial:
                self._line(self._partial, time.monotonic())
        except (OSError, ValueError):
            pass
        finally:
            try:
                self.log.flush()
            except (OSError, ValueError):
                pass

    def _take(self, chunk: bytes, now: float) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            if self._cut:              # the rest of a line already cut
                self._cut = False
                continue
            self._line(raw, now)
        if len(self._partial) > LINE_CAP_BYTES:
            self._line(self._partial[:LINE_CAP_BYTES] + f" [runner: line cut at {LINE_CAP_BYTES} bytes]".encode(), now)
            self._partial, self._cut = b"", True

    def _line(self, raw: bytes, now: float) -> None:
        if len(raw) > LINE_CAP_BYTES:
            raw = raw[:LINE_CAP_BYTES] + f" [runner: line cut at {LINE_CAP_BYTES} bytes]".encode()
        line = scrub_text(raw.decode("utf-8", errors="replace"), self._secrets)
        self.clock.feed(line, now)
        if self.flood:
            return
        data = (line + "\n").encode()
        if self.written + len(data) > LOG_CAP_BYTES:
            self.flood = f"its output passed {LOG_CAP_BYTES >> 20} MiB"
            self.log.write(f"[runner] output cut at {LOG_CAP_BYTES >> 20} MiB\n".encode())
            return
        self.log.write(data)
        self.written += len(data)
        self.log.flush()


def out_flood(out_dir: Path) -> str | None:
    """Why the run's output folder is over its caps, or None."""
    total = entries = 0
    try:
        for root, dirs, files in os.walk(out_dir):
            entries += len(dirs) + len(files)
            if entries > OUT_MAX_ENTRIES:
                return f"its output folder holds more than {OUT_MAX_ENTRIES} entries"
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
            if total > OUT_CAP_BYTES:
                return f"its output folder passed {OUT_CAP_BYTES >> 30} GiB"
    except OSError:
        return None
    return None


def read_capped(path: Path, limit: int | None = None) -> str:
    """The log's text (its last `limit` bytes when given): logs are capped, so this is bounded."""
    try:
        with open(path, "rb") as f:
            if limit is not None:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
