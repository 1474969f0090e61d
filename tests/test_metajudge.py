"""The MetaJudge on synthetic histories: a judge that keeps everything, one that contradicts the metric."""
from agent.judges.judge import MIN_SAMPLES, audit, recently_flagged
from harness.experiment_record import ExperimentRecord

TH = 0.005


def rec(n, status, gain, *, net=2, rule=None, llm=None, basis="metric", diff=None):
    best = 1.0
    judge = {"best_before": best, "threshold": TH, "net_lines": net, "basis": basis,
             "rule": {"status": rule or status}, "llm": {"status": llm} if llm else None}
    return ExperimentRecord.from_dict({"n": n, "status": status, "trusted_bpb": best - gain,
                                       "diff": diff or f"-A = {n}\n+A = {n + 1}\n", "verdicts": {"judge": judge}})


def kinds(a):
    return {f["kind"] for f in a.flags}


def test_honest_judge_is_not_flagged():
    hist = [rec(i, "keep" if i % 3 == 0 else "discard", 0.02 if i % 3 == 0 else -0.01) for i in range(12)]
    a = audit(hist[:-1], hist[-1])
    assert a.flags == [] and a.contradiction is None
    assert a.metrics["keep_rate"] == a.metrics["metric_keep_rate"]


def test_judge_that_keeps_everything_is_flagged_lenient():
    # the metric supports 1 in 4; the judge keeps all, mostly gains inside the band (not contradictions)
    hist = [rec(i, "keep", 0.02 if i % 4 == 0 else 0.001) for i in range(MIN_SAMPLES + 4)]
    a = audit(hist[:-1], hist[-1])
    assert "lenient" in kinds(a)
    assert a.metrics["keep_rate"] == 1.0 and a.metrics["metric_keep_rate"] < 0.5


def test_judge_that_contradicts_the_metric_is_flagged():
    hist = [rec(0, "keep", 0.02), rec(1, "keep", -0.03), rec(2, "discard", 0.04), rec(3, "discard", -0.01)]
    current = rec(4, "keep", -0.02)
    a = audit(hist, current)
    assert "contradiction" in kinds(a)
    assert a.contradiction and "kept though it is worse" in a.contradiction
    # a simplicity or integrity discard of a better result is not a contradiction
    ok = audit([], rec(5, "discard", 0.04, basis="simplicity"))
    assert ok.contradiction is None


def test_large_diff_leniency_disagreement_and_repetition():
    hist = [rec(i, "keep", 0.006, net=80) for i in range(3)]
    assert "large_diff_leniency" in kinds(audit(hist[:-1], hist[-1]))
    pairs = [rec(i, "keep", 0.02, rule="keep", llm="discard") for i in range(6)]
    assert "llm_rule_disagreement" in kinds(audit(pairs[:-1], pairs[-1]))
    same = "-MATRIX_LR = 0.02\n+MATRIX_LR = 0.03\n"
    reps = [rec(i, "discard", -0.01, diff=same) for i in range(5)]
    a = audit(reps[:-1], reps[-1])
    assert "repetition" in kinds(a) and len(a.metrics["near_duplicates"]) >= 3


def test_cooldown_reads_escalations_from_history():
    hist = [rec(0, "keep", 0.02)]
    assert not recently_flagged(hist, "lenient")
    hist[0].verdicts["metajudge"] = {"escalated": [{"kind": "lenient", "reason": "x"}]}
    assert recently_flagged(hist, "lenient") and not recently_flagged(hist, "repetition")
