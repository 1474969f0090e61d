"""The research outcome: how much really better is the model a night ends with, per arm, at equal runs?

    uv run scripts/bench_research.py [--nights 3] [--first-night K] [--max-runs 20 | --device-seconds S]
        [--rules reference,default,strict] [--searches local,tpe,...] [--bases tuned,handicapped]
        [--steps 16 | --wall-clock S] [--early-stop] [--remeasure-seeds 4] [--baseline-repeats N]
        [--load-procs N] [--out out/bench_research]
    uv run scripts/bench_research.py --table A.json B.json ... --out DIR   (nights run apart, merged)

One night is the real loop (agent/loop.py's Loop, offline proposer, the sandbox) in a throwaway
repository of its own, stopped by --max-runs: every arm spends the same training runs (the
baseline's repeats, confirming runs, incumbent reruns and crashed tries count; the last
experiment may run past the limit by its own confirmations, and the table says how many runs each
night took). An arm is a keep rule (the loop's --rule: `reference`, the reference protocol, one run
per experiment, keep if lower; `default`, advance on evidence; `strict`, confirm every keep), all
sealed and judged on the trusted figure, and an offline search (local, tpe, local-fine), from a base: the
tuned base a new tag starts from (train.py at the tiny profile's values), or the handicapped one
of scripts/bench_judge.py (LOGIT_SOFTCAP 3.0). Night k of every arm uses search seed k, and the
arms' nights are interleaved, so a bench cut short has as many nights of every arm.

After each night the final incumbent and the base are re-measured (agent/remeasure.py): runs of
their train.py through the loop's own run path, sealed and evaluated by the trusted evaluator, on
fresh seeds (never a seed the loop used; every re-measurement uses the same seeds, so a base and a
final that share a train.py share their figure). Per arm it prints: the true gain over the base
(re-measured base minus re-measured final, mean over nights with its standard error; with one
night, the re-measurements' own standard error, marked), the honesty gap (the figure the loop
recorded for its best minus the re-measured final: negative is a loop that believes itself better
than it is), keeps, runs per decision (the experiments' runs over their decisions, baseline
apart), and wall time per night. Fixed steps by default (AUTORESEARCH_STEPS: what a run learns
depends on its seed, not the machine's load); `--wall-clock S` runs the loop's own wall-clock
budget of S seconds instead, and with `--load-procs N` N CPU burners come and go while the loop
runs (scripts/bench_load.py, spells of 20-90 s, the schedule seeded by the night's seed: the regime
of a busy laptop, where a run's figure carries the load it met); the re-measurements then run on a
quiet machine. Under the table, for each seed both reviewers ran: how many of their
first decisions were identical (the same proposals while they agree), then the experiments each
reached. Writes <out>/bench_research.json after every night, and keeps each night's journal beside
it (journal-<base>-<rule>-<search>-<seed>.jsonl: every run's clock and printed curve, on which
scripts/stop_rules.py replays early-stop rules the night did not use).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_judge as bj  # noqa: E402
import bench_load  # noqa: E402
from agent import budget  # noqa: E402
from agent.loop import BASELINE_DESCRIPTION  # noqa: E402
from agent import seeds as seedkeys  # noqa: E402
from agent.remeasure import Remeasured, remeasure  # noqa: E402
from search import knobs  # noqa: E402
from harness.results import read_journal  # noqa: E402

RULES = ("reference", "default", "strict")
# The night's end re-measures the default rule's final on this many fresh seeds inside its runs
# (its headline); the reference and the strict rule headline their recorded figure, as they always have.
FINAL_RUNS = {"default": 2, "reference": 0, "strict": 0}
SEARCHES = ("local", "tpe", "local-fine")
BASES = ("tuned", "handicapped")
# A night's runs and the re-measurement's seeds by default: the issue's protocol (30 runs, 4 seeds).
MAX_RUNS = 30
REMEASURE_SEEDS = 4
# Seeds each early-stopped candidate and its parent are run on to its end (--early-stop): enough to
# tell a stopped gain of a few sigma from a stopped loser, at two runs of each.
FALSE_STOP_SEEDS = 2
# The loop's --budget under fixed steps: it only sets the run's timeout (max(2x, budget + 300 s)).
FIXED_STEPS_BUDGET = 60.0
# The bench's default regime, as regime_of() names it (and the regime of nights written without one).
DEFAULT_REGIME = f"steps {bj.STEPS}"


def base_sources(steps: int | None, bases) -> tuple[dict, dict[str, str]]:
    """The runs' environment and each base's train.py (bench_judge's set-up: tiny profile, no key)."""
    env, tuned = bj.bench_base(steps or bj.STEPS, handicap=False)
    handicapped = knobs.set_knobs(tuned, {bj.HANDICAP[0]: bj.HANDICAP[1]})
    if steps is None:   # wall-clock: the loop's own budget decides how long a run trains
        os.environ.pop("AUTORESEARCH_STEPS", None)
        env.pop("AUTORESEARCH_STEPS", None)
    out = {"tuned": tuned, "handicapped": handicapped}
    return env, {b: out[b] for b in bases}


def _key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def night(root: Path, base: str, source: str, reviewer: str, search: str, seed: int, max_runs: int,
          budget_s: float, seeds: list[int], cache: dict[str, Remeasured], baseline_repeats: int | None = None,
          say=print, load_procs: int = 0, early_stop: bool = False, device_seconds: float = 0.0,
          keep_journal: Path | None = None) -> dict:
    """One night of the real loop with keep rule `reviewer` (a --rule) until `max_runs` training
    runs (the default rule's night end inside them: its final re-measured on fresh seeds, its
    headline), then its final incumbent and its base re-measured on `seeds` (`cache`: train.py
    hash -> Remeasured, shared across nights). `load_procs`: burners that come and go while the
    loop runs (not while it re-measures). `keep_journal`: where the night's journal is copied (every
    run's clock and printed curve: a stop rule the night did not use can be tried on it later)."""
    from agent import loop as loopmod
    from agent.console import Console
    from agent.remeasure import night_end
    from agent import gitops
    repo = bj.make_repo(root / f"{base}-{reviewer}-{search}-{seed}", source)
    argv = loop_argv(repo, reviewer, search, seed, budget_s, max_runs, baseline_repeats, early_stop, device_seconds)
    loop = loopmod.Loop(loopmod.parse_args(argv))
    keyed(loop, seedkeys.named_key(f"bench_research night {seed}"))
    loop.panel.console.close()
    loop.panel.console = Console(loop.tag, loop.budget, live=False)
    t0 = time.time()
    measured, load, stops = {}, None, None
    try:
        if load_procs:
            load = bench_load.BackgroundLoad(load_procs, seed=seed).start()
        try:
            loop.run()
            claim = night_end(loop, FINAL_RUNS[reviewer], say=lambda m: say(f"  {m}"))
        finally:
            if load is not None:
                load.stop()
        wall = time.time() - t0
        base_commit = loop.run_info.base_commit
        for role, commit in (("base", base_commit), ("final", loop.last_kept)):
            key = _key(gitops.show_file(repo, commit, "train.py"))
            if key not in cache:
                cache[key] = remeasure(loop, commit, seeds, say=lambda m: say(f"  {m}"))
            measured[role] = cache[key]
        stops = false_stops(loop, repo, seeds[:FALSE_STOP_SEEDS], cache, say) if early_stop else None
    finally:
        loop.stop()
        if keep_journal is not None and (loop.run_dir / "journal.jsonl").exists():
            shutil.copy(loop.run_dir / "journal.jsonl", keep_journal)
    out = summarize_night(base, reviewer, search, seed, loop, measured, wall, max_runs, claim)
    if stops is not None:
        out["early_stops"] = stops
    if load is not None:
        out["load"] = {"procs": load_procs, "on_fraction": load.fraction_on(), "events": load.events}
    return out


def keyed(loop, key: bytes) -> None:
    """Give `loop`'s run folder `key` once its setup made the folder: night k of every rule draws
    the same seeds (agent/seeds.py), so where their decisions agree, so do their runs."""
    setup = loop.setup

    def setup_then_key():
        out = setup()
        seedkeys.set_key(loop.run_dir, key)
        return out
    loop.setup = setup_then_key


def loop_argv(repo: Path, reviewer: str, search: str, seed: int, budget_s: float, max_runs: int,
              baseline_repeats: int | None = None, early_stop: bool = False, device_seconds: float = 0.0) -> list[str]:
    """The loop's command line for one night: `max_runs` runs, or (0) `device_seconds` of them."""
    argv = ["--tag", "night", "--repo", str(repo), "--proposer", "offline", "--reviewer", "hierarchy",
            "--rule", reviewer, "--final-runs", str(FINAL_RUNS[reviewer]),
            "--offline-search", search, "--seed", str(seed), "--budget", f"{budget_s:g}"]
    argv += ["--max-runs", str(max_runs)] if max_runs > 0 else ["--max-run-seconds", f"{device_seconds:g}"]
    if early_stop and reviewer == "default":   # the reference protocol has no early stop
        argv += ["--early-stop"]
    if baseline_repeats is not None:
        argv += ["--baseline-repeats", str(baseline_repeats)]
    return argv


def false_stops(loop, repo: Path, seeds: list[int], cache: dict, say=print) -> list[dict]:
    """What early stopping cost: each candidate the night stopped early, run to its end on `seeds`
    (fresh, outside the night's budget) beside its parent. A stop is false when the candidate
    re-measures lower than the parent it was stopped against (a real gain thrown away); `clear` when
    by more than twice the difference's standard error."""
    from agent import gitops
    out = []
    for r in loop.history:
        if not r.stopped_early or not r.commit or not r.parent:
            continue
        figs = {}
        for role, commit in (("candidate", r.commit), ("parent", r.parent)):
            key = _key(gitops.show_file(repo, commit, "train.py"))   # a final's or base's figure if it is one
            if key not in cache and f"stops:{key}" not in cache:
                cache[f"stops:{key}"] = remeasure(loop, commit, seeds, say=lambda m: say(f"  {m}"))
            figs[role] = cache.get(key) or cache[f"stops:{key}"]
        c, p = figs["candidate"], figs["parent"]
        diff = c.mean - p.mean if c.mean is not None and p.mean is not None else None
        se = math.hypot(c.se or 0.0, p.se or 0.0) if diff is not None else None
        out.append({"n": r.n, "description": r.description, "candidate_true": c.mean, "parent_true": p.mean,
                    "diff": diff, "se": se, "false": diff is not None and diff < 0,
                    "clear": diff is not None and se is not None and se > 0 and diff < -2 * se})
    return out


def summarize_night(base, reviewer, search, seed, loop, measured: dict, wall: float, max_runs: int,
                    claim: dict | None = None) -> dict:
    recs = [r for r in loop.history if r.is_experiment]
    exps = [r for r in recs if r.proposer != "baseline"]
    b, f = measured["base"], measured["final"]
    recorded = loop.best["val_bpb"] if loop.best else None
    claimed = statistics.fmean(claim["runs"]) if claim and claim["runs"] else None
    headline = claimed if claimed is not None else recorded   # what the night says its final scores
    same = b.values == f.values   # no keep (or a keep of the base's train.py): one figure, gain 0
    se = 0.0 if same else math.hypot(b.se or 0.0, f.se or 0.0)
    exp_runs = sum(r.training_runs for r in exps)
    return {
        "base": base, "reviewer": reviewer, "search": search, "seed": seed, "max_runs": max_runs,
        "runs": budget.runs_done(recs), "baseline_runs": sum(r.training_runs for r in recs if r.proposer == "baseline"),
        "experiments": len(exps), "keeps": sum(r.status == "keep" for r in exps),
        "runs_per_decision": exp_runs / len(exps) if exps else None,
        "one_run_decisions": sum(1 for r in exps if r.training_runs == 1),
        "recorded_best": recorded, "base_true": b.mean, "final_true": f.mean,
        "gain_true": (b.mean - f.mean) if b.mean is not None and f.mean is not None else None,
        "gain_se": se, "honesty_gap": (headline - f.mean) if headline is not None and f.mean is not None else None,
        "recorded_gap": (recorded - f.mean) if recorded is not None and f.mean is not None else None,
        "headline": headline, "claim_runs": len(claim["runs"]) if claim else 0,
        "confirmed": bool(claim and claim["confirmed"]),
        "stepped_back": bool(claim and claim.get("stepped_back_from")),
        "device_seconds": sum((r.timing("runs") or r.timing("run") or 0.0) for r in recs)
        + sum(claim_seconds(c) for c in (read_journal(loop.files.journal_path, kind="claim")[0] if claim else [])),
        "stopped_early": sum(1 for r in exps if r.stopped_early),
        "base_remeasure": b.as_dict(), "final_remeasure": f.as_dict(), "wall_seconds": wall,
        "stop_reason": loop.stop_reason,
        "decisions": [{"n": r.n, "description": r.description, "status": r.status, "runs": r.training_runs,
                       "val_bpb": r.trusted_bpb if r.trusted_bpb is not None else r.printed_bpb,
                       "reason": r.decision_reason} for r in recs],
    }


def claim_seconds(claim: dict | None) -> float:
    """Wall seconds of a night end's runs (each claim records its own: the final's, and its
    parent's after a step back)."""
    return float(claim["seconds"]) if claim and isinstance(claim.get("seconds"), (int, float)) else 0.0


def _mean_se(xs: list[float]) -> tuple[float | None, float | None]:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else None)


