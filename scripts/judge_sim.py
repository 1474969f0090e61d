"""The judge's rule on simulated runs: how often it keeps a null, how often a gain, at what cost.

    uv run scripts/judge_sim.py [--benches 300] [--nights 300] [--seed 1]

Pure Python, seconds. Runs are Normal(true value, 1): gains are in sigma. Two simulations:

- the bench (scripts/bench_judge.py's plan): 5 baseline runs, 20 null edits of the incumbent,
  then gains of 1, 2, 3, 5 sigma (3, 3, 5, 5 of them) each judged against the baseline. The
  rule is agent/judges/stats.py's own code (pooled_noise, compare, call), with the loop's order
  of runs. Prints the keep rates, how often a bench meets the goal (at most 1 null kept in 20, at
  least 9 of 10 gains >= 3 sigma), and the runs spent.
- a night of 100 runs: proposals whose true effects are 60% harmful (1-6 sigma worse), 25% null,
  15% real gains (1-6 sigma): the new rule against the old one (2 baseline runs, keep when the gain
  beats 2 x their spread, one confirming run inside that band, the best = the kept figure).

`--variants --night-runs 30` (slow: minutes per line): nights of that many runs for the reference
protocol (karpathy/autoresearch: one run per experiment, keep if lower than the best figure so
far) and for variants of this rule (a first run that must be further below the bar before it is
confirmed, fewer baseline runs, no incumbent reruns, a lower P_KEEP), each with its bench's null
and gain keep rates: what scripts/bench_research.py measures through the real loop, on a
synthetic landscape.

`--bound --night-runs 30`: what no rule that confirms its keeps can beat. Oracles that know every
proposal's true effect (no noise, no baseline repeats) against the reference protocol on the same
mix: one that keeps every gain above a floor on one run, and one that spends a second, confirming
run on each keep (as every rule that refuses one-run keeps must: a recipe that makes training
erratic lands low on one run by luck).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.judges import stats  # noqa: E402

BENCH_GAINS = (1,) * 3 + (2,) * 3 + (3,) * 5 + (5,) * 5


# Whether a contested candidate waits for a run of the incumbent (stats.rerun_incumbent); --no-incumbent-runs.
INCUMBENT_RERUNS = True


def judge(rng, store: dict, inc: str, mu: float, name: str, inc_mu: float = 0.0) -> tuple[bool, int]:
    """Run candidate `name` (true value -mu: lower is better) until the rule decides; the runs it
    took, the incumbent's (true value -inc_mu) among them."""
    store[name] = []
    runs, run_candidate = 0, True
    while True:
        if run_candidate:
            store[name].append(rng.gauss(-mu, 1.0))
        else:
            store[inc].append(rng.gauss(-inc_mu, 1.0))
        runs += 1
        noise = stats.pooled_noise(store)
        said, _ = stats.call(stats.compare(store[inc], store[name], noise), runs=len(store[name]))
        if said in ("keep", "discard", "undecided"):
            return said == "keep", runs
        run_candidate = not (INCUMBENT_RERUNS and stats.rerun_incumbent(len(store[inc]), len(store[name])))


def bench(rng, baseline_runs=stats.BASELINE_RUNS, nulls=20):
    store = {"base": [rng.gauss(0.0, 1.0) for _ in range(baseline_runs)]}
    inc, inc_mu, runs, false = "base", 0.0, baseline_runs, 0
    for i in range(nulls):
        kept, k = judge(rng, store, inc, inc_mu, f"null{i}", inc_mu)
        runs += k
        if kept:
            false, inc = false + 1, f"null{i}"
    kept_gains = []
    for i, g in enumerate(BENCH_GAINS):
        kept, k = judge(rng, store, "base", g, f"gain{i}", 0.0)
        runs += k
        kept_gains.append((g, kept))
    return false, kept_gains, runs


def effect(rng) -> float:
    u = rng.random()
    if u < 0.6:
        return -rng.uniform(1, 6)
    if u < 0.85:
        return rng.gauss(0, 0.1)
    return rng.uniform(1, 6)


def night_new(rng, budget=100):
    store = {"base": [rng.gauss(0.0, 1.0) for _ in range(stats.BASELINE_RUNS)]}
    inc, inc_mu, runs, false, true, i = "base", 0.0, stats.BASELINE_RUNS, 0, 0, 0
    while runs < budget:
        mu = inc_mu + effect(rng)
        name, i = f"c{i}", i + 1
        kept, k = judge(rng, store, inc, mu, name, inc_mu)
        runs += k
        if kept:
            false, true = false + (mu <= inc_mu), true + (mu > inc_mu)
            inc, inc_mu = name, mu
    return inc_mu, false, true, i


