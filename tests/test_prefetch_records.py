"""Records are their commits: a proposal's description describes the diff that runs.

A proposal prefetched on top of a candidate that is then discarded has lost its parent. Its edit
may be merged onto the last kept commit only when the merge carries the whole edit and nothing
else; otherwise (the new parent already holds part of it, or all of it) it is proposed again.
A commit that changes nothing that runs never runs.
"""
from agent.judges.guard import check_source
from agent.proposing import Prefetch, Proposers, edit_of, same_edit
from agent.proposers.base import Proposal, ProposalRequest
from search import knobs
from harness.results import read_journal
from tests.loop_fixtures import FAKE_TRAIN, fake_repo, git
from tests.test_loop import Scripted, check_run, run_in_process

BASE = "A = 1\nB = 2\nC = 3\n\ndef main():\n    return A + B + C\n"


def test_same_edit_is_the_whole_edit_and_nothing_else():
    moved_b = BASE.replace("B = 2", "B = 20")
    # the same edit on a parent that differs elsewhere: the whole edit applies
    assert same_edit(BASE, moved_b, BASE.replace("C = 3", "C = 30"), moved_b.replace("C = 3", "C = 30"))
    # the parent already holds half of a two-line edit: the merge carries only the other half
    both = BASE.replace("B = 2", "B = 20").replace("A = 1", "A = 10")
    assert not same_edit(BASE, both, BASE.replace("A = 1", "A = 10"), both)
    # the merge gives the parent back: no edit at all
    assert not same_edit(BASE, moved_b, moved_b, moved_b)
    # a merge that adds a line the proposal did not
    assert not same_edit(BASE, moved_b, BASE, moved_b + "D = 4\n")
    # hunks are compared by content, not by line number
    shifted = "# a header line\n" + BASE
    assert same_edit(BASE, moved_b, shifted, shifted.replace("B = 2", "B = 20"))
    assert edit_of(BASE, BASE) == []


class _LLMish:
    """A proposer the prefetch treats as expensive (not cheap_redo, not "offline")."""
    name = "llm"
    cheap_redo = False

    def __init__(self, source):
        self.source = source

    def propose(self, req):
        return Proposal(description="revert B and raise C", hypothesis="h", source=self.source,
                        proposer="claude", cost_usd=0.5, tokens={"input": 7, "output": 3})


class _Tracer:
    class _Span:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def log(self, **k):
            pass

    def span(self, *a, **k):
        return self._Span()


def _take(candidate_source, proposal_source, kept_source):
    p = _LLMish(proposal_source)
    pf = Prefetch()
    pf.start(Proposers(p, object(), _Tracer()), ProposalRequest(n=3, worktree=None, train_source=candidate_source,
                                                                 program="", history=[], best=None), "cand")
    return pf, pf.take(3, "kept", kept_source)


def test_a_prefetch_whose_edit_only_partly_applies_is_asked_again():
    candidate = BASE.replace("B = 2", "B = 5")                          # experiment 2, later discarded
    proposal = candidate.replace("B = 5", "B = 2").replace("C = 3", "C = 4")   # made on experiment 2
    pf, got = _take(candidate, proposal, BASE)
    assert got is None, "the merge would drop the B line: the description would claim more than runs"
    assert [d.description for d in pf.dropped] == ["revert B and raise C"], "its cost is still charged"


def test_a_prefetch_that_only_undoes_its_parent_is_asked_again():
    candidate = BASE.replace("A = 1", "A = 9")
    pf, got = _take(candidate, BASE, BASE)
    assert got is None and len(pf.dropped) == 1


def test_a_prefetch_whose_whole_edit_applies_is_rebased_with_its_description():
    candidate = BASE.replace("A = 1", "A = 9")
    proposal = candidate.replace("C = 3", "C = 4")
    pf, got = _take(candidate, proposal, BASE)
    assert got is not None and pf.dropped == []
    prop, info = got
    assert prop.source == BASE.replace("C = 3", "C = 4") and info.rebased_from == "cand"
    assert prop.description == "revert B and raise C"


def test_comment_only_edits_never_run():
    src = FAKE_TRAIN
    for layout in (src.replace("DEPTH = 4  # layers", "DEPTH = 4  # a new comment") + "\n\n# trailing\n",
                   src.replace("DEPTH = 4  # layers", "DEPTH = (4)  # layers"),
                   src.replace("\n\n", "\n\n\n", 1)):
        v = check_source(src, layout)
        assert not v.ok and v.details["rule"] == "unchanged" and "comments or layout" in v.reason, layout
    assert check_source(src, src.replace("DEPTH = 4  # layers", "DEPTH = 5  # layers")).ok


def test_the_loop_records_the_diff_that_ran_after_a_stale_prefetch(tmp_path, monkeypatch):
    """Experiment 2 widens (and is discarded); experiment 3 was prefetched on it and both narrows
    back and deepens. Merged onto the base only "deeper" would remain, so the proposal is asked
    again; the record, the results row and the commit message say what ran."""
    repo = fake_repo(tmp_path / "repo")
    user_head = git(repo, "rev-parse", "HEAD")
    proposer = Scripted([
        ("wider (worse)", lambda s: knobs.set_knobs(s, {"WIDTH": 128})),
        ("narrow back and deeper", lambda s: knobs.set_knobs(s, {"WIDTH": 64, "DEPTH": 5})),
        ("deeper", lambda s: knobs.set_knobs(s, {"DEPTH": 5})),
    ])
    run_in_process(repo, tmp_path, monkeypatch, proposer, "--max-experiments", "3")
    records, rows = check_run(repo, "s", 3, user_head)
    assert records[1]["status"] == "discard"
    third = records[2]
    assert len(proposer.requests) == 3, "the stale proposal was asked for again"
    assert knobs.values(proposer.requests[2].train_source)["WIDTH"] == 64, "asked on the kept parent"
    assert third["description"] == "deeper" == rows[2].description
    assert third.get("rebased_from") is None
    assert [d["description"] for d in third["dropped_prefetch"]] == ["narrow back and deeper"]
    assert "+DEPTH = 5" in third["diff"] and "+WIDTH" not in third["diff"] and "-WIDTH" not in third["diff"]
    assert git(repo, "log", "-1", "--format=%s", third["commit"]) == "deeper"
    journal, _ = read_journal(repo / ".autoresearch" / "s" / "journal.jsonl")
    assert journal[2]["cost_usd"] >= 0.02, "the dropped proposal's cost is charged to its replacement"
