"""The run's other records, typed for their readers: the journal's audit and queue_applied
objects, a re-measurement's outcome, and the trace spans of traces.jsonl.

Their writers build plain JSON objects (agent/judges/hierarchy.py, agent/judges/queue_apply.py,
agent/tracing.py); readers (recovery, the dashboard, the Braintrust sink) read them only through
these classes. Read from disk they are data, not trusted: from_dict never raises, and a value of
the wrong type reads as None (or empty).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.figures import as_dict, as_int, as_str, fnum

# queue_applied actions that move the branch (a restore cherry-picks, a revert undoes a keep).
BRANCH_ACTIONS = ("restore", "revert")


def _ident(v) -> str | int | None:
    """A span id, parent or trace: a string or an int, else None."""
    return v if isinstance(v, str) or as_int(v) is not None else None


@dataclass(frozen=True)
class AuditRecord:
    """journal kind "audit": the MetaJudge's audit of one decision (agent/judges/hierarchy.py
    writes {"kind": "audit", "tag", **MetaAudit.as_dict(), "escalated"})."""
    n: int | None
    tag: str | None
    flags: list = field(default_factory=list)         # {"kind", "reason"} dicts
    contradiction: str | None = None
    escalated: list = field(default_factory=list)     # the flags that went to the human queue
    raw: dict = field(default_factory=dict)           # the object as read (shown as is)

    @classmethod
    def from_dict(cls, d) -> "AuditRecord | None":
        """The audit, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") != "audit":
            return None
        n = as_int(d.get("n"))
        if n is None:
            n = as_int(d.get("experiment"))   # an older writer's key
        flags, escalated = d.get("flags"), d.get("escalated")
        return cls(n=n, tag=as_str(d.get("tag")),
                   flags=[f for f in flags if isinstance(f, dict)] if isinstance(flags, list) else [],
                   contradiction=as_str(d.get("contradiction")),
                   escalated=[f for f in escalated if isinstance(f, dict)] if isinstance(escalated, list) else [],
                   raw=d)


@dataclass(frozen=True)
class QueueAppliedRecord:
    """journal kind "queue_applied": one human decision applied at a boundary
    (agent/judges/queue_apply.py apply_item)."""
    item: int | None
    action: str | None            # restore | revert | acknowledged | restore_failed | *_conflict | *_empty
    commit: str | None            # the commit it made on the branch
    trusted_bpb: float | None     # the branch's re-measured value after it, when measured
    result: str | None

    @classmethod
    def from_dict(cls, d) -> "QueueAppliedRecord | None":
        """The record, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") != "queue_applied":
            return None
        return cls(item=as_int(d.get("item")), action=as_str(d.get("action")), commit=as_str(d.get("commit")) or None,
                   trusted_bpb=fnum(d.get("trusted_bpb")), result=as_str(d.get("result")))

    @property
    def moved_branch(self) -> bool:
        """It left a commit on the branch: the branch head is that commit from here on."""
        return self.action in BRANCH_ACTIONS and self.commit is not None


@dataclass(frozen=True)
class Measurement:
    """A measurement of one commit outside the experiment sequence, read from the dict its maker
    returns: JudgeHierarchy.measure (trained, then the trusted evaluation; its figure is
    "trusted_bpb") or agent/report.py's ablations (cached in ablations.json; "bpb")."""
    ok: bool
    reason: str | None = None
    bpb: float | None = None
    log: str | None = None

    @classmethod
    def of(cls, d, figure: str = "trusted_bpb") -> "Measurement":
        """`d` read (None or no dict: not measured); `figure` names its val_bpb key."""
        d = as_dict(d)
        return cls(ok=d.get("ok") is True, reason=as_str(d.get("reason")), bpb=fnum(d.get(figure)),
                   log=as_str(d.get("log")))


@dataclass(frozen=True)
class SpanRecord:
    """One line of traces.jsonl: a finished span (agent/tracing.py Span.record())."""
    id: str | int | None
    parent: str | int | None
    trace: str | int | None
    name: str
    start: float | None
    end: float | None             # None: still open when written (never, for the file's spans)
    input: object = None
    output: object = None
    tokens: dict = field(default_factory=dict)
    cost: float | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, d) -> "SpanRecord | None":
        if not isinstance(d, dict):
            return None
        return cls(id=_ident(d.get("id")), parent=_ident(d.get("parent")), trace=_ident(d.get("trace")),
                   name=str(d.get("name", "?")), start=fnum(d.get("start")), end=fnum(d.get("end")),
                   input=d.get("input"), output=d.get("output"), tokens=as_dict(d.get("tokens")),
                   cost=fnum(d.get("cost")), error=as_str(d.get("error")) or None)

    def names_experiment(self, n: int | None) -> bool:
        """Its input names experiment n (the loop's spans carry {"n": ...}; older ones "experiment")."""
        inp = as_dict(self.input)
        return n is not None and n in (inp.get("n"), inp.get("experiment"))

    def token(self, key: str) -> int:
        """Tokens of one kind (input, output, cache_read, cache_write), 0 when absent."""
        return int(fnum(self.tokens.get(key)) or 0)