def regime(n: dict) -> str:
    """How a night's runs were measured: fixed steps, or a wall-clock budget, under a changing load
    or not (nights written before this key ran the default fixed steps)."""
    return n.get("regime") or DEFAULT_REGIME


def regime_of(args) -> str:
    how = f"steps {args.steps}" if not args.wall_clock else \
        f"wall {args.wall_clock:g}s" + (f" load {args.load_procs}" if args.load_procs else "")
    if args.device_seconds:
        how += f", {args.device_seconds:g} device-s"
    return how + (", early stop" if args.early_stop else "")


def table(nights: list[dict]) -> list[dict]:
    """Per arm (base, reviewer, search, regime): the nights' figures, mean and standard error over nights."""
    arms: dict[tuple, list[dict]] = {}
    for n in nights:
        arms.setdefault((n["base"], n["reviewer"], n["search"], regime(n)), []).append(n)
    rows = []
    for (base, reviewer, search, how), ns in arms.items():
        gain, gain_se = _mean_se([n["gain_true"] for n in ns])
        if gain_se is None and len(ns) == 1:   # one night: the re-measurements' own error (marked)
            gain_se = ns[0]["gain_se"]
        gap, gap_se = _mean_se([n["honesty_gap"] for n in ns])
        rows.append({"base": base, "reviewer": reviewer, "search": search, "regime": how, "nights": len(ns),
                     "gain": gain, "gain_se": gain_se, "gain_se_over_nights": len(ns) > 1,
                     "honesty_gap": gap, "honesty_gap_se": gap_se,
                     "keeps": statistics.fmean(n["keeps"] for n in ns),
                     "experiments": statistics.fmean(n["experiments"] for n in ns),
                     "runs": statistics.fmean(n["runs"] for n in ns),
                     "runs_per_decision": _mean_se([n["runs_per_decision"] for n in ns])[0],
                     "wall_seconds": statistics.fmean(n["wall_seconds"] for n in ns),
                     "device_seconds": statistics.fmean(n.get("device_seconds") or 0.0 for n in ns),
                     "stopped": sum(len(n["early_stops"]) for n in ns if "early_stops" in n),
                     "false_stops": sum(s["false"] for n in ns for s in n.get("early_stops", [])),
                     "clear_false_stops": sum(s["clear"] for n in ns for s in n.get("early_stops", [])),
                     "stepped_back": sum(bool(n.get("stepped_back")) for n in ns)})
    return rows


