"""One search run over train.py's knobs: space + candidate policy + Hyperband + worker pool.

The policy decides which candidates enter a bracket: uniform random, the cheap prior's LCB
ranking of an oversampled pool (search/prior.py), SNIP saliency on an oversampled pool
(search/snip.py), or a proposer callback (the arms' Claude policy). Whatever the policy, every
rung result is fed back to the prior (when there is one), and every task is written to
`<out>/sweep.jsonl` as it finishes, so a killed sweep loses nothing already measured.

CLI: `uv run python -m search.sweep --max-steps 81 --min-steps 3 --out out/sweep`
(also reachable as `python -m search sweep ...`); `--executor local|ray
[--ray-address ADDR] [--gpus-per-task 1]` runs the tasks on the loop's executors (a Ray cluster
included) instead of the local process pool.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from search.hyperband import Bracket, Candidate, Rung, hyperband_brackets, run_schedule
from search.space import Space, config_id, write_candidate

# Pool size per entrant when a policy (prior, SNIP) picks entrants from an oversampled pool.
OVERSAMPLE = 8
# Share of a prior-picked bracket that is still uniformly random: insurance against a wrong prior.
EXPLORE_FRAC = 0.25
# Cool-down branch length of a rung evaluation, as a fraction of the lowest rung's steps, and its
# floor: train.py's last cool-down step runs at FINAL_LR_FRAC (0 by default), so a 1-step branch
# would not cool down at all; 2 steps give one step at half the LR.
DECAY_FRAC = 0.2
MIN_DECAY = 2


@dataclass
class SweepSettings:
    max_steps: int                 # R: steps of a full evaluation
    min_steps: int                 # r: steps at the lowest rung
    eta: int = 3
    decay_steps: int | None = None # cool-down branch per evaluation (default DECAY_FRAC * min_steps)
    budget_steps: int | None = None  # stop when this many steps are spent (None: one pass of all brackets)
    seed: int = 0
    promotion: bool = True
    overlap: bool = True
    policy: str = "hyperband"      # random | hyperband | prior | snip | prior+snip | proposer
    oversample: int = OVERSAMPLE

    def decay(self) -> int:
        if self.decay_steps is not None:
            return self.decay_steps
        return max(MIN_DECAY, round(DECAY_FRAC * self.min_steps))


@dataclass
class SweepResult:
    records: list[dict]                      # one per task, dispatch order
    best: dict | None                        # {"config", "val_bpb", "steps", "cand"}
    spent_steps: int
    wall: float
    out: Path
    extra: dict = field(default_factory=dict)


def brackets_for(settings: SweepSettings) -> list[Bracket]:
    if settings.policy == "random":          # random search: every candidate gets the full budget
        return [Bracket(0, (Rung(1, settings.max_steps),))]
    return hyperband_brackets(settings.max_steps, settings.min_steps, settings.eta)


def run_sweep(base_source: str, space: Space, pool, out: Path, settings: SweepSettings, *,
              prior=None, snip=None, proposer: Callable[[int, list[dict]], list[dict]] | None = None,
              log: Callable[[str], None] = print) -> SweepResult:
    """Run one search; `prior` (CheapPrior) learns from every result whenever it is given."""
    out = Path(out)
    cand_dir, ckpt_dir = out / "candidates", out / "ckpt"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(settings.seed)
    journal = open(out / "sweep.jsonl", "a")
    history: list[dict] = []
    best: dict | None = None
    t0 = time.time()

    def pick(n: int) -> list[dict]:
        policy = settings.policy
        if policy == "proposer" and proposer is not None:
            configs = proposer(n, history)
            configs = [c for c in configs if set(space.names) <= set(c)][:n]
            return configs + [space.sample(rng) for _ in range(n - len(configs))]
        if policy in ("random", "hyperband"):
            return [space.sample(rng) for _ in range(n)]
        pool_cfgs = [space.sample(rng) for _ in range(n * settings.oversample)]
        chosen: list[int] = []
        if "snip" in policy and snip is not None:
            order = snip.rank(pool_cfgs)                   # best saliency first
            keep = max(n, len(pool_cfgs) // 2) if "prior" in policy else n
            pool_cfgs = [pool_cfgs[i] for i in order[:keep]]
        if "prior" in policy and prior is not None:
            n_rand = int(math.floor(n * EXPLORE_FRAC)) if prior.obs else 0
            chosen = prior.select(pool_cfgs, n - n_rand)
            rest = [i for i in range(len(pool_cfgs)) if i not in chosen]
            chosen += [int(i) for i in rng.permutation(rest)[:n_rand]]
        else:
            chosen = list(range(n))
        return [pool_cfgs[i] for i in chosen]

    def make_candidates(index: int, bracket: Bracket) -> list[Candidate]:
        configs = pick(bracket.rungs[0].n)
        cands, seen = [], set()
        for cfg in configs:
            cid = config_id(cfg)
            while cid in seen:                     # the same config twice in a bracket: resample
                cfg = space.sample(rng)
                cid = config_id(cfg)
            seen.add(cid)
            cands.append(Candidate(cid, cfg, write_candidate(base_source, space, cfg, cand_dir)))
        log(f"bracket {index} (s={bracket.s}): {len(cands)} candidates, rungs "
            + " ".join(f"{r.n}x{r.steps}" for r in bracket.rungs))
        return cands

    def on_result(res, cum_steps: int) -> None:
        nonlocal best
        t = res.task
        cfg = t.meta.get("config", {})
        if prior is not None:
            prior.observe(cfg, t.steps, res.val_bpb)
        rec = {"kind": "sweep_task", "task": t.id, "cand": t.cand, "bracket": t.bracket, "rung": t.rung,
               "steps": t.steps, "cost": t.cost, "cum_steps": cum_steps, "val_bpb": res.val_bpb,
               "config": cfg, "threads": t.threads, "wall": round(res.wall, 3), "error": res.error,
               "resumed": t.state.resume is not None, "at": time.time()}
        history.append(rec)
        journal.write(json.dumps(rec) + "\n")
        journal.flush()
        if res.val_bpb is not None and (best is None or res.val_bpb < best["val_bpb"]
                                        or (res.val_bpb == best["val_bpb"] and t.steps > best["steps"])):
            best = {"config": cfg, "val_bpb": res.val_bpb, "steps": t.steps, "cand": t.cand}
        status = f"{res.val_bpb:.4f}" if res.val_bpb is not None else f"crash ({res.error})"
        log(f"  {t.id}: {t.steps} steps (+{t.cost}) -> {status}  [{res.wall:.1f}s, {t.threads} thr]")

    brackets = brackets_for(settings)
    repeat = settings.budget_steps is not None
    try:
        records = run_schedule(pool, brackets, make_candidates, repeat=repeat,
                               decay_steps=settings.decay(), ckpt_dir=ckpt_dir, seed=settings.seed,
                               promotion=settings.promotion, budget_steps=settings.budget_steps,
                               overlap=settings.overlap, on_result=on_result)
    finally:
        journal.close()
        shutil.rmtree(ckpt_dir, ignore_errors=True)   # states of unfinished brackets
    spent = max((r["cum_steps"] for r in records), default=0)
    return SweepResult(records, best, spent, time.time() - t0, out)


def full_evaluation_winner(result: SweepResult, max_steps: int) -> dict | None:
    """The best candidate among full-budget evaluations (what a sweep should hand on)."""
    full = [r for r in result.records if r.get("val_bpb") is not None and r["steps"] >= max_steps]
    pool = full or [r for r in result.records if r.get("val_bpb") is not None]
    if not pool:
        return None
    r = min(pool, key=lambda r: (r["val_bpb"], -r["steps"]))
    return {"config": r["config"], "val_bpb": r["val_bpb"], "steps": r["steps"], "cand": r["cand"]}


def main(argv: list[str] | None = None, prog: str = "python -m search.sweep") -> int:
    from search.executor_pool import add_executor_args, open_executor_pool
    from search.pool import Pool, worker_seal
    from search.prior import CheapPrior
    from search.throughput import load_profile

    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 epilog="Details and measured figures: docs/hyperband.md", allow_abbrev=False)
    ap.add_argument("--train", default="train.py", help="the train.py whose knobs are searched")
    ap.add_argument("--max-steps", type=int, default=81, help="steps of a full evaluation (R)")
    ap.add_argument("--min-steps", type=int, default=3, help="steps at the lowest rung (r)")
    ap.add_argument("--eta", type=int, default=3, help="keep the best 1/eta at each rung")
    ap.add_argument("--decay-steps", type=int, default=None, help="LR cool-down steps before each evaluation")
    ap.add_argument("--budget-steps", type=int, default=None, help="default: one pass of all brackets")
    ap.add_argument("--policy", default="prior", choices=["random", "hyperband", "prior", "snip", "prior+snip"],
                    help="which candidates enter a bracket (default prior)")
    ap.add_argument("--knobs", default="", help="comma-separated subset of the space's knobs")
    ap.add_argument("--warm-prior", type=Path, default=None, help="prior store to load and extend")
    ap.add_argument("--workers", type=int, default=None, help="default: harness_profile.json or cores")
    ap.add_argument("--seed", type=int, default=0, help="seed of the candidate draws")
    ap.add_argument("--out", type=Path, default=Path("out/sweep"), help="output folder (replaced)")
    ap.add_argument("--small", action="store_true", help="search on the small base model of "
                    "search/space.py (a quick demo on CPU); the winner file keeps that size")
    add_executor_args(ap)
    args = ap.parse_args(argv)

    import prepare
    from search import knobs
    from search.space import SMALL_BASE
    source, _ = knobs.for_profile(Path(args.train).read_text(), prepare.PROFILE)   # the profile's knob values
    if args.small:
        source = knobs.set_knobs(source, SMALL_BASE)
    space = Space.for_source(source, only=[k for k in args.knobs.split(",") if k] or None)
    prof = load_profile()
    workers = args.workers or prof.get("workers") or 2
    settings = SweepSettings(args.max_steps, args.min_steps, args.eta, args.decay_steps,
                             args.budget_steps, args.seed, policy=args.policy)
    prior = None
    if "prior" in args.policy:
        prior = CheapPrior(space, args.max_steps, fingerprint=prepare.data_fingerprint(), profile=prepare.PROFILE)
        if args.warm_prior and args.warm_prior.exists():
            print(f"prior: {prior.warm_start(args.warm_prior)} observations from {args.warm_prior}")
    snip = None
    if "snip" in args.policy:
        from search.snip import SnipFilter
        snip = SnipFilter(source, space)
    print(f"sweep: {', '.join(space.names)} | R={args.max_steps} r={args.min_steps} eta={args.eta} "
          f"decay={settings.decay()} | policy {args.policy} | {workers} workers"
          + ("" if args.executor == "pool" else f" ({args.executor} executor)"))
    if args.executor == "pool":
        box, view = worker_seal()
        tasks = Pool(workers, prepare_dir=Path(prepare.__file__).parent, log_dir=args.out / "logs",
                     cores=prof.get("cores"), sandbox=box, data=view, root=args.out)
    else:   # the loop's executors (executors/): slots here, or Ray tasks on a cluster
        tasks = open_executor_pool(args.executor, workers, prepare_source=Path(prepare.__file__).read_text(),
                                   run_dir=args.out, ray_address=args.ray_address,
                                   gpus_per_task=args.gpus_per_task, threads=prof.get("threads"))
    with tasks as pool:
        res = run_sweep(source, space, pool, args.out, settings, prior=prior, snip=snip)
    if prior is not None and args.warm_prior:
        prior.save(args.warm_prior)
    win = full_evaluation_winner(res, args.max_steps)
    if win is None:
        print("sweep: every candidate crashed; see the logs in", args.out / "logs", file=sys.stderr)
        return 1
    winner_py = args.out / "winner_train.py"
    winner_py.write_text(space.apply(source, win["config"]))
    (args.out / "winner.json").write_text(json.dumps(dict(win, spent_steps=res.spent_steps,
                                                          wall=res.wall), indent=2))
    print(f"sweep: {len(res.records)} tasks, {res.spent_steps} steps, {res.wall:.0f}s; "
          f"winner {win['cand']} val_bpb {win['val_bpb']:.4f} at {win['steps']} steps -> {winner_py}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
