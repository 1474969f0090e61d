"""Benchmark the loop's fixed overhead per experiment with the offline proposer.

    uv run scripts/bench_loop.py [--budget 20] [--experiments 3] [--keep]

Copies prepare.py, train.py and program.md into a throwaway git repo, runs agent/loop.py there
(offline proposer, the data of AUTORESEARCH_CACHE / AUTORESEARCH_PROFILE as set), then reads the
journal and prints, per experiment and as medians: wall time of the experiment, training_seconds,
and the overhead (wall minus training) split into startup (process start, imports, model build,
warm-up steps, saving the model), eval (train.py's own; 0 in the loop, where runs are sealed),
verify (the trusted evaluation: the one evaluation per run, in its own sandboxed process), git and
proposal (time the loop waited for a proposal). That table is per experiment, and an experiment of
the judge may take several training runs (the baseline's repeats, confirming runs, the
incumbent's): the lines under it are per run. The fixed overhead per run is the loop's wall time
not spent training over the runs (startup, trusted evaluation, git, proposal wait), runs
per decision are printed apart, and the duty cycle counts every run's training (confirmations and
reruns included) over the loop's wall time. Targets: overhead <= 3% of a 300 s budget on a GPU,
<= 6% on the 2-core CPU.
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
FILES = ("prepare.py", "runtime.py", "attention.py", "graph_export.py", "train.py", "program.md")
# The overhead targets (a GPU, the 2-core CPU), as a fraction of the default 300 s budget.
TARGET_FRACTION = 0.03
TARGET_FRACTION_CPU = 0.06
OUT = REPO / "out" / "bench_loop.json"


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
                   cwd=cwd, check=True, capture_output=True)


def per_run_figures(records: list[dict], loop_wall: float) -> dict:
    """Per training run, not per experiment: a decision of the judge may take several runs (the
    baseline's repeats, confirming runs, the incumbent's), each of them training. Every run's
    training seconds (the record's run and its reruns, one figure per log); the fixed overhead per
    run is the experiments' wall time not spent training over the runs (the loop's one-time set-up
    left out); runs per decision apart."""
    from harness.experiment_record import ExperimentRecord
    recs = [ExperimentRecord.from_dict(r) for r in records]
    training, runs, git_s, proposal_s, wall = 0.0, 0, 0.0, 0.0, 0.0
    for rec in recs:
        trained = {rec.log: rec.timing("training") or 0.0} if rec.log else {}
        for r in rec.reruns:
            summary = r.get("summary") if isinstance(r.get("summary"), dict) else {}
            if r.get("log"):
                trained[r["log"]] = float(summary.get("training_seconds") or 0.0)
        training += sum(trained.values())
        runs += rec.training_runs
        git_s += rec.timing("git") or 0.0
        wall += rec.timing("total") or 0.0
        proposal_s += rec.timing("proposal_wait") or 0.0
    exps = [r for r in recs if r.proposer != "baseline"]
    exp_runs = sum(r.training_runs for r in exps)
    return {"runs": runs, "training": training, "duty_cycle": training / loop_wall if loop_wall else 0.0,
            "overhead_per_run": (wall - training) / runs if runs else 0.0,
            "git_per_run": git_s / runs if runs else 0.0, "proposal_per_run": proposal_s / runs if runs else 0.0,
            "decisions": len(exps), "experiment_runs": exp_runs,
            "runs_per_decision": exp_runs / len(exps) if exps else None,
            "baseline_runs": sum(r.training_runs for r in recs if r.proposer == "baseline")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
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
    per_run = per_run_figures(records, loop_wall)
    med["overhead_per_run"] = per_run["overhead_per_run"]
    print(f"\nfixed overhead per run: {per_run['overhead_per_run']:.2f}s = startup {med['startup']:.2f} + trusted "
          f"evaluation {med['verify']:.2f} (medians of the decisions' last runs) + git {per_run['git_per_run']:.2f} + "
          f"proposal wait {per_run['proposal_per_run']:.2f} + other (the experiments' time not training, over "
          f"{per_run['runs']} runs; {per_run['overhead_per_run'] / 300:.1%} of a 300 s budget; targets "
          f"{TARGET_FRACTION:.0%} GPU, {TARGET_FRACTION_CPU:.0%} CPU)")
    rpd = per_run["runs_per_decision"]
    print(f"runs per decision: {rpd:.2f} ({per_run['experiment_runs']} runs over {per_run['decisions']} decisions "
          f"after the baseline)" if rpd is not None else "runs per decision: - (no decision after the baseline)",
          f"; the baseline {per_run['baseline_runs']} runs", sep="")
    duty = per_run["duty_cycle"]
    print(f"duty cycle: {duty:.1%} of the loop's wall time trains ({per_run['training']:.1f}s of training over every "
          f"run, the baseline's repeats, confirming runs and reruns included)")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"budget": args.budget, "experiments": rows, "median": med,
                               "loop_wall": loop_wall, **per_run}, indent=1))
    print(f"figures: {OUT}")
    if args.keep:
        print(f"repo kept at {repo}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
