"""Reading values out of data that is not trusted (a journal a run may have corrupted): a value
is a number, an int, a string or a dict only when it really is one. finite/fnum are
harness/results_table.py's (one definition), re-exported here for the record types."""
from __future__ import annotations

from harness.results_table import finite, fnum  # noqa: F401  (re-exported)


def as_int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_str(v) -> str | None:
    return v if isinstance(v, str) else None


def as_dict(v) -> dict:
    return v if isinstance(v, dict) else {}


# A val_bpb shown or drawn as a result: bits per byte are never negative, and past MAX_BPB a figure
# is broken, not a model (a byte is 8 bits; a model far worse than a uniform guess is still
# single or double digits). 1e308 printed is 309 digits, and 1e308 - -1e308 overflows to inf.
MAX_BPB = 1e6


def bpb_figure(v) -> float | None:
    """`v` when it can be a val_bpb (finite, 0 <= v <= MAX_BPB), else None."""
    v = fnum(v)
    return v if v is not None and 0.0 <= v <= MAX_BPB else None


# Past this magnitude a number is printed in short scientific form (a hostile file's 1e308 is 309
# digits in fixed notation; no real count of dollars, seconds or tokens comes near it).
LONG_NUMBER = 1e15


def figure_text(v, spec: str = ".6f") -> str:
    """A number as a report prints it: format `spec` when finite and under LONG_NUMBER, short
    scientific form past it, "-" for none (inf, nan, an int too large for a float, not a number)."""
    v = fnum(v)
    if v is None:
        return "-"
    return format(v, spec) if abs(v) < LONG_NUMBER else f"{v:.3g}"

