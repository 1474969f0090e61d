"""A disturbed baseline, with real processes: an honest baseline repeat slowed by a competing process.

A stand-in train.py (no torch: fixed CPU work per step) runs three or more times under
harness.runner.run_train, the harness clock timing its step lines and its load meter reading the
machine; during the second run busy processes, each in its own session, take the machine's cores.
The judge gets those real RunResults (with the values once seen on a shared machine: 1.396 for the
honest run, 1.527 for the slowed one) and must rerun the slowed one instead of counting it, keeping
the band at the honest runs' noise, on what the harness measured alone: the stand-in prints the
same step times whatever happens. Seconds, not a training."""
import subprocess
import sys
from types import SimpleNamespace

import pytest

from agent.judges import pairing
from agent.judges.hierarchy import JudgeHierarchy
from harness.runner import RunPlace, RunSpec, run_train
from harness.verify import VerifyResult

# Tries of the slowed run (each a second or two) before the test gives up on this machine's load.
TRIES = 6

STAND_IN = '''
import os, time
print("params 1,000 | flops/token 1.0e+06 | batch 8x64 x4 = 2,048 tokens/step | budget 1.0s", flush=True)
for step in range(1, 31):
    x = 0                      # fixed work per step; the step time it prints is a constant, true or not
    for i in range(120_000):
        x += i * i
    print(f"step {step:05d} | loss 4.0 | lrm 1.000 | dt 30ms | tok/s 68,267 | epoch 1 | trained 1.0s", flush=True)
print("---")
for k, v in [("val_bpb", "1.0"), ("training_seconds", "1.0"), ("total_seconds", "1.5"), ("peak_vram_mb", "10.0"),
             ("mfu_percent", "0.00"), ("total_tokens_M", "0.1"), ("num_steps", 30), ("num_params_M", "0.0"),
             ("depth", 1), ("eval_seconds", "0.0")]:
    print(f"{k + ':':<18}{v}")
'''

HOG = "print('spinning', flush=True)\nwhile True:\n    pass\n"


def _run(wt, n, log):
    return run_train(RunSpec(wt, wt, n, 1.0, timeout=120, place=RunPlace(log_name=log)))


def _slowed_run(wt, hogs):
    """The run with `hogs` busy processes on its core, every one spinning before it starts."""
    # Each in its own session, like a process started from another terminal: the runner starts the
    # training in its own session, and with autogroup scheduling (Linux's default) CPU time is shared
    # between sessions first, so hogs in the test's own session would only ever halve the run's pace.
    procs = [subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE, text=True,
                              start_new_session=True) for _ in range(hogs)]
    try:
        for p in procs:   # a loaded box starts them late: wait for each
            assert p.stdout.readline().strip() == "spinning"
        return _run(wt, 1, "exp-0001.rerun1.log")
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_baseline_repeat_slowed_by_a_competing_process_is_rerun_not_counted(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    (tmp_path / "train.py").write_text(STAND_IN)
    h = JudgeHierarchy(baseline_repeats=2)
    ctx = SimpleNamespace(n=1, tag="t", worktree=tmp_path, run_dir=tmp_path, commit="b" * 40, parent=None,
                          diff="", history=[], best=None, proposal=SimpleNamespace(description="baseline", hypothesis=""))

    def judge(run, bpb):
        assert run.crash_class is None, run.log_tail
        return h._decide_on(ctx, run, VerifyResult(True, "verified", bpb, None, True, 0.1))

    def busy(run):
        return run.extra["clock"]["other_cores_train"]

    # A loaded box (the other test worker) can load the honest run too, and on 2 cores that leaves
    # little room above it: a weak difference is redone with the quietest honest run seen so far
    # and more hogs, each try a second or two.
    # What the judge needs (evidence.screen, pairing.comparable): the others' busy cores apart by
    # more than OTHER_SAME, with a margin for the clock figures' rounding.
    enough = pairing.OTHER_SAME + 0.02
    honest = _run(tmp_path, 1, "exp-0001.log")
    for attempt in range(1, TRIES + 1):
        slowed = _slowed_run(tmp_path, hogs=min(attempt, 4))
        more = busy(slowed) - busy(honest)
        if more > enough:
            break
        again = _run(tmp_path, 1, f"exp-0001.quiet{attempt}.log")
        honest = min(honest, again, key=busy)
    assert more > enough, f"the harness's meter saw only {more:.2f} more busy cores in {TRIES} tries"
    d1 = judge(honest, 1.396)
    assert d1.is_again
    d2 = judge(slowed, 1.527)
    assert d2.is_again and "disturbed" in d2.reason and "not counted" in d2.reason, d2.reason
    for k in (2, 3):   # the judge allows 2 disturbed runs beyond the plan: a loaded box (the other
        d3 = judge(_run(tmp_path, 1, f"exp-0001.rerun{k}.log"), 1.399)   # test worker) may slow an honest one
        if not d3.is_again:
            break
        runs = d3.verdicts["evidence"]["candidate"]["runs"]   # rerun only for want of two undisturbed runs
        assert sum(r["used"] for r in runs) < 2, d3.reason
    assert not d3.is_again and d3.status == "keep"
    jd = d3.verdicts["judge"]
    runs = d3.verdicts["evidence"]["candidate"]["runs"]
    assert runs[1]["log"] == "logs/exp-0001.rerun1.log" and runs[1]["used"] is False
    assert "another load" in runs[1]["why"] or "meter's cap" in runs[1]["why"] or "changed while" in runs[1]["why"], runs[1]
    assert 1.527 not in jd["baseline_values"], jd["baseline_values"]
    assert jd["spread"] < 0.01, f"the slowed run blew up the noise: sigma {jd['spread']}"
    assert jd["baseline_values"] == [r["bpb"] for r in runs if r["used"]]
    for r in runs:   # a run left out is left out for what the harness measured of the machine
        assert r["used"] or any(w in r["why"] for w in ("another load", "meter's cap", "changed while")), r
    if len(runs) == 3:   # no honest run was slowed by the box: the band is the two honest runs'
        assert jd["baseline_values"] == [1.396, 1.399] and d3.trusted_bpb == pytest.approx(1.3975)
