"""The harness clock follows the run's own load: an honest run on a busy machine is never an
integrity failure, and silent training still buys at most 5% of the budget at every budget.

The real cases run the real tiny train.py sealed (harness.runner, bubblewrap) beside real
CPU-burning processes, and a real edit of train.py that trains silently before its first step
line; the bounds are checked on the clock's arithmetic with loads fed in."""
import json
import os
import subprocess
import sys
import time

import pytest

from harness import clock as clock_mod
from harness import procs
from harness.clock import ClockReference, LogClock, over_budget
from harness.sandbox import detect
from tests.test_cheats import GIT_ENV, SRC, commit, ctx_for, make_wt, repo  # noqa: F401  (fixture)
from tests.test_sealed import run_sealed, sealed_setup

BURN = "import time\nwhile True:\n    pass\n"


def burners(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(k)]


def stop(procs) -> None:
    for p in procs:
        p.kill()
        p.wait()


def ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


class Fed(procs.LoadMeter):
    """A meter whose samples the test gives (the others' CPU seconds at each time)."""

    def __init__(self, cores, samples):
        super().__init__(None)
        self.cores = cores
        for t, other in samples:
            self.add(t, other)


def test_the_meter_counts_the_others_cpu_not_the_run_s_own():
    """A burner outside the run's tree is the machine's load; the same burner inside the tree
    (the run's own child: a cheat that spins to look loaded) is not."""
    outside = burners(1)[0]
    own = procs.LoadMeter(os.getpid())      # the test process's tree holds the burner as its child
    everyone = procs.LoadMeter(None)        # counts every busy tick as the others'
    t0 = ticks(outside.pid)
    own.sample(0.0)
    everyone.sample(0.0)
    time.sleep(2.0)
    own.sample(2.0)
    everyone.sample(2.0)
    burned = (ticks(outside.pid) - t0) / procs._HZ
    stop([outside])
    assert burned > 0.2
    assert everyone.samples[-1][1] - own.samples[-1][1] >= 0.8 * burned   # the child is the run's own
    assert procs.factor_of(0.0, 2) == 1.0 and procs.factor_of(1.0, 2) == 2.0
    assert procs.factor_of(50.0, 2) == procs.MAX_LOAD                       # bounded


@pytest.mark.parametrize("budget", [1.0, 10.0, 60.0, 300.0])
@pytest.mark.parametrize("cores_busy", [0.0, 1.0, 1.5])
def test_silent_training_buys_at_most_five_percent_at_every_budget(budget, cores_busy):
    """At load F (the others keep `cores_busy` of 2 cores busy) an honest run starts, steps and
    saves F times slower and is in time, its start and save up to JITTER slower still; one that
    trains silently before its first step line or after its last for more than that jitter and 5%
    of the budget's work (F x 5% x budget of slowed wall time) is past the limit, and 1.75x the
    budget is past the integrity line (at the meter's cap: no evidence, since the load can no
    longer be told from the excess)."""
    f = procs.factor_of(cores_busy, 2)
    ref = ClockReference(startup_s=4.0, post_s=1.0)         # the idle baseline's
    honest_startup, honest_post = ref.startup_s * f, ref.post_s * f

    def run(pre, post):
        end = honest_startup + pre + budget + honest_post + post
        meter = Fed(2, [(0.0, 0.0), (end, cores_busy * end)])
        c = LogClock(0.0, ref, meter)
        first = honest_startup + pre
        steps = 50
        for k in range(steps + 1):
            c.feed(f"step {k + 1:05d} | loss 3.0", now=first + budget * k / steps)
        return c.figures(ended=end)

    fig = run(0.0, 0.0)
    assert fig.load.train == pytest.approx(f) and over_budget(fig, budget)[0] is None
    jitter_pre, jitter_post = clock_mod.JITTER * honest_startup, clock_mod.JITTER * honest_post
    assert over_budget(run(jitter_pre, jitter_post), budget)[0] is None     # an honest start's and save's jitter
    extra = 0.051 * budget * f                               # just over 5% of the budget's work, slowed
    for pre, post in ((jitter_pre + extra, 0.0), (0.0, jitter_post + extra),
                      (jitter_pre + extra / 2, jitter_post + extra / 2 + 0.001 * budget)):
        assert over_budget(run(pre, post), budget)[0] is not None
    assert over_budget(run(jitter_pre + 0.049 * budget * f, 0.0), budget)[0] is None
    # past the integrity line, except at the meter's cap, where the excess is no evidence (never kept)
    at_cap = f >= procs.MAX_LOAD * clock_mod.SATURATED
    assert over_budget(run(jitter_pre + 0.75 * budget * f, 0.0), budget)[0] == ("over" if at_cap else "cheat")


