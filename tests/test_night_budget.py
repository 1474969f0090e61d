"""A night you can afford: --max-cost and the crash-streak hand-over, through the real loop
and the real anthropic client against the local Messages API server (tests/fake_anthropic.py)."""
import json
from types import SimpleNamespace

from agent import budget
from agent.config import IdeasConfig
from harness.experiment_record import ExperimentRecord
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (the fixture)
from tests.loop_fixtures import fake_env, fake_repo, run_loop

KEY = "sk-ant-test-not-a-real-key-000"


def proposals(edits):
    """A handler per proposal: one turn that edits train.py and submits (str_replace + submit)."""
    def reply(old, new, what):
        return FakeAnthropic.tool_uses([("str_replace", {"path": "train.py", "old_str": old, "new_str": new}),
                                        ("submit", {"description": what, "hypothesis": "scripted"})])
    return [reply(*e) for e in edits]


def records(repo, tag):
    lines = (repo / ".autoresearch" / tag / "journal.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind", "experiment") == "experiment"]


def test_the_cost_cap_hands_the_night_to_the_offline_proposer(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    with FakeAnthropic() as fake:
        fake.push(*proposals([("WIDTH = 64  #", "WIDTH = 96  #", "wider"), ("LR = 0.04  #", "LR = 0.05  #", "faster"),
                              ("DEPTH = 4  #", "DEPTH = 5  #", "deeper")]))
        env = fake_env(tmp_path, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=fake.base_url)
        # each proposal costs 100 + 20 tokens at the default model's price: $0.0004
        p = run_loop(repo, env, "--tag", "cap", "--budget", "1", "--max-experiments", "6", "--max-cost", "0.0007",
                     "--api-patience", "1", timeout=300)
        calls = len(fake.message_requests())
    assert p.returncode == 0, p.stdout + p.stderr
    recs = records(repo, "cap")
    assert [r["proposer"] for r in recs] == ["baseline", "claude", "claude", "offline", "offline", "offline"]
    # exp 3's proposal was made ahead on exp 2 ("faster"), which was discarded; the edit conflicts on
    # the base (adjacent lines), so exp 3 was proposed again: that dropped proposal is paid for too
    assert calls == 3, "past the cap the LLM is not called, not even to prefetch"
    assert recs[2]["dropped_prefetch"][0]["description"] == "faster"
    spent = sum(r["cost_usd"] for r in recs)
    assert abs(spent - 3 * recs[1]["cost_usd"]) < 1e-9 and spent >= 0.0007
    assert all(r["handover"].startswith("cost cap") for r in recs[3:])
    assert "handover" not in recs[1] and "fallback" not in recs[3]
    assert "hand-over: cost cap" in p.stdout and "the loop goes on" in p.stdout
    assert "hand-over     cost cap reached at exp 4: the offline proposer proposed 3" in p.stdout


def test_a_crash_streak_hands_two_experiments_to_the_offline_proposer(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    # three crashes in different places (a proposal made ahead on a crashed parent still merges)
    crashes = [("def main():\n", "def main():\n    raise RuntimeError('boom')\n", "crash a"),
               ("    main()\n", "    assert DEPTH < 0, 'no'\n    main()\n", "crash b"),
               ("    time.sleep(float(", "    print(1 / (DEPTH - DEPTH))\n    time.sleep(float(", "crash c")]
    with FakeAnthropic() as fake:
        fake.push(*proposals(crashes + [("WIDTH = 64  #", "WIDTH = 96  #", "wider"),
                                        ("USE_BIAS = False  #", "USE_BIAS = True  #", "biased")]))
        env = fake_env(tmp_path, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=fake.base_url)
        p = run_loop(repo, env, "--tag", "streak", "--budget", "1", "--max-experiments", "7", "--fix-tries", "0",
                     "--crash-streak", "3", "--api-patience", "1", timeout=300)
        calls = len(fake.message_requests())
    assert p.returncode == 0, p.stdout + p.stderr
    recs = records(repo, "streak")
    assert [(r["proposer"], r["status"]) for r in recs[:4]] == [("baseline", "keep")] + [("claude", "crash")] * 3
    assert [r["proposer"] for r in recs[4:]] == ["offline", "offline", "claude"]
    assert recs[4]["handover"].startswith("crash streak") and "takes 2 more" in recs[4]["handover"]
    assert "takes 1 more" in recs[5]["handover"] and "handover" not in recs[6]
    # the LLM was asked for 3 crashes, nothing during the hand-over, then for exp 7 (twice if the
    # proposal it made ahead on exp 6 no longer merged after exp 6's discard)
    assert calls in (4, 5) and recs[6]["description"] in ("wider", "biased")
    assert p.stdout.count("hand-over: crash streak") == 1
    assert "hand-over     crash streaks: 1 hand-over(s) to the offline proposer, 2 experiment(s) (exp 5, 6)" in p.stdout


def test_streak_and_cap_rules_on_their_own():
    def rec(n, proposer, status, handover=None):
        return ExperimentRecord.of(n=n, proposer=proposer, status=status, handover=handover, cost_usd=0.01)
    hist = [rec(1, "baseline", "keep"), rec(2, "claude", "crash"), rec(3, "claude", "crash")]
    assert budget.streak_reason(hist, 3) is None
    hist.append(rec(4, "claude", "crash"))
    why = budget.streak_reason(hist, 3)
    assert "takes 2 more" in why and budget.streak_reason(hist, 0) is None
    hist.append(rec(5, "offline", "discard", why))
    hist.append(rec(6, "offline", "keep", budget.streak_reason(hist, 3)))
    assert budget.streak_reason(hist, 3) is None, "after two offline experiments the LLM proposes again"
    hist.append(rec(7, "claude", "crash"))
    assert budget.streak_reason(hist, 3) is None, "a new streak starts from one"
    # an offline experiment in between breaks a streak; a crash of the offline proposer is not the LLM's
    assert budget.streak_reason([rec(2, "claude", "crash"), rec(3, "offline", "crash"), rec(4, "claude", "crash"),
                                 rec(5, "claude", "crash")], 3) is None
    assert budget.cap_reason(hist, 0.07).startswith("cost cap: $0.0700 of --max-cost $0.0700")
    assert budget.cap_reason(hist, 0.08) is None and budget.cap_reason(hist, None) is None
    config = IdeasConfig(max_cost=0.05, crash_streak=3)
    assert budget.handover(config, hist).startswith("cost cap")


def test_past_the_cap_the_judge_does_not_call_the_llm(fake_anthropic, tmp_path):
    from agent.judges.evidence import Sample
    from agent.judges.hierarchy import JudgeHierarchy
    from agent.judges.llm_judge import LLMJudge
    from harness.verify import VerifyResult
    from tests.test_llm_judge import judge
    h = JudgeHierarchy(llm_judge=judge(fake_anthropic))
    assert isinstance(h.llm, LLMJudge)
    h._memo.runs["b" * 40] = [Sample("b" * 40, v) for v in (0.999, 1.001, 1.0, 1.002, 0.998)]
    h.stop_llm("cost cap: $1.0000 of --max-cost $1.0000 spent on the LLM")
    ctx = SimpleNamespace(n=2, tag="t", worktree=tmp_path, run_dir=tmp_path, commit="c" * 40, parent="b" * 40,
                          diff="-LR = 1\n+LR = 2\n", history=[], best={"commit": "b" * 40, "val_bpb": 1.0},
                          proposal=SimpleNamespace(description="LR 2", hypothesis="h"))
    h._experiment(ctx, VerifyResult(True, "verified", 0.98, 0.98, True, 1.0), [0.98])
    d = h._experiment(ctx, VerifyResult(True, "verified", 0.981, 0.981, True, 1.0), [0.98, 0.981])
    assert d.status == "keep" and d.verdicts["judge"]["llm"] == {"skipped": h.llm_stopped}
    assert fake_anthropic.message_requests() == []
