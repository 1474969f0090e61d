"""Human decisions applied at the boundary, in a real git repo: approve restores a discarded commit
onto the branch (re-measured), reject reverts a keep; both become commits with notes and journal records."""
import json
import subprocess
from types import SimpleNamespace

import pytest

from agent.coordinator import Coordinator
from agent.judges.hierarchy import JudgeHierarchy
from agent.judges.queue_apply import TRAILER, apply_decided
from agent.judges.reviewer import BoundaryContext
from agent.workspace import RunFiles
from agent import gitops
from runfiles.queue_store import QueueStore
from harness.results import init_results, read_results
from harness.experiment_record import ExperimentRecord


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def branch(tmp_path, monkeypatch):
    """base -> kept K (LR 2); a discarded D (DEPTH 5) on top of K, parked under a discarded ref."""
    for k, v in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                 "GIT_COMMITTER_EMAIL": "t@t"}.items():
        monkeypatch.setenv(k, v)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".gitignore").write_text("results.tsv\nqueue.sqlite*\njournal.jsonl\n")
    (wt / "train.py").write_text("LR = 1\n\n\n\nDEPTH = 4\n")
    git(wt, "init", "-q")
    git(wt, "add", ".")
    git(wt, "commit", "-q", "-m", "base")
    base = git(wt, "rev-parse", "HEAD")
    (wt / "train.py").write_text("LR = 2\n\n\n\nDEPTH = 4\n")
    kept = gitops.commit_file(wt, "train.py", "exp 1: LR 2")
    (wt / "train.py").write_text("LR = 2\n\n\n\nDEPTH = 5\n")
    discarded = gitops.commit_file(wt, "train.py", "exp 2: depth 5")
    gitops.update_ref(wt, "refs/autoresearch/t/discarded/2", discarded)
    gitops.reset_hard(wt, kept)
    results = wt / "results.tsv"
    init_results(results)
    q = QueueStore(wt / "queue.sqlite")
    return SimpleNamespace(wt=wt, base=base, kept=kept, discarded=discarded, q=q, results=results)


def escalate(q, n, commit, status, kind="contested"):
    return q.escalate(tag="t", experiment=n, commit=commit, kind=kind, reason=f"{kind} exp {n}",
                      payload={"status": status, "diff": "..."})


def test_approve_restores_and_reject_reverts_both_noted(branch):
    b = branch
    restore_id = escalate(b.q, 2, b.discarded, "discard")
    revert_id = escalate(b.q, 1, b.kept, "keep", kind="disagreement")
    ack_id = escalate(b.q, 3, None, "discard", kind="bias")
    b.q.decide(restore_id, "approve", who="alice", note="the gain looked real")
    b.q.decide(revert_id, "reject", who="bob", note="LR change is a fluke")
    b.q.decide(ack_id, "approve", who="carol")
    measured, heads = [], []

    def measure(commit):
        measured.append((commit, (b.wt / "train.py").read_text()))
        return {"ok": True, "trusted_bpb": 1.5 - 0.1 * len(measured), "memory_gb": 0.1}

    history = [ExperimentRecord.of(n=1, status="keep", commit=b.kept, trusted_bpb=1.6)]
    recs = apply_decided(b.q, repo=b.wt, worktree=b.wt, tag="t", measure=measure, history=history,
                         on_outcome=lambda o: heads.append((o.head, o.best)))
    assert [r["action"] for r in recs] == ["restore", "revert", "acknowledged"]
    restored, reverted = recs[0]["commit"], recs[1]["commit"]
    # the restore sits on top of the kept commit, with the discarded change, and was measured there
    assert gitops.parent_of(b.wt, restored) == b.kept
    assert measured[0] == (restored, "LR = 2\n\n\n\nDEPTH = 5\n")
    # the revert undoes the keep on top of that: LR back to 1, depth 5 stays
    assert gitops.parent_of(b.wt, reverted) == restored
    assert (b.wt / "train.py").read_text() == "LR = 1\n\n\n\nDEPTH = 5\n" and gitops.head(b.wt) == reverted
    assert heads[0] == (restored, {"commit": restored, "val_bpb": pytest.approx(1.4)})
    assert heads[1] == (reverted, {"commit": reverted, "val_bpb": pytest.approx(1.3)})
    # both noted: git notes on the new commits, the trailer in the message, journal records
    for rec, who, note in ((recs[0], "alice", "the gain looked real"), (recs[1], "bob", "LR change is a fluke")):
        n = json.loads(gitops.read_note(b.wt, rec["commit"]))
        assert n["decided_by"] == who and n["note"] == note and n["queue_item"] == rec["item"]
        assert f"{TRAILER}: {rec['item']}" in git(b.wt, "log", "-1", "--format=%B", rec["commit"])
        assert rec["kind"] == "queue_applied" and rec["decided_by"] == who and rec["trusted_bpb"] is not None
    assert read_results(b.results).rows == []   # results.tsv stays one row per experiment
    assert {i.id: i.status for i in b.q.list()} == {restore_id: "applied", revert_id: "applied",
                                                          ack_id: "applied"}
    assert "nothing to change" in b.q.get(ack_id).applied.result
    # applying again does nothing: every item is applied
    assert apply_decided(b.q, repo=b.wt, worktree=b.wt, tag="t", measure=measure, history=history) == []


