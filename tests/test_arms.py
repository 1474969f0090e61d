"""Arms: the headline/regret metrics on hand-made trajectories, the Claude policy against a local
Messages API, and a tiny end-to-end arms run on CPU that writes valid JSON and HTML."""
import json
import re
from pathlib import Path

import anthropic
import pytest

from search.arms import (ClaudePolicy, best_at, console_summary, headline, parse_seeds, quality_table,
                          run_arms, summarize, trajectory, write_reports)
from search.arms_screen import SCREEN_K, pick_fidelity, round_bracket, screen_k
from search.arms_stats import (chance_level, compare, completed_brackets, describe_pairs, fair_budget,
                                fairness, format_headline, headline_stats, hyperband_cycle, pairwise,
                                planned_brackets)
from search.hyperband import bracket_cost
from search.space import SMALL_BASE, Space
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)

F = FakeAnthropic

REPO = Path(__file__).resolve().parent.parent


def recs(pairs):
    return [{"cum_steps": s, "val_bpb": v} for s, v in pairs]


def test_trajectory_keeps_improvements_only_and_skips_crashes():
    t = trajectory(recs([(10, 3.0), (20, None), (30, 3.2), (40, 2.5), (50, 2.5)]))
    assert t == [(10, 3.0), (40, 2.5)]
    assert best_at(t, 5) is None and best_at(t, 39) == 3.0 and best_at(t, 100) == 2.5


def test_headline_is_steps_to_random_final_over_random_steps():
    trajs = {
        "random": trajectory(recs([(100, 3.0), (200, 2.8), (400, 2.6)])),   # final 2.6 at 400
        "hyperband": trajectory(recs([(50, 2.9), (100, 2.55)])),            # 2.6 reached at 100
        "prior": trajectory(recs([(300, 2.6)])),                            # exactly at 300
        "bad": trajectory(recs([(100, 2.9)])),                              # never reaches it
    }
    assert headline(trajs) == {"random": 1.0, "hyperband": 0.25, "prior": 0.75, "bad": None}
    assert quality_table(trajs["random"], 400) == {"25%": 3.0, "50%": 2.8, "75%": 2.8, "100%": 2.6}


def test_summarize_counts_unreached_seeds_in_the_headline():
    runs = {0: {"random": recs([(100, 3.0)]), "prior": recs([(50, 2.9)])},
            1: {"random": recs([(80, 3.1), (160, 3.0)]), "prior": recs([(200, 3.2)])}}
    rep = summarize(runs, 200)
    assert rep["per_seed"][0]["headline"]["prior"] == 0.5
    assert rep["per_seed"][1]["headline"]["prior"] is None
    assert rep["per_seed"][1]["not_reached_above"] == {"prior": 1.25}   # spent 200, random needed 160
    h = rep["headline"]["prior"]                  # 1 of 2 reached: the median is "not reached",
    assert (h["median"], h["median_reached"], h["reached"]) == (None, False, "1/2")   # never 0.5
    assert (h["min"], h["max"]) == (0.5, None)
    assert rep["headline"]["random"]["median"] == 1.0 and rep["headline"]["random"]["reached"] == "2/2"
    assert rep["quality"]["random"]["100%"] == {"mean": pytest.approx(3.0), "min": 3.0, "max": 3.0}
    assert rep["quality"]["prior"]["100%"] == {"mean": pytest.approx(3.05), "min": 2.9, "max": 3.2}
    assert rep["per_seed"][0]["reference_best"] == 2.9
    pair = rep["separation"]["headline"][0]
    assert (pair["a"], pair["b"], pair["verdict"]) == ("random", "prior", "cannot be told apart")
    assert pair["chance"] == 0.5                  # random's headline is 1 by definition: sign level 2/2^2
    lines = console_summary(dict(rep, fairness={"warnings": []}))
    assert "arms:   prior not reached [0.500-not reached], 1/2 reached; 0.500, not reached (> 1.25)" in lines
    assert not any("WARNING" in line for line in lines)
    assert any(line.startswith("arms: headline: cannot be told apart: random ~ prior") for line in lines)


