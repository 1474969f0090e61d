"""lab/: the GRPO reward and a GRPO step end to end on a random-weight run; the flywheel's gates."""
import json

import pytest

from lab import grpo
from tests.fake_anthropic import fake_anthropic  # noqa: F401  (fixture)
from tests.infer_fixture import make_run, one_thread

_one_thread = pytest.fixture(autouse=True)(one_thread)


def test_grpo_reward_is_exact_match_on_the_first_line():
    assert grpo.reward("7\n3+3=6", "7") == 1.0
    assert grpo.reward(" 12 \nx", "12") == 1.0
    assert grpo.reward("12", "7") == grpo.FORMAT_REWARD          # a number, the wrong one
    assert grpo.reward("1 2\n", "12") == 0.0                    # not a number
    assert grpo.reward("", "7") == 0.0
    assert grpo.reward("\n7", "7") == 0.0                       # the answer must be on the first line
    assert grpo.reward("٣", "3") == 0.0                         # non-ASCII digits are not the answer


def test_grpo_held_out_pairs_are_never_trained_on():
    train_pairs, held = grpo.pairs(0)
    assert len(held) == grpo.HELD_OUT and not set(held) & set(train_pairs)
    assert not set(grpo.SHOTS) & (set(held) | set(train_pairs))
    assert grpo.prompt_text(2, 5).endswith("6+2=8\n2+5=")


def test_grpo_runs_and_reports(tmp_path, capsys):
    run, commits = make_run(tmp_path)
    assert grpo.main(["--run", str(run), "--commit", commits[1][:7], "--steps", "2", "--eval", "3"]) == 0
    report = json.loads((run / "out" / "grpo" / f"grpo-{commits[1][:7]}.json").read_text())
    assert [s["step"] for s in report["log"]] == [1, 2]
    assert all(s["kl"] >= 0 for s in report["log"]) and 0 <= report["accuracy_after"] <= 1
    assert (run / "out" / "grpo" / f"grpo-{commits[1][:7]}.pt").exists()
    assert "accuracy before" in capsys.readouterr().out


def test_flywheel_gates_reject_repetition_low_diversity_and_near_duplicates():
    from lab import flywheel as fw
    good = list(range(40))
    assert fw.ngram_repetition([1, 2, 3] * 10) > fw.REPEAT_MAX and fw.ngram_repetition(good) == 0.0
    assert fw.diversity([5, 6] * 20 + [7, 8, 9, 10]) < fw.DIVERSITY_MIN <= fw.diversity(good)
    text = "the quick brown fox jumps over the lazy dog while the cat sleeps"
    samples = [
        {"seed": "x", "text": text, "tokens": good},
        {"seed": "y", "text": text + "!", "tokens": good},                          # near-duplicate of the first
        {"seed": "z", "text": "ab ab ab", "tokens": [1, 2, 3, 4] * 10},             # a loop
        {"seed": "w", "text": "few", "tokens": [1, 2, 1, 2, 3, 1, 2, 4, 1, 2, 5, 2, 1] * 2 + good[:6]},
        {"seed": "v", "text": "   ", "tokens": good},                               # empty
        {"seed": "a completely different seed", "text": "a completely different seed", "tokens": good},
        {"seed": "s", "text": "numbers 12345 and letters qwerty in a new order", "tokens": good},
    ]
    kept, counts = fw.gate(samples)
    assert [s["seed"] for s in kept] == ["x", "s"]
    assert counts == {"empty": 1, "repetition": 1, "low_diversity": 1, "near_duplicate": 2}


def test_flywheel_verdict_at_two_percent():
    from lab import flywheel as fw
    assert fw.verdict(4.0, 3.9)[0] == "gain"          # -2.5%
    assert fw.verdict(4.0, 3.95)[0] == "neutral"      # -1.25%
    assert fw.verdict(4.0, 4.07)[0] == "neutral"      # +1.75%
    v, rel = fw.verdict(4.0, 4.2)
    assert v == "collapse" and rel == pytest.approx(0.05)


def test_claude_gate_keeps_on_a_majority_and_an_abstention_keeps(fake_anthropic):
    from lab.claude_gate import ClaudeGate
    from tests.fake_anthropic import FakeAnthropic
    samples = [{"seed": f"seed {i}", "text": f"text {i}"} for i in range(4)]
    fake_anthropic.push(FakeAnthropic.tool_use("keep_samples", {"keep": [0, 1, 7]}),   # 7: out of range
                        FakeAnthropic.tool_use("keep_samples", {"keep": [1, 2]}),
                        FakeAnthropic.error(400, "bad request"))                      # abstains: keeps all
    gate = ClaudeGate("claude-sonnet-5", base_url=fake_anthropic.base_url, api_key="test")
    kept, rejected = gate.filter(samples)
    assert [s["seed"] for s in kept] == ["seed 0", "seed 1", "seed 2"] and rejected == 1
    assert gate.calls == 3 and gate.errors == 1
    sent = fake_anthropic.requests[0].body
    assert sent["tool_choice"]["name"] == "keep_samples" and "text 3" in sent["messages"][0]["content"]
    assert len({r.body["system"] for r in fake_anthropic.requests}) == 3   # three different judges
