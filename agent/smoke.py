"""The smoke preset (--smoke) and the startup estimate of a tag's first rows.

`--smoke` is the shortest loop that does everything a night does, sized for a laptop: the tiny
profile (a 1M-parameter model on a 64-token context), a fixed number of optimizer steps instead
of a wall-clock budget (so a busy machine makes it slower, never different), two baseline runs,
the offline proposer, one torch thread per run, and three experiments in all (the baseline and two
judged ones). Every value it sets is a default: an option (or AUTORESEARCH_STEPS,
AUTORESEARCH_THREADS) given explicitly wins.

The estimate said at startup counts what the first rows really cost: each run's training, its
startup (imports, model build) and its trusted evaluation, times the runs the judge needs (the
baseline repeats, and for each experiment one run when it is discarded at once, up to
stats.MAX_RUNS plus the incumbent's reruns when it looks like a gain).
"""
from __future__ import annotations

import os

from agent.console import clock
from agent.judges import stats

# The profile the preset runs (prepare.py PROFILES): everything in seconds on a CPU.
SMOKE_PROFILE = "tiny"
# Optimizer steps per run: ~6 s of training on 2 idle cores (0.2 s a step, measured), enough
# for the knobs the offline search moves to show in val_bpb (~2.7 bpb after 30 steps).
SMOKE_STEPS = 30
# Torch threads per run. One: on a busy 2-core machine two threads wait on each other at every
# operation (measured under load 10: 30 tiny steps took 277 s with 2 threads, 30 s with 1), and the
# tiny model's matrices are too small to gain much from a second core on an idle one.
SMOKE_THREADS = 1
# The preset's option values; each one only where the option was not given.
SMOKE_DEFAULTS = {"budget": 10.0,            # nominal: steps mode ends a run, not the clock
                  "max_experiments": 3,      # the baseline and two judged experiments
                  "proposer": "offline",     # no key, no network
                  "baseline_repeats": 2}     # the fewest that measure a noise at all
# Seconds of one smoke run besides its training, on 2 idle cores: the sandboxed train.py's
# imports and model build (~4 s) and the trusted evaluation's own process (~6 s), measured.
SMOKE_OVERHEAD_S = 10.0
# Seconds per training step of the tiny profile on one thread of an idle-ish core (measured: 50
# steps in 10.5 s on 2 threads at load 2; one thread is somewhat slower when the machine is idle).
SMOKE_STEP_S = 0.3
# A run on a time budget: its wall time per budget second (startup and the harness's slack).
RUN_WALL_PER_BUDGET = 1.1
# The trusted evaluation, in tokens per second on 2 busy cores (prepare.py's cpu profile note:
# ~7.3K tok/s) plus its own process start; a GPU evaluates far faster (then this overestimates).
EVAL_TOKENS_PER_S = 7300.0
EVAL_START_S = 8.0
# Tokens of the trusted evaluation at the reference budget; shorter budgets evaluate on a share of
# them (eval_tokens_for), never fewer than EVAL_TOKENS_MIN: a 30 s run is not measured for 3 minutes.
REFERENCE_BUDGET = 300.0
EVAL_TOKENS_MIN = 8192


def apply_environment(smoke: bool) -> None:
    """The preset's environment, in this process before anything reads it (prepare.py reads the
    profile at import; the runs inherit the steps: AUTORESEARCH_STEPS, if set, is kept)."""
    if smoke:
        os.environ["AUTORESEARCH_PROFILE"] = SMOKE_PROFILE
        os.environ.setdefault("AUTORESEARCH_STEPS", str(SMOKE_STEPS))   # a step count already set wins
        os.environ.setdefault("AUTORESEARCH_THREADS", str(SMOKE_THREADS))


def eval_tokens_for(profile_tokens: int | None, budget: float) -> int | None:
    """Tokens of a tag's trusted evaluation: the profile's EVAL_TOKENS at the reference budget,
    a proportional share below it (at least EVAL_TOKENS_MIN); None: the profile's own."""
    if not profile_tokens or budget >= REFERENCE_BUDGET:
        return None
    share = int(profile_tokens * budget / REFERENCE_BUDGET)
    tokens = max(EVAL_TOKENS_MIN, share)
    return None if tokens >= profile_tokens else tokens


def run_seconds(budget: float, eval_tokens: int | None, steps: int | None = None) -> float:
    """The wall time of one run with its evaluation, as estimated before any was measured."""
    if steps:
        return steps * SMOKE_STEP_S + SMOKE_OVERHEAD_S
    return budget * RUN_WALL_PER_BUDGET + EVAL_START_S + (eval_tokens or 0) / EVAL_TOKENS_PER_S


def runs_needed(baseline_repeats: int, experiments: int | None) -> tuple[int, int]:
    """(fewest, most) runs for the baseline and `experiments` judged ones: every experiment
    discarded after its first run, or every one run MAX_RUNS times with the incumbent rerun to
    INCUMBENT_RUNS once."""
    n = max(0, (experiments or 0))
    low = baseline_repeats + n
    high = baseline_repeats + n * stats.MAX_RUNS + (max(0, stats.INCUMBENT_RUNS - baseline_repeats) if n else 0)
    return low, high


def eta_note(*, baseline_repeats: int, max_experiments: int | None, budget: float,
             eval_tokens: int | None, steps: int | None, done: int = 0) -> str:
    """The startup line: what the first row costs, and (with --max-experiments) the whole session.
    `done`: experiments the tag already has (an imported tag's rows): --max-experiments counts them."""
    per = run_seconds(budget, eval_tokens, steps)
    what = f"{steps} steps" if steps else f"{budget:g}s of training"
    first = (f"estimate: one run is about {clock(per)} ({what}, startup and the trusted evaluation); the "
             f"first row of results.tsv needs {baseline_repeats} baseline run(s), about {clock(per * baseline_repeats)}")
    if max_experiments is None:
        return first
    low, high = runs_needed(baseline_repeats, max(0, max_experiments - done - 1))
    had = f" ({done} already recorded)" if done else ""
    return (f"{first}; --max-experiments {max_experiments}{had}: {low} to {high} runs as the judge asks for "
            f"reruns, about {clock(per * low)} to {clock(per * high)} on an idle machine")


def eta_line(*, n: int, max_experiments: int | None, first_n: int, elapsed_s: float) -> str | None:
    """Before experiment `n` with --max-experiments: how many are left and, once this session has
    decided one, about how long they take at its pace (None without --max-experiments)."""
    if max_experiments is None or n > max_experiments:
        return None
    left = max_experiments - n + 1
    done = n - first_n
    head = f"eta: experiment {n} of {max_experiments} next, {left} to go"
    if done < 1 or elapsed_s <= 0:
        return head
    return f"{head}; about {clock(left * elapsed_s / done)} at this session's pace ({done} decided in {clock(elapsed_s)})"
