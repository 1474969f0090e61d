"""--workers 2 on a CPU, on a wall-clock budget, the real loop: an honest gain is kept.

The case this guards: the baseline measured alone, every candidate beside another worker's run
(on a shared CPU each run gets fewer steps in its seconds), so honest candidates looked worse
than the baseline and were discarded. The judge now measures the load and pairs the candidate's
runs with runs of the incumbent made under the same concurrency (agent/judges/pairing.py).

The real train.py (tiny profile, a small model) on a 5 s training budget, the judge hierarchy, the
sandbox, two local workers. The tag starts from a train.py with learning rates a hundredth of the
profile's (an under-trained baseline); the Claude proposer (the real anthropic client against
tests/fake_anthropic.py) proposes putting them back: an honest gain of about 1 bpb, far beyond
what a second run beside it costs. Experiment 3, a scripted edit of another line (the warm-down),
runs beside it, so the gain is measured under load. (Not the offline proposer: its first step from
this baseline moves a learning rate out of range to the range's edge, the very line of the gain's
edit, and when that experiment is kept first the gain's edit conflicts with the tip and is
discarded as it should be: a race, not the judge, would decide the test.)

Contested (out of reruns, to the human queue) is accepted, a plain discard is not: on a shared CI
box a load that comes and goes can leave every confirming run no evidence until the reruns run
out. How often it is kept is measured, not asserted here (docs/judge.md).
"""
from __future__ import annotations

from search import knobs
from tests.fake_anthropic import FakeAnthropic as F
from tests.loop_fixtures import copy_real, make_repo, run_loop
from tests.test_workers import journal, no_process_left

SMALL = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}
# The tiny profile's learning rates (runtime.PROFILE_KNOBS, train.py's own for the last two) and
# the baseline's, a hundredth of them: 5 s of training at these moves val_bpb from ~3.7 to ~2.4.
GOOD = {"MATRIX_LR": "0.02", "EMBEDDING_LR": "0.3", "UNEMBEDDING_LR": "0.004", "SCALAR_LR": "0.5"}
SLOW = {"MATRIX_LR": "0.0002", "EMBEDDING_LR": "0.003", "UNEMBEDDING_LR": "4e-05", "SCALAR_LR": "0.005"}
DESCRIPTION = "learning rates back to the profile's"


def test_an_honest_gain_beside_another_worker_is_kept(tiny_cache, tmp_path):
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], dict(SMALL, **{k: float(v) for k, v in SLOW.items()}))
    repo = make_repo(tmp_path / "repo", files)
    edits = [F.tool_use("str_replace", {"path": "train.py", "old_str": f"{k} = {SLOW[k]}  #",
                                        "new_str": f"{k} = {GOOD[k]}  #"}) for k in SLOW]
    script = [*edits, F.tool_use("submit", {"description": DESCRIPTION,
                                            "hypothesis": "the baseline's learning rates are far too small"}),
              F.tool_use("str_replace", {"path": "train.py", "old_str": "WARMDOWN_RATIO = 0.5  #",
                                         "new_str": "WARMDOWN_RATIO = 0.45  #"}),
              F.tool_use("submit", {"description": "a slightly shorter warm-down",
                                    "hypothesis": "the schedule's tail matters little here"})]

    def answer(req):
        """The proposer's calls (its tools end in submit) get the script in order; the LLM judge's and a
        fourth proposal's get 529 (the rule judge decides alone; the offline proposer answers)."""
        tools = {t.get("name") for t in req.body.get("tools", [])} if isinstance(req.body, dict) else set()
        return script.pop(0) if script and "submit" in tools else F.error(529, "overloaded")

    with F() as fake:
        fake.default = answer
        env = dict(tiny_cache, ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key-000", ANTHROPIC_BASE_URL=fake.base_url)
        env.pop("AUTORESEARCH_STEPS", None)          # a wall-clock budget: the load moves the figures
        p = run_loop(repo, env, "--tag", "wg", "--budget", "5", "--max-experiments", "3", "--workers", "2",
                     "--reviewer", "hierarchy", "--baseline-repeats", "2", "--api-patience", "1",
                     "--final-runs", "0", timeout=600)   # the pairing is tested here, not the headline
    assert p.returncode == 0, p.stdout + p.stderr
    recs = journal(repo, "wg")
    story = [(r["n"], r.get("worker"), r["description"], r["status"], r["decision_reason"]) for r in recs]
    print(*story, sep="\n")
    assert sorted(r["n"] for r in recs) == [1, 2, 3], story
    base, gain = recs[0], next(r for r in recs if r["description"] == DESCRIPTION)
    # the unmodified baseline is never an integrity failure, alone or as the incumbent beside a worker
    assert base["status"] == "keep" and not base["decision_reason"].startswith("integrity"), story
    for r in recs:   # a run of the incumbent made beside a worker: at worst no evidence, never a cheat
        assert not (r["commit"] == base["commit"] and "past the budget" in r["decision_reason"]), story
        for note in r["decision_reason"].split("the incumbent's run is no evidence")[1:]:
            assert "past the budget" not in note.split("not counted")[0], story
    # the gain was measured beside the other worker's run, and kept (at worst contested, never a discard)
    other = next(r for r in recs if r["n"] not in (1, gain["n"]))
    assert gain["started_at"] < other["ended_at"] and other["started_at"] < gain["ended_at"], story
    assert gain["status"] == "keep" or gain["decision_reason"].startswith("contested"), story
    assert gain["trusted_bpb"] < base["trusted_bpb"] - 0.3, story
    assert not no_process_left(repo)