def parting(nights: list[dict]) -> list[dict]:
    """Where the two reviewers part, per night seed: the reference's night and the judge's of the same
    base, search and seed get the same proposals for as long as their decisions agree (the search
    sees the same history), so the shared prefix of identical decisions (description and status)
    says whether the judge decided differently or only reached fewer experiments in its runs."""
    by = {(n["base"], n["search"], regime(n), n["seed"], n["reviewer"]): n for n in nights}
    out = []
    for (base, search, how, seed, reviewer), ref in sorted(by.items(), key=lambda kv: tuple(map(str, kv[0]))):
        judged = by.get((base, search, how, seed, "default")) or by.get((base, search, how, seed, "hierarchy"))
        if reviewer not in ("reference", "simple") or judged is None or "decisions" not in ref \
                or "decisions" not in judged:
            continue
        a = [d for d in ref["decisions"] if d["description"] != BASELINE_DESCRIPTION]
        b = [d for d in judged["decisions"] if d["description"] != BASELINE_DESCRIPTION]
        shared = next((i for i, (x, y) in enumerate(zip(a, b)) if (x["description"], x["status"]) !=
                       (y["description"], y["status"])), min(len(a), len(b)))
        out.append({"base": base, "search": search, "regime": how, "seed": seed, "shared": shared,
                    "parted_at": a[shared].get("n") if shared < min(len(a), len(b)) else None,
                    "reference_experiments": len(a), "judge_experiments": len(b),
                    "reference_gain": ref["gain_true"], "judge_gain": judged["gain_true"]})
    return out


