"""The journal's annotations besides the experiment records (harness/experiment_record.py), typed
for their readers: AuditRecord, QueueAppliedRecord, ClaimRecord (a commit measured again on fresh
seeds: agent/judges/confirm.py), Measurement (a re-measurement's outcome) and SpanRecord (a line
of traces.jsonl).

Read from disk they are data: from_dict never raises."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.results_table import as_dict, as_int, as_str, fnum


BRANCH_ACTIONS = ("restore", "revert")
# Journal kinds of a branch move outside an experiment: a human decision applied at a boundary
# (agent/judges/queue_apply.py), the night end's step back from a final its fresh runs did not hold
# up (agent/remeasure.py).
BRANCH_MOVE_KINDS = ("queue_applied", "step_back")


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
    (agent/judges/queue_apply.py apply_item); or kind "step_back": the night end's revert of a final
    whose fresh runs no longer put it below its parent (item None)."""
    item: int | None
    action: str | None            # restore | revert | acknowledged | restore_failed | *_conflict | *_empty
    commit: str | None            # the commit it made on the branch
    trusted_bpb: float | None     # the branch's re-measured value after it, when measured
    result: str | None

    @classmethod
    def from_dict(cls, d) -> "QueueAppliedRecord | None":
        """The record, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") not in BRANCH_MOVE_KINDS:
            return None
        return cls(item=as_int(d.get("item")), action=as_str(d.get("action")), commit=as_str(d.get("commit")) or None,
                   trusted_bpb=fnum(d.get("trusted_bpb")), result=as_str(d.get("result")))

    @property
    def moved_branch(self) -> bool:
        """It left a commit on the branch: the branch head is that commit from here on."""
        return self.action in BRANCH_ACTIONS and self.commit is not None


@dataclass(frozen=True)
class ClaimRecord:
    """journal kind "claim": a commit measured again on fresh seeds (agent/judges/confirm.py):
    "confirmed" when those runs pass the statistical test against its parent's runs; for the
    night's final also its gain over the baseline's runs (the morning report's headline)."""
    commit: str | None
    n: int | None                 # the experiment that kept it
    runs: list                    # its fresh runs (trusted val_bpb)
    parent: str | None
    parent_runs: list
    p_better: float | None
    confirmed: bool
    final: bool                   # the night's final, measured when the night ended
    baseline_runs: list = field(default_factory=list)
    gain: float | None = None     # the baseline's mean minus these runs' mean
    se: float | None = None
    failed: list = field(default_factory=list)
    why: str | None = None
    seeds: list = field(default_factory=list)   # the fresh seeds its runs used
    stepped_back_from: str | None = None        # the final the branch stepped back from to this commit
    holds: bool | None = None                   # the night end's weighing of an unconfirmed final (confirm.holds)

    @classmethod
    def from_dict(cls, d) -> "ClaimRecord | None":
        """The claim, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") != "claim":
            return None

        def nums(v):
            return [float(x) for x in v if fnum(x) is not None] if isinstance(v, list) else []
        return cls(commit=as_str(d.get("commit")), n=as_int(d.get("n")), runs=nums(d.get("runs")),
                   parent=as_str(d.get("parent")), parent_runs=nums(d.get("parent_runs")),
                   p_better=fnum(d.get("p_better")), confirmed=d.get("confirmed") is True, final=d.get("final") is True,
                   baseline_runs=nums(d.get("baseline_runs")), gain=fnum(d.get("gain")), se=fnum(d.get("se")),
                   failed=[str(x) for x in d.get("failed") or [] if isinstance(x, str)]
                   if isinstance(d.get("failed"), list) else [], why=as_str(d.get("why")),
                   seeds=[x for x in d.get("seeds") or [] if isinstance(x, int) and not isinstance(x, bool)]
                   if isinstance(d.get("seeds"), list) else [],
                   stepped_back_from=as_str(d.get("stepped_back_from")) or None,
                   holds=d.get("holds") if isinstance(d.get("holds"), bool) else None)


# A claim's runs: at least this many fresh runs of the commit (the strict judge's least runs for a keep).
CLAIM_MIN_RUNS = 2


def read_claims(journal_path) -> list[ClaimRecord]:
    """Every claim in a tag's journal, in order."""
    from harness.results import read_journal
    return [c for c in (ClaimRecord.from_dict(d) for d in read_journal(journal_path, kind="claim")[0])
            if c is not None]


def confirmed_when_kept(rec) -> bool:
    """A keep made by the strict test: at least CLAIM_MIN_RUNS runs of its own at the P(better)
    the test required (the baseline is the bar, not a claim; a one-run rule's keep is a bet)."""
    if rec.is_baseline or rec.status != "keep":
        return False
    ev = rec.evidence_view()
    if ev is None or (ev.rule is not None and ev.rule.decided_by in ("default", "reference")):
        return False
    used = [r for r in ev.runs if r.used and r.bpb is not None]
    p, need = ev.comparison.p_better, ev.comparison.p_keep
    return len(used) >= CLAIM_MIN_RUNS and p is not None and need is not None and p >= need


# The label of a keep the night's end stepped the branch back from (agent/remeasure.py step_back).
STEPPED_BACK = "stepped back"


def claim_label(rec, claims: list[ClaimRecord]) -> str:
    """"confirmed", "not confirmed" (a claim's fresh runs did not pass), "unconfirmed" (none yet), or
    "stepped back" (the night's end stepped the branch back from it: its fresh runs did not hold)."""
    if any(c.stepped_back_from == rec.commit for c in claims):
        return STEPPED_BACK
    if confirmed_when_kept(rec):
        return "confirmed"
    mine = [c for c in claims if c.commit == rec.commit]
    if any(c.confirmed for c in mine):
        return "confirmed"
    return "not confirmed" if mine else "unconfirmed"


@dataclass(frozen=True)
class Measurement:
    """A measurement of one commit outside the experiment sequence, read from the dict its maker
    returns: JudgeHierarchy.measure (trained, then the trusted evaluation; its figure is
    "trusted_bpb") or agent/report.py's ablations (cached in ablations.json; "bpb")."""
    ok: bool
    reason: str | None = None
    bpb: float | None = None
    log: str | None = None
    clock: str | None = None     # the harness clock's verdict on the run: "over" (no evidence) or "cheat"

    @classmethod
    def of(cls, d, figure: str = "trusted_bpb") -> "Measurement":
        """`d` read (None or no dict: not measured); `figure` names its val_bpb key."""
        d = as_dict(d)
        return cls(ok=d.get("ok") is True, reason=as_str(d.get("reason")), bpb=fnum(d.get(figure)),
                   log=as_str(d.get("log")), clock=as_str(d.get("clock")))


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
