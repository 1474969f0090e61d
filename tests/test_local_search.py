"""agent/proposers/local.py: the offline proposer's default, one resolvable knob step from the incumbent."""
import pytest

from agent.loop import make_offline
from agent.coordinator import InFlight
from agent.proposers.base import Proposal, ProposalRequest
from agent.proposers.local import JUMP_STEPS, MAX_JUMP_KNOBS, SIZE_KNOBS, STEP_FACTOR, LocalProposer, step
from agent.proposers.offline import OfflineProposer
from search import knobs
from harness.experiment_record import ExperimentRecord
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
    assert name in SIZE_KNOBS, "the model's size and the tokens per step are stepped first"


def test_the_size_knobs_go_first_for_every_seed_then_the_learning_rates(tmp_path):
    for seed in range(4):
        first = ask(tmp_path / f"s{seed}", REAL, [rec(1, REAL, "keep")], 2, seed=seed)
        assert set(moved(REAL, first.source)) <= set(SIZE_KNOBS), (seed, first.description)
    # every size step tried (and flat): a curated knob next, a learning rate moved x2, not 0.1%
    hist, src = [rec(1, REAL, "keep")], REAL
    for n, (k, v) in enumerate(((k, v) for k in SIZE_KNOBS for v in (0.5, 2)), start=2):
        old = knobs.values(REAL)[k]
        hist.append(rec(n, knobs.set_knobs(REAL, {k: int(old * v) if k != "DEPTH" else old + (1 if v > 1 else -1)}),
                        "discard", parent="c1", p_better=0.5))
    nxt = ask(tmp_path / "lr", src, hist, len(hist) + 1)
    (name, (old, new)), = moved(REAL, nxt.source).items()
    assert name not in SIZE_KNOBS and "untried from this incumbent" in nxt.hypothesis, nxt.description
    kind, lo, hi = knobs.DEFAULT_SPECS[name]
    if kind == "log":
        assert max(new / old, old / new) == pytest.approx(STEP_FACTOR, rel=1e-3), nxt.description
    else:
        assert abs(new - old) == pytest.approx((hi - lo) / 4, rel=1e-3), nxt.description


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
    # each contested step went twice as far first (see the next test), and measured flat there
    for k, v in (("A_LR", 0.01 * STEP_FACTOR ** 2), ("B_LR", 0.1 / STEP_FACTOR ** 2)):
        hist.append(rec(n, knobs.set_knobs(src, {k: knobs.normalize(v)}), "discard", parent="c1", p_better=0.5))
        n += 1
    prop = ask(tmp_path, src, hist, n)
    assert moved(src, prop.source) == {"A_LR": (0.01, knobs.normalize(0.01 * STEP_FACTOR)),
                                       "B_LR": (0.1, knobs.normalize(0.1 / STEP_FACTOR))}
    assert "each looked better" in prop.hypothesis and "both at once" in prop.hypothesis


def test_two_unproven_steps_go_together_before_the_untried_ones(tmp_path):
    # the real train.py, so dozens of single steps are still untried: two contested steps (the
    # judge's P(better) 0.9 and 0.85, each unproven) are the evidence for the next proposal
    hist = [rec(1, REAL, "keep")]
    a = knobs.set_knobs(REAL, {"MATRIX_LR": 0.04 * STEP_FACTOR})
    b = knobs.set_knobs(REAL, {"SCALAR_LR": knobs.normalize(knobs.values(REAL)["SCALAR_LR"] / STEP_FACTOR)})
    hist += [rec(2, a, "discard", parent="c1", p_better=0.9), rec(3, b, "discard", parent="c1", p_better=0.85)]
    # SCALAR_LR twice as far the same way first (MATRIX_LR's x4 leaves its range, 0.003-0.12)
    ext = ask(tmp_path / "ext", REAL, hist, 4)
    assert moved(REAL, ext.source) == {"SCALAR_LR": (0.5, knobs.normalize(0.5 / STEP_FACTOR ** 2))}, ext.description
    hist.append(rec(4, ext.source, "discard", parent="c1", p_better=0.3))
    prop = ask(tmp_path, REAL, hist, 5)
    assert set(moved(REAL, prop.source)) == {"MATRIX_LR", "SCALAR_LR"}, prop.description
    assert "exp 2 and exp 3 each looked better" in prop.hypothesis
    # one contested step alone is no pair: an untried single step comes next
    alone = ask(tmp_path / "alone", REAL, hist[:2], 3)
    assert len(moved(REAL, alone.source)) == 1 and "untried from this incumbent" in alone.hypothesis


