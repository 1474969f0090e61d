"""agent/coordinator.py: the one shape of an undecided experiment (in flight; pending.json)."""
from types import SimpleNamespace

from agent.experiment import Attempt, write_pending
from agent.coordinator import BEING_PROPOSED, InFlight, PendingFile
from agent.proposers.base import Proposal
from agent.workspace import RunFiles
from search import knobs
from harness.records import ExperimentRecord

SRC = "DEPTH = 4  # layers\nLR = 0.01  # a rate\n"


def attempt():
    p = Proposal(description="deeper", hypothesis="more layers", source=SRC, proposer="claude", model="m",
                 notes="a note")
    return Attempt(n=7, parent="a" * 40, proposal=p, info={"seconds": 1.5}, commit="b" * 40)


def test_pending_file_round_trip_through_the_writer(tmp_path):
    a = attempt()

    slot = SimpleNamespace(files=RunFiles(tmp_path, "t", tmp_path, tmp_path))   # what write_pending reads of a Slot
    write_pending(slot, a)          # what run_experiment writes before the run
    got = PendingFile.read(tmp_path / "pending.json")
    assert (got.n, got.parent, got.commit, got.description, got.proposer) == (7, a.parent, a.commit, "deeper", "claude")
    p = got.proposal(SRC)
    assert (p.hypothesis, p.model, p.notes, p.source) == ("more layers", "m", "a note", SRC)
    assert got.info == {"seconds": 1.5} and got.started_at == a.started_at


def test_a_torn_or_hostile_pending_file_is_no_experiment(tmp_path):
    path = tmp_path / "pending.json"
    for text in (b"", b'{"n": 3, "commit": "ab', b"\xff\xfe{", b"[1, 2]", b'{"n": "3"}', b'{"n": true}'):
        path.write_bytes(text)
        assert PendingFile.read(path) is None, text
    path.write_text('{"n": 3, "commit": "c", "info": "not a dict", "attempts": 5, "description": 9}')
    got = PendingFile.read(path)
    assert (got.n, got.commit, got.info, got.attempts, got.description) == (3, "c", {}, [], "")
    assert PendingFile.read(tmp_path / "absent.json") is None


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
    """ProposalInfo (agent/proposing.py): what pending.json holds comes back as it was, and every
    key that is not a timing is one of the experiment record's optional keys, under its name."""
    from agent.proposing import INFO_KEYS, TIMING_KEYS, ProposalInfo
    from harness.records import OPTIONAL_KEYS
    assert set(INFO_KEYS) - set(TIMING_KEYS) <= set(OPTIONAL_KEYS)
    raw = {"seconds": 2.0, "waited": 0.5, "fallback": "offline", "screen": {"k": 3}, "future_key": 1}
    info = ProposalInfo.from_dict(raw)
    assert info.to_dict() == raw and info.extra == {"future_key": 1}
    assert (info.proposal_seconds, info.proposal_wait) == (2.0, 0.5)
    assert info.for_record() == {"fallback": "offline", "screen": {"k": 3}}
    assert ProposalInfo(seconds=1.5).proposal_wait == 1.5 and ProposalInfo().proposal_seconds == 0.0
    assert ProposalInfo.from_dict({"seconds": "soon", "waited": None}).proposal_wait == 0.0
    # an Attempt handed pending.json's dict reads it
    p = Proposal(description="d", hypothesis="h", source=SRC, proposer="offline")
    assert Attempt(n=1, parent=None, proposal=p, info={"handover": "cost cap"}).info.handover == "cost cap"
