"""harness/record_parts.py: the experiment record held in typed parts, the journal line unchanged.

Real journal lines (written by the real loop's record()) and adversarial dicts go through the
parts and come back as the same flat object, keys in the same order; pending.json's ProposalInfo
likewise."""
import json
from dataclasses import fields

import pytest

from harness.record_parts import (INFO_KEYS, INFO_PATHS, FixInfo, PrefetchInfo, ProposalInfo, RecordCosts,
                                  RecordDecision, RecordIdentity, RecordProposal, RecordRun, ScreenInfo, get_path)
from harness.records import OPTIONAL_KEYS, RECORD_KEYS, RECORD_PATHS, ExperimentRecord, experiment_records
from scripts.core_size import MAX_ATTRIBUTES, REPO, class_attributes

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


def test_real_journal_lines_go_through_the_parts_unchanged(loop_run):
    """Written by the real loop (record()): each line read into parts and written back is the same
    line; every key is in a part (nothing left over in `extra`)."""
    lines = (loop_run / "journal.jsonl").read_text().splitlines()
    recs = experiment_records([json.loads(x) for x in lines])
    assert len(recs) >= 3 and {r.status for r in recs} >= {"keep"}
    for line, rec in zip([x for x in lines if json.loads(x).get("kind", "experiment") == "experiment"], recs):
        obj = json.loads(line)
        _round_trip(obj)
        assert rec.extra == {} and json.dumps(rec.to_dict()) == line
        # each key lives where RECORD_PATHS says, in a typed part
        assert rec.ident.n == obj["n"] and rec.ident.commit == obj["commit"] and rec.decision.status == obj["status"]
        assert rec.run.summary == obj["summary"] and rec.costs.timings == obj["timings"]
        assert rec.proposal.description == obj["description"] and rec.decision.verdicts == obj["verdicts"]
        # a fresh record built from the same keys writes record()'s order
        assert list(ExperimentRecord.of(**obj).to_dict()) == list(obj)


@pytest.mark.parametrize("d", ADVERSARIAL)
def test_adversarial_dicts_round_trip_without_raising(d):
    _round_trip(d)
    rec = ExperimentRecord.from_dict(d)
    # the typed reads never raise on what was read
    rec.decision_bpb, rec.row_bpb, rec.basis, rec.token_counts(), rec.cost(), rec.training_runs
    rec.knob_values, rec.code_id, rec.text("description"), rec.evidence_view(), rec.noise_band()


def test_a_new_record_writes_record_keys_in_order_and_optional_keys_only_when_set():
    rec = ExperimentRecord.of(n=4, status="keep", worker=2, handover="cost cap", fixes=[{"a": 1}])
    out = rec.to_dict()
    assert list(out) == [k for k in RECORD_KEYS if k not in OPTIONAL_KEYS or k in ("worker", "handover", "fixes")]
    assert rec.proposal.info.handover == "cost cap" and rec.proposal.info.fixing.fixes == [{"a": 1}]
    assert rec.ident.worker == 2 and out["worker"] == 2
    with pytest.raises(TypeError):
        ExperimentRecord.of(nope=1)
    # a key set after reading is written after the keys read
    read = ExperimentRecord.from_dict({"n": 1})
    read.proposal.info.screening.screen = {"k": 2}
    read.run.sealed = True
    assert list(read.to_dict()) == ["n", "sealed", "screen"]


def test_every_journal_key_has_one_place_in_the_parts():
    assert len(set(RECORD_PATHS.values())) == len(RECORD_PATHS) == len(RECORD_KEYS)
    fresh = ExperimentRecord()
    for k, path in RECORD_PATHS.items():
        get_path(fresh, path)                               # the path exists
    leaves = {p for p in RECORD_PATHS.values()}
    parts = {"ident": RecordIdentity, "run": RecordRun, "decision": RecordDecision, "costs": RecordCosts}
    for name, cls in parts.items():
        assert {(name, f.name) for f in fields(cls)} <= leaves, f"a field of {cls.__name__} that is no key"
    assert {("proposal", f.name) for f in fields(RecordProposal) if f.name != "info"} <= leaves


def test_proposal_info_is_the_loop_type_and_the_record_part():
    """pending.json's ProposalInfo round-trips exactly (unknown keys, order, None), and the
    record's optional proposal keys are the same ProposalInfo."""
    from agent.proposing import ProposalInfo as LoopInfo
    assert LoopInfo is ProposalInfo
    for d in ({}, {"resumed": True, "seconds": 1.0, "zz": [1]}, {"waited": None, "screen": "x", "fixes": 3},
              {k: f"v{i}" for i, k in enumerate(reversed(INFO_KEYS))}):
        info = ProposalInfo.from_dict(d)
        assert info.to_dict() == d and list(info.to_dict()) == list(d)
    assert ProposalInfo.from_dict(["not", "a", "dict"]).to_dict() == {}
    info = ProposalInfo(seconds=2.0, handover="h", prefetch=PrefetchInfo(waited=0.5, stale_parent="p"),
                        screening=ScreenInfo(screen={"k": 2}), fixing=FixInfo(fix_error="f"), extra={"zz": 1})
    assert list(info.to_dict()) == [k for k in INFO_KEYS if k in ("seconds", "waited", "handover", "stale_parent",
                                                                  "screen", "fix_error")] + ["zz"]
    kept = info.for_record()
    assert kept.to_dict() == {"handover": "h", "stale_parent": "p", "screen": {"k": 2}, "fix_error": "f"}
    rec = ExperimentRecord(proposal=RecordProposal(info=kept))
    assert {k: v for k, v in rec.to_dict().items() if k in OPTIONAL_KEYS} == kept.to_dict()
    assert all(get_path(info, INFO_PATHS[k]) is not None for k in info.to_dict() if k != "zz")


def test_no_record_class_holds_more_than_a_reader_can():
    """scripts/core_size.py's count: the record, its parts and ProposalInfo each <= 12 attributes."""
    counts = dict(class_attributes(REPO / "harness" / "experiment_record.py"))
    counts |= dict(class_attributes(REPO / "harness" / "record_parts.py"))
    for name in ("ExperimentRecord", "ProposalInfo", "RecordIdentity", "RecordProposal", "RecordRun",
                 "RecordDecision", "RecordCosts", "PrefetchInfo", "ScreenInfo", "FixInfo"):
        assert 0 < counts[name] <= MAX_ATTRIBUTES, (name, counts[name])
