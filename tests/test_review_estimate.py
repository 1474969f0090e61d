"""The startup estimate counts what --max-experiments still allows: an imported tag (rows from
another run, its own baseline still to measure) with 5 experiments and --max-experiments 6 has
one experiment left, the baseline, not six (the estimate said 7 to 30 runs)."""
from agent import cli

ARGS = dict(baseline_repeats=2, budget=10.0, eval_tokens=None, steps=30)


def runs(note: str) -> tuple[int, int]:
    part = note.split("--max-experiments", 1)[1].split(":", 1)[1]
    low, high = part.strip().split(" runs", 1)[0].split(" to ")
    return int(low), int(high)


def test_a_new_tag_counts_the_baseline_and_the_judged_experiments():
    assert runs(cli.eta_note(max_experiments=3, **ARGS)) == cli.runs_needed(2, 2)


def test_an_imported_tag_counts_only_what_is_left():
    note = cli.eta_note(max_experiments=6, done=5, **ARGS)
    assert runs(note) == (2, 2)               # the baseline's two runs, nothing judged after it
    assert "(5 already recorded)" in note
    assert runs(cli.eta_note(max_experiments=8, done=5, **ARGS)) == cli.runs_needed(2, 2)


def test_nothing_left_is_no_negative_count():
    assert runs(cli.eta_note(max_experiments=3, done=7, **ARGS)) == (2, 2)


def test_the_eta_line_counts_what_is_left_at_the_session_pace():
    assert cli.eta_line(n=2, max_experiments=None, first_n=1, elapsed_s=60.0) is None
    assert cli.eta_line(n=4, max_experiments=3, first_n=1, elapsed_s=60.0) is None      # the loop stops
    first = cli.eta_line(n=1, max_experiments=3, first_n=1, elapsed_s=0.0)
    assert first.startswith("eta: experiment 1 of 3 next, 3 to go") and "pace" not in first
    line = cli.eta_line(n=3, max_experiments=4, first_n=1, elapsed_s=120.0)   # 2 decided in 2m: 1m each
    # before any experiment after the baseline: one measured run each, never the baseline's repeats as a pace
    runs_only = cli.eta_line(n=2, max_experiments=3, first_n=2, elapsed_s=1100.0, run_s=360.0)
    assert "about 12m00s if each is decided on one run (6m00s a run here)" in runs_only and "pace" not in runs_only
    assert "experiment 3 of 4 next, 2 to go" in line and "about 2m00s" in line and "2 decided in 2m00s" in line
