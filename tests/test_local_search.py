"""agent/proposers/local.py: the offline proposer's default, one resolvable knob step from the incumbent."""
import math

import pytest

from agent.loop import make_offline
from agent.proposers.base import ProposalRequest
from agent.proposers.local import JUMP_STEPS, MAX_JUMP_KNOBS, STEP_FACTOR, LocalProposer, step
from agent.proposers.offline import OfflineProposer
from harness import knobs
from harness.records import ExperimentRecord
from tests.loop_fixtures import REPO

REAL = (REPO / "train.py").read_text()
SMALL = """A_LR = 0.01  # a learning rate
B_RATIO = 0.3  # a fraction
USE_X = False  # a switch
"""


def rec(n, source, status, parent=None, p_better=None, commit=None):
    r = {"n": n, "commit": commit or f"c{n}", "parent": parent, "status": status, "trusted_bpb": 1.0 + n / 100,
         "config": knobs.values(source), "code": knobs.code_fingerprint(source)}
    if p_better is not None:
        r["evidence"] = {"comparison": {"p_better": p_better}}
    return ExperimentRecord.from_dict(r)


def ask(folder, source, history, n, best="c1", seed=0):
    return LocalProposer().propose(ProposalRequest(n=n, worktree=folder, train_source=source, program="",
                                                   history=history, best={"commit": best, "val_bpb": 1.0}, seed=seed))


def moved(a, b):
    va, vb = knobs.values(a), knobs.values(b)
    return {k: (va[k], vb[k]) for k in va if va[k] != vb[k]}


def test_one_knob_one_resolvable_step_and_the_commit_says_why(tmp_path):
    prop = ask(tmp_path, REAL, [rec(1, REAL, "keep")], 2)
    change = moved(REAL, prop.source)
    assert len(change) == 1, "one knob per step, not a draw over all of them"
    (name, (old, new)), = change.items()
    assert prop.proposer == "offline" and prop.description == (
        f"offline: {name} {knobs.format_literal(old)} -> {knobs.format_literal(new)}")
    assert "untried from this incumbent" in prop.hypothesis
    assert not name.startswith(("GPU_", "CPU_")) and "SEED" not in name
    if isinstance(old, float) and old > 0 and name.endswith("_LR"):
        assert max(new / old, old / new) == pytest.approx(STEP_FACTOR, rel=1e-3), "x1.41, not 0.1%"


def test_after_a_discard_the_other_way_then_momentum_after_a_keep(tmp_path):
    hist = [rec(1, SMALL, "keep")]
    first = ask(tmp_path, SMALL, hist, 2)
    (name, (old, new)), = moved(SMALL, first.source).items()
    hist.append(rec(2, first.source, "discard", parent="c1"))
    second = ask(tmp_path, SMALL, hist, 3)
    (name2, (_, new2)), = moved(SMALL, second.source).items()
    assert name2 == name and "was discarded: the other way" in second.hypothesis
    if not isinstance(old, bool):
        assert (new2 - old) * (new - old) < 0
    # the other way was kept: from there the same knob goes two steps further
    hist.append(rec(3, second.source, "keep", parent="c1"))
    third = ask(tmp_path, second.source, hist, 4, best="c3")
    if isinstance(old, bool):
        assert "momentum" not in third.hypothesis   # a switch has no "further"
        return
    (name3, (a, b)), = moved(second.source, third.source).items()
    assert name3 == name and third.hypothesis.startswith("momentum: exp 3 was kept")
    assert (b - a) * (new2 - old) > 0
    if name == "A_LR":
        assert b / a == pytest.approx(STEP_FACTOR ** JUMP_STEPS, rel=1e-3)


def test_two_unproven_steps_are_tried_together(tmp_path):
    src = "A_LR = 0.01  # a learning rate\nB_LR = 0.1  # another\n"
    hist = [rec(1, src, "keep")]
    n = 2
    for k, v in (("A_LR", 0.01 * STEP_FACTOR), ("B_LR", 0.1 / STEP_FACTOR)):
        hist.append(rec(n, knobs.set_knobs(src, {k: knobs.normalize(v)}), "discard", parent="c1", p_better=0.9))
        n += 1
    for k, v in (("A_LR", 0.01 / STEP_FACTOR), ("B_LR", 0.1 * STEP_FACTOR)):
        hist.append(rec(n, knobs.set_knobs(src, {k: knobs.normalize(v)}), "discard", parent="c1", p_better=0.1))
        n += 1
    prop = ask(tmp_path, src, hist, n)
    assert moved(src, prop.source) == {"A_LR": (0.01, knobs.normalize(0.01 * STEP_FACTOR)),
                                       "B_LR": (0.1, knobs.normalize(0.1 / STEP_FACTOR))}
    assert "each looked better" in prop.hypothesis and "both at once" in prop.hypothesis


def test_an_exhausted_neighbourhood_jumps_with_a_few_knobs(tmp_path):
    src = "USE_A = False  # a switch\nUSE_B = False  # another\nUSE_C = False  # a third\nUSE_D = False  # a fourth\n"
    hist = [rec(1, src, "keep")]
    for i, k in enumerate(("USE_A", "USE_B", "USE_C", "USE_D")):
        hist.append(rec(i + 2, knobs.set_knobs(src, {k: True}), "discard", parent="c1", p_better=0.1))
    prop = ask(tmp_path, src, hist, 6)
    change = moved(src, prop.source)
    assert 2 <= len(change) <= MAX_JUMP_KNOBS and "every single step from this incumbent was tried" in prop.hypothesis


def test_steps_stay_inside_the_range_and_the_loop_picks_the_search():
    assert step("LR", 0.1, ["log", 0.01, 0.1], "") == [knobs.normalize(0.1 / math.sqrt(2))]
    assert step("N", 2, ["int", 2, 6, 1], "") == [3] and step("N", 4, ["int", 2, 6, 1], "", 2) == [2, 6]
    assert step("X", False, ["choice", [False, True]], "") == [True] and step("Z", 1.0, None, "") == []
    assert isinstance(make_offline("local"), LocalProposer)
    tpe = make_offline("tpe")
    assert isinstance(tpe, OfflineProposer) and tpe.sampler == "tpe"
