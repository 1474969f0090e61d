"""agent/proposers/offline.py: a real, deterministic, history-aware search over the knob block."""
import difflib
import math

import pytest

from agent.proposers.base import Proposal, ProposalError, ProposalRequest, Proposer
from agent.proposers.offline import FROZEN_RE, OfflineProposer, neighbors
from harness import knobs
from tests.loop_fixtures import FAKE_TRAIN, REPO

REAL = (REPO / "train.py").read_text()


def request(source, history=(), n=2, seed=0, **kw):
    return ProposalRequest(n=n, worktree=REPO, train_source=source, program="", history=list(history),
                           best=None, seed=seed, **kw)


def record(n, parent, commit, source, status, bpb):
    return {"n": n, "parent": parent, "commit": commit, "status": status,
            "summary": {"val_bpb": bpb} if bpb is not None else None,
            "config": knobs.values(source), "code": knobs.code_fingerprint(source)}


def changed_lines(a, b):
    return [l for l in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]


def test_protocol_and_honest_single_line_diff():
    p = OfflineProposer()
    assert isinstance(p, Proposer) and p.name == "offline"
    prop = p.propose(request(REAL))
    assert isinstance(prop, Proposal) and prop.proposer == "offline" and prop.model is None
    lines = changed_lines(REAL, prop.source)
    assert len(lines) == 2, lines
    name = lines[0][1:].split(" = ")[0]
    old, new = knobs.values(REAL)[name], knobs.values(prop.source)[name]
    assert f"{name} {knobs.format_literal(old)} -> {knobs.format_literal(new)}" in prop.description
    assert prop.hypothesis and not FROZEN_RE.search(name)
    compile(prop.source, "train.py", "exec")


def test_deterministic_for_a_seed():
    a = OfflineProposer().propose(request(REAL, seed=3))
    b = OfflineProposer().propose(request(REAL, seed=3))
    assert a.source == b.source and a.description == b.description
    seen = {OfflineProposer().propose(request(REAL, seed=s)).description for s in range(8)}
    assert len(seen) > 1, "different seeds explore differently"


def score(source):
    v = knobs.values(source)
    return 1.0 + 0.01 * abs(v["DEPTH"] - 6) + 0.05 * abs(math.log2(v["LR"] / 0.04)) \
        + 0.02 * abs(math.log2(v["WIDTH"] / 64)) + 0.03 * v["USE_BIAS"]


def simulate(steps, seed=0):
    """Drive the proposer like the loop does (keep iff better), on the stand-in train.py."""
    best_src, best_commit = FAKE_TRAIN, "c1"
    history = [record(1, None, "c1", FAKE_TRAIN, "keep", score(FAKE_TRAIN))]
    for n in range(2, steps + 2):
        prop = OfflineProposer().propose(request(best_src, history, n=n, seed=seed))
        bpb = score(prop.source)
        status = "keep" if bpb < score(best_src) else "discard"
        history.append(record(n, best_commit, f"c{n}", prop.source, status, bpb))
        if status == "keep":
            best_src, best_commit = prop.source, f"c{n}"
    return history, best_src


def test_never_repeats_and_moves_from_the_best():
    history, best = simulate(25)
    keys = [(r["code"], tuple(sorted(r["config"].items()))) for r in history]
    assert len(keys) == len(set(keys)), "a configuration was tried twice"
    assert knobs.values(best)["DEPTH"] == 6, "the search should find the DEPTH optimum of the stand-in"
    assert score(best) < score(FAKE_TRAIN)
    # every proposal is one or two knob steps away from the best at its time
    for rec in history[1:]:
        parent = next(r for r in history if r["commit"] == rec["parent"])
        assert parent["status"] == "keep"
        diff = {k for k in rec["config"] if rec["config"][k] != parent["config"][k]}
        assert 1 <= len(diff) <= 3


def test_pushes_a_direction_that_helped():
    deeper = knobs.set_knobs(FAKE_TRAIN, {"DEPTH": 5})
    history = [record(1, None, "c1", FAKE_TRAIN, "keep", 1.02),
               record(2, "c1", "c2", deeper, "keep", 1.01)]
    prop = OfflineProposer().propose(request(deeper, history, n=3))
    assert knobs.values(prop.source)["DEPTH"] == 6 and "push further" in prop.hypothesis


def test_avoids_a_direction_that_crashed():
    history = [record(1, None, "c1", FAKE_TRAIN, "keep", 1.02)]
    for i, (name, value) in enumerate([("DEPTH", 5), ("LR", 0.05657), ("WIDTH", 128)], start=2):
        history.append(record(i, "c1", f"c{i}", knobs.set_knobs(FAKE_TRAIN, {name: value}), "crash", None))
    for seed in range(5):
        prop = OfflineProposer().propose(request(FAKE_TRAIN, history, n=5, seed=seed))
        v = knobs.values(prop.source)
        assert (v["DEPTH"], v["LR"], v["WIDTH"]) != (5, 0.04, 64)
        assert v["DEPTH"] <= 5 and v["WIDTH"] <= 64, prop.description


def test_pending_experiment_counts_as_tried():
    first = OfflineProposer().propose(request(FAKE_TRAIN, [record(1, None, "c1", FAKE_TRAIN, "keep", 1.0)]))
    pending = {"n": 2, "status": "pending", "commit": "c2", "parent": "c1",
               "config": knobs.values(first.source), "code": knobs.code_fingerprint(first.source)}
    again = OfflineProposer().propose(request(FAKE_TRAIN, [record(1, None, "c1", FAKE_TRAIN, "keep", 1.0),
                                                           pending]))
    assert again.source != first.source


def test_refuses_to_fix_and_to_search_nothing():
    with pytest.raises(ProposalError):
        OfflineProposer().propose(request(REAL, fix_of=Proposal("d", "h", REAL, "offline")))
    with pytest.raises(ProposalError, match="no CAPS knob"):
        OfflineProposer().propose(request("def build_model(c):\n    pass\n"))


def test_neighbors():
    assert neighbors("DEPTH", 4) == [3, 5]
    assert neighbors("TOTAL_BATCH_SIZE", 8192) == [4096, 16384]
    assert neighbors("SEED", 42) == []
    assert neighbors("ADAM_BETA2", 0.95) == [0.9, 0.975]
    assert set(neighbors("WINDOW_PATTERN", "SSSL")) == {"SSSS", "LLLL"}
    assert neighbors("ACT", "relu", "# one of relu|gelu|silu") == ["gelu", "silu"]
    assert neighbors("WARMUP_RATIO", 0.0) == [0.05]