pytestmark = pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"),
                                reason="needs bubblewrap (apt-get install bubblewrap)")


def reference_from(run) -> ClockReference:
    return ClockReference.from_figures([run.extra["clock"]])


# The reference run's budget: a reference is the unmodified train.py's startup and post (each
# divided by its load), which do not depend on the budget, so one short run serves both tests below.
REFERENCE_BUDGET = 2


@pytest.fixture(scope="module")
def reference(tiny_cache, tmp_path_factory):
    """The tag's baseline timed on the machine as it is: the unmodified train.py, sealed, once for
    the module (a worktree of its own)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in GIT_ENV.items():
            mp.setenv(k, v)
        wt, _ = make_wt(tmp_path_factory.mktemp("reference"))
        seal, _ = sealed_setup(wt)
        ref_run = run_sealed(wt, seal, 1, REFERENCE_BUDGET)
    assert ref_run.crash_class is None, ref_run.log_tail
    return reference_from(ref_run)


def test_the_unmodified_train_py_on_a_busy_machine_is_never_an_integrity_failure(repo, tiny_cache, reference):
    """The tag's baseline timed on the machine as it is (the module's reference run), then the same
    train.py at a 6 s budget beside one and then four CPU-burning processes (on 2 cores, with the
    run's one thread: ~1.5x and ~4x load on an idle box): the clock measures the load, scales the
    allowances, and no run is a cheat (at worst no evidence)."""
    wt, base = repo
    seal, h = sealed_setup(wt)
    h.budget = 6
    ref = reference
    seen = []
    for n, k in ((2, 1), (3, 4)):
        procs = burners(k)
        try:
            run = run_sealed(wt, seal, n, 6, clock_reference=ref)
        finally:
            stop(procs)
        assert run.crash_class is None, run.log_tail
        kind, why = h._over_budget(ctx_for(wt, base, SRC, commit=base), run)
        fig = run.extra["clock"]
        seen.append((k, kind, fig["load_startup"], fig["load_train"], fig["charged_s"]))
        assert kind != "cheat", (why, fig)
        assert fig["load_train"] > 1.0, fig             # the meter saw the burners
    print("burners, verdict, load startup, load train, charged:", seen)


def test_silent_training_of_175_percent_of_a_10s_budget_is_caught(repo, tiny_cache, reference):
    """train.py edited to train its first 7.5 s without step lines (its numbering starting after
    them) and then a full budget after its first line (runtime.budget_spent, which would have it
    pay its long start, is not asked): ~1.75x a 10 s budget. Before, it fit in a 15 s floor of
    slack; now it is past the limit and never evidence."""
    wt, base = repo
    seal, h = sealed_setup(wt)
    h.budget = 10
    ref = reference           # the unmodified train.py's startup and post (the module's reference run)
    cheat = SRC
    for old, new in (
        ("    t_train = time.time()\n", "    t_train = time.time()\n    hidden = 0\n"),
        ("        dt = time.time() - t0\n", "        dt = time.time() - t0\n"
         "        if time.time() - t_train < 7.5:\n            hidden = step + 1\n            step += 1\n"
         "            continue\n"),
        ('print(f"step {step:05d} |', 'print(f"step {step - hidden:05d} |'),
        ('((local_steps > STARTUP_STEPS and elapsed >= plan["budget"])\n                                  or '
         'runtime.budget_spent(first_line_at, plan["budget"])):', 'time.time() - first_line_at >= plan["budget"]:'),
    ):
        assert old in cheat, old
        cheat = cheat.replace(old, new, 1)
    sha = commit(wt, cheat)
    run = run_sealed(wt, seal, 2, 10, clock_reference=ref)
    assert run.crash_class is None, run.log_tail
    fig = run.extra["clock"]
    assert fig["first_step"] == 1                           # the hidden steps are not numbered
    kind, why = h._over_budget(ctx_for(wt, base, cheat, commit=sha), run)
    assert kind is not None, fig                            # never evidence
    d = h.judge(ctx_for(wt, base, cheat, commit=sha), run)
    assert d.status != "keep", d.reason
    print("cheat:", kind, json.dumps({k: fig[k] for k in ("startup_s", "train_s", "charged_s", "load_startup",
                                                          "load_train", "allowance_s")}))
    assert clock_mod.SLACK_FRAC == 0.05 and not hasattr(clock_mod, "SLACK_MIN_S")   # no floor of seconds


def test_one_step_longer_than_a_short_budget_is_no_evidence_not_a_cheat():
    """A saturated machine (seen: 25 s steps at a 15 s budget): the honest run's second step line
    comes 26 s after its first. No evidence, run again; never an integrity failure."""
    c = LogClock(0.0, ClockReference(8.0, 2.0), Fed(2, [(0.0, 0.0), (70.0, 280.0)]))
    c.feed("step 00001 | loss 6.2", now=30.0)
    c.feed("step 00002 | loss 6.0", now=56.2)
    fig = c.figures(ended=63.0)
    assert fig.charged_s == pytest.approx(26.2) and fig.steps.pace_s == pytest.approx(26.2)
    assert over_budget(fig, 15.0)[0] == "over"


def test_at_the_meter_s_cap_an_excess_is_no_evidence_never_a_cheat():
    """Past MAX_LOAD the meter cannot say how much the load slowed a run: an excess that would be a
    cheat on a measured load is then no evidence (not counted, never kept), not an accusation; the
    same excess under a load the meter measured stays an integrity failure."""
    from dataclasses import replace
    from harness.clock import ClockFigures, PhaseLoads, StepLines
    from harness.procs import MAX_LOAD
    budget = 5.0
    base = ClockFigures(startup_s=2.0, train_s=5.0, charged_s=3 * budget, allowance_s=2.0, post_s=0.5,
                        post_allowance_s=1.0, steps=StepLines(seen=10, first=1, last=10, pace_s=0.5),
                        load=PhaseLoads(startup=2.0, train=2.0, post=1.0))
    assert over_budget(base, budget)[0] == "cheat"
    for phase in ("startup", "train", "post"):
        kind, why = over_budget(replace(base, load=replace(base.load, **{phase: MAX_LOAD})), budget)
        assert kind == "over" and "cap" in why, (phase, why)
    assert over_budget(replace(base, charged_s=budget), budget)[0] is None   # within the limit: fine


def test_a_single_threaded_run_is_not_slowed_by_a_core_left_free():
    """A run on one thread (AUTORESEARCH_THREADS=1, the smoke preset) beside one busy core of two
    is not slowed: its factor stays 1, so its baseline's startup is not divided into an allowance
    that the same run, alone on a quiet machine, then overruns (every honest run 'over')."""
    assert procs.factor_of(1.0, 2, wants=1) == 1.0
    assert procs.factor_of(1.5, 2, wants=1) == pytest.approx(2.0)        # half a core left: 2x
    assert procs.factor_of(50.0, 2, wants=1) == procs.MAX_LOAD              # bounded the same
    assert procs.factor_of(1.0, 2) == 2.0                                   # every core wanted: as before
    assert procs.threads_of({"AUTORESEARCH_THREADS": "1"}) == 1
    assert procs.threads_of({}) is None and procs.threads_of({"AUTORESEARCH_THREADS": "x"}) is None

    def startup_run(others_busy, startup):
        meter = Fed(2, [(0.0, 0.0), (20.0, others_busy * 20.0)])
        meter.wants = 1
        c = LogClock(0.0, ClockReference(), meter)
        c.feed("step 00001 | loss 6.0", now=startup)
        c.feed("step 00010 | loss 5.0", now=startup + 5.0)
        return c.figures(ended=startup + 5.5)

    base = startup_run(1.0, 1.3)      # the baseline, beside one busy core: not slowed
    ref = ClockReference.from_figures([base.as_dict()])
    assert ref.startup_s == pytest.approx(1.3)
    later = LogClock(0.0, ref, Fed(2, [(0.0, 0.0), (20.0, 0.0)]))   # alone on a quiet machine
    later.feed("step 00001 | loss 6.0", now=1.3)
    later.feed("step 00010 | loss 5.0", now=6.3)
    assert over_budget(later.figures(ended=6.8), 5.0)[0] is None


def test_clock_figures_keep_their_flat_dict():
    """The figures are grouped in the type (steps, loads) but the journal's and a remote job's dict
    stays flat: a dict written before reads back to the same dict."""
    from harness.clock import ClockFigures
    old = {"startup_s": 2.5, "train_s": 5.0, "charged_s": 5.25, "steps_seen": 10, "first_step": 1, "last_step": 10,
           "allowance_s": 4.0, "last_line": "step 00010 | loss 3.0", "post_s": 0.5, "silent_steps": 0,
           "pace_s": 0.556, "post_allowance_s": 1.0, "tok_s": 1200.0, "load_startup": 1.5, "load_train": 2.0,
           "load_post": 1.0}
    fig = ClockFigures.from_dict(old)
    assert (fig.steps.last, fig.steps.tok_s, fig.load.train) == (10, 1200.0, 2.0)
    # a dict written before the harness measured the run's own CPU reads as "not measured"
    assert (fig.load.own_cpu_s, fig.load.exact, fig.load.other_cores, fig.load.spread) == (None, False, 0.0, 1.0)
    new = fig.as_dict()
    assert {k: new[k] for k in old} == old and list(new)[:len(old)] == list(old)
    assert ClockFigures.from_dict(new).as_dict() == new
