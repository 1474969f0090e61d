"""The human queue: a small SQLite store of escalations waiting for a person.

The judge hierarchy escalates contested calls and detected bias here; `agent/review_queue.py` and the
dashboard list and decide them; the loop applies decided items at the next experiment boundary and
marks them applied. The loop never waits on this store.

Several processes use the file at once (loop, review CLI, dashboard), so the database runs in WAL
mode and every method opens its own short connection: no connection outlives a call, so there is
no cross-thread or cross-process sharing to get wrong.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.results_table import as_dict, as_str, fnum

# Seconds a writer waits for another process's lock before giving up (dashboard + loop + CLI).
BUSY_TIMEOUT_S = 10.0
# Item statuses, in lifecycle order: pending -> approved|rejected -> applied.
STATUSES = ("pending", "approved", "rejected", "applied")
# What a human can decide, and the status each decision leads to.
DECISIONS = {"approve": "approved", "reject": "rejected"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tag         TEXT NOT NULL,
    experiment  INTEGER,
    "commit"    TEXT,
    kind        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    payload     TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL DEFAULT 'pending',
    decided_by  TEXT,
    note        TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL,
    decided_at  REAL,
    applied_at  REAL,
    result      TEXT
);
CREATE INDEX IF NOT EXISTS queue_status ON queue(status);
"""

COLUMNS = ("id", "tag", "experiment", "commit", "kind", "reason", "payload", "status",
           "decided_by", "note", "created_at", "decided_at", "applied_at", "result")


class QueueError(ValueError):
    """A request the queue refuses (unknown item, item not pending, unknown decision)."""


@dataclass(frozen=True)
class EscalatedOpinion:
    """A judge's opinion as the payload holds it (agent/judges/judge.py Opinion.as_dict), read safely."""
    status: str | None = None
    confidence: float | None = None
    reason: str = ""
    error: str | None = None

    @classmethod
    def of(cls, d) -> "EscalatedOpinion | None":
        if not isinstance(d, dict) or not d:
            return None
        return cls(status=as_str(d.get("status")), confidence=fnum(d.get("confidence")),
                   reason=as_str(d.get("reason")) or "", error=as_str(d.get("error")))


@dataclass(frozen=True)
class Escalation:
    """An item's payload, read safely (a hand-edited one may lack anything, or hold other types)."""
    status: str | None           # the judge's status for the experiment when it escalated it
    description: str
    hypothesis: str
    diff: str
    discarded_ref: str | None
    figures: dict
    rule: EscalatedOpinion | None
    llm: EscalatedOpinion | None
    metajudge: str
    verify_reason: str

    @classmethod
    def of(cls, payload: dict) -> "Escalation":
        p = as_dict(payload)
        meta = p.get("metajudge")
        return cls(status=as_str(p.get("status")), description=as_str(p.get("description")) or "",
                   hypothesis=as_str(p.get("hypothesis")) or "", diff=as_str(p.get("diff")) or "",
                   discarded_ref=as_str(p.get("discarded_ref")), figures=as_dict(p.get("figures")),
                   rule=EscalatedOpinion.of(p.get("rule")), llm=EscalatedOpinion.of(p.get("llm")),
                   metajudge=json.dumps(meta, default=str) if isinstance(meta, (dict, list)) else as_str(meta) or "",
                   verify_reason=as_str(as_dict(p.get("verify")).get("reason")) or "")


@dataclass(frozen=True)
class HumanDecision:
    """A person's call on an item (the review CLI's or the dashboard's): who, their note, when.
    `by` and `at` are None while the item is pending."""
    by: str | None = None
    note: str = ""
    at: float | None = None


@dataclass(frozen=True)
class Applied:
    """The loop's application of a decided item: when, and what happened (None until applied)."""
    at: float | None = None
    result: str | None = None


@dataclass(frozen=True)
class QueueItem:
    """One row of the queue, as every reader sees it (the loop's application, the review CLI, the
    dashboard). `payload` is the escalation's evidence (agent/judges/hierarchy.py `_escalate`:
    description, hypothesis, status, figures, diff, the opinions), read through the properties.
    The row's columns stay flat (COLUMNS, as_dict()); the person's call and the loop's application
    are its `decision` and `applied` parts."""
    id: int
    tag: str
    experiment: int | None
    commit: str | None
    kind: str
    reason: str
    payload: dict = field(default_factory=dict)
    status: str = "pending"
    created_at: float = 0.0
    decision: HumanDecision = field(default_factory=HumanDecision)
    applied: Applied = field(default_factory=Applied)

    @property
    def escalation(self) -> Escalation:
        return Escalation.of(self.payload)

    @property
    def escalated_status(self) -> str | None:
        """The judge's status for the experiment when it escalated it (keep | discard | crash)."""
        return self.escalation.status

    def as_dict(self) -> dict:
        """The row as its columns name it (the dashboard's JSON)."""
        return {"id": self.id, "tag": self.tag, "experiment": self.experiment, "commit": self.commit,
                "kind": self.kind, "reason": self.reason, "payload": self.payload, "status": self.status,
                "decided_by": self.decision.by, "note": self.decision.note, "created_at": self.created_at,
                "decided_at": self.decision.at, "applied_at": self.applied.at, "result": self.applied.result}


