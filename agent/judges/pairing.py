"""Measure the edit, not the machine: runs paired in time when the machine's load varies.

On a wall-clock budget a run's val_bpb moves with the load it ran under (fewer steps). The
harness measures that load for every run (harness/procs.py LoadMeter, the clock's `load_train`), so the
judge can tell when its runs were made on different machines in effect:

- **Comparable** runs: load factors within LOAD_SAME of each other, in either direction. A
  candidate measured in a quiet spell is no more comparable with an incumbent measured under load
  than the other way round.
- While every run of a comparison is comparable with the incumbent's, the unpaired sequential
  test of agent/judges/stats.py decides. Once they are not, the decision goes **paired**: the
  candidate's runs and the incumbent's runs for this decision are interleaved in time, C I I C
  C I ... (next_side), so one load hits both sides of a pair and a trend in the load hits each
  side first equally often. Pairs are adjacent runs of the two sides (pairs_of); a pair whose two
  runs' loads differ beyond PAIR_SAME is not comparable and left out.
- The decision then rests on the paired differences d = incumbent - candidate (compare): the
  machine's effect, shared by the pair, cancels. Their variance is pooled with the tag's own
  noise (a difference of two runs has variance 2 sigma^2): var_d = (ss_d + df_pool 2 sigma^2) /
  (n - 1 + df_pool), df = n - 1 + df_pool. Pairs that disagree more than the noise allows widen
  it; n pairs alone would give a t-test with n - 1 df, which at 2 pairs keeps nothing.

Everything here works on plain values (Run) so the rule can be tested without a loop.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from agent.judges import stats

# Runs whose load factors are within this ratio ran on the same machine in effect: one busy
# process more on 2 cores is ~1.5-2x; the meter's own jitter on an idle box a few percent.
LOAD_SAME = 1.3
# A pair whose two runs' loads differ more than this is not comparable: the load changed between
# them (the pair's difference would measure that change). As strict as LOAD_SAME: two runs at
# loads x2.95 and x3.99 are no pair.
PAIR_SAME = LOAD_SAME
# Runs whose others' busy cores differ by more than this did not share a machine either, whatever
# their load factors say: a single-threaded run is not time-sliced while a core stays free for it,
# but a neighbour on the other core still slows it (shared caches, memory bandwidth), and its
# factor reads 1.0 both ways. The meter's own jitter on an idle box is a few hundredths of a core.
OTHER_SAME = 0.5
# Pairs at most for one decision (as the unpaired test's runs): then undecided, contested.
MAX_PAIRS = stats.MAX_RUNS
# A paired keep needs this P(better): the paired rule looks more often before it gives up (see
# FUTILITY_PAIRS), and at stats.P_KEEP it kept 1.8% of nulls in scripts/judge_load_sim.py.
P_KEEP = 0.995
# One pair discards only a candidate this many se worse than its partner: a pair's difference
# has twice a run's variance, so stats' first-run rule (t < 0) would drop a 3-sigma gain 1.7% of
# the time on one pair; at -1 it is 0.1%, and a null goes on to a second pair 84% of the time.
FIRST_PAIR_DISCARD_T = -1.0
# The futility discard (stats.FUTILITY_T: the gain faded) waits for this many pairs unless the
# candidate is behind (t < 0): two pairs have the se of one unpaired run, and a 3-sigma gain fell
# under t 1 on them ~2% of the time (scripts/judge_load_sim.py); on three, ~0.4%.
FUTILITY_PAIRS = 3


@dataclass(frozen=True)
class Run:
    side: str            # "candidate" | "incumbent"
    value: float
    at: float            # when it ended (ordering in time)
    load: float | None   # the harness's load factor over its training (None: not measured)
    other: float | None = None   # the others' busy cores over its training (None: not measured)


def ratio(a: float | None, b: float | None) -> float:
    """How far apart two loads are, either direction (1.0 when either is unknown)."""
    if not a or not b:
        return 1.0
    return max(a, b) / min(a, b)


def comparable(a: float | None, b: float | None, limit: float = LOAD_SAME,
               a_other: float | None = None, b_other: float | None = None) -> str | None:
    """Why two runs' loads are not comparable (their factors `a`, `b`; the others' busy cores
    `a_other`, `b_other` where measured), or None."""
    r = ratio(a, b)
    if r > limit:
        faster = "lighter" if (a or 0) < (b or 0) else "heavier"
        return f"its load x{a:.2f} is {faster} than its comparison's x{b:.2f} ({r:.2f}x apart > {limit:g}x)"
    if a_other is not None and b_other is not None and abs(a_other - b_other) > OTHER_SAME:
        return (f"the rest of the machine kept {a_other:.2f} cores busy during it against {b_other:.2f} during "
                f"its comparison (> {OTHER_SAME:g} apart)")
    return None


def varies(loads: list[float | None], limit: float = LOAD_SAME, others: list[float | None] = ()) -> bool:
    """Whether the loads of a comparison's runs are not all comparable with each other."""
    known = [x for x in loads if x]
    if known and max(known) / min(known) > limit:
        return True
    busy = [x for x in others if x is not None]
    return bool(busy) and max(busy) - min(busy) > OTHER_SAME


