"""Confirmed: a claim made on runs of a commit's own, and the night's headline made on fresh seeds.

Under the default rule a commit on the branch is the better bet on tonight's evidence, advanced on
one run (agent/judges/advance.py). "Confirmed" is a separate claim: at least MIN_RUNS fresh runs
of the commit (seeds no run of the loop used) that pass the strict judge's test against its
parent's runs (agent/judges/stats.py compare, P(better) >= P_KEEP). A keep of the strict rule, or
one the default rule handed to the strict judge, was confirmed when it was kept. Confirmations run
on demand (`uv run agent/report.py --run DIR --confirm [N]`, the queue's "confirm" action) and for
the night's final when the night ends, whose fresh runs also give the headline: its gain over the
baseline's runs, with its standard error, never the minimum of noisy runs.

Every claim is a journal object of kind "claim" (runfiles/journal.py ClaimRecord).
"""
from __future__ import annotations

import math
import statistics
import time

from agent.judges import advance, evidence, shrink, stats
from runfiles.journal import CLAIM_MIN_RUNS, ClaimRecord
from harness.experiment_record import ExperimentRecord
from runfiles.journal import claim_label as label, read_claims  # noqa: F401  (the label and the claims, by name here)

# Fresh runs a claim rests on at least (the strict judge's least runs for a keep).
MIN_RUNS = CLAIM_MIN_RUNS
# An unconfirmed final still holds at the night's end while its fresh runs leave it more likely
# better than its parent than not (the posterior under the night's prior of effects): below, the
# parent is the better bet, and the branch steps back to it.
HOLD_P = 0.5


def keep_record(history: list[ExperimentRecord], commit: str) -> ExperimentRecord | None:
    return next((r for r in reversed(history) if r.is_experiment and r.status == "keep" and r.commit == commit), None)


def claims_of(journal: list[dict]) -> list[ClaimRecord]:
    return [c for c in (ClaimRecord.from_dict(d) for d in journal) if c is not None]


def _with_fresh(history: list[ExperimentRecord], fresh: list[float]):
    """The journal's counted runs per commit, and the tag's noise pooled over them and the fresh runs."""
    store = evidence.restore(history)
    return store, evidence.noise_of({**store, "__fresh__": [evidence.Sample("__fresh__", v) for v in fresh]})


def claim(commit: str, history: list[ExperimentRecord], fresh: list[float], *, failed: list[str] = (),
          baseline: str | None = None, final: bool = False) -> dict:
    """The claim journal object for `commit` on its `fresh` runs: confirmed against its parent's
    counted runs (the journal's store); with `baseline`, the gain over the baseline's runs."""
    rec = keep_record(history, commit)
    store, noise = _with_fresh(history, fresh)
    parent = rec.parent if rec is not None else None
    parent_runs = evidence.values(store.get(parent, [])) if parent else []
    out = {"kind": "claim", "commit": commit, "n": rec.number if rec is not None else None, "runs": list(fresh),
           "parent": parent, "parent_runs": parent_runs, "failed": list(failed), "final": final, "at": time.time(),
           "p_better": None, "confirmed": False, "sigma": noise.sigma}
    if len(fresh) < MIN_RUNS:
        out["why"] = f"{len(fresh)} fresh run(s) of its own: a claim needs {MIN_RUNS}"
    elif not parent_runs:
        out["why"] = "its parent has no counted run to test against"
    else:
        cmp = stats.compare(parent_runs, fresh, noise)
        out["p_better"] = cmp.p_better
        out["confirmed"] = cmp.p_better is not None and cmp.p_better >= stats.P_KEEP
        out["why"] = (f"{len(fresh)} fresh run(s) (mean {statistics.fmean(fresh):.6f}) against its parent "
                      f"{str(parent)[:7]}'s {len(parent_runs)} (mean {statistics.fmean(parent_runs):.6f}): "
                      f"P(better) {cmp.p_better:.3f}" + (" >= " if out["confirmed"] else " < ") + f"{stats.P_KEEP:g}")
    if baseline is not None:
        base_runs = evidence.values(store.get(baseline, []))
        out["baseline"], out["baseline_runs"] = baseline, base_runs
        if fresh and base_runs:
            sigma = noise.sigma or stats.floor_for(base_runs)
            # the fresh runs' own spread where it is wider than the tag's noise (a recipe that makes
            # training erratic): the headline's error is never narrower than its own runs say
            own = statistics.stdev(fresh) if len(fresh) > 1 else sigma
            out["gain"] = statistics.fmean(base_runs) - statistics.fmean(fresh)
            out["se"] = math.sqrt(sigma * sigma / len(base_runs) + max(sigma, own) ** 2 / len(fresh))
    return out


def holds(history: list[ExperimentRecord], commit: str, fresh: list[float]) -> tuple[bool, float | None, str] | None:
    """Whether the kept `commit` is still the better bet than its parent on its `fresh` runs (seeds
    the night never used, so none of its luck): (holds, P(better), why). The parent's value is its
    shrunk estimate on every counted run it has (for a one-run advance, the bar it was advanced
    against, now with the night's whole prior); the fresh runs alone speak for the commit. None for
    a commit no experiment kept on a parent (the baseline, a human's restore): nothing to step back
    to, or a parent with no figure to weigh it against. No fresh run (each failed) cannot show it
    holds: it does not."""
    rec = keep_record(history, commit)
    if rec is None or rec.is_baseline or not rec.parent:
        return None
    if not fresh:
        return False, None, "no fresh run of it could be measured: it is no better bet than its parent"
    store, noise = _with_fresh(history, fresh)
    sigma = noise.sigma or stats.floor_for(fresh)
    prior = shrink.fit_prior(advance.effects_of(history), sigma)
    parent = advance.estimate_of(rec.parent, evidence.values(store.get(rec.parent, [])), sigma, history, prior)
    if not math.isfinite(parent.mean):   # a parent with no counted run and no estimate: nothing to weigh
        return None
    _, p = shrink.posterior(parent, list(fresh), sigma, prior)
    ok = p >= HOLD_P
    return ok, p, (f"{len(fresh)} fresh run(s) (mean {statistics.fmean(fresh):.6f}) against its parent "
                   f"{rec.parent[:7]}'s shrunk value {parent.mean:.6f}: P(better) {p:.3f}"
                   + (" >= " if ok else " < ") + f"{HOLD_P:g}")


def headline(claims: list[ClaimRecord]) -> str | None:
    """The night's headline: its final re-measured on fresh seeds against the baseline's runs."""
    final = next((c for c in reversed(claims) if c.final), None)
    if final is None:
        return None
    stepped = (f"; the branch stepped back to it from {final.stepped_back_from[:7]}, whose fresh runs did not "
               "hold below it") if final.stepped_back_from else \
        ("; its fresh runs do not hold it below its parent" if final.holds is False else "")
    if final.gain is None:
        return (f"the final {str(final.commit)[:7]} could not be re-measured against the baseline"
                + (f" ({'; '.join(final.failed)[:200]})" if final.failed else "") + stepped)
    return (f"{final.gain:+.6f} +- {final.se:.6f} bpb over the baseline: the final {str(final.commit)[:7]} "
            f"re-measured on {len(final.runs)} fresh seed(s) against the baseline's {len(final.baseline_runs)} run(s)"
            + ("; confirmed against its parent" if final.confirmed else "; not confirmed against its parent")
            + stepped)
