"""The offline proposer's sampler against random search on a synthetic objective with a known optimum.

    uv run scripts/sampler_bench.py [--trials 25] [--seeds 5]

Drives agent/proposers/offline.py exactly as the loop does (each draw measured and put in the
history the next request reads), with a pure-Python objective in place of training (optimum 0.0
at A_LR 0.03, B_RATIO 0.75, C_BETA 0.95, N_LAYERS 5, USE_X True), for TPE, CMA-ES and random sampling
over the same space, and prints the best value each found.
"""
import argparse
import statistics
import tempfile
from pathlib import Path

from tests.test_offline_proposer import search


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--trials", type=int, default=25)
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    got = {"tpe": [], "cmaes": [], "random": []}
    with tempfile.TemporaryDirectory() as d:
        for seed in range(args.seeds):
            for sampler in got:
                got[sampler].append(search(Path(d) / f"{sampler}{seed}", sampler, seed, args.trials))
            print(f"seed {seed}: " + "  ".join(f"{k} {v[-1]:.4f}" for k, v in got.items()), flush=True)
    wins = sum(t < r for t, r in zip(got["tpe"], got["random"]))
    means = ", ".join(f"{k} {statistics.fmean(v):.4f}" for k, v in got.items())
    print(f"{args.trials} trials x {args.seeds} seeds: mean best {means}; tpe better than random on "
          f"{wins}/{args.seeds} seeds")


if __name__ == "__main__":
    main()
