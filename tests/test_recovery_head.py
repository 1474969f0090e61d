"""--resume puts the branch where the last branch-moving event left it: a kept experiment or an
applied human-queue decision (restore/revert), whichever came last in the journal."""
import json

from agent.recovery import _branch_head


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
    assert _branch_head(j, "base") == ("c" * 40, 1.95)


def test_keep_after_queue_revert_wins_and_failed_applications_are_ignored(tmp_path):
    j = tmp_path / "journal.jsonl"
    _write(j, [
        {"n": 1, "status": "keep", "commit": "a" * 40, "trusted_bpb": 2.0, "summary": {"val_bpb": 2.01}},
        {"kind": "queue_applied", "action": "revert", "commit": "r" * 40, "trusted_bpb": 2.05},
        {"kind": "queue_applied", "action": "restore_failed", "commit": "x" * 40, "trusted_bpb": 1.0},
        {"n": 2, "status": "keep", "commit": "k" * 40, "trusted_bpb": 1.9, "summary": {"val_bpb": 1.9}},
    ])
    assert _branch_head(j, "base") == ("k" * 40, 1.9)


def test_no_journal_means_the_base_commit(tmp_path):
    assert _branch_head(tmp_path / "missing.jsonl", "base") == ("base", None)
