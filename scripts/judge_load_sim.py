"""The judge hierarchy under a load that comes and goes, on simulated runs: nulls kept, gains kept,
gains discarded without escalation.

    uv run scripts/judge_load_sim.py [--benches 40] [--seed 1] [--load-cost 4] [--unpaired]

The real decision code (agent/judges/hierarchy.py: the sequential test, the disturbed-run rules,
the pairing of agent/judges/pairing.py, the escalations) on runs made up here: a run of a commit
gives true value + LOAD_COST x (load - 1) + Normal(0, 1), in sigmas, where the load is 1 (quiet)
or 2 (a CPU burner on), switching after a random spell of 1-6 runs, and the harness's measured
load is handed in as the clock's `load_train`. The plan is scripts/bench_judge.py --quick's: 5
baseline runs, 20 null edits of the incumbent, 10 gains (5 of 3 sigma, 5 of 5) against the
baseline. --unpaired hides the load from the judge (every run reports load 1): the rule before.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.judges.hierarchy import JudgeHierarchy  # noqa: E402
from harness.runner import RunResult  # noqa: E402
from harness.verify import VerifyResult  # noqa: E402

GAINS = (3,) * 5 + (5,) * 5


class Machine:
    """The load, switching between 1 and 2 after spells of 1-6 runs."""

    def __init__(self, rng):
        self.rng, self.load, self.left = rng, 1.0, rng.randint(1, 6)

    def tick(self) -> float:
        self.left -= 1
        if self.left <= 0:
            self.load, self.left = (2.0 if self.load == 1.0 else 1.0), self.rng.randint(1, 6)
        return self.load


def a_run(bpb: float, load: float, shown: bool, verified: bool) -> RunResult:
    clock = {"startup_s": 1.0, "train_s": 10.0, "charged_s": 10.0, "load_train": load if shown else 1.0,
             "pace_s": 0.1}
    extra = {"clock": clock}
    if verified:
        extra["verify_result"] = VerifyResult(True, "verified", bpb, bpb, True, 0.5)
    return RunResult(returncode=0, summary={}, crash_class=None, log_path=None, wall_seconds=1.0,
                     timed_out=False, artifact=None, extra=extra)


def ctx(root, n, commit, best):
    return SimpleNamespace(n=n, tag="sim", worktree=root, run_dir=root, commit=commit, parent="p" * 40,
                           diff="-X = 1\n+X = 2\n", history=[], best=best,
                           proposal=SimpleNamespace(description=f"exp {n}", hypothesis="h"))


def bench(rng, root: Path, cost: float, shown: bool) -> dict:
    h = JudgeHierarchy(baseline_repeats=5)
    m = Machine(rng)
    runs = 0

    def value(true, load):
        return 100.0 + true + cost * (load - 1.0) + rng.gauss(0.0, 1.0)

    def decide(c, true, true_inc):
        nonlocal runs
        asked = None
        while True:
            load = m.tick()
            runs += 1
            if asked is not None and asked.run_next:
                d = h.judge_incumbent(c, a_run(value(true_inc, load), load, shown, True))
            else:
                bpb = value(true, load)
                d = h._decide_on(c, a_run(bpb, load, shown, False),
                                 VerifyResult(True, "verified", bpb, bpb, True, 0.5))
            if not d.is_again:
                return d
            asked = d

    base = "b" * 40
    d = None
    for _ in range(5):
        d = decide(ctx(root, 1, base, None), 0.0, 0.0)
    best = {"commit": base, "val_bpb": d.trusted_bpb}
    inc, inc_true, out = base, 0.0, {"nulls_kept": 0, "gains_kept": 0, "lost": 0, "contested": 0, "paired": 0}
    n = 2
    for i in range(20):
        commit = f"{n:040x}"
        d = decide(ctx(root, n, commit, {"commit": inc, "val_bpb": best["val_bpb"]}), inc_true, inc_true)
        out["paired"] += "paired" in (d.verdicts.get("evidence") or {})
        if d.status == "keep":
            out["nulls_kept"] += 1
            inc = commit
        n += 1
    for g in GAINS:
        commit = f"{n:040x}"
        d = decide(ctx(root, n, commit, dict(best)), -float(g), 0.0)
        kept = d.status == "keep"
        esc = any(e.get("kind") == "contested" for e in d.verdicts["judge"].get("escalations") or [])
        out["gains_kept"] += kept
        out["lost"] += (not kept) and not esc
        out["contested"] += (not kept) and esc
        out["paired"] += "paired" in (d.verdicts.get("evidence") or {})
        n += 1
    out["runs"] = runs
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--benches", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--load-cost", type=float, default=4.0, help="sigmas a run loses at load 2 (default 4)")
    p.add_argument("--unpaired", action="store_true", help="the judge is not shown the load (the rule before)")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    res = []
    for _ in range(args.benches):
        with tempfile.TemporaryDirectory(prefix="judge-load-sim-") as root:
            res.append(bench(rng, Path(root), args.load_cost, not args.unpaired))
    tot = {k: sum(r[k] for r in res) for k in res[0]}
    goal = statistics.fmean(r["nulls_kept"] <= 1 and r["gains_kept"] >= 9 and r["lost"] == 0 for r in res)
    print(f"judge under a load that comes and goes x{args.benches} (load cost {args.load_cost:g} sigma, "
          f"{'load hidden: unpaired' if args.unpaired else 'load measured: paired where it varied'}): "
          f"nulls kept {tot['nulls_kept']}/{20 * len(res)} ({tot['nulls_kept'] / (20 * len(res)):.1%}); "
          f"gains >= 3 sigma kept {tot['gains_kept']}/{10 * len(res)} ({tot['gains_kept'] / (10 * len(res)):.1%}); "
          f"gains discarded without escalation {tot['lost']}; contested {tot['contested']}; "
          f"decisions paired {tot['paired']}; runs per bench {tot['runs'] / len(res):.1f}; "
          f"benches meeting the goal {goal:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
