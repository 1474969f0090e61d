"""The judge under a changing load (agent/judges/pairing.py wired into agent/judges/hierarchy.py):
pace compared in either direction, runs paired in time where the load varied, and a decision that
runs out of reruns escalated as contested, never a silent discard. The runs are the judge's
inputs as the harness hands them in (the trusted value and the clock's measured load)."""
import random

from agent.console import decision_line
from agent.judges import pairing, queue_apply
from agent.judges.hierarchy import JudgeHierarchy
from runfiles.queue_store import QueueStore
from harness.decision import Decision
from harness.experiment_record import ExperimentRecord
from harness.verify import VerifyResult
from tests.loop_fixtures import fake_run
from tests.test_judge_stats import BASE, CAND, ctx, decide

SIGMA = 0.005
LOAD_COST = 0.05      # bpb a 2x load costs a run on a wall-clock budget (fewer steps)


def clock(load, charged=10.0):
    return {"startup_s": 1.0, "train_s": charged, "charged_s": charged, "load_train": load, "pace_s": 0.1}


def cand_run(load, charged=10.0):
    return fake_run(extra={"clock": clock(load, charged)}, summary={})


def inc_run(bpb, load):
    return fake_run(summary={}, extra={"clock": clock(load),
                                       "verify_result": VerifyResult(True, "verified", bpb, bpb, True, 0.5)})


def value(true, load, rng):
    return true + LOAD_COST * (load - 1.0) + rng.gauss(0, SIGMA)


def baseline(h, tmp_path, load, rng, true=1.40):
    d = None
    for _ in range(5):
        d = decide(h, ctx(tmp_path, 1, BASE, None), value(true, load, rng), r=cand_run(load))
    assert not d.is_again
    return {"commit": BASE, "val_bpb": d.trusted_bpb}


def drive(h, c, true_cand, true_inc, load_of, rng, limit=40):
    """Run the decision to its end as the loop would: the candidate, or the incumbent when asked."""
    asked, order = None, []
    for k in range(limit):
        load = load_of(k)
        if asked is not None and asked.run_next:
            order.append("I")
            d = h.judge_incumbent(c, inc_run(value(true_inc, load, rng), load))
        else:
            order.append("C")
            d = decide(h, c, value(true_cand, load, rng), r=cand_run(load))
        if not d.is_again:
            return d, "".join(order)
        asked = d
    raise AssertionError(f"no decision after {limit} runs: {order}")


def test_a_null_measured_in_a_quiet_spell_is_not_kept_against_an_incumbent_measured_under_load(tmp_path):
    """The case seen: the incumbent's runs under load, the candidate's in a quiet spell. The unpaired
    means would show a 10-sigma gain; the judge pairs the candidate's runs with fresh runs of the
    incumbent under the same load and sees none."""
    rng = random.Random(5)
    h = JudgeHierarchy(baseline_repeats=5)
    best = baseline(h, tmp_path, 2.0, rng)
    d, order = drive(h, ctx(tmp_path, 2, CAND, best), 1.40, 1.40, lambda k: 1.0, rng)
    assert d.status != "keep", d.reason
    assert "I" in order and order.startswith("CI"), order       # the incumbent was measured beside it
    assert "paired" in d.reason or d.reason.startswith("contested"), d.reason


def test_an_honest_gain_under_a_heavier_load_is_paired_not_discarded(tmp_path):
    """The converse: a 6-sigma gain whose first run came under twice the baseline's load looks
    worse; it is not discarded on that run (the load, not the edit), but paired and kept."""
    rng = random.Random(7)
    h = JudgeHierarchy(baseline_repeats=5)
    best = baseline(h, tmp_path, 1.0, rng)
    loads = [2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]
    d, order = drive(h, ctx(tmp_path, 2, CAND, best), 1.40 - 6 * SIGMA, 1.40, lambda k: loads[k], rng)
    assert d.status == "keep", (d.reason, order)
    assert order.startswith("CIIC"), order                      # C I, I C: one load hits both
    assert d.verdicts["evidence"]["paired"]["pairs"] >= 2


def test_loads_compared_in_either_direction_and_by_the_others_cores_too():
    assert pairing.comparable(1.0, 2.0) and pairing.comparable(2.0, 1.0)
    # a single-threaded run's factor is 1.0 with a core free, but a neighbour on the other core
    # is still another machine: the others' busy cores are compared as well
    assert pairing.comparable(1.0, 1.0, pairing.LOAD_SAME, 0.0, 1.0)
    assert pairing.comparable(1.0, 1.0, pairing.LOAD_SAME, 0.1, 0.3) is None
    # loads x2.95 and x3.99 make no pair
    assert pairing.comparable(2.95, 3.99, pairing.PAIR_SAME)


