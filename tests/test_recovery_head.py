"""--resume puts the branch where the last branch-moving event left it: a kept experiment or an
applied human-queue decision (restore/revert), whichever came last in the journal."""
import json

from agent.recovery import branch_head


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "{half a line")


def test_queue_restore_after_last_keep_moves_the_head(tmp_path):
    j = tmp_path / "journal.jsonl"
    _write(j, [
        {"n": 1, "status": "keep", "commit": "a" * 40, "summary": {"val_bpb": 2.0}},
        {"n": 2, "status": "discard", "commit": "b" * 40, "summary": {"val_bpb": 2.1}},
        {"kind": "audit", "commit": "z" * 40},
        {"kind": "queue_applied", "action": "restore", "commit": "c" * 40, "trusted_bpb": 1.95},
        {"n": 3, "status": "discard", "commit": "d" * 40, "summary": {"val_bpb": 2.2}},
    ])
    assert branch_head(j, "base") == ("c" * 40, 1.95)


def test_keep_after_queue_revert_wins_and_failed_applications_are_ignored(tmp_path):
    j = tmp_path / "journal.jsonl"
    _write(j, [
        {"n": 1, "status": "keep", "commit": "a" * 40, "trusted_bpb": 2.0, "summary": {"val_bpb": 2.01}},
        {"kind": "queue_applied", "action": "revert", "commit": "r" * 40, "trusted_bpb": 2.05},
        {"kind": "queue_applied", "action": "restore_failed", "commit": "x" * 40, "trusted_bpb": 1.0},
        {"n": 2, "status": "keep", "commit": "k" * 40, "trusted_bpb": 1.9, "summary": {"val_bpb": 1.9}},
    ])
    assert branch_head(j, "base") == ("k" * 40, 1.9)


def test_no_journal_means_the_base_commit(tmp_path):
    assert branch_head(tmp_path / "missing.jsonl", "base") == ("base", None)


def test_reconcile_returns_what_it_recovered_and_touches_no_loop(tmp_path):
    """reconcile(RunFiles, base) on a folder a stop left: a kept experiment whose results.tsv row
    was lost, a discard, and a pending experiment committed on the kept one. It returns the
    history, the branch head, the best and the experiment to re-run, and repairs the files."""
    from agent.coordinator import PendingFile
    from agent.recovery import Recovered, reconcile
    from agent.workspace import RunFiles
    from agent import gitops
    from harness.experiment_record import ExperimentRecord
    from harness.results import append_journal, append_result, init_results, read_results
    from tests.loop_fixtures import git, make_repo

    repo = make_repo(tmp_path / "repo", {"train.py": "LR = 1\n"})
    base = gitops.head(repo)
    (repo / "train.py").write_text("LR = 2\n")
    kept = gitops.commit_file(repo, "train.py", "exp 2: LR 2")
    files = RunFiles(repo, "t", repo, repo)
    init_results(files.results_path)
    for rec in (ExperimentRecord.of(n=1, tag="t", commit=base, status="keep", trusted_bpb=2.0, proposer="baseline"),
                ExperimentRecord.of(n=2, tag="t", commit=kept, status="keep", trusted_bpb=1.9, description="LR 2")):
        append_journal(files.journal_path, rec.to_dict())
    append_result(files.results_path, base, 2.0, 0.0, "keep", "baseline")   # exp 2's row was lost
    (repo / "train.py").write_text("LR = 3\n")
    pending = gitops.commit_file(repo, "train.py", "exp 3: LR 3")
    gitops.reset_hard(repo, kept)
    append_journal(files.journal_path, PendingFile(n=3, parent=kept, commit=pending, description="LR 3").as_line())

    found = reconcile(files, base)
    assert isinstance(found, Recovered)
    assert [r.n for r in found.history] == [1, 2] and all(isinstance(r, ExperimentRecord) for r in found.history)
    assert found.last_kept == kept and found.best == {"commit": kept, "val_bpb": 1.9}
    assert found.rerun is not None and found.rerun.n == 3 and found.rerun.commit == pending
    assert any("rebuilt the missing row of experiment 2" in note for note in found.notes)
    assert any("experiment 3 was committed but not recorded" in note for note in found.notes)
    assert [ln.commit for ln in read_results(files.results_path).rows] == [base[:7], kept[:7]]   # the row is back
    assert git(repo, "rev-parse", "HEAD") == pending   # the branch at the experiment to re-run
    # a pending line that cannot be run again is given up once, by a line of its own
    append_journal(files.journal_path, ExperimentRecord.of(n=3, tag="t", commit=pending, status="discard").to_dict())
    gitops.reset_hard(repo, kept)
    (repo / "train.py").write_text("LR = 4\n")
    orphan = gitops.commit_file(repo, "train.py", "exp 4: LR 4")
    gitops.reset_hard(repo, base)
    append_journal(files.journal_path, PendingFile(n=4, parent=base, commit=orphan).as_line())
    again = reconcile(files, base)
    assert again.rerun is None and any("experiment 4: its parent is no longer the last kept commit" in x
                                       for x in again.notes)
    assert git(repo, "rev-parse", "refs/autoresearch/t/interrupted/4") == orphan
    assert not any("experiment 4" in x for x in reconcile(files, base).notes)   # said once, not at every resume


