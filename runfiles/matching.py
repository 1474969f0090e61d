"""The one row-to-record matcher: which results.tsv row is which journal record.

Both are written in decision order by agent/experiment.py record (the journal line first, then
the row), so in a clean run row i is record i. After a crash, a torn line or a hand edit they can
disagree: a record without its row (the kill came between the two writes), a row without its
record (the journal line was lost), rows of one commit repeated. Recovery (agent/recovery.py)
rebuilds what is missing at its place; the dashboard shows each row with its record.

The match is an order-preserving alignment on (short commit, status): the longest common
subsequence, so one missing or extra line shifts nothing after it. `loose` (the dashboard, which
also shows malformed rows) then pairs what is left by commit in order, and last by experiment
number (the row's position) with the same status.
"""
from __future__ import annotations

import difflib
from collections import defaultdict

from harness.experiment_record import ExperimentRecord
from harness.results_table import ResultLine


def _short(commit) -> str:
    return str(commit or "")[:7].lower()


def _status(v) -> str | None:
    return v if isinstance(v, str) else None     # a hostile value (a list, a number) matches nothing


def _typed(rec) -> ExperimentRecord:
    """A journal record as read (a dict: recovery) or typed already (the dashboard)."""
    return rec if isinstance(rec, ExperimentRecord) else ExperimentRecord.from_dict(rec if isinstance(rec, dict) else {})


def record_key(rec: ExperimentRecord | dict) -> tuple[str, str | None]:
    r = _typed(rec)
    return _short(r.short or r.commit), _status(r.status)


def match_rows(rows: list[ResultLine], records: list, *, loose: bool = False) -> dict[int, int]:
    """Index of each matched row -> index of its record. `rows`: results.tsv lines
    (harness/results_table.py; `n`, their 1-based position, for `loose`); `records`: journal
    records, as dicts or ExperimentRecord."""
    typed = [_typed(r) for r in records]
    key_row = [(_short(r.commit), _status(r.status)) for r in rows]
    key_rec = [record_key(r) for r in typed]
    out: dict[int, int] = {}
    for a, b, size in difflib.SequenceMatcher(None, key_row, key_rec, autojunk=False).get_matching_blocks():
        for k in range(size):
            if key_row[a + k][0]:
                out[a + k] = b + k
    if not loose:
        return out
    used = set(out.values())
    by_commit: dict[str, list[int]] = defaultdict(list)
    for j, (commit, _) in enumerate(key_rec):
        if commit and j not in used:
            by_commit[commit].append(j)
    for i, (commit, _) in enumerate(key_row):
        queue = by_commit.get(commit) if i not in out and len(commit) >= 7 else None
        if queue:
            out[i] = queue.pop(0)
            used.add(out[i])
    by_n = {rec.n: j for j, rec in enumerate(typed) if j not in used and isinstance(rec.n, int)}
    for i, row in enumerate(rows):
        j = by_n.get(row.n)
        if i not in out and j is not None and _status(typed[j].status) == _status(row.status) is not None:
            out[i] = j
            used.add(j)
            by_n.pop(row.n)
    return out
