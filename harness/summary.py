"""Parse the summary block that train.py prints at the end of a run.

The block is a line `---` followed by `key: value` lines (docs/contracts.md). We read the LAST
such block in the log, so a run that printed `---` earlier (or a traceback after a partial block)
is still read correctly. Values that look numeric become floats (or ints); the rest stay strings.
Parsing is done here, in code, never by an LLM.
"""
from __future__ import annotations

import re

# The keys the seed's program.md promises, in order; a block without val_bpb is not a summary.
REQUIRED_KEYS = ("val_bpb", "training_seconds", "total_seconds", "peak_vram_mb", "mfu_percent",
                 "total_tokens_M", "num_steps", "num_params_M", "depth")
# A summary line: a bare identifier, a colon, a value. train.py pads "key:" to KEY_FIELD characters;
# we rely on that so that lines printed after the block at exit ("nanobind: leaked 4 instances!")
# are not mistaken for summary keys.
KEY_FIELD = 18
LINE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(\s+)(\S.*?)\s*$")
INT_RE = re.compile(r"^[+-]?\d+$")


def _convert(text: str):
    """'953' -> 953, '0.9979' -> 0.9979, 'nan' -> nan, 'sdpa' -> 'sdpa'."""
    if INT_RE.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _padded(m: re.Match) -> bool:
    """True when the value starts in the column train.py pads to (or after one space for long keys)."""
    width = len(m.group(1)) + 1 + len(m.group(2))
    return width == KEY_FIELD or (len(m.group(1)) + 1 >= KEY_FIELD and len(m.group(2)) == 1)


def _block(lines: list[str], strict: bool) -> dict:
    block = {}
    for line in lines:
        m = LINE_RE.match(line.rstrip())
        if not m or (strict and not _padded(m)):
            break
        block[m.group(1)] = _convert(m.group(3))
    return block


def parse_summary(text: str) -> dict | None:
    """Return the last summary block of `text` as a dict, or None when there is none.

    A block counts only if it has `val_bpb`; missing other keys are tolerated (the caller sees
    which are absent) because a summary with the metric is still a result. Lines are read with
    the contract's padding; a block written without it (an edited print) is read loosely.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "---"]
    for start in reversed(starts):
        for strict in (True, False):
            block = _block(lines[start + 1:], strict)
            if "val_bpb" in block:
                return block
    return None


def missing_keys(summary: dict) -> list[str]:
    """The promised keys a summary lacks (for a warning in the journal, not a crash)."""
    return [k for k in REQUIRED_KEYS if k not in summary]
