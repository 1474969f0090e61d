"""The startup estimate counts what --max-experiments still allows: an imported tag (rows from
another run, its own baseline still to measure) with 5 experiments and --max-experiments 6 has
one experiment left, the baseline, not six (the estimate said 7 to 30 runs)."""
from agent import smoke

ARGS = dict(baseline_repeats=2, budget=10.0, eval_tokens=None, steps=30)


def runs(note: str) -> tuple[int, int]:
    part = note.split("--max-experiments", 1)[1].split(":", 1)[1]
    low, high = part.strip().split(" runs", 1)[0].split(" to ")
    return int(low), int(high)


def test_a_new_tag_counts_the_baseline_and_the_judged_experiments():
    assert runs(smoke.eta_note(max_experiments=3, **ARGS)) == smoke.runs_needed(2, 2)


def test_an_imported_tag_counts_only_what_is_left():
    note = smoke.eta_note(max_experiments=6, done=5, **ARGS)
    assert runs(note) == (2, 2)               # the baseline's two runs, nothing judged after it
    assert "(5 already recorded)" in note
    assert runs(smoke.eta_note(max_experiments=8, done=5, **ARGS)) == smoke.runs_needed(2, 2)


def test_nothing_left_is_no_negative_count():
    assert runs(smoke.eta_note(max_experiments=3, done=7, **ARGS)) == (2, 2)
