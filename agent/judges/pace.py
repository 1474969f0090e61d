"""Was a run disturbed by the machine? Its pace, against itself and against its commit's other runs.

On a wall-clock budget a run that another process slowed down trains fewer steps and comes out
worse: its val_bpb measures the machine, not the commit. Three checks, from what every run
already prints (`step N | ... | dt 412ms | ...` lines; the header's flops/token and tokens/step)
and the harness clock's pace (seconds per step between the first and last step line):

- within the run: the median step time of its slowest quarter against its fastest quarter (the
  warm-up steps left out): a competing process that starts or stops mid-run shows here;
- against the same commit's other runs: slower than the fastest of them by PACE_SLOW;
- a commit's first run against the incumbent's runs, in FLOPs per second (so a bigger model is not
  "slow"): slower or faster by PACE_SLOW_OTHER makes it suspect, and the judge runs it again to
  tell the machine from the code (a rerun at the same pace is the code's own speed).

Where the machine's load (measured by the harness, agent/judges/pairing.py) differs between a
comparison's runs in either direction, the judge pairs the runs in time instead.

A run judged disturbed is neither a noise sample nor evidence for a decision; the judge reruns it.
In steps mode (AUTORESEARCH_STEPS) the pace does not change what a run learns: no check applies.
"""
from __future__ import annotations

import re
import statistics

# Same commit, same step cost: a run this much slower than the commit's fastest run trained
# 1/1.3 = 77% of the steps, several sigma on a wall-clock budget; idle jitter is a few percent.
PACE_SLOW = 1.3
# A new commit against the incumbent, in FLOPs/s: code changes move the FLOP rate legitimately
# (a smaller model runs at a lower rate on CPU), so only a factor a competing process gives (one
# busy process on 2 cores: ~2.7x) makes a first run suspect.
PACE_SLOW_OTHER = 2.0
# Within a run: its slowest quarter's median step time against its fastest quarter's.
WITHIN_SLOW = 1.5
# Steps at the start left out of the within-run check (allocator and cache warm-up).
WARMUP_STEPS = 3
# Fewer timed steps than this: the within-run check says nothing.
MIN_STEPS = 8

DT_RE = re.compile(r"^step \d+ \|.*?\bdt ([0-9.]+)ms", re.M)
FLOPS_RE = re.compile(r"flops/token ([0-9.]+e[+-]?\d+|[0-9.]+)")
TOKENS_RE = re.compile(r"= ([0-9,]+) tokens/step")


def step_times(log_text: str) -> list[float]:
    """Seconds per step, in order, from the step lines."""
    return [float(x) / 1000.0 for x in DT_RE.findall(log_text or "")]


def flops_per_step(log_text: str) -> float | None:
    f, t = FLOPS_RE.search(log_text or ""), TOKENS_RE.search(log_text or "")
    if not f or not t:
        return None
    try:
        return float(f.group(1)) * float(t.group(1).replace(",", ""))
    except ValueError:
        return None


def within_run(dts: list[float]) -> str | None:
    """Why the run's own pace says it was disturbed, or None."""
    timed = dts[WARMUP_STEPS:]
    if len(timed) < MIN_STEPS:
        return None
    q = len(timed) // 4
    quarters = [timed[i * q:(i + 1) * q] for i in range(4)]
    medians = [statistics.median(x) for x in quarters if x]
    fast, slow = min(medians), max(medians)
    if fast > 0 and slow > WITHIN_SLOW * fast:
        return (f"its steps slowed down mid-run: the slowest quarter's median step {slow * 1000:.0f} ms "
                f"against {fast * 1000:.0f} ms in its fastest ({slow / fast:.1f}x > {WITHIN_SLOW:g}x)")
    return None


def against_commit(pace: float | None, paces: list[float]) -> str | None:
    """A run of pace `pace` (s/step) against the same commit's runs' paces."""
    others = [p for p in paces if p and p > 0]
    if not pace or not others:
        return None
    fastest = min(others + [pace])
    if pace > PACE_SLOW * fastest:
        return (f"{pace * 1000:.0f} ms/step against {fastest * 1000:.0f} ms in the same commit's fastest run "
                f"({pace / fastest:.1f}x > {PACE_SLOW:g}x)")
    return None


def against_incumbent(rate: float | None, incumbent_rates: list[float]) -> str | None:
    """A new commit's FLOPs/s against the incumbent's runs, in either direction: slower than their
    best, or faster than their slowest, by PACE_SLOW_OTHER (a first run in a quiet spell against an
    incumbent measured under load measures the machine as much as one under load against a quiet
    incumbent): a reason to run it again, or None."""
    rates = [r for r in incumbent_rates if r and r > 0]
    if not rate or not rates:
        return None
    best, slowest = max(rates), min(rates)
    if rate * PACE_SLOW_OTHER < best:
        return (f"{rate / 1e9:.3g} GFLOP/s against {best / 1e9:.3g} in the incumbent's runs "
                f"({best / rate:.1f}x slower > {PACE_SLOW_OTHER:g}x)")
    if rate > PACE_SLOW_OTHER * slowest:
        return (f"{rate / 1e9:.3g} GFLOP/s against {slowest / 1e9:.3g} in the incumbent's runs "
                f"({rate / slowest:.1f}x faster > {PACE_SLOW_OTHER:g}x)")
    return None
