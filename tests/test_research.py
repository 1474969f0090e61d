"""Arms compared at equal compute: --max-runs, the count of a decision's training runs, the
re-measurement on fresh seeds (agent/remeasure.py) and scripts/bench_research.py on a tiny night."""
from __future__ import annotations

import importlib.util
import json

import pytest

from agent import budget
from agent.config import Stops
from agent import loop as loop_mod
from agent.experiment import seed_for
from agent.remeasure import SeedClash, remeasure
from agent import seeds as seedkeys
from search import knobs
from harness.experiment_record import ExperimentRecord, experiment_records
from harness.results import read_journal
from tests.loop_fixtures import REPO, fake_env, fake_repo, run_loop

spec = importlib.util.spec_from_file_location("bench_research", REPO / "scripts" / "bench_research.py")
bench_research = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_research)
from scripts import stop_rules  # noqa: E402


def _rec(log, reruns=(), attempts=(), proposer="offline"):
    return ExperimentRecord.of(n=2, proposer=proposer, status="discard", log=log,
                            verdicts={"reruns": [dict(r) for r in reruns]}, attempts=[dict(a) for a in attempts])


def test_a_decisions_training_runs_are_counted_once_each():
    assert _rec(None).training_runs == 0, "a guard refusal ran nothing"
    assert _rec("logs/exp-0002.log").training_runs == 1
    baseline = _rec("logs/exp-0001.rerun4.log", [{"log": f"logs/exp-0001{s}.log"} for s in
                                                  ("", ".rerun1", ".rerun2", ".rerun3")], proposer="baseline")
    assert baseline.training_runs == 5, "the baseline's repeats count"
    # the last run was the incumbent's: the record describes the candidate's last run, already a rerun
    inc_last = _rec("logs/exp-0002.rerun1.log", [{"log": "logs/exp-0002.log"}, {"log": "logs/exp-0002.rerun1.log"},
                                                 {"log": "logs/exp-0002.rerun2.incumbent.log"}])
    assert inc_last.training_runs == 3
    fixed = _rec("logs/exp-0002.fix1.log", attempts=[{"log": "logs/exp-0002.log", "crash_class": "exception"}])
    assert fixed.training_runs == 2, "a crashed try a fix replaced was a run"
    assert budget.runs_done([baseline, inc_last, fixed, _rec(None)]) == 10


@pytest.mark.parametrize("argv,msg", [
    (["--max-runs", "0"], "--max-runs must be at least 1"),
    (["--max-runs", "5", "--workers", "2"], "--max-runs counts"),
    (["--max-runs", "5", "--screen", "3"], "--max-runs counts"),
])
def test_bad_max_runs_is_refused(argv, msg, capsys):
    with pytest.raises(SystemExit) as exc:
        loop_mod.parse_args(["--tag", "t", *argv])
    assert exc.value.code == 2 and msg in capsys.readouterr().err


