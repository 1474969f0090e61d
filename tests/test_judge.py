"""The rule judge's noise band and simplicity criterion, on synthetic figures."""
import math

import pytest

from agent.judges import stats
from agent.judges.evidence import Band, Margin
from agent.judges.judge import combine, near_duplicates, rule_opinion


def margin(values: list[float], k: float = 2.0) -> Margin:
    """The band the hierarchy hands rule_opinion (evidence.Margin.of), with k x the pooled, floored
    sigma of `values` as its threshold (the live threshold is a t-test's margin, stats.margin_for)."""
    sigma = stats.pooled_noise({"baseline": values}).sigma
    return Margin.of(sigma, k * sigma, stats.floor_for(values))


BEST = 1.0000
BAND = margin([1.0000, 1.0040])          # stdev 0.002828..., threshold k=2 -> 0.005657
LINES = {"added": 2, "removed": 2, "net": 0}


def test_band_from_baseline_repeats():
    # the spread is the repeats' sample standard deviation, as the baseline's evidence.Band carries it
    base = Band.of([1.0000, 1.0040], stats.pooled_noise({"baseline": [1.0000, 1.0040]}))
    assert base.spread == pytest.approx(0.004 / math.sqrt(2)) and base.measured
    assert BAND.spread == pytest.approx(0.004 / math.sqrt(2))
    assert BAND.threshold == pytest.approx(2 * 0.004 / math.sqrt(2)) and BAND.k == pytest.approx(2.0)
    # identical repeats (deterministic CPU) and a single run fall back to the floor
    same = [1.0, 1.0]
    assert Band.of(same, stats.pooled_noise({"baseline": same})).spread == pytest.approx(stats.SIGMA_FLOOR_ABS)
    single = Band.of([2.0], stats.pooled_noise({"baseline": [2.0]}))
    assert not single.measured and single.spread == pytest.approx(max(stats.SIGMA_FLOOR_ABS, 0.0005 * 2.0))
    # ...and so does a decision's margin when there is no sigma yet
    assert Margin.of(None, None, stats.floor_for([2.0])).spread == pytest.approx(0.0005 * 2.0)
    # a measured spread below the floor is raised to it
    assert margin([1.0, 1.0005]).spread == pytest.approx(0.0005 * 1.00025)


def test_improvement_inside_band_is_contested_outside_is_kept():
    inside = rule_opinion(trusted_bpb=BEST - 0.004, best_bpb=BEST, band=BAND, lines=LINES)
    assert inside.status == "contested" and "noise band" in inside.reason
    outside = rule_opinion(trusted_bpb=BEST - 0.008, best_bpb=BEST, band=BAND, lines=LINES)
    assert outside.status == "keep"
    assert outside.confidence > inside.confidence
    # the same gain with a narrower band (quieter baseline) is a keep
    quiet = margin([1.0, 1.0005])
    assert rule_opinion(trusted_bpb=BEST - 0.004, best_bpb=BEST, band=quiet, lines=LINES).status == "keep"


def test_worse_or_equal_is_discarded_and_crash_is_crash():
    assert rule_opinion(trusted_bpb=BEST + 0.02, best_bpb=BEST, band=BAND, lines=LINES).status == "discard"
    assert rule_opinion(trusted_bpb=BEST + 0.001, best_bpb=BEST, band=BAND, lines=LINES).status == "discard"
    assert rule_opinion(trusted_bpb=None, best_bpb=BEST, band=BAND, lines=LINES, crash="oom").status == "crash"
    assert rule_opinion(trusted_bpb=float("nan"), best_bpb=BEST, band=BAND, lines=LINES).status == "crash"
    first = rule_opinion(trusted_bpb=1.2, best_bpb=None, band=BAND, lines=LINES)
    assert first.status == "keep" and "first result" in first.reason


def test_simplicity_criterion():
    th = BAND.threshold
    big = {"added": 60, "removed": 5, "net": 55}
    tiny_gain = rule_opinion(trusted_bpb=BEST - 1.2 * th, best_bpb=BEST, band=BAND, lines=big)
    assert tiny_gain.status == "discard" and tiny_gain.reason.startswith("simplicity")
    large_gain = rule_opinion(trusted_bpb=BEST - 3 * th, best_bpb=BEST, band=BAND, lines=big)
    assert large_gain.status == "keep"
    deletion = {"added": 0, "removed": 12, "net": -12}
    equal = rule_opinion(trusted_bpb=BEST + 0.5 * th, best_bpb=BEST, band=BAND, lines=deletion)
    assert equal.status == "keep" and "fewer lines" in equal.reason
    clearly_worse = rule_opinion(trusted_bpb=BEST + 3 * th, best_bpb=BEST, band=BAND, lines=deletion)
    assert clearly_worse.status == "discard"


