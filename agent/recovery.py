"""--resume: bring journal, results.tsv, git and processes back into agreement after any stop.

Invariants restored (the loop's write order makes each case recoverable):
1. No orphan: a child process group recorded in child.pid that still runs in the worktree is killed.
2. Every experiment exactly once: the journal is written before results.tsv, so a record without
   its row gets the row appended (derived from the record); a row without a record (a torn journal
   line) gets a minimal record marked "recovered". Duplicate records of one n are ignored.
3. Discarded commits stay reachable: a discard/crash record whose ref is missing gets it.
4. An experiment that was committed but not recorded (pending.json; the loop died while it
   trained) is RE-RUN on the same commit: its proposal is preserved in git and a killed run has
   no result to record. If its parent is no longer the last kept commit, it cannot be re-run
   faithfully: the commit is kept under refs/autoresearch/<tag>/interrupted/<n> and dropped.
5. The branch points at the last kept commit (or at the pending commit about to be re-run).
"""
from __future__ import annotations

from agent.experiment import Attempt
from agent.proposers.base import Proposal
from harness import gitops
from harness.results import append_journal, append_result, read_journal, read_json, read_results
from harness.runner import kill_leftover


def reconcile(loop) -> tuple[Attempt | None, list[str]]:
    """Repair the run folder; returns (experiment to re-run or None, notes for the user)."""
    notes = []
    killed = kill_leftover(loop.run_dir)
    if killed:
        notes.append(killed)
    records, problems = read_journal(loop.journal_path)
    notes += [f"journal {p} (skipped)" for p in problems]
    seen, unique = set(), []
    for rec in sorted(records, key=lambda r: r.get("n", 0)):
        if rec.get("n") in seen:
            notes.append(f"journal: duplicate record for experiment {rec.get('n')} ignored")
            continue
        seen.add(rec.get("n"))
        unique.append(rec)
    records = unique
    table = read_results(loop.results_path)
    notes += [f"results.tsv {p} (left as is)" for p in table.problems]
    rows = table.rows

    if len(rows) < len(records):
        for rec in records[len(rows):]:
            append_result(loop.results_path, rec["commit"], (rec.get("summary") or {}).get("val_bpb"),
                          rec.get("memory_gb"), rec["status"], rec.get("description", ""))
            notes.append(f"results.tsv: added the missing row of experiment {rec['n']}")
    elif len(rows) > len(records):
        for i, row in enumerate(rows[len(records):], start=len(records) + 1):
            full = gitops.rev_parse(loop.repo, row["commit"]) or row["commit"]
            rec = {"kind": "experiment", "n": i, "tag": loop.tag, "commit": full, "short": full[:7],
                   "status": row["status"], "description": row["description"],
                   "summary": {"val_bpb": row["val_bpb"]} if row["status"] != "crash" else None,
                   "memory_gb": row["memory_gb"], "recovered": True,
                   "decision_reason": "recovered from results.tsv (journal line lost)"}
            append_journal(loop.journal_path, rec)
            records.append(rec)
            notes.append(f"journal: recovered a minimal record of experiment {i} from results.tsv")

    for rec in records:
        ref = rec.get("discarded_ref")
        if ref and rec.get("commit") and not gitops.ref_exists(loop.repo, ref):
            gitops.update_ref(loop.repo, ref, rec["commit"])
            notes.append(f"git: restored {ref}")

    base = loop.run_info["base_commit"]
    last_kept, best_bpb = _branch_head(loop.journal_path, base)
    loop.history = records
    loop.last_kept = last_kept
    loop.best = {"commit": last_kept, "val_bpb": best_bpb} if last_kept != base or best_bpb else None

    rerun = _pending(loop, records, base, last_kept, notes)
    gitops.reset_hard(loop.worktree, rerun.commit if rerun else last_kept)
    return rerun, notes


def _branch_head(journal_path, base) -> tuple[str, float | None]:
    """The commit the branch should point at, and its val_bpb: the last event that moved it.

    Kept experiments move the branch, and so do human-queue decisions applied at a boundary
    (journal kind "queue_applied", action restore or revert, agent/queue_apply.py). The journal
    is chronological, so the last such record wins.
    """
    head, bpb = base, None
    everything, _ = read_journal(journal_path, kind=None)
    for rec in everything:
        kind = rec.get("kind", "experiment")
        if kind == "experiment" and rec.get("status") == "keep" and rec.get("commit"):
            head = rec["commit"]
            bpb = rec.get("trusted_bpb") or (rec.get("summary") or {}).get("val_bpb")
        elif kind == "queue_applied" and rec.get("action") in ("restore", "revert") and rec.get("commit"):
            head = rec["commit"]
            if rec.get("trusted_bpb") is not None:
                bpb = rec["trusted_bpb"]
    return head, bpb


def _pending(loop, records, base, last_kept, notes) -> Attempt | None:
    pending = read_json(loop.pending_path)
    if not pending:
        loop.pending_path.unlink(missing_ok=True)
        return None
    n, commit, parent = pending.get("n"), pending.get("commit"), pending.get("parent")
    if n in {r.get("n") for r in records}:
        loop.pending_path.unlink(missing_ok=True)
        return None
    if not commit or not gitops.rev_parse(loop.repo, commit):
        notes.append(f"experiment {n}: pending commit {commit} not found; it will be proposed anew")
        loop.pending_path.unlink(missing_ok=True)
        return None
    runnable = (parent == last_kept) or (parent is None and commit == base == last_kept)
    if not runnable:
        ref = f"{gitops.REF_PREFIX}{loop.tag}/interrupted/{n}"
        gitops.update_ref(loop.repo, ref, commit)
        notes.append(f"experiment {n}: its parent is no longer the last kept commit; kept it under {ref}")
        loop.pending_path.unlink(missing_ok=True)
        return None
    source = gitops.show_file(loop.repo, commit, "train.py")
    proposal = Proposal(description=pending.get("description", ""), hypothesis=pending.get("hypothesis", ""),
                        source=source, proposer=pending.get("proposer", "offline"),
                        model=pending.get("model"), notes=pending.get("notes", ""))
    info = dict(pending.get("info") or {}, resumed=True)
    a = Attempt(n=n, parent=parent, proposal=proposal, info=info, commit=commit,
                attempts=pending.get("attempts") or [])
    notes.append(f"experiment {n} was committed but not recorded ({commit[:7]}): re-running it")
    return a
