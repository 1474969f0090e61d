"""lab/: the GRPO reward and a GRPO step end to end on a random-weight run; the flywheel's gates."""
import json

import pytest

from lab import grpo
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
    report = json.loads((run / "lab" / f"grpo-{commits[1][:7]}.json").read_text())
    assert [s["step"] for s in report["log"]] == [1, 2]
    assert all(s["kl"] >= 0 for s in report["log"]) and 0 <= report["accuracy_after"] <= 1
    assert (run / "lab" / f"grpo-{commits[1][:7]}.pt").exists()
    assert "accuracy before" in capsys.readouterr().out