def render_parting(rows: list[dict]) -> str:
    lines = ["where the reviewers part (same base, search and seed): identical decisions, then experiments each"]
    for r in rows:
        ended = "the judge's night ended inside them" if r["parted_at"] is None else \
            f"then they differ at experiment {r['parted_at']}"
        how = "" if r["regime"] == DEFAULT_REGIME else f"{r['regime']}, "
        lines.append(f"  {r['base']:12s}{r['search']:11s}{how}seed {r['seed']}: {r['shared']} identical ({ended}); "
                     f"experiments {r['reference_experiments']} vs {r['judge_experiments']}; true gain "
                     f"{_f(r['reference_gain'])} vs {_f(r['judge_gain'])}")
    return "\n".join(lines)


def _f(x, fmt="+.4f") -> str:
    return "-" if x is None else format(x, fmt)


def render(rows: list[dict]) -> str:
    regimes = any(r["regime"] != DEFAULT_REGIME for r in rows)   # a column only beside another regime
    out = [f"{'base':12s}{'reviewer':11s}{'search':8s}{'nights':>7s}{'true gain':>18s}{'honesty gap':>18s}"
           f"{'keeps':>7s}{'exps':>6s}{'runs':>6s}{'runs/dec':>9s}{'wall/night':>11s}{'  regime' if regimes else ''}"]
    for r in rows:
        mark = "" if r["gain_se_over_nights"] else "*"
        gain = f"{_f(r['gain'])} ± {_f(r['gain_se'], '.4f')}{mark}"
        gap = f"{_f(r['honesty_gap'])} ± {_f(r['honesty_gap_se'], '.4f')}"
        out.append(f"{r['base']:12s}{r['reviewer']:11s}{r['search']:8s}{r['nights']:7d}{gain:>18s}{gap:>18s}"
                   f"{r['keeps']:7.1f}{r['experiments']:6.1f}{r['runs']:6.1f}{_f(r['runs_per_decision'], '.2f'):>9s}"
                   f"{r['wall_seconds'] / 60:10.1f}m" + (f"  {r['regime']}" if regimes else ""))
    for r in rows:
        if r.get("stopped"):
            out.append(f"{r['base']} {r['reviewer']} {r['search']}: {r['stopped']} candidates stopped early, "
                       f"{r['false_stops']} of them re-measured better than their parent (false stops; "
                       f"{r['clear_false_stops']} by more than 2 se); {r['device_seconds']:.0f} device-s a night")
        if r.get("stepped_back"):
            out.append(f"{r['base']} {r['reviewer']} {r['search']}: {r['stepped_back']} of {r['nights']} night(s) "
                       "stepped back from a final its fresh runs did not hold below its parent")
    if any(not r["gain_se_over_nights"] for r in rows):
        out.append("* one night: the standard error is the re-measurements' own, not the spread over nights")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--nights", type=int, default=3, help="nights per arm (search seeds from --first-night on)")
    p.add_argument("--first-night", type=int, default=0,
                   help="the first night's search seed (a bench split over processes or sessions)")
    p.add_argument("--max-runs", type=int, default=MAX_RUNS, help="training runs per night (the loop's --max-runs)")
    p.add_argument("--rules", default=",".join(RULES), help="the keep rules compared (the loop's --rule)")
    p.add_argument("--searches", default=",".join(SEARCHES))
    p.add_argument("--bases", default=",".join(BASES))
    p.add_argument("--steps", type=int, default=bj.STEPS, help="fixed optimizer steps per run (AUTORESEARCH_STEPS)")
    p.add_argument("--wall-clock", type=float, metavar="S", help="a wall-clock budget of S seconds instead of fixed steps")
    p.add_argument("--load-procs", type=int, default=0, metavar="N",
                   help="with --wall-clock: N CPU burners come and go while the loop runs (scripts/bench_load.py)")
    p.add_argument("--remeasure-seeds", type=int, default=REMEASURE_SEEDS)
    p.add_argument("--early-stop", action="store_true", help="the default rule's nights with --early-stop")
    p.add_argument("--device-seconds", type=float, default=0.0, metavar="S",
                   help="equal device-seconds instead of equal runs: each night stops after S seconds of "
                        "training runs (the loop's --max-run-seconds)")
    p.add_argument("--baseline-repeats", type=int, default=None, help="the judge's (default: the loop's own)")
    p.add_argument("--out", default=str(REPO / "out" / "bench_research"))
    p.add_argument("--keep", action="store_true", help="keep the throwaway repositories and print where")
    p.add_argument("--table", nargs="+", metavar="JSON", help="no nights: the table of the nights in these "
                   "bench_research.json files (a bench split over processes), written to --out")
    args = p.parse_args(argv)
    if args.load_procs and not args.wall_clock:
        p.error("--load-procs needs --wall-clock S: a fixed-step run learns the same under any load")
    if args.table:
        nights = [n for path in args.table for n in json.loads(Path(path).read_text())["nights"]]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_research.json").write_text(json.dumps({"merged": args.table, "table": table(nights),
                                                             "nights": nights}, indent=1, default=str) + "\n")
        print(render(table(nights)))
        if parted := parting(nights):
            print(render_parting(parted))
        return 0
    pick = lambda s, allowed: [x for x in s.split(",") if x in allowed]   # noqa: E731
    reviewers, searches, bases = pick(args.rules, RULES), pick(args.searches, SEARCHES), pick(args.bases, BASES)
    env, sources = base_sources(None if args.wall_clock else args.steps, bases)
    budget_s = args.wall_clock or FIXED_STEPS_BUDGET
    seeds = seedkeys.fresh(seedkeys.named_key("bench_research re-measurements"), args.remeasure_seeds, set())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-research-"))
    command = " ".join(["uv run scripts/bench_research.py", *(argv if argv is not None else sys.argv[1:])])
    caches: dict[str, dict] = {b: {} for b in bases}
    nights: list[dict] = []
    t0 = time.time()
    try:
        for k in range(args.first_night, args.first_night + args.nights):
            for base in bases:
                for reviewer in reviewers:
                    for search in searches:
                        print(f"night {k + 1 - args.first_night}/{args.nights} (seed {k}): {base} base, {reviewer}, {search} search, "
                              f"{args.max_runs} runs", flush=True)
                        n = night(root, base, sources[base], reviewer, search, k,
                                  0 if args.device_seconds else args.max_runs, budget_s, seeds, caches[base],
                                  args.baseline_repeats, load_procs=args.load_procs, early_stop=args.early_stop,
                                  device_seconds=args.device_seconds,
                                  keep_journal=out / f"journal-{base}-{reviewer}-{search}-{k}.jsonl")
                        n["regime"] = regime_of(args)
                        nights.append(n)
                        print(f"  {n['experiments']} experiments, {n['runs']} runs, {n['keeps']} keeps; recorded "
                              f"{_f(n['recorded_best'], '.5f')}, true {_f(n['final_true'], '.5f')} vs base "
                              f"{_f(n['base_true'], '.5f')}: gain {_f(n['gain_true'])}; {n['wall_seconds'] / 60:.1f} min"
                              + (f"; load on {100 * n['load']['on_fraction']:.0f}% of it" if "load" in n else ""),
                              flush=True)
                        rows = table(nights)
                        (out / "bench_research.json").write_text(json.dumps(
                            {"command": command, "steps": None if args.wall_clock else args.steps,
                             "wall_clock": args.wall_clock, "profile": bj.PROFILE, "remeasure_seeds": seeds,
                             "date": time.strftime("%Y-%m-%d %H:%M"), "wall_seconds": time.time() - t0,
                             "table": rows, "nights": nights}, indent=1, default=str) + "\n")
        print(render(table(nights)), flush=True)
        if parted := parting(nights):
            print(render_parting(parted), flush=True)
        print(f"wall time {(time.time() - t0) / 60:.1f} min; figures: {out / 'bench_research.json'}", flush=True)
        return 0
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
