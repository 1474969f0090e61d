"""The keep rules: advance on evidence (the default), the reference protocol, and the strict judge.

A commit on the branch is the better bet on tonight's evidence; "confirmed" is a claim made on runs
of its own (agent/judges/confirm.py). The three rules (`--rule`), all sealed, all on the trusted
figure, differ only in when a candidate's runs make it the incumbent:

- default (advance on evidence): one run per idea. The candidate advances when its trusted figure
  beats the incumbent's *shrunk* value (agent/judges/shrink.py: the posterior mean of the
  incumbent's true value, never its lucky minimum), and its own shrunk value becomes the next bar.
  The judge's protections stay where they pay: a run the harness saw disturbed, a load not
  comparable with the incumbent's runs, a gain the night's prior finds implausible (a recipe that
  makes training erratic lands low by luck), an equal result that is cheaper or shorter: these get
  the strict judge's decision (more runs, paired where the load varied).
- reference (karpathy/autoresearch's protocol, for comparison): one run per idea, kept when its
  trusted figure is below the best figure recorded so far.
- strict (confirm every keep): the sequential test of agent/judges/stats.py; every keep rests on
  at least two runs of its own at P(better) >= P_KEEP.

Before any of them, the baseline (`baseline`): the tag's unmodified train.py, run until its
repeats are counted, kept on their mean with the noise band every later decision reads.

Functions here read plain values (samples, estimates, records) and return what the judge records;
agent/judges/hierarchy.py calls them.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from agent.judges import evidence, shrink, stats
from agent.judges.evidence import Band
from agent.judges.shrink import Estimate
from harness.decision import Decision
from harness.decision import Basis
from harness.verify import VerifyResult

RULES = ("default", "reference", "strict")
DEFAULT_RULE = "default"
# Baseline runs before the first decision, per rule: the strict rule's sequential test needs
# sigma to 4 degrees of freedom; the default rule needs a sigma to shrink with (2 df, and every
# later multi-run commit adds to it); the reference protocol runs its baseline once.
BASELINE_RUNS = {"default": 3, "reference": 1, "strict": 5}
# A first run this improbable under the night's prior of effects (its upper tail) is a gain too
# good to advance on one run: a recipe that makes training erratic lands low by luck exactly so.
SURPRISE_P = 0.005
# The diff's size and the gain, in sigmas of a run, under which a one-run advance that adds this
# many lines is refused on simplicity (judge.py's BIG_DIFF_LINES and TINY_GAIN_BANDS, in one-run units).
SIMPLICITY_SIGMAS = 1.0
# A first run at most this many standard errors (of the run against the bar) above the incumbent's
# shrunk value may still be an equal result; a cheaper or shorter candidate within it goes to the
# strict judge to show it, one further above is discarded on its run (a model cheaper to serve but
# clearly worse is no equal result, however wide the strict judge's band on few runs).
EQUAL_SE = 1.0

# What an equal result that is cheaper or shorter is handed to the strict judge for (the console's
# run counter says so: agent/status.py run_label).
EQUAL_RESULT = "the strict judge decides whether the result is equal"

@dataclass
class Call:
    """What a rule says about a candidate's first run: "keep" (advance), "discard", or "strict"
    (hand the decision to the strict judge), why, and the figures it rests on."""
    said: str
    why: str
    figures: dict
    p_better: float | None = None


def effects_of(history) -> list[tuple[float, float]]:
    """The night's first-run effects (d, its noise variance) from the records' evidence (the
    default rule writes one per decided experiment: d = the incumbent's shrunk value - the run)."""
    out = []
    for rec in history:
        ev = rec.evidence_view() if rec.is_experiment else None
        r = ev.rule if ev is not None else None
        if r is not None and r.effect_d is not None and r.effect_var is not None and r.effect_var > 0:
            out.append((r.effect_d, r.effect_var))
    return out


def recorded_estimate(history, commit: str) -> tuple[Estimate | None, Estimate | None]:
    """(the parent's estimate the commit was advanced on, the commit's estimate then) from the
    keep record of `commit` under the default rule; (None, None) for any other commit."""
    for rec in reversed(history):
        if rec.is_experiment and rec.commit == commit and rec.status == "keep":
            ev = rec.evidence_view()
            r = ev.rule if ev is not None else None
            if r is None or r.rule != "default":
                return None, None
            return _est(r.parent_mean, r.parent_var), _est(r.estimate_mean, r.estimate_var)
    return None, None


def estimate_of(commit: str, runs: list[float], sigma: float, history, prior: shrink.Prior) -> Estimate:
    """The commit's shrunk value on every counted run it has now: the posterior given its parent's
    estimate where it was advanced under the default rule, else the plain mean of its runs (the
    baseline, a commit the strict judge or a human kept on several runs)."""
    parent, then = recorded_estimate(history, commit)
    if parent is not None and runs:
        return shrink.posterior(parent, runs, sigma, prior)[0]
    if runs:
        return Estimate(statistics.fmean(runs), sigma * sigma / len(runs))
    return then if then is not None else Estimate(float("nan"), float("inf"))


def surprise(d: float, var: float, prior: shrink.Prior, df: float | None = None) -> float:
    """P(D >= d) under the prior predictive of a first run's effect: the atoms plus the run's noise.
    `df`: the degrees of freedom behind sigma (var is in its units): the noise's tail is Student's t,
    so a sigma measured on 3 runs (2 df, often half the true one) does not make an ordinary gain
    look impossible; None or under 1 (no measured sigma): the normal."""
    sd = math.sqrt(max(var, 1e-30))
    nu = df if df is not None and df >= 1 else math.inf
    return sum(w * (1.0 - stats.t_cdf((d - a) / sd, nu)) for a, w in zip(prior.atoms, prior.weights))


def advance(y: float, inc: Estimate, sigma: float, effects: list[tuple[float, float]], *,
            net_lines: int, equal_result_ok: bool, big_diff_lines: int, df: float | None = None) -> Call:
    """The default rule on a candidate's first run `y` against the incumbent's estimate `inc`.
    `effects`: the night's earlier first-run effects; `equal_result_ok`: the candidate is cheaper
    to serve or shorter (an equal result could keep it: the strict judge confirms that); `df`: the
    degrees of freedom behind `sigma` (surprise)."""
    var_d = inc.var + sigma * sigma
    d = inc.mean - y
    prior = shrink.fit_prior(effects + [(d, var_d)], sigma)
    est, p_better = shrink.posterior(inc, [y], sigma, prior)
    # how surprising this run is, under what the night showed before it (itself left out: a prior
    # fitted on it would find its own luck plausible)
    tail = surprise(d, var_d, shrink.fit_prior(effects, sigma), df)
    figures = {"rule": "default", "run": y, "bar": inc.mean, "bar_sd": inc.sd, "sigma": sigma, "df": df,
               "effect": {"d": d, "var": var_d}, "surprise": tail, "p_better": p_better,
               "estimate": {"mean": est.mean, "var": est.var, "parent": {"mean": inc.mean, "var": inc.var}},
               "confirmed": False}
    if y < inc.mean:
        if tail < SURPRISE_P:
            return Call("strict", f"a first run {d:.6f} below the incumbent's shrunk value {inc.mean:.6f} is too "
                        f"good to advance on one run (P {tail:.2g} under the night's prior of effects): "
                        "confirming it first", figures)
        if net_lines >= big_diff_lines and d < SIMPLICITY_SIGMAS * sigma:
            return Call("discard", f"simplicity: {d:.6f} below the incumbent's shrunk value {inc.mean:.6f}, under "
                        f"{SIMPLICITY_SIGMAS:g} sigma ({sigma:.6f}) for +{net_lines} lines of code", figures)
        return Call("keep", f"advanced on evidence: trusted val_bpb {y:.6f} below the incumbent's shrunk value "
                    f"{inc.mean:.6f} (+-{inc.sd:.6f}); its own shrunk value {est.mean:.6f}, P(better) "
                    f"{p_better:.3f}; one run, unconfirmed", figures, p_better)
    if equal_result_ok and y - inc.mean <= EQUAL_SE * math.sqrt(var_d):
        return Call("strict", f"{y:.6f} is not below the incumbent's shrunk value {inc.mean:.6f}, but it is cheaper "
                    f"or shorter: {EQUAL_RESULT}", figures)
    return Call("discard", f"not advanced: trusted val_bpb {y:.6f} is not below the incumbent's shrunk value "
                f"{inc.mean:.6f} (+-{inc.sd:.6f}); P(better) {p_better:.3f}", figures, p_better)


def reference(y: float, best: float | None) -> Call:
    """The reference protocol: kept when below the best figure recorded so far."""
    figures = {"rule": "reference", "run": y, "bar": best}
    if best is None or not math.isfinite(best):
        return Call("keep", f"first result: trusted val_bpb {y:.6f}", figures)
    if y < best:
        return Call("keep", f"trusted val_bpb {y:.6f} beats the best recorded {best:.6f} by {best - y:.6f} "
                    "(the reference rule: one run, keep if lower)", figures)
    return Call("discard", f"trusted val_bpb {y:.6f} does not beat the best recorded {best:.6f} "
                "(the reference rule: one run, keep if lower)", figures)


def _est(mean: float | None, var: float | None) -> Estimate | None:
    return Estimate(mean, var) if mean is not None and var is not None and var >= 0 else None


# The MetaJudge's watch on one-run advances: a streak this long of advances no fresh runs have
# confirmed is said (confirm them: `report --confirm`); an advanced commit whose later runs sit this
# many standard errors above the figure it advanced on is said too (its advance was luck).
UNCONFIRMED_STREAK = 5
DISAGREE_SE = 2.5


def audit_flags(history, current, claims=()) -> list[dict]:
    """Flags on the default rule's advances for the MetaJudge (agent/judges/judge.py audit): a
    streak of unconfirmed one-run advances; the incumbent's later runs disagreeing with the run it
    advanced on (a recipe that makes training erratic lands low once, then not); an incumbent the
    pooled noise found erratic."""
    flags = []
    keeps = [r for r in [*history, current] if r.is_experiment and r.status == "keep" and not r.is_baseline]
    confirmed = {c.commit for c in claims if c.confirmed}
    streak = 0
    for r in reversed(keeps):
        ev = r.evidence_view()
        if ev is None or ev.rule is None or ev.rule.decided_by != "default" or r.commit in confirmed:
            break
        streak += 1
    if streak >= UNCONFIRMED_STREAK:
        flags.append({"kind": "unconfirmed_streak",
                      "reason": f"the last {streak} keeps are one-run advances none of which fresh runs confirmed: "
                                "`uv run agent/report.py --run DIR --confirm N` claims one"})
    ev = current.evidence_view()
    if ev is None or not ev.incumbent.commit:
        return flags
    inc = ev.incumbent.commit
    parent, then = recorded_estimate(history, inc)
    later = [x.bpb for x in ev.incumbent.runs if x.used and x.bpb is not None][1:]
    sigma = ev.comparison.sigma or (ev.rule.sigma if ev.rule is not None else None)
    if then is not None and later and sigma:
        se = math.sqrt(then.var + sigma * sigma / len(later))
        gap = statistics.fmean(later) - then.mean
        if gap > DISAGREE_SE * se:
            flags.append({"kind": "advance_disagrees",
                          "reason": f"the incumbent {inc[:7]} advanced at a shrunk value {then.mean:.6f}; its "
                                    f"{len(later)} later run(s) average {statistics.fmean(later):.6f}, "
                                    f"{gap / se:.1f} se above: its advance looks like luck"})
    if then is not None and "incumbent" in ev.comparison.erratic:
        flags.append({"kind": "advance_erratic",
                      "reason": f"the incumbent {inc[:7]}, advanced on one run, has runs that disagree beyond the "
                                "tag's noise: a recipe that makes training erratic"})
    return flags


def baseline(commit: str, v: VerifyResult, samples: list, noise: stats.Noise, repeats: int, final: bool,
             continues: int | None = None) -> tuple[Decision, Band, str | None]:
    """The baseline's decision on `commit`'s screened runs so far: run again until `repeats` of them are
    counted (disturbed ones are replaced, up to evidence.DISTURBED_RERUNS), then kept on their mean
    with the tag's noise band. `final`: no more runs (a repeat crashed). Returns the decision, the
    band, and why the baseline is contested (kept short of its counted runs), or None.
    `continues`: the kept baseline of the same commit whose repeats an interrupt cut short."""
    used = evidence.values(samples) or [s.bpb for s in samples]   # never none: the tag needs a baseline
    mean = statistics.fmean(stats.distinct(used))
    band = Band.of(used, noise)
    ev = {"call": "baseline", "p_keep": stats.P_KEEP, "noise": noise.as_dict(),
          "candidate": {"commit": commit, "runs": [s.as_dict() for s in samples]}}
    jd = {"status": "keep", "basis": Basis.BASELINE.value, "runs": list(used), "baseline_values": list(used),
          "band": band.as_dict(), "threshold": band.threshold, "spread": band.spread, "repeats": repeats}
    if continues is not None:
        jd["continues"] = continues
    verdicts = {"verify": v.as_dict(), "judge": jd, "evidence": ev}
    latest, counted = samples[-1], len([s for s in samples if s.used])
    if counted < repeats and len(samples) < repeats + evidence.DISTURBED_RERUNS and not final:
        # The counter counts the runs that count, so it never passes the repeats ("6/5"); disturbed ones are said apart.
        if latest.disturbed:
            head = (f"baseline run {len(samples)} was disturbed ({latest.disturbed}), not counted: "
                    f"{counted}/{repeats} counted so far, this one {v.trusted_bpb:.6f}")
        else:
            left = len(samples) - counted
            head = (f"baseline run {counted}/{repeats}: {v.trusted_bpb:.6f}"
                    + (f" ({left} disturbed run(s) left out)" if left else ""))
        return Decision.again("keep", f"{head}; rerunning to measure the noise", mean, verdicts,
                              basis=Basis.BASELINE), band, None
    left_out = [s for s in samples if not s.used]
    reason = (f"baseline: trusted val_bpb {mean:.6f} over {len(used)} run(s); noise sigma "
              f"{band.spread:.6f} ({noise.df} df{', floor' if noise.floored else ''}"
              f"{', one run only: no estimate yet' if noise.sigma is None else ''}); a 2-run candidate must gain "
              + (f"{band.threshold:.6f}" if band.threshold is not None else "(unknown until a commit has 2 runs)")
              + (f"; {len(left_out)} run(s) no evidence, left out" if left_out else ""))
    short = None
    if len(samples) - len(left_out) < repeats:
        short = (f"contested: the baseline has {len(samples) - len(left_out)} counted run(s) of the {repeats} it "
                 f"needs after {len(samples)} run(s)" + (f" (no evidence: {left_out[-1].disturbed})" if left_out else ""))
        reason += f"; {short}"
    jd["reason"] = reason
    return Decision("keep", reason, mean, verdicts, basis=Basis.BASELINE), band, short