def test_steady_load_keeps_the_unpaired_rule(tmp_path):
    """Same load everywhere (or steps mode, where no load is measured): no pairing, as before."""
    rng = random.Random(9)
    h = JudgeHierarchy(baseline_repeats=5)
    best = baseline(h, tmp_path, 1.0, rng)
    d, order = drive(h, ctx(tmp_path, 2, CAND, best), 1.40 - 6 * SIGMA, 1.40, lambda k: 1.0, rng)
    assert d.status == "keep" and "paired" not in (d.verdicts["evidence"] or {}), d.reason
    assert "paired" not in d.reason


def queued(tmp_path):
    return QueueStore(tmp_path / "queue.sqlite").list() if (tmp_path / "queue.sqlite").exists() else []


def test_a_decision_out_of_reruns_is_contested_and_escalated(tmp_path):
    """Every confirming run past the clock's limit by a little (no evidence): when the reruns run
    out the decision goes to the human queue as contested, not a plain discard."""
    rng = random.Random(1)
    h = JudgeHierarchy(baseline_repeats=5, budget=10)
    best = baseline(h, tmp_path, 1.0, rng)
    c = ctx(tmp_path, 2, CAND, best)
    d = None
    for k in range(20):
        d = decide(h, c, value(1.37, 1.0, rng), r=cand_run(1.0, charged=10.9))
        if not d.is_again:
            break
    assert d.reason.startswith("contested: out of reruns"), d.reason
    esc = d.verdicts["judge"]["escalations"]
    assert esc and esc[0]["kind"] == "contested" and esc[0].get("id") is not None, esc
    assert d.escalated and "escalated to the human queue" in decision_line(ExperimentRecord.of(
        n=2, status=d.status, verdicts=d.verdicts, decision_reason=d.reason))   # and the console says so
    assert any(i.kind == "contested" and i.experiment == 2 for i in queued(tmp_path))


def test_the_loop_s_last_rerun_is_escalated_not_silently_discarded(tmp_path):
    """agent/experiment.py's own cap: a decision still asking for a run when none is left."""
    c = ctx(tmp_path, 3, CAND, {"commit": BASE, "val_bpb": 1.4})
    asking = Decision.again("discard", "P(better) 0.97 after 4 run(s)", 1.39, {"judge": {"status": "discard"}})
    d = queue_apply.out_of_reruns(c, asking, 13)
    assert d.status == "discard" and not d.is_again and d.reason.startswith("contested: out of reruns after 13")
    assert d.escalated and not asking.escalated
    assert any(i.kind == "contested" and i.experiment == 3 for i in queued(tmp_path))


def test_workers_beside_each_other_are_compared_with_an_incumbent_measured_the_same_way(tmp_path):
    """--workers 2 on one CPU: the baseline was measured alone (load 1), every candidate beside
    another worker's run (load 2: the meter counts the other run as the machine's). An honest
    5-sigma gain looks 5 sigma worse than the baseline on its first run; it is paired with runs of
    the incumbent made in its own worker slot beside the other worker (load 2 too) and kept."""
    rng = random.Random(13)
    h = JudgeHierarchy(baseline_repeats=5)
    best = baseline(h, tmp_path, 1.0, rng)
    d, order = drive(h, ctx(tmp_path, 2, CAND, best), 1.40 - 5 * SIGMA, 1.40, lambda k: 2.0, rng)
    assert d.status == "keep", (d.reason, order)
    assert order.startswith("CI"), order
    ev = d.verdicts["evidence"]
    assert all(r["load"] == 2.0 for r in ev["incumbent"]["runs"] if r["n"] == 2)


def test_steps_mode_is_never_paired(tmp_path, monkeypatch):
    """AUTORESEARCH_STEPS: the load does not change what a run learns; no load is recorded for a
    run, no decision is paired, and the runs are judged as before whatever the meter said."""
    monkeypatch.setenv("AUTORESEARCH_STEPS", "16")
    rng = random.Random(4)
    h = JudgeHierarchy(baseline_repeats=5)
    d = None
    for k in range(5):
        d = decide(h, ctx(tmp_path, 1, BASE, None), 1.40 + rng.gauss(0, SIGMA),
                   r=fake_run(extra={"clock": clock(1.0 + k % 2), "steps_mode": True}, summary={}))
    best = {"commit": BASE, "val_bpb": d.trusted_bpb}
    c = ctx(tmp_path, 2, CAND, best)
    for k in range(5):
        d = decide(h, c, 1.40 - 6 * SIGMA + rng.gauss(0, SIGMA),
                   r=fake_run(extra={"clock": clock(4.0), "steps_mode": True}, summary={}))
        assert "paired" not in d.verdicts["evidence"] and not d.run_next
        if not d.is_again:
            break
    assert d.status == "keep", d.reason
    assert all(r["load"] is None for r in d.verdicts["evidence"]["candidate"]["runs"])