def test_the_loop_stops_after_max_runs(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    p = run_loop(repo, fake_env(tmp_path), "--tag", "eq", "--budget", "1", "--max-runs", "3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "reached --max-runs 3" in p.stdout
    journal = repo / ".autoresearch" / "eq" / "journal.jsonl"
    recs = [ExperimentRecord.from_dict(json.loads(x)) for x in journal.read_text().splitlines() if x.strip()]
    recs = [r for r in recs if r.is_experiment]
    assert budget.runs_done(recs) == 3 and [r.n for r in recs] == [1, 2, 3]


def test_a_tiny_bench_night_per_reviewer(tiny_cache, tmp_path, monkeypatch):
    """The real loop, real train.py at 2 steps: a reference-rule night and a default-rule night of 2
    runs each, the finals and the base re-measured sealed on 2 fresh seeds; the table reads the nights."""
    monkeypatch.setenv("AUTORESEARCH_STEPS", "2")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    tuned, _ = knobs.for_profile((REPO / "train.py").read_text(), "tiny")
    seeds = seedkeys.fresh(seedkeys.named_key("test"), 2, set())
    cache: dict = {}
    said: list[str] = []
    simple = bench_research.night(tmp_path / "n", "tuned", tuned, "reference", "local", 0, 2, 60.0, seeds, cache,
                                  say=said.append, keep_journal=tmp_path / "kept.jsonl")
    assert simple["runs"] == 2 and simple["experiments"] == 1 and simple["stop_reason"].startswith("reached --max-runs 2")
    kept = experiment_records(read_journal(tmp_path / "kept.jsonl")[0])   # the night's journal, kept for later
    assert [r.n for r in kept if r.is_experiment] == [1, 2] and all(r.own_clock_runs() for r in kept)
    b = simple["base_remeasure"]
    assert b["seeds"] == seeds and len(b["values"]) == 2 and not b["failed"], b
    assert all(2.0 < v < 12.0 for v in b["values"]), "trusted val_bpb of a real run"
    assert simple["gain_true"] == pytest.approx(simple["base_true"] - simple["final_true"])
    assert simple["honesty_gap"] == pytest.approx(simple["recorded_best"] - simple["final_true"])
    assert any("re-measure" in m for m in said)
    judged = bench_research.night(tmp_path / "n", "tuned", tuned, "default", "local", 0, 2, 60.0, seeds, cache,
                                  baseline_repeats=2, keep_journal=tmp_path / "spread.jsonl")
    assert judged["runs"] == 2 and judged["baseline_runs"] == 2 and judged["experiments"] == 0
    assert judged["gain_true"] == 0.0 and judged["base_remeasure"] == b, "the same train.py: one re-measurement"
    rows = bench_research.table([simple, judged])
    assert [(r["reviewer"], r["nights"]) for r in rows] == [("reference", 1), ("default", 1)]
    text = bench_research.render(rows)
    assert "reference" in text and "default" in text and "one night" in text
    # the kept journals replay stop rules: the reference night's candidate against the default
    # night's two baseline runs (their spread calibrates the bars)
    replayed = stop_rules.replay(stop_rules._records(tmp_path / "kept.jsonl"),
                                 stop_rules._records(tmp_path / "spread.jsonl"))
    assert replayed["candidates"] == 1 and replayed["sigma"] is not None and replayed["sigma"] > 0
    assert "1 candidates run to their end" in stop_rules.render(replayed)


def test_stop_rules_stop_where_they_say():
    """now: at the first point above its bar; late: only if above at the last; both: above at every point."""
    limits = [[0.3, 5.0], [0.5, 4.0]]
    early_only, late_only, both = {0.3: 5.5, 0.5: 3.9}, {0.3: 4.9, 0.5: 4.2}, {0.3: 5.1, 0.5: 4.1}
    assert [stop_rules.stop_point(r, early_only, limits) for r in stop_rules.RULES] == [0.3, None, None]
    assert [stop_rules.stop_point(r, late_only, limits) for r in stop_rules.RULES] == [0.5, 0.5, None]
    assert [stop_rules.stop_point(r, both, limits) for r in stop_rules.RULES] == [0.3, 0.5, 0.5]
    assert all(stop_rules.stop_point(r, {0.3: 9.0}, None) is None for r in stop_rules.RULES)


@pytest.mark.parametrize("max_runs, device_s, early", [(20, 0.0, True), (0, 900.0, True), (0, 900.0, False)])
def test_a_bench_night_asks_the_loop_for_what_its_arm_says(tmp_path, max_runs, device_s, early):
    """Each of the bench's options reaches the loop (equal device-seconds once dropped --early-stop)."""
    for rule in ("default", "reference"):
        argv = bench_research.loop_argv(tmp_path, rule, "local", 3, 60.0, max_runs, 2, early, device_s)
        c = loop_mod.parse_args(argv)
        assert c.ideas.early_stop == (early and rule == "default"), (rule, argv)
        assert c.stops.max_runs == (max_runs or None) and c.stops.max_run_seconds == (device_s or None), argv
        assert c.rule == rule and c.baseline_repeats == 2


def test_the_night_end_is_kept_runs_of_a_full_length():
    """--max-run-seconds keeps room for the final's re-measurement at the length of a run that ran to
    its end: on the bench, early stops (5-15 s each) halved the median and the night overspent."""
    full = [ExperimentRecord.of(n=n, status="keep", timings={"run": 60.0}) for n in (1, 2, 3)]
    why = "its printed loss at 30% of its budget is 5.2, above 5.1"
    stopped = [ExperimentRecord.of(n=n, status="discard", timings={"run": 8.0}, decision_reason=f"stopped early: {why}",
                                   verdicts={"judge": {"status": "discard", "stopped_early": why}})
               for n in range(4, 10)]
    assert all(r.stopped_early for r in stopped) and not any(r.stopped_early for r in full)
    assert budget.run_seconds(full + stopped) == 60.0
    stops = Stops(max_run_seconds=900.0)   # 228 s spent above, + these, + 2 final runs of 60 s
    assert "--max-run-seconds" in budget.stop_due(stops, full + stopped + [ExperimentRecord.of(n=10, timings={"runs": 600.0})],
                                                  11, None, 2)
    assert budget.stop_due(stops, full + stopped + [ExperimentRecord.of(n=10, timings={"runs": 500.0})], 11, None, 2) is None


def test_remeasure_refuses_a_loop_seed(tiny_cache, tmp_path, monkeypatch):
    """A re-measurement on a seed a loop run had would replay that run's draw: refused before any run."""
    from tests.loop_fixtures import make_repo, copy_real
    monkeypatch.setenv("AUTORESEARCH_STEPS", "1")
    repo = make_repo(tmp_path / "repo", copy_real())
    lp = loop_mod.Loop(loop_mod.parse_args(["--tag", "s", "--repo", str(repo), "--budget", "60",
                                            "--proposer", "offline", "--reviewer", "simple"]))
    try:
        lp.setup()
        with pytest.raises(SeedClash):
            remeasure(lp, lp.last_kept, [seed_for(lp.run_dir, 1, 3)])   # the baseline's fourth run
        with pytest.raises(SeedClash):
            remeasure(lp, lp.last_kept, [42])   # train.py's own SEED: the baseline's first run
    finally:
        lp.stop()


def test_bench_loop_counts_every_run_as_training_and_overhead_per_run():
    spec = importlib.util.spec_from_file_location("bench_loop", REPO / "scripts" / "bench_loop.py")
    bench_loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_loop)
    base = {"n": 1, "proposer": "baseline", "status": "keep", "log": "logs/exp-0001.rerun1.log",
            "timings": {"training": 10.0, "total": 45.0, "git": 0.5, "proposal_wait": 0.0},
            "verdicts": {"reruns": [{"log": "logs/exp-0001.log", "summary": {"training_seconds": 10.0}}]}}
    # a candidate run twice, then the incumbent once: the record describes its second run
    cand = {"n": 2, "proposer": "offline", "status": "discard", "log": "logs/exp-0002.rerun1.log",
            "timings": {"training": 10.0, "total": 70.0, "git": 1.0, "proposal_wait": 2.0},
            "verdicts": {"reruns": [{"log": "logs/exp-0002.log", "summary": {"training_seconds": 10.0}},
                                    {"log": "logs/exp-0002.rerun1.log", "summary": {"training_seconds": 10.0}},
                                    {"log": "logs/exp-0002.rerun2.incumbent.log", "summary": {"training_seconds": 10.0}}]}}
    one = {"n": 3, "proposer": "offline", "status": "discard", "log": "logs/exp-0003.log",
           "timings": {"training": 10.0, "total": 25.0, "git": 0.5, "proposal_wait": 0.0}, "verdicts": {}}
    f = bench_loop.per_run_figures([base, cand, one], loop_wall=200.0)
    assert f["runs"] == 6 and f["training"] == 60.0
    assert f["duty_cycle"] == pytest.approx(60.0 / 200.0)
    assert f["overhead_per_run"] == pytest.approx((45 + 70 + 25 - 60) / 6)
    assert f["runs_per_decision"] == 2.0 and f["decisions"] == 2 and f["baseline_runs"] == 2
    assert f["git_per_run"] == pytest.approx(2.0 / 6) and f["proposal_per_run"] == pytest.approx(2.0 / 6)


def _night(reviewer, gain, gap, seed):
    return {"base": "tuned", "reviewer": reviewer, "search": "local", "seed": seed, "gain_true": gain,
            "gain_se": 0.004, "honesty_gap": gap, "keeps": 2, "experiments": 10, "runs": 20,
            "runs_per_decision": 1.5, "wall_seconds": 600.0}


def test_the_table_is_the_mean_over_nights_with_its_standard_error(tmp_path, capsys):
    nights = [_night("simple", 0.10, -0.02, 0), _night("simple", 0.14, -0.04, 1), _night("hierarchy", 0.05, 0.001, 0)]
    nights[2]["stepped_back"] = True
    rows = {r["reviewer"]: r for r in bench_research.table(nights)}
    assert rows["hierarchy"]["stepped_back"] == 1 and rows["simple"]["stepped_back"] == 0
    assert rows["simple"]["nights"] == 2 and rows["simple"]["gain"] == pytest.approx(0.12)
    assert rows["simple"]["gain_se"] == pytest.approx(0.02) and rows["simple"]["gain_se_over_nights"]
    assert rows["simple"]["honesty_gap"] == pytest.approx(-0.03) and rows["simple"]["honesty_gap_se"] == pytest.approx(0.01)
    assert rows["hierarchy"]["gain_se"] == 0.004 and not rows["hierarchy"]["gain_se_over_nights"], "one night: marked"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"nights": nights[:2]}))
    b.write_text(json.dumps({"nights": nights[2:]}))
    assert bench_research.main(["--table", str(a), str(b), "--out", str(tmp_path / "merged")]) == 0
    out = capsys.readouterr().out
    assert "+0.1200 ± 0.0200" in out and "+0.0500 ± 0.0040*" in out
    assert "1 of 1 night(s) stepped back" in out
    merged = json.loads((tmp_path / "merged" / "bench_research.json").read_text())
    assert len(merged["nights"]) == 3 and len(merged["table"]) == 2