def test_an_unproven_gain_goes_twice_as_far_the_same_way(tmp_path):
    hist = [rec(1, SMALL, "keep"), rec(2, knobs.set_knobs(SMALL, {"A_LR": 0.02}), "discard", parent="c1", p_better=0.9)]
    prop = ask(tmp_path, SMALL, hist, 3)
    assert moved(SMALL, prop.source) == {"A_LR": (0.01, 0.04)}, prop.description
    assert "looked better (P(better) 0.90) but unproven: 2 steps the same way" in prop.hypothesis
    # a flat step is no such evidence: its knob waits, an untried one comes next
    flat = [hist[0], rec(2, knobs.set_knobs(SMALL, {"A_LR": 0.02}), "discard", parent="c1", p_better=0.6)]
    other = ask(tmp_path / "flat", SMALL, flat, 3)
    assert "A_LR" not in moved(SMALL, other.source) and "untried" in other.hypothesis, other.description


def test_a_proposal_made_on_a_candidate_in_flight_takes_that_one_as_its_incumbent(tmp_path):
    # the loop proposes n + 1 on top of n while n trains, and uses it only if n is kept: so n's move
    # is its momentum, not the best's (which an earlier proposal had already followed)
    a_up = knobs.set_knobs(SMALL, {"A_LR": 0.02})
    hist = [rec(1, SMALL, "keep"), rec(2, a_up, "keep", parent="c1")]
    ask(tmp_path, SMALL, hist[:1], 2)
    b_up = knobs.set_knobs(a_up, {"B_RATIO": 0.4})
    flight = InFlight.of(3, "c2", Proposal(description="B up", hypothesis="", source=b_up, proposer="offline"), commit="c3")
    prop = LocalProposer().propose(ProposalRequest(n=4, worktree=tmp_path, train_source=b_up, program="", history=hist,
                                                   pending=[flight], best={"commit": "c2", "val_bpb": 1.0}, seed=0))
    (name, (old, new)), = moved(b_up, prop.source).items()
    assert name == "B_RATIO" and new > old and prop.hypothesis.startswith("momentum: exp 3 was kept"), prop.hypothesis
    # on the incumbent itself (nothing in flight under it): the best's own momentum, as before
    own = ask(tmp_path, a_up, hist, 3, best="c2")
    assert list(moved(a_up, own.source)) == ["A_LR"] and "momentum: exp 2" in own.hypothesis


def test_an_exhausted_neighbourhood_jumps_with_a_few_knobs(tmp_path):
    src = "USE_A = False  # a switch\nUSE_B = False  # another\nUSE_C = False  # a third\nUSE_D = False  # a fourth\n"
    hist = [rec(1, src, "keep")]
    for i, k in enumerate(("USE_A", "USE_B", "USE_C", "USE_D")):
        hist.append(rec(i + 2, knobs.set_knobs(src, {k: True}), "discard", parent="c1", p_better=0.1))
    prop = ask(tmp_path, src, hist, 6)
    change = moved(src, prop.source)
    assert 2 <= len(change) <= MAX_JUMP_KNOBS and "every single step from this incumbent was tried" in prop.hypothesis


def test_steps_stay_inside_the_range_and_the_loop_picks_the_search():
    assert step("LR", 0.1, ["log", 0.01, 0.1], "") == [0.05] and step("LR", 0.02, ["log", 0.001, 0.1], "") == [0.01, 0.04]
    assert step("F", 0.5, ["lin", 0.0, 1.0], "") == [0.25, 0.75], "a quarter of the range"
    assert step("N", 2, ["int", 2, 6, 1], "") == [3] and step("N", 4, ["int", 2, 6, 1], "", 2) == [2, 6]
    assert step("X", False, ["choice", [False, True]], "") == [True] and step("Z", 1.0, None, "") == []
    assert isinstance(make_offline("local"), LocalProposer)
    tpe = make_offline("tpe")
    assert isinstance(tpe, OfflineProposer) and tpe.sampler == "tpe"


