"""A slow start is the recipe's, not silent training: the class the research bench hit.

A step line comes after its step, so the harness's startup (process start -> the first step line)
ends with the run's first step. A recipe whose steps are slower (TOTAL_BATCH_SIZE 2048 -> 4096 on
the bench: steps twice as long) or whose start is slower (a cold compile of a changed graph on a
GPU, where the baseline's graph compiles warm) used to exceed the baseline's startup allowance on
every run and was "no evidence" until contested. Now:

- on a time budget the honest run pays its slow start from its budget (runtime.budget_spent is
  told the reference's startup), so the harness's charge stays inside the limit whatever the start;
- in steps mode (not timed) the startup allowance adds one step at the run's own pace, at most
  clock.FIRST_STEP_CAP steps of the reference (the baseline's pace, or the kept recipe's the run
  descends from where that is slower): a pace inflated by sleeping between steps buys no more
  silent time than that.

Each variant is timed on the harness's own LogClock and judged by its own over_budget/over_steps.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import runtime
from harness import clock as clock_mod
from harness.clock import ClockFigures, ClockReference, LogClock
from harness.sandbox import detect
from tests.test_cheats import repo  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent
BUDGET = 300.0
REF = ClockReference(startup_s=6.0, post_s=2.0, pace_s=1.0)   # the baseline: 5 s to build + its 1 s first step


def honest_time_run(monkeypatch, build_s: float, step_s: float, budget: float = BUDGET):
    """A train.py that builds for `build_s`, then steps every `step_s` asking runtime.budget_spent
    after each step, as the real train.py does; the harness stamps each line. Its figures."""
    started = 1000.0
    monkeypatch.setenv(runtime.CLOCK_ENV, json.dumps({"started_at": started, "startup_s": REF.startup_s}))
    c = LogClock(started=started, reference=REF)
    t, first, k = started + build_s, None, 0
    while True:
        t += step_s
        k += 1
        c.feed(f"step {k:05d} | loss 3.0", now=t)
        first = first or t
        if runtime.budget_spent(first, budget, now=t):
            break
    return c.figures(ended=t + REF.post_s), first - started


@pytest.mark.parametrize("build_s, step_s, why", [
    (5.0, 1.0, "the baseline itself"),
    (5.0, 2.0, "a doubled batch: every step twice as long"),
    (5.0, 8.0, "a model 8x slower per step"),
    (65.0, 1.0, "a changed graph compiling cold for a minute"),
    (3.0, 0.5, "a faster recipe"),
])
def test_an_honest_slow_start_ends_inside_its_limit_on_a_time_budget(monkeypatch, build_s, step_s, why):
    fig, startup = honest_time_run(monkeypatch, build_s, step_s)
    kind, reason = clock_mod.over_budget(fig, BUDGET)
    assert kind is None, (why, reason)
    # and it is not cut short beyond its start's excess and one step
    excess = max(0.0, startup - REF.startup_s)
    assert fig.train_s + excess + 2 * step_s >= BUDGET, (why, fig.train_s, excess)


def test_without_a_reference_the_first_allowance_is_the_credit(monkeypatch):
    """The baseline's own runs (no reference yet): the harness allows STARTUP_FIRST_S, the runner
    tells the run the same, so an honest start of any length up to it costs the run nothing."""
    started = 0.0
    monkeypatch.setenv(runtime.CLOCK_ENV, json.dumps({"started_at": started,
                                                      "startup_s": clock_mod.STARTUP_FIRST_S}))
    assert not runtime.budget_spent(100.0, 10.0, now=105.0)     # 100 s of start, 5 s trained
    assert runtime.budget_spent(100.0, 10.0, now=110.5)


def test_a_run_told_no_credit_pays_its_whole_start(monkeypatch):
    monkeypatch.setenv(runtime.CLOCK_ENV, json.dumps({"started_at": 0.0}))
    assert runtime.budget_spent(4.0, 10.0, now=10.0)            # 4 s of start + 6 s trained
    monkeypatch.delenv(runtime.CLOCK_ENV)
    assert not runtime.budget_spent(4.0, 10.0, now=1000.0)      # outside the loop: never


def test_a_cheat_told_the_credit_gains_only_the_jitter_and_the_slack(monkeypatch):
    """Knowing the reference's startup does not widen what silent training can buy: the harness
    charges everything past its allowance, so a run that trains silently before its first line
    and then uses its budget to the last step is over its limit by what it hid beyond the jitter."""
    started = 0.0
    monkeypatch.setenv(runtime.CLOCK_ENV, json.dumps({"started_at": started, "startup_s": REF.startup_s}))
    hidden = 30.0                                                # silent training before step 1's line
    c = LogClock(started=started, reference=REF)
    t, k = REF.startup_s + hidden, 0
    first = t + 1.0
    while True:     # it ignores budget_spent (which would stop it early) and trains a full budget
        t += 1.0
        k += 1
        c.feed(f"step {k:05d} | loss 3.0", now=t)
        if t - first >= BUDGET - 1.0:
            break
    fig = c.figures(ended=t + REF.post_s)
    kind, _ = clock_mod.over_budget(fig, BUDGET)
    assert kind is not None
    assert fig.charged_s - BUDGET == pytest.approx(hidden - clock_mod.JITTER * REF.startup_s, abs=1.5)


# The bench's baseline in steps mode: 1 s to build, then a 2 s first step before its first line.
STEPS_REF = ClockReference(startup_s=3.0, post_s=1.0, pace_s=2.0)


def steps_clock(first_line_at: float, pace: float, n: int = 16, ref: ClockReference = STEPS_REF):
    c = LogClock(started=0.0, reference=ref, steps=n)
    for k in range(n):
        c.feed(f"step {k + 1:05d} | loss 3.0", now=first_line_at + k * pace)
    return c.figures(ended=first_line_at + (n - 1) * pace + ref.post_s)


def honest_first_line(pace: float) -> float:
    """Its build, then a first step half as slow again as the rest (the allocator's warm-up: what
    the bench's runs showed)."""
    return STEPS_REF.startup_s - STEPS_REF.pace_s + 1.5 * pace


@pytest.mark.parametrize("pace", [2.0, 4.0, 8.0, 16.0])
def test_steps_mode_allows_the_first_step_at_the_runs_own_pace(pace):
    """Steps 1x-8x the baseline's (a bigger batch, a deeper model): no excess to speak of."""
    fig = steps_clock(honest_first_line(pace), pace)
    assert clock_mod.over_steps(fig, 16) == (None, "")
    assert ClockFigures.from_dict(fig.as_dict()) == fig      # what the journal keeps reads back the same


def test_the_same_slow_start_was_no_evidence_without_the_first_step_term():
    """A reference without a pace (no first-step term): the 4x recipe is over, so the test above
    tests the new term and not a slack that happened to be wide enough."""
    legacy = ClockReference(STEPS_REF.startup_s, STEPS_REF.post_s)
    assert clock_mod.over_steps(steps_clock(honest_first_line(16.0), 16.0, ref=legacy), 16)[0] is not None


@pytest.mark.parametrize("sleep_pace, n", [(40.0, 16), (1000.0, 16), (16.0, 16), (100.0, 1000)])
def test_a_pace_inflated_by_sleeping_buys_a_bounded_start(sleep_pace, n):
    """A baseline-speed recipe that sleeps between its step lines (wall time is free in steps mode)
    and trains its real 2 s steps before its first line: the first-step term stops at
    FIRST_STEP_CAP baseline steps and the slack counts its steps at the baseline's pace, so what it
    hides is bounded by the startup allowance and the cap, not by how long it sleeps; one step more
    than that bound is caught, however long the run."""
    cap = clock_mod.FIRST_STEP_CAP * STEPS_REF.pace_s
    bound = (1 + clock_mod.STEPS_SLACK_FRAC) * (STEPS_REF.startup_allowance() + cap) \
        + clock_mod.SLACK_FRAC * STEPS_REF.pace_s * (n - 1)
    hidden = int(bound // STEPS_REF.pace_s) + 1
    fig = steps_clock(STEPS_REF.startup_s + hidden * STEPS_REF.pace_s, sleep_pace, n=n)
    assert fig.allowance_s <= STEPS_REF.startup_allowance() + cap + 1e-9
    kind, why = clock_mod.over_steps(fig, n)
    assert kind is not None, (hidden, why)
    assert bound < 16 * STEPS_REF.pace_s + clock_mod.SLACK_FRAC * STEPS_REF.pace_s * (n - 1)   # ~16 steps + 5%


@pytest.mark.parametrize("hidden_steps", [100, 300])
def test_far_more_hidden_than_a_start_explains_is_a_cheat_however_slow_the_lines(hidden_steps):
    fig = steps_clock(STEPS_REF.startup_s + hidden_steps * STEPS_REF.pace_s, 1000.0)
    assert clock_mod.over_steps(fig, 16)[0] == "cheat"


def test_the_reference_keeps_the_baselines_pace():
    figs = [{"startup_s": 6.0, "post_s": 1.0, "pace_s": 1.0, "load_startup": 1.0, "load_train": 1.0},
            {"startup_s": 9.0, "post_s": 1.5, "pace_s": 3.0, "load_startup": 1.5, "load_train": 2.0}]
    ref = ClockReference.from_figures(figs)
    assert ref == ClockReference(startup_s=6.0, post_s=1.5, pace_s=1.5)   # no load_post: taken as idle


def test_the_runner_tells_the_run_its_credit(tmp_path):
    """The real runner and a stand-in train.py that prints what it was told: the reference's own
    startup (not the allowance: no jitter, no load stretch), and the first allowance before one."""
    from harness.runner import RunSpec, run_train
    (tmp_path / "train.py").write_text(
        "import os\nprint('clock', os.environ.get('AUTORESEARCH_CLOCK'), flush=True)\n"
        "print('step 00001 | loss 3.0', flush=True)\n")
    for ref, credit in ((REF, REF.startup_s), (None, clock_mod.STARTUP_FIRST_S)):
        run = run_train(RunSpec(tmp_path, tmp_path / "run", 1, 5.0, sealed=True, clock_reference=ref))
        line = next(x for x in run.log_path.read_text().splitlines() if x.startswith("clock "))
        told = json.loads(line.split(" ", 1)[1])
        assert set(told) == {"started_at", "startup_s"} and told["startup_s"] == credit


def test_the_real_train_py_pays_its_start_from_its_budget(tiny_cache):
    """The real train.py (tiny profile, 4 s budget) told a start 100 s in the past and a credit of
    10 s: runtime.budget_spent has it pay the other 90 s, so it stops after its first step. (Its own
    clock would have trained on: it counts no warm-up steps.)"""
    import time
    env = dict(tiny_cache, AUTORESEARCH_TIME_BUDGET="4", AUTORESEARCH_THREADS="1")
    env.pop("AUTORESEARCH_SEALED", None)
    env.pop("AUTORESEARCH_STEPS", None)
    env[runtime.CLOCK_ENV] = json.dumps({"started_at": time.time() - 100.0, "startup_s": 10.0})
    out = subprocess.run([sys.executable, "train.py"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [x for x in out.stdout.splitlines() if x.startswith("step ")]
    assert len(steps) == 1 and "training done: 1 steps" in out.stdout, out.stdout[-2000:]


@pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"), reason="needs bubblewrap (apt-get install bubblewrap)")
def test_a_real_slower_recipe_in_steps_mode_is_evidence(repo, tiny_cache, monkeypatch):
    """Real sealed runs of the real train.py (tiny profile, steps mode): the unmodified file sets
    the reference (its pace kept), then TOTAL_BATCH_SIZE x4 (each step four times the work) is
    judged against it: evidence, and its allowance holds a first step at its own pace."""
    from tests.test_cheats import SRC, commit, ctx_for
    from tests.test_sealed import run_sealed, sealed_setup
    wt, base = repo
    seal, h = sealed_setup(wt)
    env = {"AUTORESEARCH_STEPS": "12"}
    monkeypatch.setenv("AUTORESEARCH_STEPS", "12")
    first = run_sealed(wt, seal, 1, 10, env=env)
    assert first.crash_class is None, first.log_tail
    ref = ClockReference.from_figures([first.extra["clock"]])
    assert ref.pace_s is not None and ref.pace_s > 0
    old = "TOTAL_BATCH_SIZE = 2048"
    assert old in SRC
    slower = SRC.replace(old, "TOTAL_BATCH_SIZE = 8192", 1)
    sha = commit(wt, slower)
    run = run_sealed(wt, seal, 2, 10, env=env, clock_reference=ref)
    assert run.crash_class is None, run.log_tail
    fig = ClockFigures.from_dict(run.extra["clock"])
    assert fig.steps.pace_s > 1.5 * ref.pace_s, (fig.steps.pace_s, ref.pace_s)   # it is slower per step
    assert fig.allowance_s > ref.startup_allowance() * fig.load.startup          # and allowed a first step
    kind, why = h._over_budget(ctx_for(wt, base, slower, commit=sha), run)
    assert kind is None, why


def _kept(n, commit, paces, proposer="offline"):
    """A keep record whose own runs stepped at `paces` (idle, seconds between step lines)."""
    from harness.experiment_record import ExperimentRecord
    runs = [{"startup_s": STEPS_REF.startup_s, "post_s": STEPS_REF.post_s, "pace_s": p, "load_train": 1.0,
             "load_startup": 1.0, "load_post": 1.0} for p in paces]
    return ExperimentRecord.of(n=n, commit=commit, status="keep", proposer=proposer, clock=runs[0],
                               verdicts={"reruns": [{"commit": commit, "clock": c} for c in runs[1:]]})


def test_a_run_is_measured_in_steps_of_the_kept_recipe_it_descends_from():
    """The local search compounds its moves from the incumbent: on the bench DEPTH 4 -> 6 on a
    doubled batch stepped 20x the baseline's pace, 2-3x its parent's, and was "no evidence" on 4
    runs of 5 against the baseline's 8-step cap. The reference a run gets takes the pace of its
    parent (a kept commit; the baseline's where that is slower), so the same run is evidence; a
    candidate of the baseline is held to the baseline's cap as before, and so is a parent that was
    never kept (or another machine's import)."""
    from agent.experiment import reference_of
    history = [_kept(1, "base", [STEPS_REF.pace_s, STEPS_REF.pace_s * 0.9], proposer="baseline"),
               _kept(2, "mid", [7.0 * STEPS_REF.pace_s])]
    assert reference_of(history) == ClockReference(STEPS_REF.startup_s, STEPS_REF.post_s, STEPS_REF.pace_s)
    assert reference_of(history, "base").pace_s == STEPS_REF.pace_s
    assert reference_of(history, "mid").pace_s == pytest.approx(7.0 * STEPS_REF.pace_s)
    assert reference_of(history, "never-kept").pace_s == STEPS_REF.pace_s
    assert reference_of([r.to_dict() for r in history], "mid") == reference_of(history, "mid")   # journal dicts too
    pace = 20.0 * STEPS_REF.pace_s                                 # the child: 20x the baseline, ~3x its parent
    assert clock_mod.over_steps(steps_clock(honest_first_line(pace), pace), 16)[0] is not None
    fig = steps_clock(honest_first_line(pace), pace, ref=reference_of(history, "mid"))
    assert clock_mod.over_steps(fig, 16) == (None, "")
    # what a sleeping child of that parent hides stays bounded by the parent's steps, not its own sleep
    parent = reference_of(history, "mid")
    bound = (1 + clock_mod.STEPS_SLACK_FRAC) * (parent.startup_allowance() + clock_mod.FIRST_STEP_CAP * parent.pace_s) \
        + clock_mod.SLACK_FRAC * parent.pace_s * 15
    hidden = int(bound // STEPS_REF.pace_s) + 1
    fig = steps_clock(STEPS_REF.startup_s + hidden * STEPS_REF.pace_s, 1000.0, ref=parent)
    assert clock_mod.over_steps(fig, 16)[0] is not None
