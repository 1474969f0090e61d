"""Experiments per hour with --workers N: does the coordinator (proposing, git, judging,
recording) keep N "GPUs" busy, or does it serialise them?

    uv run scripts/bench_parallel.py [--hold 20] [--per-worker 3] [--workers 1,2,4,8]
        [--executors local,ray] [--sandbox none|auto]

Each point runs the real loop (agent/loop.py, offline proposer, simple reviewer) on a throwaway
repository whose train.py is a stand-in: it holds its "GPU" for --hold seconds (a sleep: no
compute, so 8 of them fit on a 2-core machine) and prints a synthetic val_bpb from its knobs.
The rate counts the experiments after the baseline, from the first one's start to the last
one's end (journal timestamps); scaling = rate(N) / rate(1). Goal: >= 0.9 N at N = 8.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.loop_fixtures import FAKE_TRAIN, fake_env, fake_repo, git  # noqa: E402

# The stand-in holds its GPU for the budget, as a real run does (train.py trains for the budget).
HOLD_TRAIN = FAKE_TRAIN.replace('time.sleep(float(os.environ.get("FAKE_SLEEP", "0.2")))',
                                'time.sleep(float(os.environ.get("AUTORESEARCH_TIME_BUDGET", "1")))')


def one_point(workers: int, executor: str, hold: float, per_worker: int, sandbox: str, keep: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-par-{executor}-{workers}-"))
    repo = fake_repo(tmp / "repo")
    (repo / "train.py").write_text(HOLD_TRAIN)
    git(repo, "commit", "-qam", "stand-in that holds its GPU for the budget")
    env = fake_env(tmp)
    subprocess.run([sys.executable, "prepare.py"], cwd=repo, env=env, check=True, capture_output=True)
    total = 1 + workers * per_worker
    cmd = [sys.executable, str(REPO / "agent" / "loop.py"), "--tag", "bench", "--budget", f"{hold:g}",
           "--max-experiments", str(total), "--workers", str(workers), "--executor", executor,
           "--reviewer", "simple", "--sandbox", sandbox]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"loop failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    lines = (repo / ".autoresearch" / "bench" / "journal.jsonl").read_text().splitlines()
    recs = [r for r in map(json.loads, lines) if r.get("kind", "experiment") == "experiment"]
    exps = [r for r in recs if r.get("proposer") != "baseline"]
    span = max(r["ended_at"] for r in exps) - min(r["started_at"] for r in exps)
    overhead = sorted(r["timings"]["total"] - hold for r in exps)
    point = {"executor": executor, "workers": workers, "experiments": len(exps), "span_s": round(span, 1),
             "per_hour": round(len(exps) / span * 3600, 1), "wall_s": round(wall, 1),
             "median_overhead_s": round(overhead[len(overhead) // 2], 2),
             "workers_used": sorted({r.get("worker") for r in exps if r.get("worker") is not None})}
    if not keep:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return point


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--hold", type=float, default=20.0, help="seconds each stand-in run holds its GPU")
    ap.add_argument("--per-worker", type=int, default=3, help="experiments per worker at each point")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--sandbox", default="none", choices=("none", "auto", "bwrap"))
    ap.add_argument("--keep", action="store_true", help="keep the temporary repositories")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    points = []
    for executor in args.executors.split(","):
        base = None
        for n in (int(x) for x in args.workers.split(",")):
            pt = one_point(n, executor, args.hold, args.per_worker, args.sandbox, args.keep)
            if base is None:   # the rate of one worker (the first point, normally N = 1)
                base = pt["per_hour"] / n
            pt["scaling"] = round(pt["per_hour"] / base, 2) if base else None
            points.append(pt)
            print(f"{executor:>5}  N={n}  {pt['experiments']:>3} exps in {pt['span_s']:>6}s  "
                  f"{pt['per_hour']:>7}/h  scaling {pt['scaling']}x (goal >= {0.9 * n:.1f}x)  "
                  f"median overhead {pt['median_overhead_s']}s/exp  workers {pt['workers_used']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"hold_s": args.hold, "cores": os.cpu_count(), "points": points}, indent=1))


if __name__ == "__main__":
    main()
