"""scripts/bench_judge.py puts its scripted edits through the real loop: every experiment after the
baseline is the scripted proposer's, with the edit it planned (a regression once let the loop's
default offline search propose instead, and the table described edits that never ran)."""

import importlib.util

from agent import loop as loop_mod
from agent.proposers.scripted import Edit, ScriptedProposer
from agent import gitops
from search import knobs
from tests.loop_fixtures import REPO, fake_repo

spec = importlib.util.spec_from_file_location("bench_judge", REPO / "scripts" / "bench_judge.py")
bench_judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_judge)


def test_the_loop_runs_the_scripted_edits_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DATA_DIR", str(tmp_path / "fakedata"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    repo = fake_repo(tmp_path / "repo")
    base = (repo / "train.py").read_text()
    edits = {2: Edit("null", "a comment", lambda s: s.replace("def main():\n", "def main():\n    # a comment\n")),
             3: Edit("gain", "deeper from the base", lambda s: knobs.set_knobs(s, {"DEPTH": 6}), on_base=True, size=3)}
    args = loop_mod.parse_args(["--tag", "b", "--repo", str(repo), "--proposer", "offline", "--budget", "1",
                                "--reviewer", "simple", "--max-experiments", "3"])
    lp = loop_mod.Loop(args)
    try:
        lp.setup()
        bench_judge.use_scripted(lp, ScriptedProposer(edits, base))
        lp.ensure_baseline()
        for n in sorted(edits):
            lp.experiment(lp.next_attempt(n))
    finally:
        lp.stop()
    recs = [r for r in lp.history if r.is_experiment]
    assert [r.n for r in recs] == [1, 2, 3]
    assert [r.proposer for r in recs] == ["baseline", "scripted", "scripted"]
    assert recs[1].description == "null: a comment" and recs[2].description == "gain: deeper from the base"
    ran = {r.n: gitops.show_file(repo, r.commit, "train.py") for r in recs[1:]}
    assert "    # a comment\n" in ran[2]
    assert knobs.values(ran[3])["DEPTH"] == 6 and "# a comment" not in ran[3], "on_base: from the base source"


def _record(n, proposer, sigma=None, df=None):
    from harness.experiment_record import ExperimentRecord
    ev = {"call": "discard", "comparison": {"sigma": sigma, "df": df, "gain": 0.0}} if sigma is not None else None
    return ExperimentRecord.of(n=n, proposer=proposer, status="discard", evidence=ev)


def test_the_gains_unit_is_the_judges_latest_sigma():
    """The gains are sized in the sigma the judge's latest decision used, not the calibration's."""
    hist = [_record(1, "baseline", 0.0074, 4), _record(2, "scripted", 0.0081, 6), _record(3, "scripted")]
    assert bench_judge.judge_sigma(hist) == (0.0081, 6), "the latest decision with a sigma"
    assert bench_judge.judge_sigma([_record(1, "baseline")]) == (None, None)


def test_planned_gains_scale_with_the_unit_and_stop_past_the_curve():
    import pytest
    cal = {"levels": {"3.0": [2.770, 2.772, 2.768, 2.771], "3.2": [2.752, 2.750, 2.753],
                      "3.4": [2.735, 2.737, 2.733], "3.7": [2.712, 2.709, 2.713]}}
    curve = bench_judge.Curve(cal)
    cfg = {"gains": {3: 2, 5: 1}}
    small = bench_judge.plan_gains(cfg, curve, 0.004, start=10)
    big = bench_judge.plan_gains(cfg, curve, 0.008, start=10)
    assert sorted(small) == [10, 11, 12]
    for plan, unit in ((small, 0.004), (big, 0.008)):
        for e in plan.values():
            x = knobs.values(e.apply(bench_judge_base()))["LOGIT_SOFTCAP"]
            assert abs(curve.gain(x) - e.size * unit) < 2e-4, (e.label, curve.gain(x), e.size * unit)
    lv = lambda plan: sorted(knobs.values(e.apply(bench_judge_base()))["LOGIT_SOFTCAP"] for e in plan.values())
    assert all(b > a for a, b in zip(lv(small), lv(big))), "a larger sigma, a larger restoration"
    reach = curve.gain(curve.xmax)
    with pytest.raises(SystemExit, match="widen CAL_OFFSETS"):
        bench_judge.plan_gains({"gains": {5: 1}}, curve, reach / 4, start=10)


