"""Jobs per hour of the executors (executors/) at N = 1, 2, 4, 8 slots.

Each job is a stand-in train.py that holds its "GPU" for a fixed budget (sleeps) and prints a
synthetic val_bpb, run through the real path: files materialised, harness.runner.run_train with
its clock, pid file and process-group handling, the log read back (Ray: sent back from the task
and written into the run folder). Each slot runs `--rounds` jobs, so a figure covers the queueing
and hand-over between jobs too. Scaling at N = rate(N) / (N * rate(1)); 1.0 is perfect.

    uv run python scripts/bench_executors.py [--budget 5] [--slots 1,2,4,8] [--executors local,ray]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from executors import wait  # noqa: E402
from harness.job import TrainJob  # noqa: E402
from executors import LocalExecutor  # noqa: E402

STANDIN = '''
import os, time
time.sleep(float(os.environ["BENCH_BUDGET"]))
print("step 00001 | loss 1.0 | trained 1.0s")
print("---")
print(f"{'val_bpb:':<18}{1.0 + int(os.environ['BENCH_JOB']) / 1000:.6f}")
'''


def run_round(ex, n_jobs: int, budget: float, run_dir: Path) -> tuple[float, int]:
    """Submit n_jobs at once; returns (wall seconds until all are back, how many came back ok)."""
    t0 = time.monotonic()
    ids = [ex.submit(TrainJob(n=i + 1, files={"train.py": STANDIN, "prepare.py": "# stand-in\n"}, budget=budget,
                              run_dir=str(run_dir), timeout=budget * 10 + 120, fetch=(),
                              env={"BENCH_BUDGET": str(budget), "BENCH_JOB": str(i)}))
           for i in range(n_jobs)]
    res = wait(ex, ids, timeout=budget * n_jobs + 600)
    wall = time.monotonic() - t0
    ok = sum(1 for r in res.values() if r.ok and abs(r.summary["val_bpb"] - 1.0) < 1)
    return wall, ok


def make(kind: str, slots: int, root: Path):
    if kind == "local":
        return LocalExecutor(slots, root=root / f"slots-{slots}")
    from executors.ray_exec import RayExecutor
    return RayExecutor(slots=slots, num_cpus_per_job=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--budget", type=float, default=5.0, help="seconds each stand-in job holds its slot")
    ap.add_argument("--slots", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=2, help="jobs per slot")
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    slots = [int(s) for s in args.slots.split(",")]
    kinds = [k for k in args.executors.split(",") if k]
    root = Path(tempfile.mkdtemp(prefix="bench-executors-"))
    figures: dict = {"budget_s": args.budget, "rounds": args.rounds, "cores": os.cpu_count(),
                     "load_avg_start": os.getloadavg()}
    try:
        if "ray" in kinds:
            from executors.ray_exec import start_ray
            t0 = time.monotonic()
            start_ray(num_cpus=max(slots))
            figures["ray_start_s"] = round(time.monotonic() - t0, 1)
            print(f"ray: local runtime up in {figures['ray_start_s']}s")
        for kind in kinds:
            base = None
            for n in slots:
                ex = make(kind, n, root)
                try:
                    run_round(ex, n, 0.1, root / f"warm-{kind}-{n}")     # Ray: N workers up, imports done
                    wall, ok = run_round(ex, n * args.rounds, args.budget, root / f"{kind}-{n}")
                finally:
                    ex.close()
                rate = ok / wall * 3600
                base = base if base is not None else rate
                eff = rate / (n * base) if base else 0.0
                figures[f"{kind}-{n}"] = {"jobs": n * args.rounds, "ok": ok, "wall_s": round(wall, 2),
                                          "jobs_per_hour": round(rate), "scaling": round(eff, 3),
                                          "ideal_wall_s": args.rounds * args.budget}
                print(f"{kind:5s} N={n}: {ok}/{n * args.rounds} jobs in {wall:6.1f}s (ideal "
                      f"{args.rounds * args.budget:.0f}s) -> {rate:7.0f} jobs/hour, scaling {eff:.2f}")
    finally:
        if "ray" in kinds:
            import ray
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    figures["load_avg_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
