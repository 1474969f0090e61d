"""Reading figures out of data that is not trusted (a journal a run may have corrupted): a value
is a number, an int or a string only when it really is one."""
from __future__ import annotations

import math


def finite(v) -> bool:
    """A real number (not bool) that is finite; ints too large for a float are not."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def fnum(v) -> float | None:
    """v as a finite float, else None (bools, strings, inf and nan are not figures)."""
    return float(v) if finite(v) else None


def as_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_str(v) -> str | None:
    return v if isinstance(v, str) else None


def as_dict(v) -> dict:
    return v if isinstance(v, dict) else {}
