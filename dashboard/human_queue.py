"""The dashboard's side of the human queue: the same store the review CLI uses.

Reading never creates a queue file: a run without escalations simply has no queue yet.
"""

from __future__ import annotations

import sqlite3

from runfiles.queue_store import QueueError, QueueItem, QueueStore

from dashboard.runs import Run

QUEUE_FILE = "queue.sqlite"
# Decided items shown under the pending ones (what the loop has yet to apply, and recent history).
RECENT_DECIDED = 8
# Who the store records as the decider for actions taken on the page.
WHO = "dashboard"


def items(run: Run) -> tuple[list[QueueItem], list[QueueItem], str | None]:
    """(pending, recently decided, problem) for this run's tag."""
    path = run.file(QUEUE_FILE)
    if not path.exists():
        return [], [], None
    try:
        rows = [r for r in QueueStore(path).list() if r.tag in (run.tag, "")]
    except sqlite3.Error as e:
        return [], [], f"cannot read {QUEUE_FILE}: {e}"
    pending = [r for r in rows if r.status == "pending"]
    decided = sorted((r for r in rows if r.status != "pending"),
                     key=lambda r: r.decision.at or r.created_at or 0, reverse=True)
    return pending, decided[:RECENT_DECIDED], None


def decide(run: Run, item_id: int, decision: str, note: str = "") -> QueueItem:
    """Record a decision; raises QueueError (unknown item, other tag, not pending, bad decision)."""
    path = run.file(QUEUE_FILE)
    if not path.exists():
        raise QueueError(f"run {run.tag} has no queue")
    store = QueueStore(path)
    item = store.get(item_id)
    if item is None or item.tag not in (run.tag, ""):
        raise QueueError(f"no queue item {item_id} for tag {run.tag}")
    return store.decide(item_id, decision, who=WHO, note=note)


__all__ = ["items", "decide", "QueueError"]