def test_near_duplicates_found_in_history():
    diff = "--- a/train.py\n+++ b/train.py\n-MATRIX_LR = 0.02\n+MATRIX_LR = 0.03\n"
    hist = [{"n": 2, "diff": diff.replace("0.03", "0.05")}, {"n": 3, "diff": "-DEPTH = 4\n+DEPTH = 8\n"},
            {"n": 4, "diff": diff}]
    hist = records(hist)
    assert near_duplicates(diff, hist) == [4]
    assert near_duplicates("", hist) == []


# ---- the hierarchy's noise protocol, with synthetic trusted values -----------------------------

from types import SimpleNamespace  # noqa: E402
from tests.loop_fixtures import fake_run  # noqa: E402

from agent.judges.hierarchy import JudgeHierarchy  # noqa: E402
from agent.judges.reviewer import BoundaryContext  # noqa: E402
from agent.workspace import RunFiles  # noqa: E402
from runfiles.queue_store import QueueStore  # noqa: E402
from harness.verify import VerifyResult  # noqa: E402
from harness.experiment_record import ExperimentRecord


def records(dicts) -> list:
    """Journal objects as the loop holds them (typed)."""
    return [ExperimentRecord.from_dict(h) if isinstance(h, dict) else h for h in dicts]


def _ctx(tmp_path, n, commit, best, history=()):
    return SimpleNamespace(n=n, tag="t", worktree=tmp_path, run_dir=tmp_path, commit=commit, parent="p" * 40,
                           diff="-MATRIX_LR = 0.02\n+MATRIX_LR = 0.025\n", history=records(history), best=best,
                           proposal=SimpleNamespace(description=f"exp {n}", hypothesis="h"))


def _judge(h, ctx, bpb):
    """What JudgeHierarchy.judge does after a verified run (verify itself is tested elsewhere)."""
    v = VerifyResult(True, "verified", bpb, bpb, True, 0.5)
    run = fake_run(summary={})
    return h._decide_on(ctx, run, v)


def test_baseline_repeats_then_confirmed_keep_then_contested_escalation(tmp_path):
    # a keep is never made on one run, and the bar is a t-test's
    # margin, not 2 x the spread of two runs (tests/test_judge_stats.py covers the rule itself)
    h = JudgeHierarchy(baseline_repeats=3)
    assert _judge(h, _ctx(tmp_path, 1, "b" * 40, None), 1.000).is_again
    assert _judge(h, _ctx(tmp_path, 1, "b" * 40, None), 1.004).is_again
    d = _judge(h, _ctx(tmp_path, 1, "b" * 40, None), 1.002)
    assert not d.is_again and d.status == "keep" and d.trusted_bpb == pytest.approx(1.002)
    assert d.verdicts["judge"]["baseline_values"] == [1.000, 1.004, 1.002]
    th = h.band.threshold
    baseline_rec = {"n": 1, "status": "keep", "trusted_bpb": 1.002, "verdicts": d.verdicts}
    best = {"commit": "b" * 40, "val_bpb": 1.002}

    clear = _judge(h, _ctx(tmp_path, 2, "c" * 40, best, [baseline_rec]), 1.002 - 2 * th)
    assert clear.is_again and "confirming it with run 2" in clear.reason   # a clear gain is confirmed first
    kept = _judge(h, _ctx(tmp_path, 2, "c" * 40, best, [baseline_rec]), 1.002 - 2.2 * th)
    assert kept.status == "keep" and not kept.is_again

    for i, frac in enumerate((0.05, 0.45, 0.2, 0.4, 0.15)):   # a small gain that never clears the margin
        last = _judge(h, _ctx(tmp_path, 4, "e" * 40, best, [baseline_rec]), 1.002 - frac * th)
        assert last.is_again == (i < 4), last.reason
    assert last.status == "discard" and last.reason.startswith("contested:") and not last.is_again
    items = QueueStore(tmp_path / "queue.sqlite").list("pending")
    assert [(i.kind, i.experiment) for i in items] == [("contested", 4)]
    assert items[0].escalation.figures["runs"] == pytest.approx([1.002 - f * th for f in (0.05, 0.45, 0.2, 0.4, 0.15)])
    assert items[0].escalated_status == "discard"
    # every decided experiment leaves an audit record for the journal, handed out at the boundary
    audits = h.boundary(BoundaryContext(files=RunFiles(tmp_path, "t", tmp_path, tmp_path / "nowhere"), history=[],
                                        on_moved=lambda head, best: None, train=lambda commit: None))
    assert [a["kind"] for a in audits] == ["audit"] * 2 and [a["n"] for a in audits] == [2, 4]


