"""agent/review_queue.py: list, show, approve, reject on a run's queue, as a user would type it."""
import subprocess
import sys
from pathlib import Path

from runfiles.queue_store import QueueStore

REPO = Path(__file__).resolve().parent.parent


def cli(*args, cwd=REPO):
    p = subprocess.run([sys.executable, str(REPO / "agent" / "review_queue.py"), *args], cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_list_show_approve_reject(tmp_path):
    run = tmp_path / ".autoresearch" / "may29"
    q = QueueStore(run / "queue.sqlite")
    a = q.escalate(tag="may29", experiment=4, commit="a" * 40, kind="contested",
                   reason="gain 0.0010 inside the band 0.0030",
                   payload={"status": "discard", "description": "MATRIX_LR 0.03", "hypothesis": "faster",
                            "diff": "-MATRIX_LR = 0.02\n+MATRIX_LR = 0.03\n",
                            "figures": {"best_before": 1.0, "threshold": 0.003, "runs": [0.999]},
                            "rule": {"status": "contested", "confidence": 0.5, "reason": "inside the band"},
                            "llm": {"status": "keep", "confidence": 0.6, "reason": "plausible"},
                            "metajudge": "no bias detected", "discarded_ref": "refs/autoresearch/may29/discarded/4"})
    b = q.escalate(tag="may29", experiment=5, commit="b" * 40, kind="bias", reason="lenient: kept 9/10",
                   payload={"status": "discard"})

    rc, out, _ = cli("--run", str(run), "list")
    assert rc == 0 and "contested" in out and "lenient: kept 9/10" in out and "aaaaaaa" in out
    rc, out, _ = cli("--run", str(run), "show", str(a))
    assert rc == 0
    for text in ("MATRIX_LR 0.03", "+MATRIX_LR = 0.03", "rule judge: contested", "llm judge: keep",
                 "metajudge: no bias detected", "refs/autoresearch/may29/discarded/4", '"threshold": 0.003'):
        assert text in out, text

    # default --run: the latest run under ./.autoresearch of the current folder
    rc, out, _ = cli("approve", str(a), "--note", "worth a look", "--who", "alice", cwd=tmp_path)
    assert rc == 0 and "restore it onto the branch" in out
    rc, out, err = cli("--run", str(run), "reject", str(a), "--who", "bob")
    assert rc == 1 and "not pending" in err
    rc, out, _ = cli("--run", str(run), "reject", str(b), "--who", "bob")
    assert rc == 0 and "nothing changes on the branch" in out

    item = q.get(a)
    assert item.status == "approved" and item.decision.by == "alice" and item.decision.note == "worth a look"
    rc, out, _ = cli("--run", str(run), "list")
    assert "no pending items" in out
    rc, out, _ = cli("--run", str(run), "list", "--status", "all")
    assert "approved" in out and "rejected" in out


def test_clear_errors(tmp_path):
    rc, _, err = cli("--run", str(tmp_path), "list")
    assert rc == 2 and "no human queue" in err
    QueueStore(tmp_path / "queue.sqlite")
    rc, _, err = cli("--run", str(tmp_path), "show", "99")
    assert rc == 1 and "no queue item 99" in err
