"""Pure statistics for the arms: an honest headline across seeds, spreads, separability, and the
step budget a fair comparison needs. No processes, no torch: everything here works on numbers.

Headline per seed: steps an arm needed to reach random search's final quality / the steps random
needed. A seed where the arm never got there is *not reached*: its ratio is only known to exceed
the steps the arm spent / random's steps (about 1 or more when both spent the budget), so it is
counted as +inf, worse than any reached seed, when seeds are combined. Per arm we report
the median over ALL seeds (+inf when half or more never reached it), the min-max range over all
seeds (max +inf when any seed missed) and "k/n reached"; never a mean over the successes alone.

Two arms can be told apart only when their min-max ranges across seeds do not overlap (every seed
of one is better than every seed of the other). Each such verdict carries its chance level: with
n seeds per arm, non-overlap happens by chance with probability 2 / C(2n, n) (the exact two-sided
Mann-Whitney level: 0.10 for 3 seeds). Against a side that cannot vary (random's own headline is
1 in every seed by definition) only the paired sign says anything: 2 / 2^n (0.25 for 3 seeds).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from search.hyperband import Bracket, Rung, bracket_cost, hyperband_brackets

# An arm leaving more than this share of the budget unspent (the next bracket or round did not
# fit) is flagged: the arms are then not spending comparable budgets.
UNUSED_FRAC = 0.10
# Arms that run Hyperband brackets (the others: random search, and screen-K rounds).
HYPERBAND_ARMS = ("hyperband", "prior", "snip", "claude")
# Arms whose every configuration gets one full-budget run (random search's shape): random and the
# samplers that pick configurations one at a time (search/optuna_arm.py, hybrid.py).
FULL_RUN_ARMS = ("random", "optuna", "optuna-cmaes", "hybrid")


# ---- headline across seeds ----

def median(values: list[float]) -> float:
    """Median with +inf allowed (an even count averages the middle two; inf + x is inf)."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        raise ValueError("median of nothing")
    mid = n // 2
    return v[mid] if n % 2 else (v[mid - 1] + v[mid]) / 2


def _finite(x: float) -> float | None:
    """JSON-safe: +inf (not reached) becomes None."""
    return None if math.isinf(x) else round(x, 4)


def headline_stats(ratios: list[float | None]) -> dict:
    """Median, min-max and reached count over ALL seeds; None (not reached) counts as +inf.

    `median`/`min`/`max` are None when +inf (not reached); `median_reached` says whether the
    median itself was reached, so a reader can never mistake a half-failed arm for a fast one.
    """
    if not ratios:
        return {"median": None, "min": None, "max": None, "reached": "0/0", "n_reached": 0, "n": 0,
                "median_reached": False}
    vals = [math.inf if r is None else float(r) for r in ratios]
    med = median(vals)
    n_ok = sum(r is not None for r in ratios)
    return {"median": _finite(med), "min": _finite(min(vals)), "max": _finite(max(vals)),
            "reached": f"{n_ok}/{len(ratios)}", "n_reached": n_ok, "n": len(ratios),
            "median_reached": not math.isinf(med)}


def format_ratio(x: float | None, reached: bool = True) -> str:
    return "not reached" if (x is None or not reached) else f"{x:.3f}"


def format_headline(h: dict) -> str:
    """'0.612 [0.576-0.636], 3/3 reached' or 'not reached [0.576-not reached], 1/3 reached'."""
    med = f"{h['median']:.3f}" if h["median_reached"] else "not reached"
    lo = "not reached" if h["min"] is None else f"{h['min']:.3f}"
    hi = "not reached" if h["max"] is None else f"{h['max']:.3f}"
    return f"{med} [{lo}-{hi}], {h['reached']} reached"


def spread(values: list[float | None]) -> dict:
    """Mean and min-max of values present in every seed (None when a seed has no value)."""
    if not values or any(v is None for v in values):
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(sum(values) / len(values), 6), "min": round(min(values), 6),
            "max": round(max(values), 6)}


# ---- can two arms be told apart? ----

def chance_level(n: int, m: int | None = None) -> float:
    """Probability that n vs m exchangeable seeds give non-overlapping ranges (either order)."""
    m = n if m is None else m
    return min(1.0, 2 / math.comb(n + m, n)) if n and m else 1.0


