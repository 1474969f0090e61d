"""agent/coordinator.py: the one shape of an undecided experiment (in flight; the journal's pending lines)."""
from types import SimpleNamespace

from agent.experiment import Attempt, write_pending
from agent.coordinator import BEING_PROPOSED, InFlight, PendingFile, undecided
from agent.proposers.base import Proposal
from agent.workspace import RunFiles
from search import knobs
from harness.experiment_record import ExperimentRecord, experiment_records
from harness.results import read_journal

SRC = "DEPTH = 4  # layers\nLR = 0.01  # a rate\n"


def attempt():
    p = Proposal(description="deeper", hypothesis="more layers", source=SRC, proposer="claude", model="m",
                 notes="a note")
    return Attempt(n=7, parent="a" * 40, proposal=p, info={"seconds": 1.5}, commit="b" * 40)


def test_pending_line_round_trip_through_the_writer(tmp_path):
    a = attempt()
    slot = SimpleNamespace(files=RunFiles(tmp_path, "t", tmp_path, tmp_path), wid=None)   # what write_pending reads
    write_pending(slot, a)          # what run_experiment writes before the run
    journal, problems = read_journal(tmp_path / "journal.jsonl", kind=None)
    assert problems == [] and [j["kind"] for j in journal] == ["pending"]
    assert experiment_records(journal) == []             # no reader of experiments takes it for one
    (got,) = undecided(journal)
    assert (got.n, got.parent, got.commit, got.description, got.proposer) == (7, a.parent, a.commit, "deeper", "claude")
    p = got.proposal(SRC)
    assert (p.hypothesis, p.model, p.notes, p.source) == ("more layers", "m", "a note", SRC)
    assert got.info == {"seconds": 1.5} and got.started_at == a.started_at and got.worker is None


def test_the_last_pending_line_of_an_unrecorded_number_is_undecided():
    """A fix or a rebase appends a newer line for the same number (the latest wins); the
    experiment's record supersedes its lines; a line that gives one up (`dropped`) leaves nothing."""
    def line(n, commit, **kw):
        return PendingFile(n=n, parent="p", commit=commit, **kw).as_line()
    journal = [line(1, "a"), {"kind": "experiment", "n": 1, "status": "keep"}, line(2, "b"), line(2, "b2", worker=3),
               line(3, "c"), line(3, "c", dropped="its parent is no longer the last kept commit"), line(4, "d")]
    got = undecided(journal)
    assert [(p.n, p.commit, p.worker) for p in got] == [(2, "b2", 3), (4, "d", None)]
    journal.append({"kind": "experiment", "n": 4, "status": "discard"})
    assert [p.n for p in undecided(journal)] == [2]


def test_a_hostile_pending_line_is_no_experiment():
    for raw in ({}, {"kind": "pending"}, {"kind": "pending", "n": "3"}, {"kind": "pending", "n": True},
                {"kind": "experiment", "n": 3}, [1, 2], "pending", None):
        assert PendingFile.from_dict(raw) is None, raw
    got = PendingFile.from_dict({"kind": "pending", "n": 3, "commit": "c", "info": "not a dict", "attempts": 5,
                                 "description": 9, "worker": "w1", "dropped": 7})
    assert (got.n, got.commit, got.info, got.attempts, got.description, got.worker, got.dropped) == \
        (3, "c", {}, [], "", None, None)
    assert undecided([{"kind": "pending", "n": [1]}, "x", None, 5]) == []


def test_in_flight_entries_carry_what_the_proposal_tries():
    e = InFlight(n=5, parent="p", worker=2)
    assert e.status == "pending" and e.config is None and e.knob_values is None
    before = e.snapshot()
    e.proposed(attempt().proposal)
    entry = e.snapshot()
    assert entry.config == knobs.values(SRC) and entry.code == knobs.code_fingerprint(SRC)
    assert (entry.n, entry.worker, entry.description, entry.proposer) == (5, 2, "deeper", "claude")
    assert entry.knob_values == knobs.values(SRC) and entry.code_id == knobs.code_fingerprint(SRC)
    assert before.config is None and before.description == BEING_PROPOSED, "a snapshot is a copy"
    crash = e.as_crash()   # what agent/budget.py counts if it crashed: a typed record
    assert isinstance(crash, ExperimentRecord)
    assert (crash.n, crash.status, crash.proposer, crash.knob_values) == (5, "crash", "claude", knobs.values(SRC))


def test_proposal_info_round_trips_and_feeds_the_record():
    """ProposalInfo (agent/proposing.py): what a pending line holds comes back as it was, and every
    key that is not a timing is one of the experiment record's optional keys, under its name."""
    from agent.proposing import INFO_KEYS, TIMING_KEYS, ProposalInfo
    from harness.experiment_record import OPTIONAL_KEYS
    assert set(INFO_KEYS) - set(TIMING_KEYS) <= set(OPTIONAL_KEYS)
    raw = {"seconds": 2.0, "waited": 0.5, "fallback": "offline", "screen": {"k": 3}, "future_key": 1}
    info = ProposalInfo.from_dict(raw)
    assert info.to_dict() == raw and info.extra == {"future_key": 1}
    assert (info.proposal_seconds, info.proposal_wait) == (2.0, 0.5)
    assert info.for_record() == {"fallback": "offline", "screen": {"k": 3}}
    assert ProposalInfo(seconds=1.5).proposal_wait == 1.5 and ProposalInfo().proposal_seconds == 0.0
    assert ProposalInfo.from_dict({"seconds": "soon", "waited": None}).proposal_wait == 0.0
    # an Attempt handed a pending line's dict reads it
    p = Proposal(description="d", hypothesis="h", source=SRC, proposer="offline")
    assert Attempt(n=1, parent=None, proposal=p, info={"handover": "cost cap"}).info.handover == "cost cap"


def test_the_real_loops_pending_lines_read_back_and_are_all_decided(loop_run):
    """Written by the real loop (run_experiment's write_pending): every pending line reads back as
    itself, each names an experiment the journal then recorded, and none is left undecided."""
    import json
    lines = [json.loads(x) for x in (loop_run / "journal.jsonl").read_text().splitlines()]
    pending = [x for x in lines if x.get("kind") == "pending"]
    recorded = {x["n"] for x in lines if x.get("kind", "experiment") == "experiment"}
    assert pending and {x["n"] for x in pending} <= recorded
    for raw in pending:
        assert PendingFile.from_dict(raw).as_line() == raw
    assert undecided(lines) == []
    first = {}
    for i, x in enumerate(lines):     # each experiment's pending line comes before its record
        first.setdefault((x.get("kind", "experiment"), x.get("n")), i)
    assert all(first[("pending", n)] < first[("experiment", n)] for n in {x["n"] for x in pending})