def pairs_of(runs: list[Run]) -> tuple[list[tuple[Run, Run]], list[tuple[Run, Run, str]]]:
    """(pairs, pairs left out with why): adjacent runs of the two sides in time order, each run
    in one pair at most; a pair whose loads differ beyond PAIR_SAME is left out."""
    seq = sorted(runs, key=lambda r: r.at)
    out, dropped, i = [], [], 0
    while i + 1 < len(seq):
        a, b = seq[i], seq[i + 1]
        if a.side == b.side:
            i += 1
            continue
        c, inc = (a, b) if a.side == "candidate" else (b, a)
        why = comparable(c.load, inc.load, PAIR_SAME, c.other, inc.other)
        (dropped.append((c, inc, why)) if why else out.append((c, inc)))
        i += 2
    return out, dropped


def next_side(runs: list[Run]) -> str:
    """Which side runs next so the pairs alternate C I, I C, C I ...: the side the last run did not
    have while it waits for its partner, the last run's side once it has one."""
    seq = sorted(runs, key=lambda r: r.at)
    if not seq:
        return "candidate"
    paired, dropped = pairs_of(seq)
    in_pair = {id(x) for p in paired for x in p} | {id(x) for c, i, _ in dropped for x in (c, i)}
    last = seq[-1]
    if id(last) in in_pair:
        return last.side
    return "incumbent" if last.side == "candidate" else "candidate"


def compare(pairs: list[tuple[Run, Run]], noise: stats.Noise) -> stats.Comparison:
    """The paired comparison: gain = mean of (incumbent - candidate) over the pairs, its variance
    pooled with the tag's noise (2 sigma^2 per difference); a stats.Comparison that stats.call
    decides as it decides an unpaired one (n = the pairs)."""
    d = [i.value - c.value for c, i in pairs]
    cand, inc = [c.value for c, _ in pairs], [i.value for _, i in pairs]
    gain = statistics.fmean(d) if d else 0.0
    cmp = stats.Comparison(inc, cand, gain, noise.sigma, noise.df)
    n = len(d)
    ss = sum((x - gain) ** 2 for x in d)
    df_pool = noise.df if noise.sigma is not None else 0
    df = (n - 1) + df_pool
    if n == 0 or df < 1:
        return cmp
    var = (ss + df_pool * 2.0 * (noise.sigma or 0.0) ** 2) / df
    if var <= 0:
        var = 2.0 * stats.floor_for(cand + inc) ** 2
    cmp.se = math.sqrt(var / n)
    cmp.df = df
    cmp.t = gain / cmp.se
    cmp.p_better = stats.t_cdf(cmp.t, df)
    cmp.margin = stats.t_ppf(P_KEEP, df) * cmp.se
    return cmp