def sign_level(n: int) -> float:
    """Probability that n coin-flip seeds all fall on the same side (two-sided sign test)."""
    return min(1.0, 2 / 2 ** n) if n else 1.0


def compare(a: list[float | None], b: list[float | None]) -> dict:
    """Lower is better; None counts as +inf. Separated only when the ranges do not overlap.

    Also reports the paired count (seeds where a is strictly better than b, and ties), which
    is informative but, with a handful of seeds, never enough on its own."""
    va = [math.inf if x is None else x for x in a]
    vb = [math.inf if x is None else x for x in b]
    if max(va) < min(vb):
        verdict = "a better"
    elif max(vb) < min(va):
        verdict = "b better"
    else:
        verdict = "cannot be told apart"
    paired = list(zip(va, vb))
    constant = len(set(va)) == 1 or len(set(vb)) == 1
    chance = sign_level(len(paired)) if constant else chance_level(len(va), len(vb))
    return {"verdict": verdict, "a_better_seeds": sum(x < y for x, y in paired),
            "b_better_seeds": sum(y < x for x, y in paired), "ties": sum(x == y for x, y in paired),
            "n": len(paired), "chance": round(chance, 4)}


def pairwise(per_arm: dict[str, list[float | None]]) -> list[dict]:
    """compare() for every pair of arms, in the given order."""
    arms = list(per_arm)
    out = []
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            out.append({"a": a, "b": b, **compare(per_arm[a], per_arm[b])})
    return out


def describe_pairs(pairs: list[dict]) -> tuple[list[str], list[str]]:
    """(separated pairs as 'x < y (chance 0.10)', pairs that cannot be told apart as 'x ~ y')."""
    sep, same = [], []
    for p in pairs:
        if p["verdict"] == "a better":
            sep.append(f"{p['a']} < {p['b']} (chance {p['chance']:.2f})")
        elif p["verdict"] == "b better":
            sep.append(f"{p['b']} < {p['a']} (chance {p['chance']:.2f})")
        else:
            same.append(f"{p['a']} ~ {p['b']}")
    return sep, same


# ---- a budget that lets the arms be compared ----

def planned_brackets(plan: list[Bracket], budget: int, decay: int, promotion: bool = True) -> list[Bracket]:
    """The brackets run_schedule starts under `budget` (repeat=True): its pick_bracket rule,
    without running anything. A bracket starts only if its whole cost fits next to those already
    started; when the next of the cycle does not fit, the first cheaper one (in cycle order) that
    does is run instead; when none fits, the search ends. Every started bracket completes."""
    out, committed, pos = [], 0, 0
    while True:
        for j in range(len(plan)):
            b = plan[(pos + j) % len(plan)]
            cost = bracket_cost(b, decay, promotion)
            if committed + cost <= budget:
                pos, committed = pos + j + 1, committed + cost
                out.append(b)
                break
        else:
            return out


@dataclass
class ArmPlan:
    arm: str
    brackets: int           # brackets (or screen rounds) started, all of which complete
    configs: int            # configurations drawn
    full_evals: int         # evaluations at the full max_steps
    steps: int              # steps the started brackets cost
    unused: int             # budget left over


def arm_brackets(arm: str, max_steps: int, min_steps: int, eta: int) -> list[Bracket]:
    from search.arms_screen import round_bracket, screen_k
    if arm in FULL_RUN_ARMS:
        return [Bracket(0, (Rung(1, max_steps),))]
    if screen_k(arm) is not None:
        return [round_bracket(screen_k(arm), min_steps, max_steps, eta)]
    return hyperband_brackets(max_steps, min_steps, eta)


def plan_arm(arm: str, budget: int, max_steps: int, min_steps: int, eta: int, decay: int) -> ArmPlan:
    started = planned_brackets(arm_brackets(arm, max_steps, min_steps, eta), budget, decay)
    steps = sum(bracket_cost(b, decay) for b in started)
    return ArmPlan(arm, len(started), sum(b.rungs[0].n for b in started),
                   sum(b.rungs[-1].n for b in started if b.rungs[-1].steps >= max_steps),
                   steps, budget - steps)


