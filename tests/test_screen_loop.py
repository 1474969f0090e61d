"""`agent/loop.py --screen K`: K candidates are screened with short successive-halving runs of the
real train.py; only the winner gets the full run, and every candidate is journaled."""
import json

from search import knobs
from harness.results import read_journal
from tests.loop_fixtures import copy_real, git, make_repo, run_loop


def test_screen_three_candidates_runs_only_the_winner(tiny_cache, tmp_path):
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4,
                                                            "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1})
    repo = make_repo(tmp_path / "repo", files)
    env = dict(tiny_cache, AUTORESEARCH_STEPS="2")
    env.pop("ANTHROPIC_API_KEY", None)
    # one baseline run: this test is about the screen, not the noise (the judge's own tests are)
    p = run_loop(repo, env, "--tag", "s", "--budget", "2", "--max-experiments", "2", "--screen", "3",
                 "--baseline-repeats", "1", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wt = repo / ".autoresearch" / "s"
    experiments, _ = read_journal(wt / "journal.jsonl")
    screened, _ = read_journal(wt / "journal.jsonl", kind="screen")
    assert [r["n"] for r in experiments] == [1, 2]
    # three distinct candidates for experiment 2, ranked, exactly one winner
    assert sorted(r["candidate"] for r in screened) == [0, 1, 2] and {r["n"] for r in screened} == {2}
    assert len({r["sha"] for r in screened}) == 3
    winners = [r for r in screened if r["winner"]]
    assert len(winners) == 1 and winners[0]["rank"] == 0
    # every candidate trained at the first rung; the winner went further (promotion)
    assert all(r["rungs"] and r["rungs"][0]["steps"] == 20 for r in screened)
    assert max(h["steps"] for h in winners[0]["rungs"]) > 20
    # the experiment that ran is the winner's source
    rec = experiments[1]
    assert rec["screen"]["k"] == 3 and rec["screen"]["winner"] == winners[0]["candidate"]
    assert rec["description"] == winners[0]["label"]
    committed = git(repo, "show", f"{rec['commit']}:train.py")
    cand = (wt / "screen" / "0002" / "candidates" / f"c{winners[0]['candidate']}.py").read_text()
    assert committed.strip() == cand.strip()
    assert rec["summary"]["num_steps"] == 2   # the full run used the loop's own budget, not the screen's
    spans = [json.loads(l)["name"] for l in (wt / "traces.jsonl").read_text().splitlines()]
    assert "screen" in spans
