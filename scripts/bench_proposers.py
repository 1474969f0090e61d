"""Local steps against TPE draws: which offline search finds more keeps in a night of equal runs?

    uv run scripts/bench_proposers.py --runs 30 [--searches local,tpe] [--base handicapped|tuned]
        [--time-budget S] [--out out/bench_judge]

Each search gets a night of the real loop (agent/loop.py's Loop: the judge hierarchy, sealed runs,
the trusted evaluation) from scripts/bench_judge.py's handicapped baseline (LOGIT_SOFTCAP 3.0,
the tiny profile, AUTORESEARCH_STEPS fixed steps per run), or with --base tuned from the base a
new tag starts from (train.py at the profile's values: where a user's night starts), in
a throwaway repository of its own,
until it has spent RUNS training runs. Prints, per search: experiments, runs, keeps, knobs moved
per proposal and the best val_bpb; writes <out>/bench_proposers.json.

Fixed steps make a run's figure independent of the machine's load, and they also make a bigger
model free (it gets as many steps as a small one), which a 300 s budget would charge for.
`--time-budget S` runs on a wall-clock budget of S seconds instead (the loop's own mode: a bigger
model gets fewer steps, and the figures move with the load: keep the machine otherwise idle).
"""
from __future__ import annotations

import argparse
import json
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

SEARCHES = ("local", "tpe")


def night(repo: Path, search: str, runs: int, budget: float, reviewer: str = "hierarchy") -> dict:
    """The real loop with an offline proposer (`search`: local | tpe) until `runs` training runs."""
    from agent import loop as loopmod
    from agent.console import Console
    args = loopmod.parse_args(["--tag", f"night-{search}", "--repo", str(repo), "--proposer", "offline",
                               "--offline-search", search, "--reviewer", reviewer, "--budget", f"{budget:g}"])
    loop = loopmod.Loop(args)
    loop.panel.console.close()
    loop.panel.console = Console(loop.tag, loop.budget, live=False)
    try:
        loop.setup()
        loop.ensure_baseline()
        while sum(runs_of(r.to_dict()) for r in loop.history if r.is_experiment) < runs:
            loop.experiment(loop.next_attempt(loop.coord.next_n()))
    finally:
        loop.stop()
    recs = [r.to_dict() for r in loop.history if r.is_experiment]
    keeps = [r for r in recs[1:] if r["status"] == "keep"]
    return {"search": search, "experiments": len(recs) - 1, "runs": sum(runs_of(r) for r in recs),
            "keeps": len(keeps), "baseline": recs[0].get("trusted_bpb") or (recs[0].get("summary") or {}).get("val_bpb"),
            "best": (loop.best or {}).get("val_bpb"), "kept": [r["description"] for r in keeps],
            "moved_per_proposal": statistics.fmean(moved(r, recs) for r in recs[1:]) if len(recs) > 1 else 0.0}


def runs_of(rec: dict) -> int:
    """Training runs an experiment's decision rested on (at least its own one: a reviewer that
    records no evidence still ran it once, and a night must end)."""
    return max(1, bj.runs_of(rec))


def moved(rec: dict, recs: list[dict]) -> int:
    """Knobs a proposal moved from its parent's values."""
    parent = next((r.get("config") or {} for r in recs if r.get("commit") == rec.get("parent")), {})
    mine = rec.get("config") or {}
    return sum(1 for k in mine if k in parent and parent[k] != mine[k])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--runs", type=int, default=30, help="training runs per night (baseline repeats included)")
    p.add_argument("--searches", default=",".join(SEARCHES), help="offline searches to compare, comma-separated")
    p.add_argument("--steps", type=int, default=bj.STEPS, help="optimizer steps per run (AUTORESEARCH_STEPS)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="a wall-clock budget of this many seconds per run instead of fixed steps")
    p.add_argument("--base", choices=("handicapped", "tuned"), default="handicapped",
                   help="the night's start: bench_judge's handicapped baseline, or train.py at the profile's values")
    p.add_argument("--out", default=str(REPO / "out" / "bench_judge"))
    args = p.parse_args(argv)
    searches = [s for s in args.searches.split(",") if s]
    if not searches or any(s not in SEARCHES for s in searches):
        p.error(f"--searches takes some of {','.join(SEARCHES)}")
    _, base_source = bj.bench_base(args.steps, handicap=args.base == "handicapped")
    budget = 60.0   # fixed steps: the budget only bounds a run (the loop's timeout is 2x it, at least 10 min)
    if args.time_budget is not None:
        os.environ.pop("AUTORESEARCH_STEPS", None)
        budget = args.time_budget
    root = Path(tempfile.mkdtemp(prefix="bench-proposers-"))
    t0 = time.time()
    res: dict = {}
    try:
        for search in searches:
            r = res[search] = night(bj.make_repo(root / search, base_source), search, args.runs, budget=budget)
            print(f"{search}: {r['experiments']} experiments in {r['runs']} runs, {r['keeps']} kept, "
                  f"best {r['best']:.6f} from {r['baseline']:.6f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res.update(wall_seconds=time.time() - t0, load=os.getloadavg()[0], base=args.base,
               steps=None if args.time_budget is not None else args.steps, time_budget=args.time_budget,
               command=" ".join(["uv run scripts/bench_proposers.py", *(argv if argv is not None else sys.argv[1:])]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_proposers.json").write_text(json.dumps(res, indent=1) + "\n")
    print(f"{'search':8s}{'experiments':>13s}{'runs':>6s}{'keeps':>7s}{'knobs moved':>13s}{'best val_bpb':>14s}")
    for k in searches:
        r = res[k]
        print(f"{k:8s}{r['experiments']:13d}{r['runs']:6d}{r['keeps']:7d}{r['moved_per_proposal']:13.1f}"
              f"{r['best']:14.6f}")
    print(f"{args.base} baseline {res[searches[0]]['baseline']:.6f}; wall {res['wall_seconds'] / 60:.1f} min; load {res['load']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