def night_old(rng, budget=100):
    base = [rng.gauss(0.0, 1.0) for _ in range(2)]
    th = 2 * max(statistics.stdev(base), 0.01)
    best_mu, best, runs, false, true, n = 0.0, statistics.fmean(base), 2, 0, 0, 0
    while runs < budget:
        n += 1
        mu = best_mu + effect(rng)
        y = [rng.gauss(-mu, 1.0)]
        runs += 1
        gain = best - y[0]
        if 0 < gain <= th:   # contested: one confirming run, the mean against a sqrt(2) narrower band
            y.append(rng.gauss(-mu, 1.0))
            runs += 1
            gain = best - statistics.fmean(y)
            keep = gain > th / 2 ** 0.5
        else:
            keep = gain > th
        if keep:
            false, true = false + (mu <= best_mu), true + (mu > best_mu)
            best_mu, best = mu, statistics.fmean(y)
    return best_mu, false, true, n


def night_simple(rng, budget: int):
    """The reference protocol: one run per experiment, kept when its one figure beats the best one."""
    best_mu, best, runs, false, true, n = 0.0, rng.gauss(0.0, 1.0), 1, 0, 0, 0
    while runs < budget:
        n += 1
        mu = best_mu + effect(rng)
        y = rng.gauss(-mu, 1.0)
        runs += 1
        if y < best:
            false, true = false + (mu <= best_mu), true + (mu > best_mu)
            best_mu, best = mu, y
    return best_mu, false, true, n


def night_rule(rng, budget: int, baseline_runs: int):
    """This module's rule, as night_new, with `baseline_runs` baseline runs and a night of `budget` runs."""
    store = {"base": [rng.gauss(0.0, 1.0) for _ in range(baseline_runs)]}
    inc, inc_mu, runs, false, true, i = "base", 0.0, baseline_runs, 0, 0, 0
    while runs < budget:
        mu = inc_mu + effect(rng)
        name, i = f"c{i}", i + 1
        kept, k = judge(rng, store, inc, mu, name, inc_mu)
        runs += k
        if kept:
            false, true = false + (mu <= inc_mu), true + (mu > inc_mu)
            inc, inc_mu = name, mu
    return inc_mu, false, true, i


def night_oracle(rng, budget: int, confirm: bool, floor: float):
    """A rule that knows each proposal's true effect: it keeps exactly the gains above `floor`
    sigma, on one run, or with one confirming run more (`confirm`); the night's final true gain."""
    best_mu, runs = 0.0, 1
    while runs < budget:
        mu = best_mu + effect(rng)
        runs += 1
        if mu - best_mu > floor:
            runs += 1 if confirm else 0
            best_mu = mu
    return best_mu


def bound(budget: int, nights: int, seed: int) -> None:
    rng = random.Random(seed)
    ref = statistics.fmean(night_simple(rng, budget)[0] for _ in range(nights))
    print(f"{'reference (one run, keep if lower)':44s} {budget} runs: final true gain {ref:5.2f} sigma")
    for confirm in (False, True):
        for floor in (0.0, 1.0, 2.0):
            gain = statistics.fmean(night_oracle(rng, budget, confirm, floor) for _ in range(nights))
            label = f"oracle, gains > {floor:g} sigma, {'confirmed' if confirm else 'one run'}"
            print(f"{label:44s} {budget} runs: final true gain {gain:5.2f} sigma ({gain / ref:.0%} of the reference)")


# (label, FIRST_RUN_MIN_T, baseline runs, incumbent reruns, P_KEEP, MAX_RUNS) of --variants.
VARIANTS = [("the rule (default)", 0.0, 5, True, 0.99, 5), ("first run t >= 0.5", 0.5, 5, True, 0.99, 5),
            ("first run t >= 1", 1.0, 5, True, 0.99, 5), ("3 baseline runs", 0.0, 3, True, 0.99, 5),
            ("no incumbent reruns", 0.0, 5, False, 0.99, 5), ("t >= 0.5, no incumbent reruns", 0.5, 5, False, 0.99, 5),
            ("P_KEEP 0.95", 0.0, 5, True, 0.95, 5), ("P_KEEP 0.9", 0.0, 5, True, 0.9, 5),
            ("at most 3 runs a candidate", 0.0, 5, True, 0.99, 3),
            ("3 runs a candidate, 3 baseline runs", 0.0, 3, True, 0.99, 3)]


