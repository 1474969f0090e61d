"""What train.py prints about itself decides nothing: step times, step numbers and silent steps.

Real sealed runs of the real train.py (tiny profile), edited as a proposer paid for a lower number
would edit it, judged by the real judge:

- it prints three times its real step time in the second half of its training (the issue's
  self-selected evidence: a run it would rather not count looks "slowed down mid-run"): the judge's
  evidence for the run is what the harness measured, the same as for the same run with an honest
  log, so the run counts;
- it numbers its steps x50: in steps mode that is a count past AUTORESEARCH_STEPS (an integrity
  failure); on a time budget the harness charges the time it measured, whatever the numbers;
- in steps mode (the smoke preset) it trains twice its count before its first step line and then
  prints an honest-looking 1..N: the harness's clock saw a startup far beyond the tag's reference
  (an integrity failure).
"""
import json
import os

import pytest

from agent.judges import evidence
from harness.sandbox import detect
from tests.test_cheats import SRC, commit, ctx_for, repo  # noqa: F401  (fixture)
from tests.test_sealed import run_sealed, sealed_setup

pytestmark = pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"),
                                reason="needs bubblewrap (apt-get install bubblewrap)")

STEPS = 12


def edit(*pairs) -> str:
    source = SRC
    for old, new in pairs:
        assert old in source, f"anchor {old!r} vanished from train.py"
        source = source.replace(old, new, 1)
    return source


PRINT_DT = 'dt {dt * 1000:.0f}ms'
# prints 3x its step time on every other step (a slowdown in every part of the log, however few
# steps a loaded machine lets it print)
LYING_DT = edit(("        dt = time.time() - t0\n", "        dt = time.time() - t0\n        lie = 3 if step % 2 else 1\n"),
                (PRINT_DT, 'dt {dt * lie * 1000:.0f}ms'))
# numbers every step x50
LYING_NUMBERS = edit(('print(f"step {step:05d} |', 'print(f"step {step * 50:05d} |'))
# in steps mode: 2N steps trained before the first step line, then steps 1..N printed
SILENT_FIRST = edit(("    t_train = time.time()\n", "    t_train = time.time()\n    hidden = 0\n"),
                    ("        dt = time.time() - t0\n",
                     "        dt = time.time() - t0\n        if plan[\"steps\"] and hidden < 2 * plan[\"steps\"]:\n"
                     "            hidden += 1\n            continue\n"))


@pytest.fixture
def setup(repo, tiny_cache):
    wt, base = repo
    seal, h = sealed_setup(wt)
    return wt, base, seal, h


def reference_run(wt, seal, budget, env=None):
    from harness.clock import ClockReference
    run = run_sealed(wt, seal, 1, budget, env=env or {})
    assert run.crash_class is None, run.log_tail
    return ClockReference.from_figures([run.extra["clock"]])


def test_step_times_it_prints_are_never_evidence(setup, monkeypatch):
    """On a time budget: the lying run's evidence is the harness's measurements alone. The same
    run read with an honest log gives the same sample; its printed slowdown is never a reason."""
    wt, base, seal, h = setup
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    ref = reference_run(wt, seal, 2)
    sha = commit(wt, LYING_DT)
    run = run_sealed(wt, seal, 2, 4, clock_reference=ref)
    assert run.crash_class is None, run.log_tail
    text = run.log_path.read_text()
    dts = [int(x.split("dt ")[1].split("ms")[0]) for x in text.splitlines() if x.startswith("step ")]
    assert max(dts[len(dts) // 2:]) >= 2 * min(dts[:len(dts) // 2]), "the log lies as planned"
    ctx = ctx_for(wt, base, LYING_DT, commit=sha)
    lying = evidence.sample_of(ctx, run, 1.5)
    honest_log = wt / "honest.log"
    honest_log.write_text(text.replace("dt ", "dt 1"))   # another log, the same harness figures
    run.log_path = honest_log
    honest = evidence.sample_of(ctx, run, 1.5)
    keep = ("bpb", "seed", "load", "other_cores", "within", "over", "pace_s")
    assert {k: lying.as_dict()[k] for k in keep} == {k: honest.as_dict()[k] for k in keep}
    assert lying.within is None or "slowed down" not in lying.within
    kind, why = h._over_budget(ctx, run)
    assert kind != "cheat", why


def test_step_numbers_times_fifty_are_a_count_past_the_steps(setup, monkeypatch):
    wt, base, seal, h = setup
    monkeypatch.setenv("AUTORESEARCH_STEPS", str(STEPS))
    sha = commit(wt, LYING_NUMBERS)
    run = run_sealed(wt, seal, 2, 10, env={"AUTORESEARCH_STEPS": str(STEPS)})
    assert run.crash_class is None, run.log_tail
    kind, why = h._over_budget(ctx_for(wt, base, LYING_NUMBERS, commit=sha), run)
    assert kind == "cheat" and "past its step count" in why, why


def test_silent_steps_before_the_first_line_in_steps_mode_are_caught_by_the_clock(setup, monkeypatch):
    """The smoke preset's regime (AUTORESEARCH_STEPS): 2N steps trained before any step line, then
    an honest-looking 1..N. Only the harness's clock can see it: its startup, against the
    reference the unmodified train.py set."""
    wt, base, seal, h = setup
    monkeypatch.setenv("AUTORESEARCH_STEPS", str(STEPS))
    ref = reference_run(wt, seal, 10, env={"AUTORESEARCH_STEPS": str(STEPS)})
    sha = commit(wt, SILENT_FIRST)
    run = run_sealed(wt, seal, 2, 10, env={"AUTORESEARCH_STEPS": str(STEPS)}, clock_reference=ref)
    assert run.crash_class is None, run.log_tail
    fig = run.extra["clock"]
    assert fig["first_step"] == 1 and fig["last_step"] == STEPS     # the numbers look honest
    kind, why = h._over_budget(ctx_for(wt, base, SILENT_FIRST, commit=sha), run)
    assert kind == "cheat", (why, json.dumps(fig))
    d = h.judge(ctx_for(wt, base, SILENT_FIRST, commit=sha), run)
    assert d.status == "discard" and d.reason.startswith("integrity:"), d.reason
