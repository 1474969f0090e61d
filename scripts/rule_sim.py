"""The keep rules on simulated nights: true gain at equal runs, and how honest each night's headline is.

    uv run scripts/rule_sim.py [--nights 400] [--runs 30] [--seed 1] [--priors plentiful,small,rare]
        [--sigma-error 1.0] [--baseline-runs 3] [--shrunk-too]

Pure Python, a minute. Runs are Normal(true value, 1): values and gains are in sigma. A night is a
chain of proposals, each a step from the incumbent with a true effect drawn from a prior (the mix
of harmful, null and helpful edits a search makes); every rule sees the same proposals and the same
run noise (a run's noise is drawn once per (proposal, run index)), and spends the same runs:

- reference: karpathy/autoresearch's protocol: one baseline run, one run per proposal, keep if
  lower than the best figure so far (the kept run's own figure);
- default: advance on evidence (agent/judges/judge.py advance): BASELINE_RUNS runs of the base
  (sigma), one run per proposal, advance when it is below the incumbent's shrunk value
  (agent/judges/shrink.py: the empirical-Bayes posterior mean, the prior fitted on the night's
  one-run results) (`--shrunk-too`: a variant that also asks the candidate's own shrunk value to be
  below the bar, so that no advance raises it); the last 2 runs of the night re-measure the final
  (its headline);
- strict: the judge that confirms every keep (agent/judges/stats.py: sequential t-test, P_KEEP,
  up to MAX_RUNS runs a candidate, the incumbent re-run when it has fewer runs).

Per rule and prior: the true gain (the final's true value against the base's), as a share of the
reference's; the honesty gap (the headline minus the final's true value; the reference's headline
is its recorded best, the default's its re-measured final, the strict's the kept figure); the
share of advances that were nulls or harmful. `--sigma-error F`: the rules believe sigma is F
times what it is (a wrong noise estimate).
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.judges import shrink, stats  # noqa: E402

# Priors over a proposal's effect (positive: better, in sigma): (share, low, high) of uniform parts.
PRIORS = {
    # a local search on a base with room: 40% of steps gain
    "plentiful": [(0.40, 0.3, 3.0), (0.25, -0.3, 0.3), (0.35, -5.0, -0.3)],
    # gains exist but are small next to the noise
    "small": [(0.30, 0.2, 1.2), (0.35, -0.2, 0.2), (0.35, -4.0, -0.2)],
    # a tuned base: few steps gain
    "rare": [(0.10, 0.5, 3.0), (0.40, -0.3, 0.3), (0.50, -5.0, -0.3)],
}
BASELINE_RUNS = 3
FINAL_RUNS = 2


def draw_effect(rng, prior) -> float:
    u, acc = rng.random(), 0.0
    for share, lo, hi in prior:
        acc += share
        if u <= acc:
            return rng.uniform(lo, hi)
    return rng.uniform(prior[-1][1], prior[-1][2])


class World:
    """The night's proposals and noise, shared by every rule: proposal i's effect on top of whatever
    is the incumbent, and a noise draw per (commit, run index)."""

    def __init__(self, seed: int, prior):
        self.rng, self.prior = random.Random(seed), prior
        self.effects: list[float] = []
        self.noise: dict[tuple[int, int], float] = {}

    def effect(self, i: int) -> float:
        while len(self.effects) <= i:
            self.effects.append(draw_effect(self.rng, self.prior))
        return self.effects[i]

    def run(self, commit: int, k: int, true: float) -> float:
        key = (commit, k)
        if key not in self.noise:
            self.noise[key] = self.rng.gauss(0.0, 1.0)
        return true + self.noise[key]


def reference(w: World, runs: int):
    base = w.run(-1, 0, 0.0)
    best, true, spent, i, advances = base, 0.0, 1, 0, []
    while spent < runs:
        t = true - w.effect(i)
        y = w.run(i, 0, t)
        spent += 1
        if y < best:
            advances.append(w.effect(i))
            best, true = y, t
        i += 1
    return true, best, advances


def default(w: World, runs: int, sigma_error: float = 1.0, baseline_runs: int = BASELINE_RUNS,
            shrunk_too: bool = False):
    sig = sigma_error
    base_runs = [w.run(-1, k, 0.0) for k in range(baseline_runs)]
    spent = baseline_runs
    inc = shrink.Estimate(statistics.fmean(base_runs), sig * sig / baseline_runs)
    true, i, advances, effects, inc_id = 0.0, 0, [], [], -1
    while spent < runs - FINAL_RUNS:
        t = true - w.effect(i)
        y = w.run(i, 0, t)
        spent += 1
        effects.append((inc.mean - y, inc.var + sig * sig))
        est, _ = shrink.posterior(inc, [y], sig, shrink.fit_prior(effects, sig))
        if y < inc.mean and (not shrunk_too or est.mean < inc.mean):
            advances.append(w.effect(i))
            inc, true, inc_id = est, t, i
        i += 1
    final = [w.run(inc_id, 100 + k, true) for k in range(FINAL_RUNS)]
    return true, statistics.fmean(final), advances


def strict(w: World, runs: int):
    store = {"base": [w.run(-1, k, 0.0) for k in range(stats.BASELINE_RUNS)]}
    spent, inc, true, i, advances = stats.BASELINE_RUNS, "base", 0.0, 0, []
    trues = {"base": 0.0}
    while spent < runs:
        name, t = f"c{i}", true - w.effect(i)
        store[name], trues[name] = [], t
        while spent < runs:
            store[name].append(w.run(i, len(store[name]), t))
            spent += 1
            said, _ = stats.call(stats.compare(store[inc], store[name], stats.pooled_noise(store)),
                                 runs=len(store[name]))
            if said == "more" and stats.rerun_incumbent(len(store[inc]), len(store[name])) and spent < runs:
                store[inc].append(w.run(-1 if inc == "base" else int(inc[1:]), 50 + len(store[inc]), trues[inc]))
                spent += 1
            if said != "more":
                break
        if said == "keep":
            advances.append(w.effect(i))
            inc, true = name, t
        i += 1
    return true, statistics.fmean(store[inc]), advances


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--nights", type=int, default=400)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--priors", default=",".join(PRIORS))
    ap.add_argument("--sigma-error", type=float, default=1.0)
    ap.add_argument("--baseline-runs", type=int, default=BASELINE_RUNS)
    ap.add_argument("--shrunk-too", action="store_true",
                    help="the default rule also asks the candidate's own shrunk value to be below the bar")
    a = ap.parse_args(argv)
    print(f"{a.nights} nights of {a.runs} runs per prior; gains in sigma; sigma believed x{a.sigma_error:g}")
    print("| prior | rule | true gain | share of reference | honesty gap | advances | null or harmful advances |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in a.priors.split(","):
        prior = PRIORS[name]
        out = {r: {"gain": [], "gap": [], "adv": [], "bad": []} for r in ("reference", "default", "strict")}
        for night in range(a.nights):
            for rule, fn in (("reference", lambda w: reference(w, a.runs)),
                             ("default", lambda w: default(w, a.runs, a.sigma_error, a.baseline_runs, a.shrunk_too)),
                             ("strict", lambda w: strict(w, a.runs))):
                w = World(a.seed * 100_003 + night, prior)
                true, headline, adv = fn(w)
                out[rule]["gain"].append(-true)
                out[rule]["gap"].append(headline - true)
                out[rule]["adv"].append(len(adv))
                out[rule]["bad"] += [e <= 0.3 for e in adv]
        ref = statistics.fmean(out["reference"]["gain"])
        for rule, o in out.items():
            g = statistics.fmean(o["gain"])
            se = statistics.stdev(o["gain"]) / math.sqrt(len(o["gain"]))
            gap = statistics.fmean(o["gap"])
            gse = statistics.stdev(o["gap"]) / math.sqrt(len(o["gap"]))
            bad = statistics.fmean(o["bad"]) if o["bad"] else 0.0
            print(f"| {name} | {rule} | {g:.2f} +- {se:.2f} | {100 * g / ref:.0f}% | {gap:+.2f} +- {gse:.2f} | "
                  f"{statistics.fmean(o['adv']):.1f} | {100 * bad:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
