"""An imported tip is a candidate, never the baseline. A branch imported from another run holds
code nobody here proposed or checked: resumed, the tag measures this project's own train.py as its
baseline (its runs give the judge's noise and the harness clock's startup reference), then runs the
imported tip sealed, on the clock, and judges it like any proposal. An imported train.py that trains
silently past its budget is then an integrity discard, and the clock reference stays the project's.

The real loop, the real train.py on the tiny profile, sealed, on a wall-clock budget."""
import json
import subprocess

import pytest

from agent.import_run import TIP_PROPOSER
from agent.judges.hierarchy import JudgeHierarchy
from agent import gitops
from search import knobs
from agent.experiment import reference_of
from harness.clock import ClockReference
from harness.decision import Basis
from harness.results import read_journal
from harness.experiment_record import experiment_records
from harness.verify import VerifyResult
from tests.loop_fixtures import copy_real, fake_run, git, loop_cmd, make_repo
from tests.test_cheats import GIT_ENV, ctx_for, make_wt
from tests.test_import_run import _import

BUDGET = 2   # seconds of training a run: a tiny run, and what the silent training is measured against
TINY = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}


def _swap(source: str, edits) -> str:
    for old, new in edits:
        assert old in source, f"anchor {old!r} vanished from train.py"
        source = source.replace(old, new, 1)
    return source


# How an imported train.py can train past its budget where no step line shows it, each stopping a
# budget after its first step line (runtime.budget_spent would have it pay a long start first).
STOP_ON_THE_HARNESS_CLOCK = ('((local_steps > STARTUP_STEPS and elapsed >= plan["budget"])\n'
                             '                                  or runtime.budget_spent(first_line_at, plan["budget"])):',
                             'time.time() - first_line_at >= plan["budget"]:')
SILENT = {
    # trains three budgets before its first step line, its step numbers starting after them
    "silent steps first": [
        ("    t_train = time.time()\n", "    t_train = time.time()\n    hidden = 0\n"),
        ("        dt = time.time() - t0\n",
         "        dt = time.time() - t0\n        if time.time() - t_train < 3 * plan[\"budget\"]:\n"
         "            hidden = step + 1\n            step += 1\n            continue\n"),
        ('print(f"step {step:05d} |', 'print(f"step {step - hidden:05d} |'),
        STOP_ON_THE_HARNESS_CLOCK],
    # trains a budget in step lines, then three more after the last one, before saving its model
    "silent steps last": [
        ("    gc.unfreeze()  # hand",
         "    t_more = time.time()\n    while time.time() - t_more < 3 * plan[\"budget\"]:\n"
         "        with autocast:\n            loss = train_loss(x, y)\n        loss.backward()\n"
         "        optimizer.step()\n        optimizer.zero_grad()\n        x, y, epoch = next(loader)\n"
         "    gc.unfreeze()  # hand"),
        STOP_ON_THE_HARNESS_CLOCK],
}