def test_a_knob_set_outside_its_range_steps_back_toward_it():
    # a baseline's bad value often sits outside the search's range (the judge bench's LOGIT_SOFTCAP
    # 3.0 against a range of 5-50): the step toward the range lands inside it (clamped to its edge
    # when it falls short), the step away is dropped
    assert step("CAP", 2.0, ["log", 5.0, 50.0], "") == [5.0]
    assert step("CAP", 3.0, ["log", 5.0, 50.0], "") == [knobs.normalize(3.0 * STEP_FACTOR)]
    assert step("CAP", 80.0, ["log", 5.0, 50.0], "") == [40.0] and step("CAP", 120.0, ["log", 5.0, 50.0], "") == [50.0]
    assert step("F", -0.5, ["lin", 0.0, 0.6], "") == [0.0] and step("F", 0.9, ["lin", 0.0, 0.6], "") == [0.6]
    assert step("N", 9, ["int", 2, 6, 1], "") == [6] and step("N", 0, ["int", 2, 6, 1], "") == [2]
    assert all(isinstance(v, int) for v in step("N", 9, ["int", 2, 6, 1], ""))


def test_a_curated_knob_outside_its_range_goes_to_its_edge_then_momentum(tmp_path):
    # the curated ranges (search/knobs.py) bracket the reference: from an incumbent with
    # LOGIT_SOFTCAP far below its range (the judge bench's handicap), a proposal takes it to the
    # range's edge; once kept, momentum goes two steps further, as far as the curated range goes
    src = knobs.set_knobs(REAL, {"LOGIT_SOFTCAP": 3.0, "MATRIX_LR": 0.5})
    first = ask(tmp_path, src, [rec(1, src, "keep")], 2)
    assert moved(src, first.source) == {"MATRIX_LR": (0.5, 0.12)}, "the farthest outside first (x4.2 vs x1.7)"
    assert "outside the range known to train" in first.hypothesis
    hist = [rec(1, src, "keep"), rec(2, first.source, "discard", parent="c1")]
    second = ask(tmp_path, src, hist, 3)
    assert moved(src, second.source) == {"LOGIT_SOFTCAP": (3.0, 5.0)}
    hist.append(rec(3, second.source, "keep", parent="c1"))
    third = ask(tmp_path, second.source, hist, 4, best="c3")
    assert moved(second.source, third.source) == {"LOGIT_SOFTCAP": (5.0, 20.0)}
    assert "momentum" in third.hypothesis and "2 steps further" in third.hypothesis
    # the study searches a start outside the curated range over both (0.75-50 here), so momentum
    # is not stopped at the start's own x4 (12); two more steps (80) leave it, one (40) does not
    hist.append(rec(4, third.source, "keep", parent="c3"))
    fourth = ask(tmp_path, third.source, hist, 5, best="c4")
    assert moved(third.source, fourth.source) == {"LOGIT_SOFTCAP": (20.0, 40.0)}, fourth.description
    # a keep that took a curated knob out of its range is evidence against taking it back
    # (the study first saw 15.0, so its range is the curated 5-50 and momentum cannot go on), for
    # any seed's order of the knobs
    out_src = knobs.set_knobs(REAL, {"LOGIT_SOFTCAP": 60.0})
    kept_out = [rec(1, REAL, "keep"), rec(2, out_src, "keep", parent="c1")]
    for seed in range(4):
        ask(tmp_path / f"out{seed}", REAL, [rec(1, REAL, "keep")], 2, seed=seed)
        nxt = ask(tmp_path / f"out{seed}", out_src, kept_out, 3, best="c2", seed=seed)
        assert "LOGIT_SOFTCAP" not in moved(out_src, nxt.source), (seed, nxt.description)
    # DEPTH's curated range (2-6) is the small models': the reference's 8 (a GPU's size) is not
    # taken to it; it is stepped by one like any size knob
    ref = ask(tmp_path / "ref", REAL, [rec(1, REAL, "keep")], 2)
    assert "outside the range" not in ref.hypothesis and moved(REAL, ref.source).get("DEPTH", (8, 7))[1] in (7, 9)