def test_failed_remeasurement_and_conflict_leave_the_branch(branch):
    b = branch
    i = escalate(b.q, 2, b.discarded, "discard")
    b.q.decide(i, "approve", who="alice")
    recs = apply_decided(b.q, repo=b.wt, worktree=b.wt, tag="t", history=[],
                         measure=lambda c: {"ok": False, "reason": "integrity: causality probe failed"})
    assert recs[0]["action"] == "restore_failed" and gitops.head(b.wt) == b.kept
    assert "causality" in b.q.get(i).applied.result
    assert gitops.ref_exists(b.wt, f"refs/autoresearch/t/queue/{i}")   # the attempt stays reachable
    # a change that no longer applies (the branch moved the same line) is reported, not forced
    (b.wt / "train.py").write_text("LR = 2\n\n\n\nDEPTH = 6\n")
    moved = gitops.commit_file(b.wt, "train.py", "exp 3: depth 6")
    j = escalate(b.q, 2, b.discarded, "discard")
    b.q.decide(j, "approve", who="alice")
    recs = apply_decided(b.q, repo=b.wt, worktree=b.wt, tag="t", history=[], measure=lambda c: {"ok": True})
    assert recs[0]["action"] == "restore_conflict" and gitops.head(b.wt) == moved
    assert git(b.wt, "status", "--porcelain", "--untracked-files=no") == ""


def test_hierarchy_boundary_moves_the_loop(branch):
    """The boundary gets the tag's files, history, `on_moved` and `train` (a BoundaryContext), not
    the loop: the applied decision moves the coordinator's head and best through on_moved, and the
    re-measurement is asked of measure with the caller's train."""
    b = branch
    i = escalate(b.q, 2, b.discarded, "discard")
    b.q.decide(i, "approve", who="alice")
    h = JudgeHierarchy()
    asked = []
    h.measure = lambda commit, **kw: asked.append((commit, kw)) or {"ok": True, "trusted_bpb": 1.25}
    coord = Coordinator(b.kept)
    coord.moved(b.kept, {"commit": b.kept, "val_bpb": 1.3})

    def train(commit):
        raise AssertionError("measure is replaced: nothing trains")
    recs = h.boundary(BoundaryContext(files=RunFiles(b.wt, "t", b.wt, b.wt), history=[], on_moved=coord.moved,
                                      train=train))
    assert [r["kind"] for r in recs] == ["queue_applied"]
    assert coord.last_kept == recs[0]["commit"] == gitops.head(b.wt)
    assert coord.best == {"commit": recs[0]["commit"], "val_bpb": 1.25}
    assert asked == [(recs[0]["commit"], {"worktree": b.wt, "run_dir": b.wt, "train": train})]


def test_a_remeasurement_is_the_callers_run_verified_by_the_judge(branch, tmp_path):
    """JudgeHierarchy.measure trains through the `train` it is handed (no loop object, no
    agent.experiment import); a crashed run is a failed measurement, with its log."""
    h = JudgeHierarchy()
    ran = []

    def crashed(commit):
        ran.append(commit)
        return SimpleNamespace(crash_class="timeout", log_path=tmp_path / "queue.log", summary=None)
    out = h.measure(branch.kept, worktree=branch.wt, run_dir=branch.wt, train=crashed)
    assert ran == [branch.kept]
    assert out == {"ok": False, "reason": "crashed: timeout", "log": str(tmp_path / "queue.log")}
