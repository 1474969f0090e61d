"""--early-stop through the real loop: the printed curve may make an idea cost less, never count.

Real train.py on the tiny profile in steps mode, sealed, the default rule. The baseline runs twice
(the spread a curve is judged by), with LOGIT_SOFTCAP set badly so that a real gain is there to be
kept. Then:

- a recipe that barely learns (every learning rate x0.001) prints a curve far behind the
  incumbent's and is stopped at a point of its budget: discarded on one shortened run;
- the same recipe printing a curve better than it trains is not stopped: it runs to its end and
  the trusted evaluation discards it;
- a real gain that prints half its loss is kept on its trusted figure, and its forged curve is no
  bar for its successors: the limits are bounded by its trusted gain, and an honest run of the
  same recipe is not stopped against it.
"""
from __future__ import annotations

import importlib.util
from dataclasses import replace

from agent import loop as loop_mod
from agent.judges import curves
from agent.proposers.scripted import Edit, ScriptedProposer
from agent.remeasure import fresh_seeds
from harness.clock import ClockFigures
from search import knobs
from tests.loop_fixtures import REPO



def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench_judge, bench_research = _script("bench_judge"), _script("bench_research")

STEPS = 10
PRINT = 'print(f"step {step:05d} | loss {loss_f:.6f} |'
LRS = ("MATRIX_LR", "EMBEDDING_LR", "UNEMBEDDING_LR", "SCALAR_LR")


def _prints(factor: float):
    def edit(src: str) -> str:
        assert PRINT in src
        return src.replace(PRINT, PRINT.replace("{loss_f:.6f}", "{loss_f * %g:.6f}" % factor), 1)
    return edit


def _stalled(src: str) -> str:
    vals = knobs.values(src)
    return knobs.set_knobs(src, {k: vals[k] * 0.001 for k in LRS})


def _restored(src: str) -> str:
    return knobs.set_knobs(src, {"LOGIT_SOFTCAP": 15.0})


def _curve(rec) -> dict[float, float]:
    fig = ClockFigures.from_dict(rec.clock)
    return {round(f, 2): v for f, v in fig.curve}


def test_the_curve_spends_less_and_never_keeps(tiny_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_STEPS", str(STEPS))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    tuned, _ = knobs.for_profile((REPO / "train.py").read_text(), "tiny")
    base_src = knobs.set_knobs(tuned, {"LOGIT_SOFTCAP": 3.0})
    repo = bench_judge.make_repo(tmp_path, base_src)
    edits = {2: Edit("loser", "every learning rate x0.001", _stalled),
             3: Edit("liar", "x0.001 learning rates printing a third of their loss", lambda s: _prints(0.3)(_stalled(s))),
             4: Edit("gain", "LOGIT_SOFTCAP restored, printing half its loss", lambda s: _prints(0.5)(_restored(s))),
             5: Edit("honest", "LOGIT_SOFTCAP restored", _restored, on_base=True)}
    args = loop_mod.parse_args(["--tag", "es", "--repo", str(repo), "--proposer", "offline", "--budget", "60",
                                "--early-stop", "--baseline-repeats", "2", "--final-runs", "0"])
    lp = loop_mod.Loop(args)
    try:
        lp.setup()
        bench_judge.use_scripted(lp, ScriptedProposer(edits, base_src))
        lp.ensure_baseline()
        base = next(r for r in lp.history if r.is_experiment)
        loser, liar, gain = (lp.experiment(lp.next_attempt(n)) for n in (2, 3, 4))
        limits = curves.limits(lp.history, lp.last_kept)
        honest = lp.experiment(lp.next_attempt(5))
        # what the research bench makes of the stop: the stopped recipe run to its end beside its parent
        stops = bench_research.false_stops(lp, repo, fresh_seeds(lp.run_dir, 1, set()), {}, say=lambda m: None)
    finally:
        lp.stop()

    assert base.status == "keep" and base.training_runs == 2
    # a curve far behind: stopped at a point of its budget, one short run, discarded unjudged
    assert loser.status == "discard" and loser.stopped_early and loser.decision_reason.startswith("stopped early"), \
        loser.decision_reason
    assert loser.training_runs == 1 and loser.trusted_bpb is None
    assert max(_curve(loser)) <= max(curves.STOP_POINTS), "it was ended before the rest of its budget"
    assert [(x["n"], x["false"]) for x in stops] == [(2, False)], stops
    assert stops[0]["candidate_true"] > stops[0]["parent_true"], "a stalled recipe, rightly stopped"
    # the same recipe printing a better curve than it trains: run to its end, judged, discarded
    assert not liar.stopped_early and liar.status == "discard", liar.decision_reason
    assert 1.0 in _curve(liar) and liar.trusted_bpb is not None and liar.trusted_bpb > base.trusted_bpb
    # a real gain printing half its loss is kept on its trusted figure ...
    assert gain.status == "keep" and gain.trusted_bpb < base.trusted_bpb, gain.decision_reason
    # ... but its printed end is half what that figure says: its curve stops nothing
    assert limits is None, limits
    base_runs = [{round(f, 2): v for f, v in ClockFigures.from_dict(c).curve} for c in base.own_clock_runs()]
    forged = _curve(gain)
    assert curves.trusted_lead(base, gain, base_runs, [forged]) is None
    # a forger who printed an honest end: the bar is held to the trusted gain, not to its curve
    # (and printed a tenth of its loss mid-run)
    clock = {**gain.clock, "curve": [[f, v / 0.5 if round(f, 2) == 1.0 else v * 0.2] for f, v in gain.clock["curve"]]}
    mid_only = replace(gain, clock=clock, verdicts={})
    lead = curves.trusted_lead(base, mid_only, base_runs, [_curve(mid_only)])
    assert lead is not None and lead > 0
    bounded = dict(curves.limits([base, mid_only], gain.commit))
    for f in curves.STOP_POINTS:
        base_f = sum(c[f] for c in base_runs) / len(base_runs)
        assert _curve(mid_only)[f] < base_f - curves.MID_LEAD * lead, "the forgery claims more than it proved"
        assert bounded[f] >= base_f - curves.MID_LEAD * lead, (f, bounded[f], base_f, lead)
    # and the honest run of the same recipe ran to its end
    assert not honest.stopped_early, honest.decision_reason
    assert 1.0 in _curve(honest) and honest.trusted_bpb is not None