def variants(budget: int, nights: int, benches: int, seed: int, only: str | None = None) -> None:
    global INCUMBENT_RERUNS
    rng = random.Random(7)
    out = [night_simple(rng, budget) for _ in range(nights)]
    print(f"{'reference (one run, keep if lower)':34s} {budget} runs: final true gain {statistics.fmean(o[0] for o in out):5.2f} "
          f"sigma, false keeps {statistics.fmean(o[1] for o in out):.2f}, true keeps {statistics.fmean(o[2] for o in out):.2f}, "
          f"experiments {statistics.fmean(o[3] for o in out):.1f}", flush=True)
    saved = (stats.FIRST_RUN_MIN_T, stats.P_KEEP, INCUMBENT_RERUNS, stats.MAX_RUNS)
    try:
        for label, first_t, base_runs, inc_reruns, p_keep, max_runs in VARIANTS:
            if only and only not in label:
                continue
            stats.FIRST_RUN_MIN_T, stats.P_KEEP, INCUMBENT_RERUNS, stats.MAX_RUNS = first_t, p_keep, inc_reruns, max_runs
            rng = random.Random(seed)
            res = [bench(rng, base_runs) for _ in range(benches)]
            nulls = statistics.fmean(f for f, _, _ in res) / 20
            g3 = statistics.fmean(k for _, gs, _ in res for g, k in gs if g == 3)
            goal = statistics.fmean((f <= 1) and sum(k for g, k in gs if g >= 3) >= 9 for f, gs, _ in res)
            out = [night_rule(rng, budget, base_runs) for _ in range(nights)]
            print(f"{label:34s} {budget} runs: final true gain {statistics.fmean(o[0] for o in out):5.2f} sigma, false "
                  f"keeps {statistics.fmean(o[1] for o in out):.2f}, true keeps {statistics.fmean(o[2] for o in out):.2f}, "
                  f"experiments {statistics.fmean(o[3] for o in out):.1f} | bench: nulls kept {nulls:.2%}, 3 sigma "
                  f"{g3:.1%}, goal met {goal:.0%}", flush=True)
    finally:
        stats.FIRST_RUN_MIN_T, stats.P_KEEP, INCUMBENT_RERUNS, stats.MAX_RUNS = saved


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--benches", type=int, default=300)
    p.add_argument("--nights", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--baseline-runs", type=int, default=stats.BASELINE_RUNS)
    p.add_argument("--no-incumbent-runs", action="store_true",
                   help="never run the incumbent again for a contested candidate (the rule before stats.INCUMBENT_RUNS)")
    p.add_argument("--variants", action="store_true",
                   help="nights of --night-runs runs: the reference protocol and variants of this rule")
    p.add_argument("--night-runs", type=int, default=100)
    p.add_argument("--bound", action="store_true",
                   help="nights of --night-runs runs: oracles that know the true effects, against the reference protocol")
    p.add_argument("--only", help="with --variants: only the variants whose label contains this")
    args = p.parse_args(argv)
    if args.bound:
        bound(args.night_runs, args.nights, args.seed)
        return 0
    if args.variants:
        variants(args.night_runs, args.nights, args.benches, args.seed, args.only)
        return 0
    global INCUMBENT_RERUNS
    INCUMBENT_RERUNS = not args.no_incumbent_runs
    rng = random.Random(args.seed)
    res = [bench(rng, args.baseline_runs) for _ in range(args.benches)]
    nulls = statistics.fmean(f for f, _, _ in res) / 20
    by = {}
    for _, gains, _ in res:
        for g, k in gains:
            by.setdefault(g, []).append(k)
    goal = statistics.fmean((f <= 1) and sum(k for g, k in gains if g >= 3) >= 9 for f, gains, _ in res)
    print(f"bench x{args.benches} (P_KEEP {stats.P_KEEP}, {args.baseline_runs} baseline runs, up to "
          f"{stats.MAX_RUNS} runs a candidate): nulls kept {nulls:.2%}; gains kept "
          + ", ".join(f"{g} sigma {statistics.fmean(v):.1%}" for g, v in sorted(by.items()))
          + f"; goal met in {goal:.1%} of benches; runs {statistics.fmean(r for _, _, r in res):.1f} per bench")
    for name, f in (("old rule (2 runs, 2 x spread)", night_old), ("new rule (this module)", night_new)):
        if not args.nights:
            break
        out = [f(rng) for _ in range(args.nights)]
        print(f"night of 100 runs x{args.nights}, {name}: final true gain {statistics.fmean(o[0] for o in out):.1f} "
              f"sigma, false keeps {statistics.fmean(o[1] for o in out):.2f}, true keeps {statistics.fmean(o[2] for o in out):.2f}, "
              f"experiments {statistics.fmean(o[3] for o in out):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