def _decided(*steps):
    base = {"n": 1, "description": loop_mod.BASELINE_DESCRIPTION, "status": "keep"}
    return [base] + [{"n": i + 2, "description": d, "status": s} for i, (d, s) in enumerate(steps)]


def test_where_the_reviewers_part_is_the_shared_prefix_of_identical_decisions(tmp_path, capsys):
    ref, judged = _night("simple", 0.20, 0.0, 3), _night("hierarchy", 0.15, 0.0, 3)
    ref["decisions"] = _decided(("a", "discard"), ("b", "keep"), ("c", "keep"), ("d", "discard"))
    judged["decisions"] = _decided(("a", "discard"), ("b", "keep"), ("c", "discard"))   # parts at its third
    alone = _night("simple", 0.1, 0.0, 4)   # no judge's night of its seed: no line
    alone["decisions"] = _decided(("a", "keep"))
    other = _night("hierarchy", 0.1, 0.0, 3)
    other["search"] = "tpe"                 # another search's night of the same seed is no partner
    other["decisions"] = _decided(("a", "discard"))
    rows = bench_research.parting([ref, judged, alone, other])
    assert [(r["seed"], r["shared"], r["reference_experiments"], r["judge_experiments"]) for r in rows] == [(3, 2, 4, 3)]
    assert "then they differ at experiment 4" in bench_research.render_parting(rows)
    judged["decisions"] = _decided(("a", "discard"), ("b", "keep"))                      # ended inside the prefix
    assert bench_research.parting([ref, judged])[0]["shared"] == 2
    assert "ended inside them" in bench_research.render_parting(bench_research.parting([ref, judged]))
    del ref["decisions"]                                                                 # an older file: no line
    assert bench_research.parting([ref, judged]) == []
    ref["decisions"] = _decided(("a", "discard"))
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"nights": [ref, judged]}))
    assert bench_research.main(["--table", str(path), "--out", str(tmp_path / "m")]) == 0
    assert "seed 3: 1 identical" in capsys.readouterr().out


