"""A kept commit's train.py runs as it reads: `uv run train.py` at a tag's commit, by hand, is the
loop's own run of it, on a small profile too. The tag's base commit writes the profile's knob
values into train.py and drops the in-memory rewrite a bare run of the repository's train.py
does (runtime.use_profile_knobs), so a kept commit that moves a knob to the value the reference
(gpu) recipe has runs that value by hand, as the loop ran it."""
import os
import re
import subprocess
import sys

from agent import loop as loop_mod
from agent.experiment import seed_for
from agent.proposers.base import Proposal
from search import knobs
from harness.job import RUN_SOURCES
from harness.results import read_journal
from tests.loop_fixtures import copy_real, git, make_repo

STEPS = "4"
# The repository's train.py made small (fast) and handicapped: no learning rate to speak of, so
# the experiment that restores the rates is kept by the reference rule at any seed.
SMALL = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}
LRS = ("EMBEDDING_LR", "UNEMBEDDING_LR", "MATRIX_LR", "SCALAR_LR")


class OneEdit:
    """Experiment 2 restores the learning rates and moves ASPECT_RATIO to the gpu recipe's 64."""
    name = "scripted"
    cheap_redo = False   # as an LLM: a stale proposal is rebased, not asked again

    def __init__(self, rates):
        self.rates = rates

    def propose(self, req):
        source = knobs.set_knobs(req.train_source, {**self.rates, "ASPECT_RATIO": 64})
        return Proposal(description="learning rates back, twice as wide", hypothesis="it learns",
                        source=source, proposer="scripted")


def test_a_kept_commit_run_by_hand_is_the_loop_s_run(tiny_cache, tmp_path, monkeypatch):
    files = copy_real()
    source = knobs.set_knobs(files["train.py"], SMALL)
    rates = {k: knobs.values(source)[k] for k in LRS}
    files["train.py"] = knobs.set_knobs(source, {k: v * 1e-4 for k, v in rates.items()})
    assert knobs.values(files["train.py"])["ASPECT_RATIO"] == 64, "the repository holds the gpu recipe's value"
    repo = make_repo(tmp_path / "repo", files)
    monkeypatch.setenv("AUTORESEARCH_STEPS", STEPS)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr(loop_mod, "make_proposer", lambda *a, **k: OneEdit(rates))
    lp = loop_mod.Loop(loop_mod.parse_args(["--tag", "h", "--budget", "30", "--repo", str(repo),
                                            "--reviewer", "simple", "--max-experiments", "2"]))
    lp.run()
    lp.stop()
    records, _ = read_journal(repo / ".autoresearch" / "h" / "journal.jsonl")
    kept = records[1]
    assert kept["status"] == "keep", kept["decision_reason"]
    assert kept["config"]["ASPECT_RATIO"] == 64, "the tag's base wrote 32 in; the experiment moved it to 64"
    # the base commit carries the tiny values and no in-memory rewrite; so does every commit after it
    kept_source = git(repo, "show", f"{kept['commit']}:train.py")
    assert knobs.PROFILE_CALL not in kept_source and knobs.PROFILE_CALL_DONE in kept_source
    assert git(repo, "rev-parse", "autoresearch/h") == kept["commit"]

    # by hand: the commit's files in a folder, `python train.py` with the run's seed and steps
    by_hand = tmp_path / "by_hand"
    by_hand.mkdir()
    for name in RUN_SOURCES:
        (by_hand / name).write_text(git(repo, "show", f"{kept['commit']}:{name}"))
    env = {k: v for k, v in os.environ.items() if k != "AUTORESEARCH_KNOBS_AS_WRITTEN"}
    env.update(AUTORESEARCH_STEPS=STEPS, AUTORESEARCH_SEED=str(seed_for(lp.run_dir, kept["n"], 0)))
    p = subprocess.run([sys.executable, "train.py"], cwd=by_hand, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "running these knobs at the profile's values" not in p.stdout
    printed = dict(re.findall(r"^(\w+):\s+(\S+)$", p.stdout, re.M))
    assert float(printed["val_bpb"]) == kept["summary"]["val_bpb"], "the loop's run, to the printed digit"
    assert float(printed["num_params_M"]) == float(kept["summary"]["num_params_M"])
    assert int(printed["num_steps"]) == kept["summary"]["num_steps"] == int(STEPS)