@pytest.mark.parametrize("variant", list(SILENT))
def test_an_imported_tip_that_trains_past_its_budget_is_a_candidate_discarded_for_integrity(
        tiny_cache, tmp_path, variant):
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], TINY)
    repo = make_repo(tmp_path / "repo", files)
    git(repo, "checkout", "-q", "-b", "exp/CPU/silent")
    base_row = git(repo, "rev-parse", "--short", "HEAD")
    (repo / "train.py").write_text(_swap((repo / "train.py").read_text(), SILENT[variant]))
    git(repo, "commit", "-q", "-am", "faster training")
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "master")
    results = tmp_path / "results.tsv"
    results.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                       f"{base_row}\t3.900000\t0.1\tkeep\tbaseline\n{tip[:7]}\t0.100000\t0.1\tkeep\tfaster training\n")
    p = _import("--repo", repo, "--branch", "exp/CPU/silent", "--results", results, "--tag", "imp")
    assert p.returncode == 0, p.stderr
    env = dict(tiny_cache)
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("AUTORESEARCH_STEPS", None)   # the wall-clock budget: the harness clock times every run
    p = subprocess.run(loop_cmd("--tag", "imp", "--resume", "--budget", str(BUDGET), "--reviewer", "hierarchy",
                                "--baseline-repeats", "1", "--max-experiments", "4"),
                       cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    run = repo / ".autoresearch" / "imp"
    recs = experiment_records(read_journal(run / "journal.jsonl")[0])
    assert [r.n for r in recs] == [1, 2, 3, 4]
    baseline, candidate = recs[2], recs[3]

    own = knobs.for_profile(files["train.py"], "tiny")[0]
    assert baseline.is_baseline and baseline.sealed and baseline.trusted_bpb is not None
    assert gitops.show_file(repo, baseline.commit, "train.py") == own, "the baseline is the project's own train.py"
    assert "hidden" not in own and "t_more" not in own

    assert candidate.proposer == TIP_PROPOSER and candidate.description == "imported tip of exp/CPU/silent from CPU"
    assert candidate.sealed and candidate.parent == baseline.commit
    imported = gitops.show_file(repo, tip, "train.py")   # as any train.py here: in the profile's knob values
    assert gitops.show_file(repo, candidate.commit, "train.py") == knobs.for_profile(imported, "tiny")[0]
    assert candidate.status == "discard" and candidate.basis is Basis.INTEGRITY, candidate.decision_reason
    assert "trained past the budget" in candidate.decision_reason

    ref = reference_of(recs)   # what every later run's startup is charged against
    assert ref == ClockReference.from_figures(baseline.clock_runs()) and ref.startup_s is not None
    phase = "startup_s" if variant == "silent steps first" else "post_s"   # where it trained unseen
    assert candidate.clock[phase] > getattr(ref, phase), (phase, candidate.clock, ref)
    assert git(repo, "rev-parse", "autoresearch/imp") == baseline.commit, "the project's baseline stays the bar"
    info = json.loads((run / "run.json").read_text())
    assert info["base_commit"] == baseline.commit and info["profile"] == "tiny" and info["sandbox"]["kind"] == "bwrap"
    assert "best val_bpb  " + f"{baseline.decision_bpb:.6f}" in p.stdout


def _over_budget_run():
    """A sealed run that, by the harness's clock, trained 4x a 10 s budget: a cheat for any
    candidate; the tag's own base is exempt (its runs' excess is the machine's, not its code's)."""
    clock = {"startup_s": 2.0, "train_s": 40.0, "charged_s": 40.0, "allowance_s": 300.0, "pace_s": 0.1,
             "post_s": 0.5, "first_step": 1, "last_step": 100, "steps_seen": 100}
    return fake_run(wall_seconds=45, summary={"val_bpb": 3.0}, extra={"clock": clock, "sealed": True})


def test_only_the_tag_s_own_base_runs_as_a_baseline_without_the_cheat_verdict(tmp_path, monkeypatch):
    """A baseline at run.json's base commit is the project's train.py: over the budget it is no
    evidence (run again), never a cheat. Any other commit in the baseline's place (imported code, a
    proposer's fix of a crashed baseline) trains past the budget as an integrity failure."""
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    wt, base = make_wt(tmp_path)
    source = (wt / "train.py").read_text()
    h = JudgeHierarchy(baseline_repeats=2, budget=10)
    ctx = ctx_for(wt, base, source, n=1, commit=base)
    ctx.best = None
    d = h._decide_on(ctx, _over_budget_run(), VerifyResult(True, "ok", trusted_bpb=3.0))
    assert d.basis is Basis.BASELINE and d.is_again, d.reason

    (wt / "train.py").write_text(source + "\n# imported\n")
    git(wt, "commit", "-q", "-am", "imported code in the baseline's place")
    other = git(wt, "rev-parse", "HEAD")
    ctx = ctx_for(wt, base, source, n=1, commit=other)
    ctx.best = None
    d = JudgeHierarchy(baseline_repeats=2, budget=10)._decide_on(ctx, _over_budget_run(),
                                                                 VerifyResult(True, "ok", trusted_bpb=3.0))
    assert d.status == "discard" and d.basis is Basis.INTEGRITY and "trained past the budget" in d.reason