def test_claude_policy_parses_clips_and_survives_bad_replies(fake_anthropic):  # noqa: F811
    space = Space({"MATRIX_LR": ("log", 0.001, 0.1), "DEPTH": ("int", 2, 6)})
    reply = ('Here you go:\n[{"MATRIX_LR": 0.5, "DEPTH": 3.6}, {"MATRIX_LR": 0.01, "DEPTH": 2}, '
             '{"DEPTH": 4}]')
    fake_anthropic.push(FakeAnthropic.text(reply), FakeAnthropic.text("no json at all"))
    client = anthropic.Anthropic(api_key="test", base_url=fake_anthropic.base_url, max_retries=0)
    policy = ClaudePolicy(space, model="claude-test", client=client)
    history = [{"config": {"MATRIX_LR": 0.02, "DEPTH": 4}, "steps": 9, "val_bpb": 2.5}]
    got = policy(3, history)
    assert got == [{"MATRIX_LR": 0.1, "DEPTH": 4}, {"MATRIX_LR": 0.01, "DEPTH": 2}]   # clipped; the
    sent = fake_anthropic.requests[0].body                                           # incomplete one dropped
    assert sent["model"] == "claude-test" and "2.5" in sent["messages"][0]["content"]
    assert policy(2, history) == [] and "no JSON array" in policy.errors[-1]


