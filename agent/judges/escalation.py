"""What a decision of the judge hierarchy leaves outside the journal: an item on the human queue
(harness/queue_store.py) for a call a human should see, and a git note with both opinions on the
experiment's commit (the judge's own notes ref). agent/judges/hierarchy.py calls both."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from harness import gitops
from harness.queue_store import QueueStore
from harness.records import Decision
from harness.secrets import scrub

# The judge's own notes ref: the loop's `add -f` on refs/notes/autoresearch would replace ours.
JUDGE_NOTES_REF = "refs/notes/autoresearch-judge"
# Characters of a diff stored in a queue item's payload.
PAYLOAD_DIFF_CHARS = 50_000


def escalate(ctx, kind: str, reason: str, status: str, verdicts: dict, meta_reason: str) -> dict:
    """Put the decision on the human queue as `kind` (contested, disagreement, bias, integrity...):
    the diff, the judges' figures and opinions; returns what the journal records ({"kind", "id"},
    or the error: the queue never stops the loop)."""
    said = Decision(status, reason, verdicts=verdicts)   # typed reads of what the judges said
    payload = scrub({
        "status": status, "description": ctx.proposal.description, "hypothesis": ctx.proposal.hypothesis,
        "parent": ctx.parent, "diff": (ctx.diff or "")[:PAYLOAD_DIFF_CHARS],
        "figures": said.judge_figures() | {"trusted_bpb": said.verify_figure("trusted_bpb"),
                                           "printed_bpb": said.verify_figure("printed_bpb")},
        "rule": said.opinion_of("rule"), "llm": said.opinion_of("llm"), "metajudge": meta_reason,
        "verify": said.verify or None,
        "discarded_ref": gitops.discarded_ref(ctx.tag, ctx.n) if status != "keep" else None})
    try:
        item = QueueStore(Path(ctx.run_dir) / "queue.sqlite").escalate(
            tag=ctx.tag, experiment=ctx.n, commit=ctx.commit, kind=kind, reason=scrub(reason), payload=payload)
    except Exception as e:  # the queue must never stop the loop; the journal keeps the reason
        return {"kind": kind, "error": f"{type(e).__name__}: {e}"}
    return {"kind": kind, "id": item}


def note(ctx, status: str, reason: str, verdicts: dict) -> None:
    """The decision and both opinions as a git note on the experiment commit (own notes ref)."""
    if not ctx.commit:
        return
    said = Decision(status, reason, verdicts=verdicts)
    record = scrub({"n": ctx.n, "status": status, "reason": reason, "trusted_bpb": said.verify_figure("trusted_bpb"),
                    "rule": said.opinion_of("rule"), "llm": said.opinion_of("llm"),
                    "metajudge": said.metajudge_flags, "verify": said.verify_reason,
                    "verify_seconds": said.verify_figure("seconds")})
    with contextlib.suppress(gitops.GitError, OSError):
        gitops.git(Path(ctx.worktree), *gitops._identity_args(Path(ctx.worktree)), "notes", "--ref",
                   JUDGE_NOTES_REF, "add", "-f", "-m", json.dumps(record, default=str, indent=1), ctx.commit)


def out_of_reruns(ctx, decision: Decision, runs: int) -> Decision:
    """A decision that still asks for a run when the loop has none left to give: contested, on the
    human queue, never a silent discard (the journal keeps the judge's last figures)."""
    reason = f"contested: out of reruns after {runs} runs, still undecided ({decision.reason})"
    verdicts = dict(decision.verdicts)
    jd = dict(decision.judge, status="discard", reason=reason)
    verdicts["judge"] = jd
    jd["escalations"] = [escalate(ctx, "contested", reason, "discard", verdicts, "")]
    note(ctx, "discard", reason, verdicts)
    return Decision("discard", reason, decision.trusted_bpb, verdicts, basis=decision.basis)
