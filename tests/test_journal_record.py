"""harness/experiment_record.py: the experiment record is one flat record, one field per key of
the journal line.

Real journal lines (written by the real loop's record()) and adversarial dicts go through the
record and come back as the same object, keys in the same order; pending.json's ProposalInfo
(agent/proposing.py) likewise, and what the record keeps of it is its optional keys."""
import json
from dataclasses import fields

import pytest

from agent.proposing import INFO_KEYS, TIMING_KEYS, ProposalInfo
from harness.experiment_record import OPTIONAL_KEYS, RECORD_KEYS, ExperimentRecord, experiment_records

ADVERSARIAL = [
    {},
    {"zzz": 1, "n": 3},                                            # an unknown key first
    {"ended_at": 5.0, "kind": "experiment", "n": 1},               # record()'s order reversed
    {"n": "7", "status": ["keep"], "verdicts": "x", "summary": [1], "tokens": None, "config": 3,
     "attempts": {"a": 1}, "timings": "fast", "trusted_bpb": "1.0", "evidence": 9, "worker": "w"},  # wrong types
    {"handover": None, "fixes": None, "screen": None, "worker": None, "rebases": None},            # optional, as None
    {"kind": "experiment", "fallback": "offline", "prefetched": True, "stale_parent": "abc", "rebased_from": "abc",
     "dropped_prefetch": [{"cost_usd": 0.1}], "screen": {"k": 3}, "screen_error": "e", "fixes": [{}],
     "fix_error": "f", "resumed": True, "rebases": [], "proposal_error": "p", "recovered": True, "imported": "x:y"},
    {"n": 2, "ident": {"n": 9}, "proposal": "not a part", "info": 1, "extra": {"a": 1}, "_keys": [1], "value": 0},
    {"n": 1e999, "cost_usd": float("nan"), "tokens": {"input": -1e999}, "description": None, "diff": 5},
]


def _round_trip(d: dict) -> None:
    rec = ExperimentRecord.from_dict(d)
    out = rec.to_dict()
    assert out == d or json.dumps(out) == json.dumps(d)      # NaN is not equal to itself; its text is
    assert list(out) == list(d), "the keys in the order they were read"
    for k in d:
        assert rec.value(k) is d[k], k


def test_real_journal_lines_go_through_the_record_unchanged(loop_run):
    """Written by the real loop (record()): each line read and written back is the same line; every
    key is a field (nothing left over in `extra`)."""
    lines = (loop_run / "journal.jsonl").read_text().splitlines()
    recs = experiment_records([json.loads(x) for x in lines])
    assert len(recs) >= 3 and {r.status for r in recs} >= {"keep"}
    for line, rec in zip([x for x in lines if json.loads(x).get("kind", "experiment") == "experiment"], recs):
        obj = json.loads(line)
        _round_trip(obj)
        assert rec.extra == {} and json.dumps(rec.to_dict()) == line
        for k, v in obj.items():                            # each key is the field of its name
            assert getattr(rec, k) == v, k
        # a fresh record built from the same keys writes record()'s order
        assert list(ExperimentRecord.of(**obj).to_dict()) == list(obj)


@pytest.mark.parametrize("d", ADVERSARIAL)
def test_adversarial_dicts_round_trip_without_raising(d):
    _round_trip(d)
    rec = ExperimentRecord.from_dict(d)
    # the typed reads never raise on what was read
    rec.decision_bpb, rec.row_bpb, rec.basis, rec.token_counts(), rec.cost(), rec.training_runs
    rec.knob_values, rec.code_id, rec.text("description"), rec.evidence_view(), rec.noise_band()
    for k in ("extra", "_keys", "value", "info", "ident", "proposal"):   # never a field set from a line
        if k in d:
            assert rec.extra[k] is d[k]


def test_a_new_record_writes_record_keys_in_order_and_optional_keys_only_when_set():
    rec = ExperimentRecord.of(n=4, status="keep", worker=2, handover="cost cap", fixes=[{"a": 1}])
    out = rec.to_dict()
    assert list(out) == [k for k in RECORD_KEYS if k not in OPTIONAL_KEYS or k in ("worker", "handover", "fixes")]
    assert rec.handover == "cost cap" and rec.fixes == [{"a": 1}] and out["worker"] == 2
    with pytest.raises(TypeError):
        ExperimentRecord.of(nope=1)
    with pytest.raises(TypeError):
        ExperimentRecord.of(extra={"a": 1})                 # the record's own bookkeeping is no key
    # a key set after reading is written after the keys read
    read = ExperimentRecord.from_dict({"n": 1})
    read.screen = {"k": 2}
    read.sealed = True
    assert list(read.to_dict()) == ["n", "sealed", "screen"]


def test_every_journal_key_is_one_field():
    names = [f.name for f in fields(ExperimentRecord)]
    assert list(RECORD_KEYS) == [n for n in names if n not in ("extra", "_keys")]
    assert len(set(RECORD_KEYS)) == len(RECORD_KEYS) and set(OPTIONAL_KEYS) <= set(RECORD_KEYS)
    assert RECORD_KEYS[-1] == "ended_at" and RECORD_KEYS[0] == "kind"   # record()'s order: ended last


def test_proposal_info_round_trips_and_the_record_keeps_its_optional_keys():
    """pending.json's ProposalInfo round-trips exactly (unknown keys, order, None); every key but the
    timings is one of the record's optional keys, and a record built from for_record() writes them."""
    assert set(INFO_KEYS) - set(TIMING_KEYS) <= set(OPTIONAL_KEYS)
    for d in ({}, {"resumed": True, "seconds": 1.0, "zz": [1]}, {"waited": None, "screen": "x", "fixes": 3},
              {k: f"v{i}" for i, k in enumerate(reversed(INFO_KEYS))}):
        info = ProposalInfo.from_dict(d)
        assert info.to_dict() == d and list(info.to_dict()) == list(d)
    assert ProposalInfo.from_dict(["not", "a", "dict"]).to_dict() == {}
    info = ProposalInfo(seconds=2.0, handover="h", waited=0.5, stale_parent="p", screen={"k": 2}, fix_error="f",
                        extra={"zz": 1})
    assert list(info.to_dict()) == [k for k in INFO_KEYS if k in ("seconds", "waited", "handover", "stale_parent",
                                                                  "screen", "fix_error")] + ["zz"]
    kept = info.for_record()
    assert kept == {"handover": "h", "stale_parent": "p", "screen": {"k": 2}, "fix_error": "f"}
    rec = ExperimentRecord.of(**kept)
    assert {k: v for k, v in rec.to_dict().items() if k in OPTIONAL_KEYS} == kept
