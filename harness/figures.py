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