def hyperband_cycle(max_steps: int, min_steps: int, eta: int, decay: int) -> tuple[int, int]:
    """(steps of one pass over all Hyperband brackets, configurations of the widest bracket)."""
    plan = hyperband_brackets(max_steps, min_steps, eta)
    return sum(bracket_cost(b, decay) for b in plan), max(b.rungs[0].n for b in plan)


def fair_budget(max_steps: int, min_steps: int, eta: int, decay: int) -> int:
    """The smallest budget of whole Hyperband cycles (every bracket run, each to completion, the
    same number of times) at which random search draws at least as many configurations as the
    widest Hyperband bracket compares (so random's final quality is not one lucky draw of few)."""
    cycle, widest = hyperband_cycle(max_steps, min_steps, eta, decay)
    random_cost = max_steps + decay
    k = 1
    while (k * cycle) // random_cost < widest:
        k += 1
    return k * cycle


def fairness(arms: list[str], budget: int, max_steps: int, min_steps: int, eta: int,
             decay: int) -> tuple[list[ArmPlan], list[str]]:
    """Per-arm plans under `budget`, and a warning for each reason the comparison is unfair."""
    plans = [plan_arm(a, budget, max_steps, min_steps, eta, decay) for a in arms]
    warnings = []
    cycle, widest = hyperband_cycle(max_steps, min_steps, eta, decay)
    suggest = fair_budget(max_steps, min_steps, eta, decay)
    if any(a in HYPERBAND_ARMS for a in arms):
        every = [b.s for b in hyperband_brackets(max_steps, min_steps, eta)]
        runs = [b.s for b in planned_brackets(arm_brackets("hyperband", max_steps, min_steps, eta),
                                              budget, decay)]
        counts = {s: runs.count(s) for s in every}
        missing = [s for s in every if counts[s] == 0]
        if missing:
            warnings.append(f"budget {budget} is too small for one Hyperband cycle ({cycle} steps): "
                            f"bracket(s) s={','.join(map(str, missing))} never run (use --budget-steps {suggest})")
        elif len(set(counts.values())) > 1:
            warnings.append(f"budget {budget} is not a whole number of Hyperband cycles ({cycle} steps): "
                            f"brackets run unevenly (s: runs {counts}), biasing the bracket mix "
                            f"(use --budget-steps {suggest})")
    if "random" in arms:
        rnd = next(p for p in plans if p.arm == "random")
        if rnd.configs < widest:
            warnings.append(f"random search draws only {rnd.configs} configurations, fewer than the "
                            f"{widest} the widest Hyperband bracket compares (use --budget-steps {suggest})")
    for p in plans:
        if p.unused > UNUSED_FRAC * budget:
            warnings.append(f"{p.arm} leaves {p.unused} of {budget} steps unused (its next bracket "
                            f"does not fit): the arms do not spend comparable budgets")
    return plans, warnings


def completed_brackets(records: list[dict], max_steps: int) -> tuple[int, int]:
    """(brackets started, brackets that reached a full max_steps evaluation) in an arm's records.
    A bracket whose candidates all crashed stops early and shows up here."""
    started = {r["bracket"] for r in records}
    done = {r["bracket"] for r in records if r["steps"] >= max_steps and r.get("val_bpb") is not None}
    return len(started), len(done)


def plans_json(plans: list[ArmPlan]) -> dict[str, dict]:
    return {p.arm: asdict(p) for p in plans}


def best_at(traj: list[tuple[int, float]], steps: float) -> float | None:
    """Best quality reached with at most `steps` steps spent (None before the first result)."""
    val = None
    for s, v in traj:
        if s > steps:
            break
        val = v
    return val


def seed_ratio(report: dict, seed, arm: str) -> str:
    """One seed's headline: '0.576', or 'not reached (> 0.95)' with the bound it implies."""
    ps = report["per_seed"][seed]
    v = ps["headline"].get(arm)
    if v is not None:
        return f"{v:.3f}"
    bound = (ps.get("not_reached_above") or {}).get(arm)
    return "not reached" + (f" (> {bound:.2f})" if bound else "")