def bench_judge_base() -> str:
    return knobs.set_knobs((REPO / "train.py").read_text(), {"LOGIT_SOFTCAP": 3.0})


def test_with_labels_the_nulls_goal_counts_confirmed_claims_and_the_gains_goal_advances():
    """Under an advancing rule a null may advance (the price of the rule): the goal for nulls is on
    the confirmed label, the goal for gains on what advanced; without labels both are on keeps."""
    cal = {"levels": {"3.0": [2.770, 2.772, 2.768, 2.771], "3.2": [2.752, 2.750, 2.753]}}
    curve = bench_judge.Curve(cal)
    noop = lambda s: s
    edits = {n: Edit("null", f"null {n}", noop) for n in range(2, 22)}
    edits.update({n: Edit("gain", f"gain {n}", noop, size=3) for n in range(22, 32)})
    records = [{"n": 1, "status": "keep", "trusted_bpb": 2.77}]
    records += [{"n": n, "status": "keep" if n in (2, 3, 4) else "discard"} for n in range(2, 22)]
    records += [{"n": n, "status": "keep" if n != 22 else "discard"} for n in range(22, 32)]
    unit = {"sigma": 0.004, "df": 6}
    plain = bench_judge.summarize(records, edits, curve, unit, 60.0)
    assert plain["goal"] == {"nulls": False, "gains": True}, "3 of 20 nulls kept is over 1 in 20"
    claims = {2: {"confirmed": False}, 3: {"confirmed": True}, 4: {"confirmed": False}}
    labelled = bench_judge.summarize(records, edits, curve, unit, 60.0, claims)
    nulls = next(t for t in labelled["table"] if t["what"] == "null edits")
    assert (nulls["kept"], nulls["confirmed"]) == (3, 1)
    assert labelled["goal"] == {"nulls": True, "gains": True}, "1 of 20 nulls confirmed is within 1 in 20"
    claims[4] = {"confirmed": True}
    assert not bench_judge.summarize(records, edits, curve, unit, 60.0, claims)["goal"]["nulls"]
    text = bench_judge.render(labelled)
    assert "nulls confirmed 1/20" in text and "3 advanced" in text and "gains >= 3 sigma advanced 9/10" in text


def test_the_bench_stops_at_the_first_experiment_not_scripted():
    import pytest
    bench_judge.scripted_or_stop([_record(1, "baseline"), _record(2, "scripted")])
    bench_judge.scripted_or_stop([_record(1, "baseline")])
    with pytest.raises(SystemExit, match="experiment 3 was proposed by 'offline'"):
        bench_judge.scripted_or_stop([_record(1, "baseline"), _record(2, "scripted"), _record(3, "offline")])


def test_a_proposers_night_stops_at_its_runs_and_says_what_moved(tmp_path, monkeypatch):
    # scripts/bench_proposers.py's night: the real loop with an offline search until RUNS runs
    spec_p = importlib.util.spec_from_file_location("bench_proposers", REPO / "scripts" / "bench_proposers.py")
    bench_proposers = importlib.util.module_from_spec(spec_p)
    spec_p.loader.exec_module(bench_proposers)
    monkeypatch.setenv("FAKE_DATA_DIR", str(tmp_path / "fakedata"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    repo = fake_repo(tmp_path / "repo")
    r = bench_proposers.night(repo, "local", runs=6, budget=1.0, reviewer="simple")   # fake runs: no artifact
    assert r["search"] == "local" and r["runs"] >= 6 and r["experiments"] >= 1
    assert r["moved_per_proposal"] == 1.0, "local steps move one knob each"
    assert r["keeps"] == len(r["kept"]) and r["best"] is not None and r["baseline"] is not None
    assert bench_proposers.moved({"parent": "a", "config": {"X": 1, "Y": 2}},
                                 [{"commit": "a", "config": {"X": 1, "Y": 3}}]) == 1
