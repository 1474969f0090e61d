"""Arms: the headline/regret metrics on hand-made trajectories, the Claude policy against a local
Messages API, and a tiny end-to-end arms run on CPU that writes valid JSON and HTML."""
import json
import re
from pathlib import Path

import anthropic
import pytest

from harness.arms import (ClaudePolicy, best_at, headline, quality_table, run_arms, summarize,
                          trajectory, write_reports)
from harness.arms_screen import SCREEN_K, pick_fidelity, round_bracket, screen_k
from harness.hyperband import bracket_cost
from harness.space import SMALL_BASE, Space
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)

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


def test_summarize_averages_over_seeds():
    runs = {0: {"random": recs([(100, 3.0)]), "prior": recs([(50, 2.9)])},
            1: {"random": recs([(80, 3.1), (160, 3.0)]), "prior": recs([(200, 3.2)])}}
    rep = summarize(runs, 200)
    assert rep["per_seed"][0]["headline"]["prior"] == 0.5
    assert rep["per_seed"][1]["headline"]["prior"] is None
    assert rep["headline_mean"]["prior"] == {"mean": 0.5, "reached": "1/2"}
    assert rep["quality_mean"]["random"]["100%"] == pytest.approx(3.0)
    assert rep["per_seed"][0]["reference_best"] == 2.9


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
        assert set(data["quality_mean"][arm]) == {"25%", "50%", "75%", "100%"}
    assert data["per_seed"]["0"]["headline"]["random"] == 1.0
    # promotion was used by the Hyperband arms, never by random search
    hb = data["records"]["0"]["hyperband"]
    assert any(r["rung"] > 0 for r in hb) and all(r["rung"] == 0 for r in data["records"]["0"]["random"])
    assert len(json.loads(store.read_text())["observations"]) >= 1   # the prior store grew
    page = hpath.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "<polyline" in page
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
    assert set(data["quality_mean"]["screen-3"]) == {"25%", "50%", "75%", "100%"}
    assert "screen-3" in data["headline_mean"]
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
