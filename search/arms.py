"""Arms: does the search learn? Random vs Hyperband vs + prior vs + SNIP vs screen-K vs Optuna
vs the hybrid (Claude's code ideas + Optuna's knobs) (vs + Claude).

    uv run python -m search.arms run --quick [--warm-prior prior_store.json]

Every arm gets the identical total step budget, runs through the same worker pool with the same
train.py, profile, tokenizer, dtype and seeds, and is scored by the same deterministic
fixed-window evaluation (prepare.evaluate_bpb inside train.py, after the same decay branch).
An arm's quality after s steps is the best val_bpb of any model it had evaluated by then
(steps are charged in dispatch order, so concurrency does not change the curve's x axis).

The screen-K arm (search/arms_screen.py) is the loop's `--screen K`: K candidates screened by
successive halving, only the winner trained to the full budget; its screen steps are charged
but only full runs count as results, as in the loop. The Optuna arms (search/optuna_arm.py)
and the hybrid (search/hybrid.py) ask a real Optuna study for each full-budget run, at
random search's cost per run.

Headline, per seed: steps an arm needed to reach random search's final quality, divided by the
steps random itself needed (< 1: the arm gets there faster; null: it never got there). Across
seeds (search/arms_stats.py): the median over ALL seeds, an unreached seed counting as +inf,
with the min-max range and "k/n reached"; two arms are "told apart" only when their ranges do
not overlap. Before running, the budget is checked for fairness (whole Hyperband cycles, random
drawing enough configurations, no arm leaving much unspent) and any shortfall is printed.
Outputs arms_report.json and a self-contained arms_report.html (SVG regret plot, no assets);
`python -m search.arms report out/arms/arms_report.json` recomputes both from the raw records.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

from search.arms_llm import ClaudePolicy  # noqa: F401  (the claude arm; tests import it here)
from search.arms_html import render_html
from search.arms_screen import SCREEN_K, pick_fidelity, round_bracket, run_screen_arm, screen_k
from search.arms_stats import best_at, seed_ratio  # noqa: F401  (tests import them here)
from search.arms_stats import (completed_brackets, describe_pairs, fair_budget, fairness,
                                format_headline, headline_stats, pairwise, plans_json, spread)
from search.hybrid import HYBRID_ARM, OPTUNA_ARMS, hybrid_setup, run_sampler_arm
from search.sweep import SweepSettings, run_sweep

# Quality is reported at these fractions of the budget.
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
# Quick mode: the tiny profile (prepare it first) and the small base model (space.SMALL_BASE).
# Full mode: the profile in force. budget_steps None = arms_stats.fair_budget (whole Hyperband
# cycles, random drawing at least the widest bracket's configurations: 113 quick, 2418 full).
# Three seeds: with two, non-overlapping ranges happen by chance one time in three.
QUICK = dict(seeds=[0, 1, 2], max_steps=9, min_steps=1, eta=3, budget_steps=None)
FULL = dict(seeds=[0, 1, 2], max_steps=81, min_steps=3, eta=3, budget_steps=None)
QUICK_PROFILE = "tiny"
# Default arms, in this order; "claude" joins when ANTHROPIC_API_KEY is set; "hybrid" is skipped
# (saying so) without ANTHROPIC_API_KEY/ANTHROPIC_BASE_URL. "screen" is the screen-K arm
# (K = --screen-k); "screen-5" names K directly. "optuna-cmaes" runs only when asked for.
ARMS = ("random", "hyperband", "prior", "snip", "screen", "optuna", "hybrid")


# ---- metrics (pure functions over trajectories) ----

def trajectory(records: list[dict]) -> list[tuple[int, float]]:
    """[(cum_steps, best val_bpb so far)] at every improvement, in dispatch order.

    Records with counts=False (the screen arm's screen evaluations) cost steps, which later
    records' cum_steps include, but are not results."""
    out, best = [], math.inf
    for r in sorted(records, key=lambda r: r["cum_steps"]):
        v = r.get("val_bpb") if r.get("counts", True) else None
        if v is not None and v < best:
            best = v
            out.append((int(r["cum_steps"]), float(v)))
    return out


def steps_to_reach(traj: list[tuple[int, float]], target: float) -> int | None:
    return next((s for s, v in traj if v <= target + 1e-12), None)


def headline(trajs: dict[str, list[tuple[int, float]]], baseline: str = "random") -> dict[str, float | None]:
    """Steps to reach the baseline's final quality / steps the baseline needed, per arm."""
    base = trajs.get(baseline) or []
    if not base:
        return {a: None for a in trajs}
    target = base[-1][1]
    base_steps = steps_to_reach(base, target)
    out = {}
    for arm, traj in trajs.items():
        s = steps_to_reach(traj, target)
        out[arm] = None if s is None else round(s / base_steps, 4)
    return out


def quality_table(traj: list[tuple[int, float]], budget: int) -> dict[str, float | None]:
    return {f"{int(f * 100)}%": best_at(traj, f * budget) for f in FRACTIONS}


def summarize(runs: dict[int, dict[str, list[dict]]], budget: int) -> dict:
    """Per-seed trajectories, headline ratios and quality tables, and their summaries over seeds.

    `headline[arm]`: median, min-max and "k/n reached" over ALL seeds, a seed that never reached
    random's final counting as not reached (+inf) -- never a mean over the successes alone.
    `quality[arm][fraction]`: mean and min-max over seeds. `separation`: for every pair of arms,
    whether their headline (and final quality) ranges across seeds overlap (arms_stats.compare).
    A seed where random itself has no result has no headline and is left out of it."""
    per_seed, arms = {}, []
    for seed, by_arm in runs.items():
        trajs = {a: trajectory(recs) for a, recs in by_arm.items()}
        arms = arms or list(by_arm)
        finals = [t[-1][1] for t in trajs.values() if t]
        heads = headline(trajs)
        base = steps_to_reach(trajs["random"], trajs["random"][-1][1]) if trajs.get("random") else None
        spent = {a: max((r["cum_steps"] for r in recs), default=0) for a, recs in by_arm.items()}
        per_seed[seed] = {
            "trajectories": trajs,
            "headline": heads,
            # an arm that never got there would have needed more than all it spent: ratio > this
            "not_reached_above": {a: round(spent[a] / base, 3) for a, h in heads.items()
                                  if h is None and base},
            "quality": {a: quality_table(t, budget) for a, t in trajs.items()},
            "reference_best": min(finals) if finals else None,
        }
    with_base = [s for s in per_seed if per_seed[s]["trajectories"].get("random")]
    ratios = {a: [per_seed[s]["headline"].get(a) for s in with_base] for a in arms}
    finals = {a: [per_seed[s]["quality"][a]["100%"] for s in per_seed] for a in arms}
    quality = {a: {f"{int(f * 100)}%": spread([per_seed[s]["quality"][a][f"{int(f * 100)}%"]
                                               for s in per_seed]) for f in FRACTIONS} for a in arms}
    return {"per_seed": per_seed,
            "headline": {a: headline_stats(ratios[a]) for a in arms},
            "quality": quality,
            "separation": {"headline": pairwise(ratios), "final_quality": pairwise(finals),
                           "rule": "told apart only when the min-max ranges across seeds do not overlap"},
            "seeds_without_baseline": [s for s in per_seed if s not in with_base]}


def console_summary(report: dict) -> list[str]:
    """The lines `run` prints: headline, final quality, separability, and fairness warnings."""
    n = len(report["per_seed"])
    sep = report["separation"]
    lines = [f"arms: headline = steps to reach random's final quality / random's steps (< 1 is better); "
             f"median over all {n} seeds (a seed that never reached it counts as worse than any that "
             f"did), [min-max over seeds], seeds that reached it; per seed:"]
    lines += [f"arms:   {a} {format_headline(h)}; " + ", ".join(seed_ratio(report, s, a) for s in report["per_seed"])
              for a, h in report["headline"].items()]
    lines.append("arms: final val_bpb, mean [min-max] over seeds: " + "; ".join(
        f"{a} " + ("-" if q["100%"]["mean"] is None else
                   f"{q['100%']['mean']:.4f} [{q['100%']['min']:.4f}-{q['100%']['max']:.4f}]")
        for a, q in report["quality"].items()))
    for key, what in (("headline", "headline"), ("final_quality", "final val_bpb")):
        told, same = describe_pairs(sep[key])
        lines.append(f"arms: {what}: told apart (ranges over {n} seeds do not overlap; how often that "
                     f"happens by chance): {', '.join(told) or 'none'}")
        lines.append(f"arms: {what}: cannot be told apart: {', '.join(same) or 'none'}")
    lines.append("arms: quality at 25/50/75/100% of budget (mean over seeds): " + "; ".join(
        f"{a} " + "/".join("-" if v["mean"] is None else f"{v['mean']:.4f}" for v in q.values())
        for a, q in report["quality"].items()))
    warnings = (report.get("fairness") or {}).get("warnings") or []
    lines += [f"arms: WARNING: {w}" for w in warnings]
    if warnings:
        lines.append("arms: WARNING: the budget was too small for a fair comparison; read the figures "
                     "above with that in mind")
    return lines


# ---- running the arms ----

@contextlib.contextmanager
def _sealed_pool(box, view, workers, prepare_dir, out, env, arms):
    """The hybrid arm's pool: its candidates carry Claude's code, so each runs in its own sandbox
    without the validation data and is scored by the trusted evaluator (harness/verify.py), on the
    same validation data the other arms' train.py measures itself on. None without a sandbox."""
    if box is None or view is None or HYBRID_ARM not in arms:
        yield None
        return
    from search.pool import Pool
    from harness.verify import eval_rows
    import prepare
    with Pool(workers, prepare_dir=prepare_dir, log_dir=out / "logs-sealed", env=env, sandbox=box, data=view,
              sealed_tasks=True, eval_cache=view.cache, rows=eval_rows(prepare.PROFILE)) as pool:
        yield pool


def run_arms(train: Path, out: Path, *, seeds, max_steps, min_steps, eta, budget_steps,
             workers: int, arms=ARMS, warm_prior: Path | None = None, log=print, pool_env=None,
             base_knobs: dict | None = None, screen_k_default: int = SCREEN_K, ideas=None) -> dict:
    import prepare
    from search.pool import Pool, worker_seal
    from search.prior import CheapPrior
    from search.snip import SnipFilter
    from search.space import Space

    from search import knobs
    source, _ = knobs.for_profile(train.read_text(), prepare.PROFILE)   # the profile's knob values
    if base_knobs:
        source = knobs.set_knobs(source, base_knobs)
    space = Space.for_source(source)
    arms = [f"screen-{screen_k(a, screen_k_default)}" if screen_k(a) is not None else a for a in arms]
    arms = list(arms) + (["claude"] if os.environ.get("ANTHROPIC_API_KEY") and "claude" not in arms else [])
    arms, ideas = hybrid_setup(arms, ideas, log)
    settings = dict(max_steps=max_steps, min_steps=min_steps, eta=eta, budget_steps=budget_steps)
    for arm in arms:                          # a screen that cannot fit under R fails before any run
        if screen_k(arm) is not None:
            round_bracket(screen_k(arm), min_steps, max_steps, eta)
    fingerprint, profile = prepare.data_fingerprint(), prepare.PROFILE
    runs: dict[int, dict[str, list[dict]]] = {}
    walls, extras, screens = {}, {}, {}
    decay = SweepSettings(max_steps, min_steps).decay()
    prepare_dir = Path(prepare.__file__).resolve().parent
    for w in fairness(arms, budget_steps, max_steps, min_steps, eta, decay)[1]:
        log(f"arms: WARNING: {w}")
    t0 = time.time()
    box, view = worker_seal(log)
    with Pool(workers, prepare_dir=prepare_dir, log_dir=out / "logs", env=pool_env, sandbox=box, data=view,
              root=out) as pool, _sealed_pool(box, view, workers, prepare_dir, out, pool_env, arms) as sealed:
        for seed in seeds:
            runs[seed] = {}
            for arm in arms:
                if screen_k(arm) is not None:
                    log(f"arms: seed {seed}, arm {arm}")
                    ta = time.time()
                    recs, acct = run_screen_arm(source, space, pool, out / f"seed{seed}" / arm, seed=seed,
                                                k=screen_k(arm), decay_steps=decay, log=lambda m: log("  " + m),
                                                **settings)
                    runs[seed][arm] = recs
                    screens.setdefault(arm, {})[seed] = acct
                    walls[f"{seed}/{arm}"] = round(time.time() - ta, 1)
                    continue
                if arm in OPTUNA_ARMS or arm == HYBRID_ARM:
                    log(f"arms: seed {seed}, arm {arm}")
                    ta = time.time()
                    recs, extras[f"{seed}/{arm}"] = run_sampler_arm(
                        arm, source, space, sealed if arm == HYBRID_ARM and sealed is not None else pool,
                        out / f"seed{seed}" / arm, seed=seed, decay_steps=decay,
                        ideas=ideas, log=lambda m: log("  " + m), **settings)
                    runs[seed][arm] = recs
                    walls[f"{seed}/{arm}"] = round(time.time() - ta, 1)
                    continue
                policy = {"random": "random", "hyperband": "hyperband", "prior": "prior",
                          "snip": "snip", "claude": "proposer"}[arm]
                st = SweepSettings(seed=seed, policy=policy, **settings)
                prior = snip = proposer = None
                if arm in ("prior", "claude"):
                    prior = CheapPrior(space, max_steps, fingerprint=fingerprint, profile=profile)
                    if warm_prior and warm_prior.exists() and arm == "prior":
                        log(f"arms: prior warm-started with {prior.warm_start(warm_prior)} observations")
                if arm == "snip":
                    snip = SnipFilter(source, space, prepare_dir)
                if arm == "claude":
                    proposer = ClaudePolicy(space)
                log(f"arms: seed {seed}, arm {arm}")
                ta = time.time()
                res = run_sweep(source, space, pool, out / f"seed{seed}" / arm, st, prior=prior,
                                snip=snip, proposer=proposer, log=lambda m: log("  " + m))
                runs[seed][arm] = res.records
                walls[f"{seed}/{arm}"] = round(time.time() - ta, 1)
                if proposer is not None:
                    extras[f"{seed}/claude"] = {"tokens": proposer.tokens, "errors": proposer.errors[:5],
                                                "cost_usd": round(proposer.llm.totals["cost_usd"], 6)}
                if arm == "prior" and warm_prior:
                    prior.save(warm_prior)
    for arm, per_seed in screens.items():       # did the screen pick what full runs would have?
        for seed, acct in per_seed.items():
            if "random" in runs[seed]:
                acct["fidelity"] = pick_fidelity(runs[seed][arm], runs[seed]["random"])
    report = summarize(runs, budget_steps)
    report["fairness"] = fairness_section(arms, runs, budget_steps, max_steps, min_steps, eta, decay)
    report.update(settings=dict(settings, seeds=list(seeds), workers=workers, decay_steps=decay,
                                profile=profile, fingerprint=fingerprint, space=space.to_json()),
        base_knobs=base_knobs or {}, arms=arms, screen=screens, wall_s=round(time.time() - t0, 1),
        wall_per_run=walls, extras=extras, records={str(s): r for s, r in runs.items()},
        load_avg=os.getloadavg(), created_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    return report


def fairness_section(arms, runs, budget_steps, max_steps, min_steps, eta, decay) -> dict:
    """What the budget lets each arm do (computed beforehand), and brackets crashes cut short."""
    plans, warnings = fairness(arms, budget_steps, max_steps, min_steps, eta, decay)
    for seed, by_arm in runs.items():
        for arm, recs in by_arm.items():
            started, done = completed_brackets(recs, max_steps)
            if done < started:
                warnings.append(f"seed {seed}, {arm}: only {done} of {started} brackets reached a "
                                f"full {max_steps}-step evaluation (crashes)")
    return {"warnings": warnings, "plans": plans_json(plans),
            "fair_budget": fair_budget(max_steps, min_steps, eta, decay)}


def resummarize(report: dict) -> dict:
    """Recompute the summaries of a saved report from its raw records (`arms report PATH`)."""
    st = report["settings"]
    runs = {int(seed): by_arm for seed, by_arm in report["records"].items()}
    out = {k: v for k, v in report.items() if k not in ("headline_mean", "quality_mean")}
    out.update(summarize(runs, st["budget_steps"]))
    out["screen"] = {arm: {int(seed): acct for seed, acct in per_seed.items()}     # JSON made them str
                     for arm, per_seed in (report.get("screen") or {}).items()}
    out["fairness"] = fairness_section(report["arms"], runs, st["budget_steps"], st["max_steps"],
                                       st["min_steps"], st["eta"], st["decay_steps"])
    return out


def print_report(report: dict, jpath: Path, hpath: Path) -> None:
    print(f"arms: {report['wall_s']:.0f}s wall-clock, budget {report['settings']['budget_steps']} steps per arm, "
          f"seeds {report['settings']['seeds']}")
    for line in console_summary(report):
        print(line)
    for arm, per_seed in report["screen"].items():
        print(f"arms: {arm} ({next(iter(per_seed.values()))['shape']}): " + "; ".join(
            f"seed {s}: {a['rounds']} rounds, {a['screen_steps']} screen + {a['full_steps']} full-run steps"
            + (f", picked the full-run best in {a['fidelity']['hits']}/{a['fidelity']['rounds_checked']} "
               f"checkable rounds" if "fidelity" in a else "") for s, a in per_seed.items()))
    for key, x in (report.get("extras") or {}).items():
        seed, arm = key.split("/", 1)
        best = (x.get("study") or {}).get("best") or {}
        parts = [f"best trial {best['number']} of {x['study']['trials']} ({x['study']['sampler']})"] if best else []
        if "tokens" in x:
            parts.append(f"{x['tokens'].get('input', 0)} in / {x['tokens'].get('output', 0)} out tokens, "
                         f"${x.get('cost_usd', 0.0):.4f}")
        if "ideas" in x:
            parts.append(f"{len(x['ideas'])} idea(s): " + "; ".join(i["description"] for i in x["ideas"]))
        parts += [f"error: {e}" for e in (x.get("errors") or [])[:3]]
        print(f"arms: {arm} seed {seed}: " + "; ".join(parts))
    print(f"arms: wrote {jpath} and {hpath}")


def write_reports(report: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    jpath, hpath = out / "arms_report.json", out / "arms_report.html"
    jpath.write_text(json.dumps(report, indent=1, default=str))
    hpath.write_text(render_html(report))
    return jpath, hpath


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '4,7' -> [4, 7]; '5,' -> [5]."""
    if "," not in text:
        return list(range(int(text)))
    return [int(s) for s in text.split(",") if s.strip()]


def main(argv: list[str] | None = None) -> int:
    from search.throughput import load_profile
    ap = argparse.ArgumentParser(prog="python -m search.arms", description=__doc__.split("\n\n")[0],
                                 epilog="Details and measured figures: docs/hyperband.md", allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the arms and write arms_report.json/.html", allow_abbrev=False)
    r.add_argument("--quick", action="store_true", help=f"{QUICK}")
    r.add_argument("--train", type=Path, default=Path("train.py"))
    r.add_argument("--warm-prior", type=Path, default=None)
    r.add_argument("--seeds", default="", help="N (seeds 0..N-1) or a comma-separated list such as "
                   "4,7 (one seed s: 's,'); overrides the mode's")
    r.add_argument("--budget-steps", type=int, default=None)
    r.add_argument("--max-steps", type=int, default=None)
    r.add_argument("--min-steps", type=int, default=None)
    r.add_argument("--arms", default=",".join(ARMS), help="comma-separated; 'screen' is screen-K")
    r.add_argument("--screen-k", type=int, default=SCREEN_K, help="candidates per screen round")
    r.add_argument("--workers", type=int, default=None)
    r.add_argument("--out", type=Path, default=Path("out/arms"))
    r.add_argument("--full-size", action="store_true", help="search the train.py model as is "
                   "(default in quick mode: the small base model of search/space.py)")
    rp = sub.add_parser("report", help="recompute the summaries of a saved arms_report.json and "
                        "rewrite it and the HTML next to it", allow_abbrev=False)
    rp.add_argument("path", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "report":
        report = resummarize(json.loads(args.path.read_text()))
        jpath, hpath = write_reports(report, args.path.parent)
        print_report(report, jpath, hpath)
        return 0
    if args.quick and not os.environ.get("AUTORESEARCH_PROFILE"):
        os.environ["AUTORESEARCH_PROFILE"] = QUICK_PROFILE     # before prepare is imported anywhere
    mode = dict(QUICK if args.quick else FULL)
    if args.seeds:
        mode["seeds"] = parse_seeds(args.seeds)
    for k in ("budget_steps", "max_steps", "min_steps"):
        if getattr(args, k):
            mode[k] = getattr(args, k)
    if mode["budget_steps"] is None:
        mode["budget_steps"] = fair_budget(mode["max_steps"], mode["min_steps"], mode["eta"],
                                           SweepSettings(mode["max_steps"], mode["min_steps"]).decay())
    workers = args.workers or load_profile()["workers"]
    if args.out.exists():
        shutil.rmtree(args.out)
    from search.space import SMALL_BASE
    base = None if (args.full_size or not args.quick) else SMALL_BASE
    report = run_arms(args.train.resolve(), args.out, workers=workers, base_knobs=base,
                      arms=[a for a in args.arms.split(",") if a], warm_prior=args.warm_prior,
                      screen_k_default=args.screen_k, **mode)
    jpath, hpath = write_reports(report, args.out)
    print_report(report, jpath, hpath)
    return 0


if __name__ == "__main__":
    sys.exit(main())