# Runs of one paired decision at most, both sides, disturbed ones included (then undecided,
# contested): MAX_PAIRS pairs and three runs that could not be paired or were no evidence.
PAIRED_CAP = 2 * MAX_PAIRS + 3


@dataclass
class Plan:
    """What the paired rule says for one decision: the call, why, and which side runs next."""
    said: str                                 # keep | discard | more | undecided
    why: str
    comparison: stats.Comparison | None
    next_side: str | None = None
    pairs: int = 0
    dropped: list | None = None

    def as_dict(self) -> dict:
        return {"call": self.said, "why": self.why, "pairs": self.pairs, "next": self.next_side,
                "dropped": self.dropped or []}


def _usable(s) -> bool:
    """A run paired evidence may use: not over its clock limit, not disturbed while it trained."""
    return s.over is None and s.within is None


def plan(candidate: list, incumbent: list, n: int, noise: stats.Noise, attempts: int = 0) -> Plan | None:
    """The paired rule for experiment `n` (evidence.Sample lists: the candidate's and the
    incumbent's), or None where the unpaired rule holds: every used run's load comparable with
    the others', or a first run that looks worse without running heavier than the incumbent's
    runs (its one-run discard is fair). `attempts`: runs of this decision no sample records."""
    used_c = [s for s in candidate if s.used]
    used_i = [s for s in incumbent if s.used]
    loads = [s.speed.load for s in used_c + used_i]
    if not any(loads) or not varies(loads, others=[s.speed.other for s in used_c + used_i]):
        return None
    inc_loads = [s.speed.load for s in used_i if s.speed.load]
    inc_mean = statistics.fmean(s.bpb for s in used_i) if used_i else None
    inc_others = [s.speed.other for s in used_i if s.speed.other is not None]
    if len(candidate) == 1 and used_c and inc_mean is not None and used_c[0].bpb >= inc_mean and inc_loads \
            and (used_c[0].speed.load or 0) <= LOAD_SAME * min(inc_loads) \
            and (used_c[0].speed.other or 0.0) <= min(inc_others, default=0.0) + OTHER_SAME:
        return None   # worse, and no heavier than the lightest of the bar's runs: the load did not do it
    runs = [Run("candidate", s.bpb, s.at or 0.0, s.speed.load, s.speed.other) for s in candidate if _usable(s)]
    runs += [Run("incumbent", s.bpb, s.at or 0.0, s.speed.load, s.speed.other)
             for s in incumbent if s.n == n and _usable(s)]
    pairs, dropped = pairs_of(runs)
    left = [{"candidate": c.value, "incumbent": i.value, "why": w} for c, i, w in dropped]
    spent = len(candidate) + len([s for s in incumbent if s.n == n]) + attempts
    cmp = compare(pairs, noise) if pairs else None
    if cmp is not None and cmp.t is not None:
        said, why = stats.call(cmp, runs=len(pairs))
        if said == "discard" and len(pairs) == 1 and cmp.t > FIRST_PAIR_DISCARD_T:
            said, why = "more", f"one pair, t {cmp.t:.2f}: not clearly worse yet, pairing again"
        elif said == "discard" and 1 < len(pairs) < FUTILITY_PAIRS and cmp.t >= 0:
            said, why = "more", f"{len(pairs)} pairs, t {cmp.t:.2f}: pairing again before calling it faded"
        why = f"paired over {len(pairs)} pair(s) (the machine's load varied): {why}"
    else:
        said, why = "more", "the machine's load varied: pairing the candidate's runs with the incumbent's"
    if said == "more" and spent >= PAIRED_CAP:
        said, why = "undecided", f"out of reruns after {spent} runs: {why}"
    nxt = next_side(runs) if said == "more" else None
    return Plan(said, why, cmp, nxt, len(pairs), left)
