"""Steps mode (AUTORESEARCH_STEPS: the smoke preset, sweeps) is not timed, but its step count is
checked: a train.py that keeps the hook's name (the guard counts it) but trains more steps than
asked, or hides its steps, gets no keep. It used to pass unchecked: more steps, a lower val_bpb."""
import subprocess
import sys
from pathlib import Path

from agent.judges import evidence
from harness.clock import LogClock
from tests.loop_fixtures import fake_run

REPO = Path(__file__).resolve().parent.parent


def clock_of(lines):
    c = LogClock(started=0.0)
    for i, line in enumerate(lines):
        c.feed(line, now=1.0 + i)
    return c.figures(ended=2.0 + len(lines)).as_dict()


def steps(n, start=1):
    return [f"step {k:05d} | loss 3.0 | tok/s 100 | trained {k}s" for k in range(start, n + 1)]


def test_more_steps_than_asked_is_an_integrity_failure(monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_STEPS", "30")
    run = fake_run(extra={"clock": clock_of(steps(90)), "sealed": True, "steps_mode": True})
    kind, why = evidence.over_budget(run, 10.0)
    assert kind == "cheat" and "step 90" in why


def test_fewer_lines_numbered_past_the_count_are_caught_too(monkeypatch):
    """Printing only every third step line still shows the last step's number."""
    monkeypatch.setenv("AUTORESEARCH_STEPS", "30")
    run = fake_run(extra={"clock": clock_of(steps(90)[2::3]), "sealed": True, "steps_mode": True})
    assert evidence.over_budget(run, 10.0)[0] == "cheat"


def test_a_sealed_run_without_step_lines_cannot_be_counted(monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_STEPS", "30")
    run = fake_run(extra={"clock": clock_of([]), "sealed": True, "steps_mode": True})
    kind, why = evidence.over_budget(run, 10.0)
    assert kind == "cheat" and "no step lines" in why


def test_honest_counts_pass(monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_STEPS", "30")
    for lines, resumed in ((steps(30), False), (steps(30, start=21), True)):   # fresh; resumed from step 20
        run = fake_run(extra={"clock": clock_of(lines), "sealed": True, "steps_mode": True, "resumed": resumed})
        assert evidence.over_budget(run, 10.0) == (None, "")


def test_steps_before_the_first_line_are_an_integrity_failure(monkeypatch):
    """A run not resumed from a state whose first step line is not step 1 trained before it said so."""
    monkeypatch.setenv("AUTORESEARCH_STEPS", "30")
    run = fake_run(extra={"clock": clock_of(steps(30, start=21)), "sealed": True, "steps_mode": True})
    kind, why = evidence.over_budget(run, 10.0)
    assert kind == "cheat" and "step 21" in why


def test_the_real_train_py_numbers_its_steps_up_to_the_count(tiny_cache):
    """The claim the check rests on, on the real train.py: its last step line is the count."""
    env = dict(tiny_cache, AUTORESEARCH_STEPS="3", AUTORESEARCH_THREADS="1")
    env.pop("AUTORESEARCH_SEALED", None)
    out = subprocess.run([sys.executable, "train.py"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    c = LogClock(started=0.0)
    for i, line in enumerate(out.stdout.splitlines()):
        c.feed(line, now=float(i))
    fig = c.figures()
    assert fig.steps.last == 3 and fig.steps.seen == 3