def test_a_crashed_baseline_repeat_keeps_the_baseline_from_the_runs_that_finished(tmp_path):
    h = JudgeHierarchy(baseline_repeats=3)
    ctx = _ctx(tmp_path, 1, "b" * 40, None)
    assert _judge(h, ctx, 1.000).is_again
    assert _judge(h, ctx, 1.004).is_again
    crashed = fake_run(crash_class="timeout")
    d = h.judge(ctx, crashed)
    assert d.status == "keep" and not d.is_again and d.trusted_bpb == pytest.approx(1.002)
    assert "repeat run crashed: timeout" in d.reason and h.band.spread > 0
    # an experiment (best known) that crashes is still a crash
    other = _ctx(tmp_path, 2, "c" * 40, {"commit": "b" * 40, "val_bpb": 1.002})
    assert h.judge(other, crashed).status == "crash"


def test_band_is_recovered_from_history_after_resume(tmp_path):
    hist = [{"n": 1, "status": "keep", "verdicts": {"judge": {"baseline_values": [1.0, 1.01]}}}]
    h = JudgeHierarchy()
    assert h._band(_ctx(tmp_path, 2, "c" * 40, {"val_bpb": 1.0}, hist)).values == [1.0, 1.01]


def test_a_run_far_past_its_budget_is_an_integrity_failure(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    h = JudgeHierarchy(budget=10)
    ctx = _ctx(tmp_path, 2, "c" * 40, {"val_bpb": 1.0})
    assert h._over_budget(ctx, fake_run(wall_seconds=60)) == (None, "")
    kind, why = h._over_budget(ctx, fake_run(wall_seconds=500))
    assert kind == "cheat" and "trained past the budget" in why
    # with the harness clock, the wall clock (startup, evaluation) no longer counts: charged time does
    clock = {"startup_s": 200.0, "train_s": 10.5, "charged_s": 10.5, "allowance_s": 300.0, "pace_s": 0.1}
    assert h._over_budget(ctx, fake_run(wall_seconds=500, extra={"clock": clock, "sealed": True})) == (None, "")
    over = dict(clock, charged_s=40.0, train_s=40.0)   # beyond 1.5x the budget + 5%: trained past it
    kind, why = h._over_budget(ctx, fake_run(wall_seconds=40, extra={"clock": over}))
    assert kind == "cheat" and "harness's clock" in why
    near = dict(clock, charged_s=10.9, train_s=10.9)   # past the limit, short of a cheat: run it again
    kind, why = h._over_budget(ctx, fake_run(wall_seconds=40, extra={"clock": near}))
    assert kind == "over" and "no evidence" in why
    loaded = dict(near, load_train=2.0)                # the same run slowed 2x by the machine: in time
    assert h._over_budget(ctx, fake_run(wall_seconds=40, extra={"clock": loaded})) == (None, "")
    silent = {"startup_s": None}     # a sealed run without step lines cannot be timed, so not kept
    kind, why = h._over_budget(ctx, fake_run(wall_seconds=40, extra={"clock": silent, "sealed": True}))
    assert kind == "cheat" and "no step lines" in why
    monkeypatch.setenv("AUTORESEARCH_STEPS", "5")   # a step budget has no wall-clock limit
    assert h._over_budget(ctx, fake_run(wall_seconds=500)) == (None, "")


SAVES = {"kv_bytes_per_token": 0.5, "decode_flops_per_token": 0.02}   # half the KV cache, same FLOPs


def test_efficiency_keeps_a_cheaper_model_inside_the_band():
    th = BAND.threshold
    for bpb in (BEST - 0.5 * th, BEST + 0.5 * th):   # a bit better or a bit worse: a tie either way
        op = rule_opinion(trusted_bpb=bpb, best_bpb=BEST, band=BAND, lines=LINES, serving=SAVES)
        assert op.status == "keep" and op.reason.startswith("efficiency") and "KV bytes/token -50%" in op.reason
        assert op.details["serving_savings"] == SAVES
    worse = rule_opinion(trusted_bpb=BEST + 2 * th, best_bpb=BEST, band=BAND, lines=LINES, serving=SAVES)
    assert worse.status == "discard"   # beyond the band, cheaper does not buy quality back
    # inside the band but worse by more than half of it: a regression the noise may hide, not a tie
    # (measured figures that a rule counting the whole band as "equal" kept)
    night = rule_opinion(trusted_bpb=2.519509, best_bpb=2.430060, band=Margin.of(0.035576, 0.092587, 0.0),
                         lines=LINES, serving=SAVES)
    assert night.status == "discard" and "not an equal result" in night.reason, night.reason
    edge = rule_opinion(trusted_bpb=BEST + 0.5 * th, best_bpb=BEST, band=BAND, lines=LINES, serving=SAVES)
    assert edge.status == "keep", "half the band is still a tie"
    shorter = rule_opinion(trusted_bpb=BEST + 0.8 * th, best_bpb=BEST, band=BAND,
                           lines={"added": 0, "removed": 12, "net": -12})
    assert shorter.status == "discard" and "shorter, but a loss" in shorter.reason
    small = {"kv_bytes_per_token": 0.05, "decode_flops_per_token": 0.05}   # under the margin
    assert rule_opinion(trusted_bpb=BEST + 0.5 * th, best_bpb=BEST, band=BAND, lines=LINES,
                        serving=small).status == "discard"
    traded = {"kv_bytes_per_token": 0.5, "decode_flops_per_token": -0.2}   # KV for FLOPs: no clear win
    assert rule_opinion(trusted_bpb=BEST + 0.5 * th, best_bpb=BEST, band=BAND, lines=LINES,
                        serving=traded).status == "discard"


def test_serving_figures_from_configs_and_the_efficiency_basis(tmp_path):
    import torch

    from agent.judges.judge import serving_savings
    from inference.cost import artifact_cost
    from tests.infer_fixture import random_model, tiny_config
    paths = {}
    for name, cfg in {"best": tiny_config(n_kv_head=4, pattern="L"), "gqa": tiny_config(n_kv_head=2, pattern="L"),
                      "window": tiny_config(n_kv_head=4, pattern="SL", frac=0.25)}.items():
        paths[name] = tmp_path / f"{name}.pt"
        torch.save({"config": cfg, "state_dict": random_model(cfg).state_dict()}, paths[name])
    best, gqa, window = (artifact_cost(paths[k]) for k in ("best", "gqa", "window"))
    assert best["kv_bytes_per_token"] == 4 * 2 * 4 * 16 * 2   # 4 layers, K+V, 4 heads x 16, bf16
    s = serving_savings(gqa, best)
    assert s["kv_bytes_per_token"] == 0.5 and s["decode_flops_per_token"] > 0   # smaller c_k, c_v too
    w = serving_savings(window, best)
    assert w["kv_bytes_per_token"] == pytest.approx(1 - (64 + 16 + 64 + 16) / 256)
    assert artifact_cost(tmp_path / "missing.pt") is None and serving_savings(None, best) is None
    rule = rule_opinion(trusted_bpb=BEST, best_bpb=BEST, band=BAND, lines=LINES, serving=s)
    status, basis, _, escalate = combine(rule, None)
    assert (status, basis, escalate) == ("keep", "efficiency", None)


def test_serving_figures_of_unreadable_artifacts_are_none(tmp_path):
    import torch

    from inference.cost import artifact_cost
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    torch.save({"config": {"n_layer": 2}, "state_dict": {"w": [1, 2]}}, tmp_path / "odd.pt")

    class Evil:
        def __reduce__(self):
            return (print, ("pickled code ran",))
    torch.save({"config": {}, "state_dict": {}, "x": Evil()}, tmp_path / "evil.pt")
    for name in ("junk.pt", "odd.pt", "evil.pt", "missing.pt"):
        assert artifact_cost(tmp_path / name) is None
    torch.save({"config": {"n_layer": 2}, "state_dict": {"w": torch.zeros(2, 3)}}, tmp_path / "old.pt")
    assert artifact_cost(tmp_path / "old.pt") == {"kv_bytes_per_token": None, "decode_flops_per_token": None,
                                                  "params": 6}   # a config without the keys: no claim


def test_a_knob_moved_the_other_way_is_another_experiment():
    """The guard refused the offline search's 'the other way of a discarded step' (ADAM_BETA1
    0.8 -> 0.8583 after 0.8 -> 0.7417): its long comment made the two knob lines 92% alike."""
    line = "ADAM_BETA1 = {}  # Adam beta1 for embeddings and scalars: the reference's value, see the notes\n"
    d = "--- a/train.py\n+++ b/train.py\n-" + line.format("0.8") + "+" + line.format("{}")
    hist = records([{"n": 2, "diff": d.format("0.7417")}])
    assert near_duplicates(d.format("0.8583"), hist) == []             # the other way
    assert near_duplicates(d.format("0.7420"), hist) == [2]            # within 1%: the same experiment
    assert near_duplicates(d.format("0.7417").replace("ADAM_BETA1", "ADAM_BETA2"), hist) == []   # another knob
    two = d.format("0.7417") + "-DEPTH = 4  # layers\n+DEPTH = 6  # layers\n"
    assert near_duplicates(two, hist) == [] and near_duplicates(d.format("0.7417"), records([{"n": 5, "diff": two}])) == []
