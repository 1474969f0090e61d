"""The human queue store: escalate, list, decide once, apply; survives reopen and bad payloads."""

import sqlite3
import threading

import pytest

from runfiles.queue_store import COLUMNS, QueueError, QueueStore


def _escalate(q, **kw):
    args = dict(tag="t1", experiment=3, commit="a" * 40, kind="contested",
                reason="inside the noise band", payload={"diff": "-x\n+y", "val_bpb": 1.23})
    args.update(kw)
    return q.escalate(**args)


def test_escalate_list_get_roundtrip(tmp_path):
    q = QueueStore(tmp_path / "queue.sqlite")
    i = _escalate(q)
    j = _escalate(q, kind="bias", experiment=4, payload={"keep_rate": 1.0})
    assert i != j
    items = q.list()
    assert [x.id for x in items] == [i, j]
    first = q.get(i)
    assert first.status == "pending"
    assert first.payload == {"diff": "-x\n+y", "val_bpb": 1.23}
    assert first.commit == "a" * 40 and first.kind == "contested" and first.experiment == 3
    assert first.created_at > 0 and first.decision.at is None and first.applied.at is None
    assert q.get(9999) is None
    # WAL mode, so the dashboard can read while the loop writes.
    mode = sqlite3.connect(tmp_path / "queue.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"


def test_decide_only_pending_and_apply(tmp_path):
    q = QueueStore(tmp_path / "queue.sqlite")
    i = _escalate(q)
    row = q.decide(i, "approve", who="alice", note="looks real")
    assert row.status == "approved" and row.decision.by == "alice" and row.decision.note == "looks real"
    assert row.decision.at is not None
    with pytest.raises(QueueError, match="not pending"):
        q.decide(i, "reject", who="bob")
    assert q.list("pending") == []
    assert [x.id for x in q.list("approved")] == [i]
    q.mark_applied(i, "restored as abc1234")
    row = q.get(i)
    assert row.status == "applied" and row.applied.result == "restored as abc1234"
    # the dashboard's JSON is the row's columns, flat, whatever parts the type groups them in
    flat = row.as_dict()
    assert tuple(flat) == COLUMNS and (flat["decided_by"], flat["note"]) == ("alice", "looks real")
    assert flat["result"] == "restored as abc1234" and flat["applied_at"] >= flat["decided_at"] > 0
    with pytest.raises(QueueError):
        q.mark_applied(i, "twice")


def test_bad_requests_are_refused_clearly(tmp_path):
    q = QueueStore(tmp_path / "queue.sqlite")
    i = _escalate(q)
    with pytest.raises(QueueError, match="unknown decision"):
        q.decide(i, "maybe", who="x")
    with pytest.raises(QueueError, match="no queue item"):
        q.decide(12345, "approve", who="x")
    with pytest.raises(QueueError, match="only decided"):
        q.mark_applied(i, "not yet decided")
    with pytest.raises(QueueError, match="unknown status"):
        q.list("weird")


def test_persists_across_reopen_and_tolerates_corrupt_payload(tmp_path):
    path = tmp_path / "queue.sqlite"
    i = _escalate(QueueStore(path))
    con = sqlite3.connect(path)
    con.execute("UPDATE queue SET payload = '{broken' WHERE id = ?", (i,))
    con.commit()
    con.close()
    again = QueueStore(path)
    item = again.get(i)
    assert item.payload == {"unparsed": "{broken"}
    assert again.decide(i, "reject", who="cli").status == "rejected"


def test_two_deciders_racing_only_one_wins(tmp_path):
    path = tmp_path / "queue.sqlite"
    i = _escalate(QueueStore(path))
    outcomes = []

    def decide(who):
        try:
            QueueStore(path).decide(i, "approve", who=who)
            outcomes.append("won")
        except QueueError:
            outcomes.append("lost")

    threads = [threading.Thread(target=decide, args=(w,)) for w in ("cli", "dashboard", "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost", "lost", "won"]


def test_a_hand_edited_payload_of_other_types_reads_safely(tmp_path):
    path = tmp_path / "queue.sqlite"
    q = QueueStore(path)
    i = _escalate(q, payload={"status": "keep", "rule": {"status": "keep", "confidence": 0.9, "reason": "r"}})
    j = _escalate(q)
    con = sqlite3.connect(path)
    con.execute("UPDATE queue SET payload = '[1, 2]' WHERE id = ?", (j,))   # JSON, but not an object
    con.commit()
    con.close()
    good, odd = q.get(i), q.get(j)
    assert good.escalated_status == "keep" and good.escalation.rule.confidence == 0.9 and good.escalation.llm is None
    assert odd.payload == {"unparsed": "[1, 2]"} and odd.escalated_status is None
    assert odd.escalation.figures == {} and odd.escalation.diff == "" and odd.as_dict()["id"] == j
    weird = _escalate(q, payload={"status": 3, "rule": "not an opinion", "figures": [1], "verify": "x",
                                  "metajudge": {"flags": []}})
    e = q.get(weird).escalation
    assert (e.status, e.rule, e.figures, e.verify_reason) == (None, None, {}, "")
    assert e.metajudge == '{"flags": []}'