class QueueStore:
    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        con.row_factory = sqlite3.Row
        con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        return _Closing(con)

    def escalate(self, *, tag, experiment, commit, kind, reason, payload: dict) -> int:
        """Add a pending item; returns its id. The payload must be JSON-serialisable."""
        body = json.dumps(payload if payload is not None else {}, default=str)
        with self._connect() as con:
            cur = con.execute(
                'INSERT INTO queue (tag, experiment, "commit", kind, reason, payload, status, created_at)'
                " VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)",
                (tag, experiment, commit, kind, reason, body, time.time()))
            return int(cur.lastrowid)

    def list(self, status=None) -> list[QueueItem]:
        """All items (oldest first), or those with the given status."""
        if status is not None and status not in STATUSES:
            raise QueueError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}")
        with self._connect() as con:
            if status is None:
                rows = con.execute("SELECT * FROM queue ORDER BY id").fetchall()
            else:
                rows = con.execute("SELECT * FROM queue WHERE status = ? ORDER BY id", (status,)).fetchall()
        return [_row(r) for r in rows]

    def get(self, item_id) -> QueueItem | None:
        with self._connect() as con:
            r = con.execute("SELECT * FROM queue WHERE id = ?", (int(item_id),)).fetchone()
        return _row(r) if r is not None else None

    def decide(self, item_id, decision: str, who: str, note: str = "") -> QueueItem:
        """Record a human decision on a pending item; returns the updated row.

        The UPDATE is guarded by status='pending' so two deciders racing (CLI and dashboard)
        cannot both win: the second gets a QueueError.
        """
        if decision not in DECISIONS:
            raise QueueError(f"unknown decision {decision!r}; expected approve or reject")
        with self._connect() as con:
            cur = con.execute(
                "UPDATE queue SET status = ?, decided_by = ?, note = ?, decided_at = ?"
                " WHERE id = ? AND status = 'pending'",
                (DECISIONS[decision], who, note or "", time.time(), int(item_id)))
            changed = cur.rowcount
        item = self.get(item_id)
        if item is None:
            raise QueueError(f"no queue item {item_id}")
        if changed == 0:
            raise QueueError(f"queue item {item_id} is {item.status}, not pending")
        return item

    def mark_applied(self, item_id, result: str) -> None:
        """The loop applied a decided item (or found nothing to do); `result` says what happened."""
        with self._connect() as con:
            cur = con.execute(
                "UPDATE queue SET status = 'applied', applied_at = ?, result = ?"
                " WHERE id = ? AND status IN ('approved', 'rejected')",
                (time.time(), result, int(item_id)))
            if cur.rowcount == 0:
                row = con.execute("SELECT status FROM queue WHERE id = ?", (int(item_id),)).fetchone()
                if row is None:
                    raise QueueError(f"no queue item {item_id}")
                raise QueueError(f"queue item {item_id} is {row['status']}; only decided items can be applied")


class _Closing:
    """sqlite3's context manager commits but never closes; this one does both."""

    def __init__(self, con: sqlite3.Connection):
        self.con = con

    def __enter__(self) -> sqlite3.Connection:
        return self.con

    def __exit__(self, *exc) -> None:
        self.con.close()

    def execute(self, *a):
        return self.con.execute(*a)


def _row(r: sqlite3.Row) -> QueueItem:
    d = {k: r[k] for k in COLUMNS}
    try:
        payload = json.loads(d["payload"] or "{}")
    except json.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        # A hand-edited or truncated payload must not hide the item from the human.
        payload = {"unparsed": d["payload"]}
    return QueueItem(id=d["id"], tag=d["tag"] or "", experiment=d["experiment"], commit=d["commit"],
                     kind=d["kind"] or "", reason=d["reason"] or "", payload=payload, status=d["status"],
                     created_at=d["created_at"] or 0.0,
                     decision=HumanDecision(by=d["decided_by"], note=d["note"] or "", at=d["decided_at"]),
                     applied=Applied(at=d["applied_at"], result=d["result"]))