def test_an_earlier_versions_pending_file_moves_into_the_journal(tmp_path):
    """A run folder from before the pending lines: its pending.json is the experiment to re-run,
    moved into the journal (and the file gone), so nothing in flight is lost by the upgrade."""
    from agent.recovery import reconcile
    from agent.workspace import RunFiles
    from agent import gitops
    from harness.experiment_record import ExperimentRecord
    from harness.results import append_journal, append_result, init_results, read_journal
    from tests.loop_fixtures import make_repo

    repo = make_repo(tmp_path / "repo", {"train.py": "LR = 1\n"})
    base = gitops.head(repo)
    (repo / "train.py").write_text("LR = 2\n")
    pending = gitops.commit_file(repo, "train.py", "exp 2: LR 2")
    gitops.reset_hard(repo, base)
    files = RunFiles(repo, "t", repo, repo)
    init_results(files.results_path)
    append_journal(files.journal_path, ExperimentRecord.of(n=1, tag="t", commit=base, status="keep", trusted_bpb=2.0,
                                                          proposer="baseline").to_dict())
    append_result(files.results_path, base, 2.0, 0.0, "keep", "baseline")
    (repo / "pending.json").write_text(json.dumps({"n": 2, "commit": pending, "parent": base, "description": "LR 2"}))
    found = reconcile(files, base)
    assert found.rerun is not None and (found.rerun.n, found.rerun.commit) == (2, pending)
    assert not (repo / "pending.json").exists()
    assert [j.get("kind") for j in read_journal(files.journal_path, kind=None)[0]] == ["experiment", "pending"]


def test_the_coordinator_derives_the_tip_the_way_resume_reads_the_journal(tmp_path):
    """The tip and the best are never stored: the coordinator derives them from its history and the
    moves made outside experiments, in order, and a journal of the same events read back by
    --resume (branch_head) gives the same head and figure."""
    from agent.coordinator import Coordinator
    from harness.experiment_record import ExperimentRecord
    a, b, c, d = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
    coord = Coordinator("base")
    assert coord.tip() == ("base", None)
    lines = []

    def decided(**keys):
        coord.decided(ExperimentRecord.of(**keys))
        lines.append(keys)

    def moved(head, bpb):
        coord.moved(head, {"commit": head, "val_bpb": bpb} if bpb is not None else None)
        lines.append({"kind": "queue_applied", "action": "restore", "commit": head, "trusted_bpb": bpb})
    decided(n=1, status="keep", commit=a, trusted_bpb=2.0)
    decided(n=2, status="discard", commit=b, trusted_bpb=1.5)
    assert coord.tip() == (a, {"commit": a, "val_bpb": 2.0})
    moved(c, 1.9)
    assert coord.tip() == (c, {"commit": c, "val_bpb": 1.9})
    decided(n=3, status="keep", commit=d, trusted_bpb=1.8, imported="elsewhere")   # another machine's: never the tip
    assert coord.last_kept == c
    moved(b, None)                                  # a move without a measurement leaves the best as it was
    assert coord.tip() == (b, {"commit": c, "val_bpb": 1.9})
    decided(n=4, status="keep", commit=d, trusted_bpb=1.7)
    assert coord.tip() == (d, {"commit": d, "val_bpb": 1.7})
    j = tmp_path / "journal.jsonl"
    _write(j, lines)
    assert branch_head(j, "base") == (d, 1.7)
    _write(j, lines[:-1])
    assert branch_head(j, "base") == (b, 1.9)