def test_momentum_takes_one_step_where_two_leave_the_range(tmp_path):
    # the study's range of A_LR is fixed where it first saw it, 0.01/4 .. 0.01*4; kept at 0.015,
    # two steps more (0.06) leave it and one (0.03) stays inside
    hist = [rec(1, SMALL, "keep")]
    ask(tmp_path, SMALL, hist, 2)
    up = knobs.set_knobs(SMALL, {"A_LR": 0.015})
    hist.append(rec(2, up, "keep", parent="c1"))
    prop = ask(tmp_path, up, hist, 3, best="c2")
    (name, (old, new)), = moved(up, prop.source).items()
    assert (name, old) == ("A_LR", 0.015) and new == pytest.approx(0.015 * STEP_FACTOR, rel=1e-3)
    assert "momentum" in prop.hypothesis and "1 step further" in prop.hypothesis


def test_a_flat_step_s_mirror_waits_and_a_worse_one_s_is_next(tmp_path):
    # the judge's P(better) of a discarded step: worse than the noise (0.05) -> its mirror next;
    # flat (0.45) -> an untried knob next, the mirror later with the untried steps
    hist = [rec(1, SMALL, "keep")]
    first = ask(tmp_path, SMALL, hist, 2)
    (name, _), = moved(SMALL, first.source).items()
    worse = ask(tmp_path, SMALL, hist + [rec(2, first.source, "discard", parent="c1", p_better=0.05)], 3)
    assert list(moved(SMALL, worse.source)) == [name] and "as worse (P(better) 0.05): the other way" in worse.hypothesis
    flat_hist = hist + [rec(2, first.source, "discard", parent="c1", p_better=0.45)]
    flat = ask(tmp_path, SMALL, flat_hist, 3)
    (name2, _), = moved(SMALL, flat.source).items()
    assert name2 != name and "untried from this incumbent" in flat.hypothesis


def test_a_step_an_ancestor_measured_waits_behind_the_untried_ones(tmp_path):
    # from c1 the search's first step was discarded; then c1 -> c3 kept (a learning rate doubled)
    # and c3 -> c5 kept (a switch flipped). From c5 that same first step, and the way back of c3's
    # step, were measured on the way: every never-measured step comes first, they come last, not never.
    src = "A_LR = 0.01  # a learning rate\nB_RATIO = 0.5  # a fraction\nC_LR = 0.1  # another\nUSE_X = False  # a switch\n"
    first = ask(tmp_path, src, [rec(1, src, "keep")], 2)
    (k1, _), = moved(src, first.source).items()
    lr = "C_LR" if k1 == "A_LR" else "A_LR"
    s3 = knobs.set_knobs(src, {lr: knobs.normalize(knobs.values(src)[lr] * STEP_FACTOR)})
    s5 = knobs.set_knobs(s3, {"USE_X": True})
    hist = [rec(1, src, "keep"), rec(2, first.source, "discard", parent="c1", p_better=0.4),
            rec(3, s3, "keep", parent="c1"), rec(4, s5, "keep", parent="c3", commit="c5")]
    seen, n = [], 5
    for _ in range(12):
        prop = ask(tmp_path, s5, hist, n, best="c5")
        if "untried from this incumbent" not in prop.hypothesis:
            break
        seen.append((moved(s5, prop.source), prop.hypothesis))
        hist.append(rec(n, prop.source, "discard", parent="c5", p_better=0.5, commit=f"d{n}"))
        n += 1
    moves = [c for c, _ in seen]
    again = moved(src, first.source)
    back = {lr: (knobs.values(s3)[lr], knobs.values(src)[lr])}
    if k1 != "USE_X":
        assert again in moves and moves.index(again) >= len(moves) - 2, moves
        assert "exp 2 measured it from an ancestor" in seen[moves.index(again)][1]
    assert back in moves and moves.index(back) >= len(moves) - 2, moves
    assert "the way back of exp 3, kept" in seen[moves.index(back)][1]
    assert len(moves) >= 5 and all("ancestor" not in h and "way back" not in h for _, h in seen[:len(moves) - 2])
