"""The human queue, both ways: what a decision of the judge hierarchy leaves outside the journal
(`escalate`: an item for a call a human should see; `note`: a git note with both opinions on the
experiment's commit, the judge's own notes ref; agent/judges/hierarchy.py calls both), and the
human's decisions applied to the branch, at an experiment boundary:

- approve a discarded experiment: its commit is cherry-picked onto the branch (on top of the
  current best) as a new commit, and re-measured there; if the re-measurement fails (crash or
  integrity), the branch goes back and the item says so.
- reject a kept experiment: a revert commit undoes it on the branch, and the branch is re-measured.
- any other decision (approve a keep, reject a discard, a bias report) is acknowledged: nothing
  to change in git.

Each application is a commit (its message carries the queue item id, so a crash between the
commit and mark_applied is not applied twice), a git note on the new commit, a journal record
(kind "queue_applied"), and the item marked applied with the outcome. No results.tsv row: that
table is one row per experiment, and --resume relies on it (agent/recovery.py).
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agent import gitops
from runfiles.queue_store import QueueItem, QueueStore
from runfiles.run import Best, best_of
from harness.decision import Decision
from harness.experiment_record import ExperimentRecord
from runfiles.journal import Measurement
from harness.secrets import scrub

TRAIN = "train.py"
# Commit-message trailer naming the queue item an application came from.
TRAILER = "Autoresearch-Queue-Item"


@dataclass
class Outcome:
    head: str                 # the branch head after the application
    best: Best | None         # when the branch's measured value changed
    record: dict              # the journal record


def _item_commit_on_branch(worktree: Path, item_id: int) -> str | None:
    out = gitops.git(worktree, "log", "--format=%H", f"--grep={TRAILER}: {item_id}$", "HEAD", check=False)
    return out.split()[0] if out else None


def _commit(worktree: Path, message: str) -> str:
    return gitops.commit_file(worktree, TRAIN, message)


def apply_item(item: QueueItem, *, repo: Path, worktree: Path, tag: str, measure: Callable[[str], dict],
               history: list[ExperimentRecord]) -> Outcome:
    """Apply one decided queue item; never raises on a git conflict (the outcome says so)."""
    status, source = item.escalated_status, item.commit
    decision = item.status
    head0 = gitops.head(worktree)
    rec = {"kind": "queue_applied", "tag": tag, "item": item.id, "item_kind": item.kind,
           "experiment": item.experiment, "decision": decision, "decided_by": item.decision.by,
           "note": item.decision.note, "source_commit": source, "parent": head0, "commit": None,
           "action": "acknowledged", "trusted_bpb": None, "measure": None, "started_at": time.time()}
    if decision == "approved" and status != "keep" and source:
        action, verb = "restore", "restored"
    elif decision == "rejected" and status == "keep" and source:
        action, verb = "revert", "reverted"
    else:
        rec["result"] = f"{decision} {item.kind} item: nothing to change on the branch"
        return _finish(rec, head0, None)
    done = _item_commit_on_branch(worktree, item.id)
    if done:
        rec.update(action=action, commit=done, result=f"already {verb} as {done[:7]} (applied before a stop)")
        return _finish(rec, done, None)

    who = item.decision.by or "human"
    message = (f"{'Restore' if action == 'restore' else 'Revert'} experiment {item.experiment} "
               f"({source[:7]}), {decision} by {who}\n\n{item.reason}\n"
               f"{('Note: ' + item.decision.note) if item.decision.note else ''}\n\n{TRAILER}: {item.id}\n")
    git_args = (["cherry-pick", "--no-commit", source] if action == "restore"
                else ["revert", "--no-commit", source])
    try:
        gitops.git(worktree, *git_args)
    except gitops.GitError as e:
        gitops.git(worktree, "reset", "-q", "--hard", head0)
        rec.update(action=f"{action}_conflict", result=f"could not {action} {source[:7]} on {head0[:7]}: "
                                                       f"{str(e).splitlines()[-1][:200]}")
        return _finish(rec, head0, None)
    if not gitops.git(worktree, "status", "--porcelain", "--untracked-files=no"):
        rec.update(action=f"{action}_empty", result=f"nothing to {action}: the branch already has that state")
        return _finish(rec, head0, None)
    new = _commit(worktree, message)
    rec.update(action=action, commit=new)
    raw = measure(new) or {}
    rec["measure"] = raw
    m = Measurement.of(raw)
    best = None
    if m.ok and m.bpb is not None:
        rec["trusted_bpb"] = m.bpb
        best = best_of(new, m.bpb)
        rec["result"] = f"{verb} {source[:7]} as {new[:7]}; re-measured trusted val_bpb {m.bpb:.6f}"
    elif action == "restore":
        gitops.git(worktree, "reset", "-q", "--hard", head0)
        gitops.update_ref(repo, f"{gitops.REF_PREFIX}{tag}/queue/{item.id}", new)
        rec.update(action="restore_failed", result=f"restored {source[:7]} as {new[:7]} but its re-measurement "
                                                   f"failed ({m.reason}); branch left at {head0[:7]}")
        new = head0
    else:
        prior = _measured_value(history, gitops.parent_of(repo, source))
        best = best_of(new, prior) if prior is not None else None
        rec["result"] = (f"reverted {source[:7]} as {new[:7]}; re-measurement failed ({m.reason}), "
                         f"best taken from the reverted-to commit: {prior}")
    if rec["commit"] and rec["action"] in ("restore", "revert"):
        gitops.add_note(repo, rec["commit"], json.dumps(
            {"queue_item": item.id, "action": action, "source": source, "decided_by": who,
             "note": item.decision.note, "trusted_bpb": rec["trusted_bpb"], "result": rec["result"]}))
    return _finish(rec, new, best)


def _measured_value(history: list[ExperimentRecord], commit: str | None) -> float | None:
    for r in reversed(history):
        if commit and r.commit == commit and r.status == "keep":
            return r.trusted_bpb or r.printed_bpb
    return None


def _finish(rec: dict, head: str, best: dict | None) -> Outcome:
    rec["ended_at"] = time.time()
    return Outcome(head, best, rec)


def apply_decided(queue: QueueStore, *, repo: Path, worktree: Path, tag: str, measure, history,
                  on_outcome=None) -> list[dict]:
    """Apply every approved/rejected item of this tag, oldest first; returns their journal records.

    `on_outcome(outcome)` lets the caller move its own state (the loop's best and last kept commit)
    after each item, before the next one is applied on top.
    """
    records = []
    for item in sorted([*queue.list("approved"), *queue.list("rejected")], key=lambda i: i.id):
        if item.tag != tag:
            continue
        outcome = apply_item(item, repo=repo, worktree=worktree, tag=tag, measure=measure, history=history)
        if on_outcome is not None:
            on_outcome(outcome)
        queue.mark_applied(item.id, outcome.record["result"])
        records.append(outcome.record)
    return records


# ---- onto the queue: what a decision of the judge hierarchy leaves outside the journal.

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