def test_tiny_arms_run_writes_json_and_html(tiny_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    out = tmp_path / "arms"
    store = tmp_path / "prior.json"
    report = run_arms(REPO / "train.py", out, seeds=[0], max_steps=2, min_steps=1, eta=2,
                      budget_steps=10, workers=2, arms=["random", "hyperband", "prior", "snip"],
                      warm_prior=store, base_knobs=SMALL_BASE, log=lambda m: None)
    jpath, hpath = write_reports(report, out)
    data = json.loads(jpath.read_text())
    assert data["arms"] == ["random", "hyperband", "prior", "snip"]
    for arm in data["arms"]:
        traj = data["per_seed"]["0"]["trajectories"][arm]
        assert traj, f"{arm} produced no result"
        assert all(s <= 10 for s, _ in traj)                   # the identical budget holds
        assert set(data["quality"][arm]) == {"25%", "50%", "75%", "100%"}
    assert data["per_seed"]["0"]["headline"]["random"] == 1.0
    # promotion was used by the Hyperband arms, never by random search
    hb = data["records"]["0"]["hyperband"]
    assert any(r["rung"] > 0 for r in hb) and all(r["rung"] == 0 for r in data["records"]["0"]["random"])
    assert len(json.loads(store.read_text())["observations"]) >= 1   # the prior store grew
    # budget 10 < one Hyperband cycle (9 + 8 steps): the report says the comparison is unfair
    assert any("s=0 never run" in w for w in data["fairness"]["warnings"])
    assert data["fairness"]["plans"]["random"]["configs"] == 2       # 10 // (2 + 2 decay)
    page = hpath.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "<polyline" in page
    assert "too small for a fair comparison" in page and "Can the arms be told apart?" in page
    assert not re.search(r'(src|href)="https?://', page)       # self-contained


def test_screen_round_shape_and_arm_names():
    b = round_bracket(3, 1, 9, eta=3)                          # 3x1, 1x3, then the full run 1x9
    assert [(r.n, r.steps) for r in b.rungs] == [(3, 1), (1, 3), (1, 9)]
    assert bracket_cost(b, 2) == 3 * (1 + 2) + (2 + 2) + (6 + 2)
    assert [(r.n, r.steps) for r in round_bracket(9, 2, 81).rungs] == [(9, 2), (3, 6), (1, 18), (1, 81)]
    with pytest.raises(ValueError, match="shorter than the full run"):
        round_bracket(3, 3, 9)                                 # the screen would reach R itself
    assert screen_k("screen") == SCREEN_K and screen_k("screen-5") == 5 and screen_k("random") is None


def test_tiny_screen_arm_accounting_and_reports(tiny_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    out = tmp_path / "arms"
    R, budget = 3, 15                     # eta 2: one round of 3x1 -> 1x2 -> full 1x3 (15 steps)
    report = run_arms(REPO / "train.py", out, seeds=[0], max_steps=R, min_steps=1, eta=2,
                      budget_steps=budget, workers=2, arms=["random", "screen"],
                      base_knobs=SMALL_BASE, log=lambda m: None)
    jpath, hpath = write_reports(report, out)
    data = json.loads(jpath.read_text())
    assert data["arms"] == ["random", "screen-3"]
    decay = data["settings"]["decay_steps"]
    recs = data["records"]["0"]["screen-3"]
    rounds = sorted({r["bracket"] for r in recs})
    assert len(rounds) == 1
    for b in rounds:
        rung = {k: [r for r in recs if r["bracket"] == b and r["rung"] == k] for k in range(3)}
        assert [len(rung[k]) for k in range(3)] == [3, 1, 1]
        assert all(r["screen"] and not r["counts"] for r in rung[0] + rung[1])
        best0 = min(rung[0], key=lambda r: (r["val_bpb"], r["cand"]))
        assert rung[1][0]["cand"] == best0["cand"]                # the screen promotes its best
        full = rung[2][0]
        assert full["cand"] == rung[1][0]["cand"] and full["counts"] and full["steps"] == R
        assert full["cost"] == R - 2 + decay                      # resumed from the screen's state
    screen_cost = sum(r["cost"] for r in recs if r["screen"])
    full_cost = sum(r["cost"] for r in recs if not r["screen"])
    acct = data["screen"]["screen-3"]["0"]
    assert (acct["screen_steps"], acct["full_steps"]) == (screen_cost, full_cost)
    assert acct["total_steps"] == screen_cost + full_cost == max(r["cum_steps"] for r in recs) <= budget
    assert screen_cost == 3 * (1 + decay) + (1 + decay)
    # only full runs are results: the trajectory is built from them alone
    fulls = sorted((r for r in recs if r["counts"]), key=lambda r: r["cum_steps"])
    traj = [tuple(p) for p in data["per_seed"]["0"]["trajectories"]["screen-3"]]
    assert traj and {s for s, _ in traj} <= {r["cum_steps"] for r in fulls}
    assert traj[-1][1] == min(r["val_bpb"] for r in fulls)
    # common random numbers: round 0 screens random search's first three configurations
    first = [r["config"] for r in data["records"]["0"]["random"][:3]]
    assert sorted(map(json.dumps, first)) == sorted(json.dumps(r["config"]) for r in recs if r["bracket"] == 0
                                                   and r["rung"] == 0)
    assert set(data["quality"]["screen-3"]) == {"25%", "50%", "75%", "100%"}
    assert "screen-3" in data["headline"]
    fid = acct["fidelity"]                                     # random trained round 0's three
    assert fid["rounds_checked"] == 1 and fid["hits"] in (0, 1) and fid["mean_regret"] >= 0
    page = hpath.read_text()
    assert "Does screening pay?" in page and "screen-3" in page and page.count("<polyline") == 2


def test_screen_pick_fidelity_against_full_runs():
    def rec(b, rung, cand, val=None, counts=False):
        return {"bracket": b, "rung": rung, "cand": cand, "val_bpb": val, "counts": counts}
    screen_recs = [rec(0, 0, "a", 3.0), rec(0, 0, "b", 3.1), rec(0, 0, "c", 3.2), rec(0, 1, "a", 2.9, True),
                   rec(1, 0, "d", 3.0), rec(1, 0, "e", 3.3), rec(1, 0, "f", 3.4), rec(1, 1, "d", 2.8, True),
                   rec(2, 0, "g", 3.0), rec(2, 0, "h", 3.0), rec(2, 0, "i", 3.0), rec(2, 1, "g", 2.9, True)]
    full = [{"cand": c, "val_bpb": v} for c, v in
            [("a", 2.9), ("b", 2.95), ("c", 3.0), ("d", 2.8), ("e", 2.7), ("f", 2.85), ("g", 2.9)]]
    f = pick_fidelity(screen_recs, full)                    # round 2: h, i never trained in full
    assert (f["rounds_checked"], f["hits"]) == (2, 1)
    assert f["rounds"][1] == {"round": 1, "hit": False, "regret": pytest.approx(0.1)}
    assert f["mean_regret"] == pytest.approx(0.05)


# ---- arms_stats: headline across seeds, separability, fair budgets (pure, on synthetic numbers) ----

def test_headline_stats_never_averages_the_successes_alone():
    # 1 of 2 reached: however fast the one success, the arm reads "not reached"
    for fast in (0.01, 0.5, 0.99):
        h = headline_stats([fast, None])
        assert not h["median_reached"] and h["median"] is None and h["reached"] == "1/2"
        assert format_headline(h).startswith("not reached [")
    # 2 of 3 reached: the median is the worse success (0.4), not their mean (0.3)
    h = headline_stats([0.2, None, 0.4])
    assert (h["median"], h["min"], h["max"], h["reached"]) == (0.4, 0.2, None, "2/3")
    assert format_headline(h) == "0.400 [0.200-not reached], 2/3 reached"
    # all reached: plain median and range
    h = headline_stats([0.7, 0.5, 0.6])
    assert (h["median"], h["min"], h["max"], h["median_reached"]) == (0.6, 0.5, 0.7, True)
    assert headline_stats([0.5, 0.7])["median"] == pytest.approx(0.6)
    assert headline_stats([])["reached"] == "0/0"


def test_an_unreached_seed_can_only_lower_the_headline():
    reached = [0.3, 0.5, 0.6]
    base = headline_stats(reached)
    for i in range(3):
        worse = reached[:i] + [None] + reached[i + 1:]
        h = headline_stats(worse)
        assert not h["median_reached"] or h["median"] >= base["median"]
        assert h["max"] is None


def test_compare_tells_arms_apart_only_when_ranges_do_not_overlap():
    c = compare([0.5, 0.6, 0.55], [1.0, 1.0, 1.0])     # against a constant: the sign level 2/2^3
    assert c["verdict"] == "a better" and c["a_better_seeds"] == 3 and c["chance"] == 0.25
    c = compare([3.2, 3.25, 3.21], [3.3, 3.4, 3.35])    # two varying arms: 2/C(6,3)
    assert c["verdict"] == "a better" and c["chance"] == pytest.approx(0.1)
    # better in every seed (paired) but the ranges overlap: not told apart
    c = compare([0.5, 0.9, 1.2], [0.6, 1.0, 1.3])
    assert c["verdict"] == "cannot be told apart" and (c["a_better_seeds"], c["b_better_seeds"]) == (3, 0)
    # a seed that never reached the target is worse than any reached one
    assert compare([None, None], [2.0, 3.0])["verdict"] == "b better"
    assert compare([0.4, None], [1.0, 1.0])["verdict"] == "cannot be told apart"
    assert compare([1.0, 1.0], [1.0, 1.0])["ties"] == 2
    assert chance_level(2) == pytest.approx(1 / 3) and chance_level(3) == pytest.approx(0.1)
    told, same = describe_pairs(pairwise({"x": [0.5, 0.6], "y": [1.0, 1.0], "z": [0.55, 1.2]}))
    assert told == ["x < y (chance 0.50)"] and same == ["x ~ z", "y ~ z"]


class InstantExecutor:
    """run_schedule's executor interface, answering every task at once (no training)."""

    def __init__(self):
        self.pending = []

    def free_slots(self):
        return 2 - len(self.pending)

    def submit(self, task):
        self.pending.append(task)

    def next_result(self):
        from search.hyperband import TaskResult
        t = self.pending.pop(0)
        return TaskResult(t, 3.0 + (hash(t.cand) % 100) / 1000, None, 0.0)


@pytest.mark.parametrize("budget", [50, 100, 113, 150, 226, 300])
def test_planned_brackets_match_what_the_scheduler_starts(tmp_path, budget):
    from search.hyperband import Candidate, hyperband_brackets, run_schedule
    plan = hyperband_brackets(9, 1, 3)

    def make(i, bracket):
        return [Candidate(f"c{i}-{k}", {}, tmp_path / "x.py") for k in range(bracket.rungs[0].n)]

    records = run_schedule(InstantExecutor(), plan, make, decay_steps=2, ckpt_dir=tmp_path / "ck",
                           budget_steps=budget, repeat=True)
    started = planned_brackets(plan, budget, 2)
    entrants = [sum(1 for r in records if r["bracket"] == b and r["rung"] == 0)
                for b in sorted({r["bracket"] for r in records})]
    assert entrants == [b.rungs[0].n for b in started]
    assert max((r["cum_steps"] for r in records), default=0) == sum(bracket_cost(b, 2) for b in started)


def test_fair_budget_is_whole_cycles_with_enough_random_configurations():
    assert hyperband_cycle(9, 1, 3, 2) == (113, 9)         # 47 + 33 + 33 steps; widest bracket 9
    assert fair_budget(9, 1, 3, 2) == 113                  # random: 113 // 11 = 10 >= 9
    plans, warnings = fairness(["random", "hyperband", "prior", "screen-3"], 113, 9, 1, 3, 2)
    assert warnings == []
    p = {x.arm: x for x in plans}
    assert (p["random"].configs, p["random"].unused) == (10, 3)
    assert (p["hyperband"].brackets, p["hyperband"].configs, p["hyperband"].unused) == (3, 17, 0)
    assert (p["screen-3"].brackets, p["screen-3"].steps) == (5, 105)   # 21-step rounds
    # 81/3: one cycle is 1209 steps but random draws only 14 of the widest bracket's 27
    assert hyperband_cycle(81, 3, 3, 2) == (1209, 27) and fair_budget(81, 3, 3, 2) == 2418
    assert any("draws only 14 configurations" in w for w in fairness(["random"], 1209, 81, 3, 3, 2)[1])


def test_fairness_warns_when_the_budget_is_too_small_or_uneven():
    arms = ["random", "hyperband", "screen-3"]
    w = fairness(arms, 150, 9, 1, 3, 2)[1]                 # the old quick budget: s=1 runs twice
    assert len(w) == 1 and "not a whole number of Hyperband cycles" in w[0] and "113" in w[0]
    w = fairness(arms, 100, 9, 1, 3, 2)[1]
    assert any("s=0 never run" in x for x in w)
    assert any(x.startswith("hyperband leaves 20 of 100") for x in w)
    assert any(x.startswith("screen-3 leaves 16 of 100") for x in w)
    assert not any(x.startswith("random leaves") for x in w)     # 1 of 100 unused
    w = fairness(["random"], 60, 9, 1, 3, 2)[1]            # no Hyperband arm: only random's count
    assert w == ["random search draws only 5 configurations, fewer than the 9 the widest Hyperband "
                 "bracket compares (use --budget-steps 113)"]


def test_completed_brackets_sees_crashes_and_seeds_parse():
    rows = [{"bracket": 0, "steps": 1, "val_bpb": 3.0}, {"bracket": 0, "steps": 9, "val_bpb": 2.9},
            {"bracket": 1, "steps": 1, "val_bpb": None}]      # bracket 1: every entrant crashed
    assert completed_brackets(rows, 9) == (2, 1)
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("4,7") == [4, 7] and parse_seeds("5,") == [5]


def test_html_report_shows_unreached_seeds_spread_and_fairness():
    from search.arms_html import render_html
    runs = {s: {"random": recs([(100, 3.0), (110, 2.9)]), "hyperband": recs([(40, 2.8 if s else 3.1)])}
            for s in (0, 1)}
    rep = summarize(runs, 113)
    plans, warnings = fairness(["random", "hyperband"], 150, 9, 1, 3, 2)
    rep.update(arms=["random", "hyperband"], screen={}, wall_s=1.0, fairness={
        "warnings": warnings, "plans": {p.arm: vars(p) for p in plans}, "fair_budget": 113},
        settings=dict(budget_steps=113, max_steps=9, min_steps=1, eta=3, decay_steps=2, profile="tiny",
                      fingerprint="x", seeds=[0, 1], workers=2))
    page = render_html(rep)
    row = re.search(r"<tr><td>hyperband</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row)
    # seed 0 missed (3.1 > 2.9; spent 40 of random's 110: ratio > 0.36), seed 1 reached at 40/110
    assert cells[:2] == ["not reached (&gt; 0.36)", "0.364"]
    assert cells[2] == "<b>not reached</b>" and cells[4] == "1/2"
    assert "cannot be told apart" in page and "not a whole number of Hyperband cycles" in page
    assert "<td>random vs hyperband</td><td>1/2</td><td>1/2</td><td>0</td><td>cannot be told apart</td>" in page
    assert "2.9500 <small>[2.8000&ndash;3.1000]</small>" in page       # mean [min-max] final quality


# ---- the Optuna arms and the hybrid (search/optuna_arm.py, hybrid.py, arms_llm.py) ----

def test_tpe_sampler_beats_random_search_on_a_synthetic_objective():
    import math
    import numpy as np
    from search.optuna_arm import KnobSampler
    space = Space({"X": ("lin", 0.0, 1.0), "Y": ("log", 0.001, 1.0), "D": ("int", 1, 8)})

    def f(c):                                     # known optimum 0 at X 0.3, Y 0.1, D 5
        return (c["X"] - 0.3) ** 2 + (math.log10(c["Y"]) + 1) ** 2 / 9 + (c["D"] - 5) ** 2 / 49

    for seed in range(5):
        ks = KnobSampler(space, seed)
        tpe = []
        for _ in range(40):
            trial, cfg = ks.ask()
            tpe.append(f(cfg))
            ks.tell(trial, tpe[-1])
        rng = np.random.default_rng(seed)
        rand = [f(space.sample(rng)) for _ in range(40)]
        assert tpe[:4] == rand[:4], "the start is the random arm's own stream"
        assert min(tpe) < min(rand), f"seed {seed}: TPE {min(tpe):.4f} vs random {min(rand):.4f}"


def test_optuna_arm_spends_exactly_randoms_budget(tmp_path):
    import numpy as np
    from search.optuna_arm import STARTUP, run_optuna_arm
    source = knobs_source()
    space = Space.for_source(source)
    recs, study = run_optuna_arm(source, space, InstantExecutor(), tmp_path, seed=3, max_steps=9,
                                 decay_steps=2, budget_steps=113, log=lambda m: None)
    plan = {p.arm: p for p in fairness(["random", "optuna"], 113, 9, 1, 3, 2)[0]}
    assert len(recs) == plan["random"].configs == plan["optuna"].configs == 10
    assert max(r["cum_steps"] for r in recs) == plan["random"].steps == 110
    assert [r["trial"] for r in recs] == list(range(10)) and study["complete"] == 10
    rng = np.random.default_rng(3)
    assert [r["config"] for r in recs[:STARTUP]] == [space.sample(rng) for _ in range(STARTUP)]
    for r in recs[STARTUP:]:                      # the model's asks stay inside the space
        for name, spec in space.specs.items():
            assert spec.low <= r["config"][name] <= spec.high
    assert len((tmp_path / "sweep.jsonl").read_text().splitlines()) == 10


def knobs_source():
    from search import knobs
    return knobs.set_knobs(knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0], SMALL_BASE)


def test_hybrid_is_skipped_without_an_llm(monkeypatch):
    from search.hybrid import hybrid_setup
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    lines = []
    arms, ideas = hybrid_setup(["random", "optuna", "hybrid"], None, lines.append)
    assert arms == ["random", "optuna"] and ideas is None
    assert lines == ["arms: hybrid arm skipped: its code ideas come from Claude and neither "
                     "ANTHROPIC_API_KEY nor ANTHROPIC_BASE_URL is set"]


def test_tiny_optuna_and_hybrid_arms_against_the_local_messages_api(tiny_cache, tmp_path, monkeypatch,
                                                                    fake_anthropic):  # noqa: F811
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)       # the claude arm stays out
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    monkeypatch.setenv("AUTORESEARCH_ARMS_MODEL", "claude-haiku-4-5")
    ideas = [{"description": "shorter cool-down", "edits": [{"old": "WARMDOWN_RATIO = 0.5  #",
                                                             "new": "WARMDOWN_RATIO = 0.4  #"}]},
             {"description": "not in the file", "edits": [{"old": "NO SUCH LINE", "new": "x"}]},
             {"description": "no clipping", "edits": [], "knobs": {"GRAD_CLIP": 0.0}}]
    fake_anthropic.push(F.tool_use("record_ideas", {"ideas": ideas},
                                   usage={"input_tokens": 15000, "output_tokens": 400}))
    out = tmp_path / "arms"
    report = run_arms(REPO / "train.py", out, seeds=[0], max_steps=2, min_steps=1, eta=2,
                      budget_steps=20, workers=2, arms=["random", "optuna", "hybrid"],
                      base_knobs=SMALL_BASE, log=lambda m: None)
    jpath, hpath = write_reports(report, out)
    data = json.loads(jpath.read_text())
    assert data["arms"] == ["random", "optuna", "hybrid"]
    recs = data["records"]["0"]
    for arm in data["arms"]:                      # 5 full runs of 2 + 2 steps each: identical budgets
        assert [r["cum_steps"] for r in recs[arm]] == [4, 8, 12, 16, 20]
        assert data["per_seed"]["0"]["trajectories"][arm], f"{arm} produced no result"
        assert data["fairness"]["plans"][arm]["steps"] == 20
    assert [r["config"] for r in recs["optuna"][:4]] == [r["config"] for r in recs["random"][:4]]
    (req,) = fake_anthropic.message_requests()    # one ideas call per run
    assert req.body["model"] == "claude-haiku-4-5"
    assert req.body["tool_choice"] == {"type": "tool", "name": "record_ideas"}
    assert "WARMDOWN_RATIO = 0.5" in req.body["messages"][0]["content"]
    extra = data["extras"]["0/hybrid"]
    assert extra["tokens"]["input"] == 15000 and extra["tokens"]["output"] == 400
    assert extra["cost_usd"] == pytest.approx((15000 * 1.0 + 400 * 5.0) / 1e6)
    assert [i["name"] for i in extra["ideas"]] == ["idea1", "idea3"]
    assert any("idea2 left out" in e and "matches 0 times" in e for e in extra["errors"])
    hyb = recs["hybrid"]
    assert [r["config"]["IDEA"] for r in hyb[:3]] == ["none", "idea1", "idea3"]   # every choice early
    cand = out / "seed0" / "hybrid" / "candidates" / f"cand_{hyb[1]['cand']}.py"
    assert "WARMDOWN_RATIO = 0.4  #" in cand.read_text()
    assert "GRAD_CLIP = 0.0  #" in (out / "seed0" / "hybrid" / "candidates" / f"cand_{hyb[2]['cand']}.py").read_text()
    assert data["extras"]["0/optuna"]["study"]["complete"] == 5
    page = hpath.read_text()
    assert page.count("<polyline") == 3 and "hybrid" in page and "optuna" in page
    assert "Samplers and LLM use" in page and "15000 / 400" in page and "shorter cool-down" in page


def test_hybrid_keeps_only_ideas_that_make_a_fair_runnable_train_py():
    from search.hybrid import Idea, IdeaBatch, usable
    source = knobs_source()
    space = Space.for_source(source)
    ideas = [Idea("ok", "shorter cool-down", [("WARMDOWN_RATIO = 0.5  #", "WARMDOWN_RATIO = 0.3  #")]),
             Idea("evalhack", "faster eval", [("prepare.evaluate_bpb", "lambda *a: 0.0 or prepare.evaluate_bpb")]),
             Idea("seed", "luckier seed", [], {"SEED": 7}),
             Idea("imports", "peek", [("import math", "import math, os")]),
             Idea("unknown", "new knob", [], {"NOT_A_KNOB": 1}),
             Idea("broken", "syntax", [("WARMDOWN_RATIO = 0.5  #", "WARMDOWN_RATIO = (  #")]),
             Idea("noop", "nothing", [], {}),
             Idea("dropknob", "no depth", [("DEPTH = 2  #", "LAYERS = 2  #")])]
    good, errors = usable(IdeaBatch(ideas), source, space)
    assert [i.name for i in good] == ["ok"]
    why = dict(e.split(" left out: ", 1) for e in errors)
    assert set(why) == {"evalhack", "seed", "imports", "unknown", "broken", "noop", "dropknob"}
    assert "'prepare'" in why["evalhack"] and "SEED" in why["seed"] and "import" in why["imports"]
    assert why["unknown"].startswith("KeyError") and why["broken"].startswith("SyntaxError")
    assert "changes nothing" in why["noop"] and "DEPTH" in why["dropknob"]
    assert "WARMDOWN_RATIO = 0.3  #" in good[0].apply(source, space)
