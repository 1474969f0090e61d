"""Benchmark the loop's fixed overhead per experiment with the offline proposer.

    uv run scripts/bench_loop.py [--budget 20] [--experiments 3] [--keep]

Copies prepare.py, train.py and program.md into a throwaway git repo, runs agent/loop.py there
(offline proposer, the data of AUTORESEARCH_CACHE / AUTORESEARCH_PROFILE as set), then reads the
journal and prints, per experiment and as medians: wall time of the experiment, training_seconds,
and the overhead (wall minus training) split into startup (process start, imports, model build,
warm-up steps, saving the model), eval (train.py's own; 0 in the loop, where runs are sealed),
verify (the trusted evaluation: the one evaluation per run, in its own sandboxed process), git and
proposal (time the loop waited for a proposal). The duty cycle is sum(training_seconds) / loop
wall time. Targets: overhead <= 3% of a 300 s budget on a GPU, <= 6% on the 2-core CPU.
Figures go to out/bench_loop.json too.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILES = ("prepare.py", "runtime.py", "attention.py", "train.py", "program.md")
# The overhead targets (a GPU, the 2-core CPU), as a fraction of the default 300 s budget.
TARGET_FRACTION = 0.03
TARGET_FRACTION_CPU = 0.06
OUT = REPO / "out" / "bench_loop.json"


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
                   cwd=cwd, check=True, capture_output=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=20.0, help="training seconds per experiment")
    p.add_argument("--experiments", type=int, default=3, help="experiments, baseline included")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline-repeats", type=int, default=None,
                   help="the loop's --baseline-repeats (default: the loop's own, 5)")
    p.add_argument("--keep", action="store_true", help="keep the throwaway repo and print its path")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    repo = tmp / "repo"
    repo.mkdir()
    for name in FILES:
        shutil.copy(REPO / name, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", *FILES)
    git(repo, "commit", "-q", "-m", "bench base")

    cmd = [sys.executable, str(REPO / "agent" / "loop.py"), "--tag", "bench", "--proposer", "offline",
           "--budget", f"{args.budget:g}", "--max-experiments", str(args.experiments),
           "--seed", str(args.seed)]
    if args.baseline_repeats is not None:
        cmd += ["--baseline-repeats", str(args.baseline_repeats)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    loop_wall = time.monotonic() - t0
    run_dir = repo / ".autoresearch" / "bench"
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", file=sys.stderr)
        return 1
    records = [json.loads(l) for l in (run_dir / "journal.jsonl").read_text().splitlines() if l.strip()]
    records = [r for r in records if r.get("kind", "experiment") == "experiment"]

    rows = []
    for r in records:
        t = r["timings"]
        verify = float(r.get("verify_seconds") or 0.0)
        rows.append({"n": r["n"], "status": r["status"], "wall": t["total"], "training": t["training"],
                     "overhead": t["total"] - t["training"], "startup": t["startup"], "eval": t["eval"],
                     "verify": verify, "git": t["git"], "proposal": t["proposal_wait"],
                     "other": t["total"] - t["training"] - t["startup"] - t["eval"] - verify - t["git"]
                     - t["proposal_wait"]})
    keys = ("wall", "training", "overhead", "startup", "eval", "verify", "git", "proposal", "other")
    print(f"budget {args.budget:g}s, {len(rows)} experiments, loop wall {loop_wall:.1f}s "
          f"(setup included)\n")
    print("  n  status   " + "".join(f"{k:>10}" for k in keys))
    for row in rows:
        print(f"{row['n']:3d}  {row['status']:<8}" + "".join(f"{row[k]:10.2f}" for k in keys))
    med = {k: statistics.median(row[k] for row in rows) for k in keys}
    print("med  " + " " * 8 + "".join(f"{med[k]:10.2f}" for k in keys))
    trained = sum(row["training"] for row in rows)
    duty = trained / loop_wall if loop_wall else 0.0
    duty_exp = trained / sum(row["wall"] for row in rows)
    print(f"\nmedian fixed overhead per experiment: {med['overhead']:.2f}s "
          f"({med['overhead'] / 300:.1%} of a 300 s budget; targets {TARGET_FRACTION:.0%} GPU, "
          f"{TARGET_FRACTION_CPU:.0%} CPU)")
    print(f"duty cycle: {duty:.1%} of the loop's wall time ({duty_exp:.1%} of the experiments' wall time)")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"budget": args.budget, "experiments": rows, "median": med,
                               "loop_wall": loop_wall, "duty_cycle": duty,
                               "duty_cycle_experiments": duty_exp}, indent=1))
    print(f"figures: {OUT}")
    if args.keep:
        print(f"repo kept at {repo}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
