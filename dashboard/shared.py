"""The run page's lines about results to share (dashboard/shared_results.py): where imported
experiments came from, the final best checked at a longer budget, and the cost per bpb gained."""
from __future__ import annotations

from dashboard import data
from dashboard.runs import Run
from runfiles.shared_results import CostPerGain, ImportedInfo, Validation


def notes(run: Run) -> list[tuple[str, str]]:
    """(label, text) lines for the run page's head, each only when there is something to say."""
    out = []
    imported = ImportedInfo.read(run.path)
    if imported is not None:
        out.append(("imported", imported.line()))
    v = Validation.read(run.path)
    if v is not None:
        out.append((f"longer budget: {v.verdict}", v.line()))
    records = data.journal_records(run.file("journal.jsonl"))
    if records:
        out.append(("cost per bpb gained", CostPerGain.of(records).line()))
    return out
