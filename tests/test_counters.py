"""Counters the console, state.json and the judge print never pass their totals: a baseline whose
runs are disturbed and replaced, and an experiment run past the judge's plan, say which run it is
and how many were planned, never "run 7 of 7" with more to come or "baseline run 6/5"."""
import re
from types import SimpleNamespace

from agent.console import run_text
from agent.judges import advance, stats
from agent.judges.hierarchy import JudgeHierarchy
from agent.status import run_label
from tests.test_judge_stats import BASE, _log, ctx, decide, run

# "k/N" or "k of N" in a message: k may never exceed N.
COUNTER = re.compile(r"\b(\d+)(?:/| of )(\d+)\b")


def _never_past(text: str) -> None:
    for k, total in COUNTER.findall(text):
        assert int(k) <= int(total), f"{k} past {total}: {text}"


def test_a_run_past_the_plan_has_no_total_to_pass():
    disturbed = SimpleNamespace(reason="run 3 was disturbed (its pace), not counted", run_next=None)
    for parent, planned in ((None, 4), ("p" * 40, stats.MAX_RUNS)):
        a = SimpleNamespace(parent=parent, n=3)
        texts = []
        for done in range(planned + 4):
            k, of, why = run_label(4, a, done, disturbed if done else None)
            texts.append(f"run {run_text({'k': k, 'of': of, 'why': why})}")
            assert (of == planned) if k <= planned else (of is None and f"{planned} planned" in why)
        for t in texts:
            _never_past(t)
        assert texts[planned - 1] == f"run {planned} of {planned} (replacing a run the machine disturbed)"
        assert texts[planned] == f"run {planned + 1} (replacing a run the machine disturbed; {planned} planned)"


def test_a_cheaper_equal_result_s_second_run_says_what_it_tests():
    """A one-run candidate not below the bar but cheaper or shorter goes to the strict judge to
    test an equal result: its second run says so, not "confirming a possible gain"."""
    call = advance.advance(1.0005, advance.Estimate(1.0, 0.002), 0.01, [], net_lines=-3, equal_result_ok=True,
                           big_diff_lines=40)
    assert call.said == "strict", call.why
    a = SimpleNamespace(parent="p" * 40, n=2)
    assert run_label(3, a, 1, SimpleNamespace(reason=call.why, run_next=None))[2] == "testing an equal result"
    too_good = SimpleNamespace(reason="a first run too good to advance on one run: confirming it first", run_next=None)
    assert run_label(3, a, 1, too_good)[2] == "confirming a possible gain"


def test_a_baseline_with_disturbed_runs_counts_only_the_runs_that_count(tmp_path):
    """Three repeats asked; runs 2 and 4 are disturbed by another process (the harness meter) and replaced. Every interim
    reason counts the runs that count (1/3, 2/3), says the disturbed ones apart, and the fifth run
    ends the baseline."""
    h = JudgeHierarchy(baseline_repeats=3)
    quiet, busy = 1.0, 2.4     # the harness meter's load spread within the run (a process started halfway)
    reasons = []
    for i, (spread, v) in enumerate([(quiet, 1.396), (busy, 1.527), (quiet, 1.399), (busy, 1.530), (quiet, 1.393)], 1):
        d = decide(h, ctx(tmp_path, 1, BASE, None), v, run(_log(tmp_path, f"{i}.log", [0.3] * 20), spread=spread))
        reasons.append(d.reason)
        if i < 5:
            assert d.is_again, d.reason
    assert not d.is_again and d.status == "keep"
    for r in reasons:
        _never_past(r)
    assert reasons[0].startswith("baseline run 1/3: 1.396000")
    assert reasons[1].startswith("baseline run 2 was disturbed") and "1/3 counted so far" in reasons[1]
    assert reasons[2].startswith("baseline run 2/3: 1.399000 (1 disturbed run(s) left out)")
    assert reasons[3].startswith("baseline run 4 was disturbed") and "2/3 counted so far" in reasons[3]