def test_judge_sim_variants_print_the_reference_and_leave_the_rule_as_it_was(capsys):
    from agent.judges import stats
    spec = importlib.util.spec_from_file_location("judge_sim", REPO / "scripts" / "judge_sim.py")
    judge_sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge_sim)
    before = (stats.P_KEEP, stats.MAX_RUNS, stats.FIRST_RUN_MIN_T)
    assert judge_sim.main(["--variants", "--night-runs", "12", "--nights", "2", "--benches", "1", "--only", "P_KEEP 0.9"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("reference (one run, keep if lower)") and "12 runs" in out[0]
    assert [x.split()[0:2] for x in out[1:]] == [["P_KEEP", "0.95"], ["P_KEEP", "0.9"]]
    assert (stats.P_KEEP, stats.MAX_RUNS, stats.FIRST_RUN_MIN_T) == before


def test_the_oracle_keeps_exactly_the_gains_over_its_floor_and_pays_its_confirming_runs(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("judge_sim", REPO / "scripts" / "judge_sim.py")
    judge_sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge_sim)
    effects = iter([3.0, -1.0, 0.5, 2.0, 4.0, 9.0])
    monkeypatch.setattr(judge_sim, "effect", lambda rng: next(effects))
    # base 1 run; +3 kept (2 runs), -1 (1), +0.5 under the floor (1), +2 kept (2): 7 runs, 5 sigma
    assert judge_sim.night_oracle(None, 7, confirm=True, floor=1.0) == 5.0
    effects = iter([3.0, -1.0, 0.5, 2.0, 4.0, 9.0])
    # one run each: the same 7 runs reach two more proposals (+4 and +9, both kept)
    assert judge_sim.night_oracle(None, 7, confirm=False, floor=1.0) == 18.0
    effects = iter([3.0, -1.0, 0.5, 2.0])
    assert judge_sim.night_oracle(None, 5, confirm=False, floor=0.0) == 5.5, "every gain over 0 kept"
    monkeypatch.undo()
    assert judge_sim.main(["--bound", "--night-runs", "10", "--nights", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("reference (one run, keep if lower)") and len(out) == 7
    assert sum("confirmed" in x for x in out) == 3 and all("of the reference" in x for x in out[1:])


def test_nights_of_another_regime_are_another_arm_and_no_partner(tmp_path, capsys):
    """A wall-clock night under a load is not averaged with fixed-step nights of the same arm, nor
    paired with a fixed-step night of the other reviewer; files written before the regime key read
    as fixed steps."""
    steps = [_night("simple", 0.10, 0.0, 0), _night("hierarchy", 0.08, 0.0, 0)]
    loaded = [dict(_night("simple", 0.02, -0.03, 0), regime="wall 5s load 2"),
              dict(_night("hierarchy", 0.06, 0.0, 0), regime="wall 5s load 2")]
    for n in steps + loaded:
        n["decisions"] = _decided(("a", "keep"))
    loaded[1]["decisions"] = _decided(("b", "keep"))
    rows = bench_research.table(steps + loaded)
    fixed = bench_research.DEFAULT_REGIME
    assert sorted((r["reviewer"], r["regime"], r["nights"]) for r in rows) == [
        ("hierarchy", fixed, 1), ("hierarchy", "wall 5s load 2", 1), ("simple", fixed, 1), ("simple", "wall 5s load 2", 1)]
    assert {r["regime"]: r["gain"] for r in rows if r["reviewer"] == "simple"} == {fixed: 0.10, "wall 5s load 2": 0.02}
    again = dict(_night("simple", 0.20, 0.0, 1), regime=fixed)   # a new fixed-step night joins the old ones
    assert {r["regime"]: r["nights"] for r in bench_research.table(steps + [again]) if r["reviewer"] == "simple"} == {fixed: 2}
    assert "regime" in bench_research.render(rows).splitlines()[0]
    assert "regime" not in bench_research.render(bench_research.table(steps)).splitlines()[0]
    parted = {r["regime"]: r["shared"] for r in bench_research.parting(steps + loaded)}
    assert parted == {fixed: 1, "wall 5s load 2": 0}, "each night pairs with its own regime's only"
    with pytest.raises(SystemExit):
        bench_research.main(["--load-procs", "2", "--out", str(tmp_path / "x")])
    assert "needs --wall-clock" in capsys.readouterr().err


def test_a_disturbed_remeasurement_runs_its_seed_again(monkeypatch, tmp_path):
    """A re-measurement run the harness's clock calls slowed past its load ("over": no evidence,
    as the judge reruns a disturbed run) is run again on its seed, up to DISTURBED_TRIES; a cheat
    is never retried. Stand-in runs: what is tested is which runs count."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from agent import remeasure as rm
    from harness.verify import VerifyResult

    @dataclass
    class Slot:
        sealed: bool = False
        budget: float = 60.0

    logs = []

    def run_commit(slot, n, commit, log, env):
        assert slot.sealed, "a re-measurement is always evaluated by the trusted evaluator"
        logs.append(log)
        return SimpleNamespace(crash_class=None, verified=VerifyResult(True, "ok", trusted_bpb=2.5 + len(logs) / 100))
    clock = iter([("over", "startup 9.6s against 3.8s"), (None, ""),          # seed 1: once again, then counted
                  ("cheat", "trained past its budget"),                       # seed 2: never again
                  ("over", "slow"), ("over", "slow"), ("over", "slow")])      # seed 3: out of tries
    monkeypatch.setattr(rm, "run_commit", run_commit)
    monkeypatch.setattr(rm, "over_budget", lambda run, budget: next(clock))
    monkeypatch.setattr(rm.gitops, "show_file", lambda *a: "SEED = 42\n")
    loop = SimpleNamespace(history=[], coord=SimpleNamespace(next_n=lambda: 2), files=SimpleNamespace(repo=".", run_dir=tmp_path),
                           slot=Slot())
    said = []
    out = remeasure(loop, "c" * 40, [1_000_001, 1_000_002, 1_000_003], say=said.append)
    assert out.seeds == [1_000_001] and out.values == [2.52]
    assert [f.split(":")[0] for f in out.failed] == ["seed 1000002", "seed 1000003"]
    assert "trained past its budget" in out.failed[0] and "slow" in out.failed[1]
    assert len(logs) == 1 + 1 + 1 + rm.DISTURBED_TRIES and logs[1] == "remeasure-ccccccc-1000001.rerun1.log"
    assert sum("running it again" in line for line in said) == 1 + rm.DISTURBED_TRIES - 1


def test_the_rule_sim_asks_the_shrunk_value_only_in_its_variant(monkeypatch, capsys):
    """scripts/rule_sim.py's default rule is the judge's: a run below the bar advances; `--shrunk-too`
    (a variant measured and not adopted) also asks the candidate's own shrunk value to be below it."""
    spec = importlib.util.spec_from_file_location("rule_sim", REPO / "scripts" / "rule_sim.py")
    rule_sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rule_sim)
    real = rule_sim.shrink.posterior
    for shrunk_too in (False, True):
        seen = []

        def spy(inc, runs, sigma, prior):
            est, p = real(inc, runs, sigma, prior)
            seen.append((runs[0] < inc.mean, est.mean < inc.mean))
            return est, p
        monkeypatch.setattr(rule_sim.shrink, "posterior", spy)
        advances = sum(len(rule_sim.default(rule_sim.World(night, rule_sim.PRIORS["rare"]), 30,
                                            shrunk_too=shrunk_too)[2]) for night in range(8))
        below, hair = sum(b for b, _ in seen), sum(b and not e for b, e in seen)
        assert hair > 0, "runs below the bar whose shrunk value is not: the case the variant is about"
        assert advances == (below - hair if shrunk_too else below)
    monkeypatch.setattr(rule_sim.shrink, "posterior", real)
    assert rule_sim.main(["--nights", "3", "--runs", "12", "--priors", "rare"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| rare |")]
    assert [r.split("|")[2].strip() for r in rows] == ["reference", "default", "strict"]
