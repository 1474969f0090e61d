"""Throughput harness: `tune` the worker/thread split for this machine, `bench` it against the baseline.

    uv run python -m search.throughput tune    # probe splits, write harness_profile.json
    uv run python -m search.throughput bench   # baseline vs harness on the same bracket, side by side
    uv run python -m search.throughput bench --executor ray   # + the harness's schedule on Ray tasks

The baseline is what a plain sweep does: candidates one after another, each `python train.py`
from scratch (all cores, a fresh process per evaluation, no promotion). The harness runs the same
bracket with the same candidates through long-lived workers (search/pool.py), parallel rungs,
adaptive threads and checkpoint promotion (search/hyperband.py). Both print wall-clock time and
candidate-evaluations per hour; the ratio is the speedup. Figures depend on the machine's load:
run it on an otherwise idle machine, and read docs/hyperband.md for what we measured.
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

import numpy as np

from search.hyperband import (Candidate, Task, bracket_cost, hyperband_brackets, run_schedule)
from search.pool import Pool, run_tasks, worker_seal
from search.space import Space, config_id, write_candidate

# Where the tuned profile lives (git-ignored); AUTORESEARCH_HARNESS_PROFILE overrides.
PROFILE_FILE = "harness_profile.json"
# Steps of one probe task in `tune`: long enough that startup does not dominate.
TUNE_STEPS = 12
# Bench defaults: one bracket of 9 candidates, rungs 9x3, 3x9, 1x27 steps (eta 3).
BENCH_MAX_STEPS, BENCH_MIN_STEPS, BENCH_ETA = 27, 3, 3


def profile_path() -> Path:
    return Path(os.environ.get("AUTORESEARCH_HARNESS_PROFILE") or PROFILE_FILE)


def load_profile() -> dict:
    """The tuned split, or a default (one single-thread worker per core) when never tuned."""
    cores = os.cpu_count() or 1
    path = profile_path()
    if path.exists():
        try:
            prof = json.loads(path.read_text())
            if prof.get("cores") == cores and int(prof.get("workers", 0)) >= 1:
                return prof
            print(f"throughput: {path} was tuned for {prof.get('cores')} cores, this machine has "
                  f"{cores}; using the default split (re-run tune)", file=sys.stderr)
        except (ValueError, TypeError) as e:
            print(f"throughput: ignoring unreadable {path} ({e}); re-run tune", file=sys.stderr)
    return {"workers": cores, "threads": 1, "cores": cores, "tuned": False}


def splits(cores: int) -> list[tuple[int, int]]:
    """(workers, threads per worker) with workers * threads == cores, plus oversubscription by 2."""
    out = [(w, cores // w) for w in range(1, cores + 1) if cores % w == 0]
    return out + [(2 * cores, 1)]


def tune(train: Path, prepare_dir: Path, steps: int = TUNE_STEPS, small: bool = False, log=print) -> dict:
    """Measure aggregate steps/s of each split with real training tasks; persist the best."""
    from search import knobs
    from search.space import SMALL_BASE
    cores = os.cpu_count() or 1
    import prepare
    source, _ = knobs.for_profile(train.read_text(), prepare.PROFILE)   # the profile's knob values
    if small:                              # tune for the small model (what bench and quick arms run)
        source = knobs.set_knobs(source, SMALL_BASE)
    work = Path(tempfile.mkdtemp(prefix="tune-"))
    train = work / ("small_train.py" if small else "train.py")
    train.write_text(source)
    results = {}
    try:
        for workers, threads in splits(cores):
            box, view = worker_seal(log)
            with Pool(workers, prepare_dir=prepare_dir, log_dir=work / f"w{workers}", cores=cores,
                      threads=threads, sandbox=box, data=view, root=work) as pool:
                warm = [Task(f"warm{i}", "base", train, 1, 0) for i in range(workers)]
                run_tasks(pool, warm)                  # workers up, torch imported, data cached
                tasks = [Task(f"t{i}", "base", train, steps, 0, seed=i) for i in range(workers)]
                t0 = time.time()
                res = run_tasks(pool, tasks)
                wall = time.time() - t0
            bad = [r for r in res if r.val_bpb is None]
            if bad:
                raise RuntimeError(f"tune: probe task failed ({bad[0].error}); see {bad[0].log}")
            rate = workers * steps / wall
            results[f"{workers}x{threads}"] = round(rate, 3)
            log(f"tune: {workers} workers x {threads} threads: {rate:.2f} steps/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = max(results, key=results.get)
    w, t = (int(x) for x in best.split("x"))
    prof = {"workers": w, "threads": t, "cores": cores, "steps_per_s": results, "tuned": True,
            "small_base": small, "steps": steps,
            "source_len": len(source), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    profile_path().write_text(json.dumps(prof, indent=2))
    log(f"tune: best {w} workers x {t} threads -> {profile_path()}")
    return prof


class _Fixed:
    """make_candidates for run_schedule that hands out the same pre-written candidates."""

    def __init__(self, cands: list[Candidate]):
        self.cands = cands

    def __call__(self, index, bracket):
        return self.cands[:bracket.rungs[0].n]


class BenchFailed(RuntimeError):
    """A benchmark arm measured nothing: no speedup or winner can be reported."""


def _why(recs: list[dict]) -> str:
    """The first failed task's reason: its error, and its log's last line (the exception)."""
    bad = next((r for r in recs if r.get("val_bpb") is None), None)
    if bad is None:
        return "no task reported a val_bpb"
    last = ""
    if bad.get("log") and Path(bad["log"]).is_file():
        lines = [ln for ln in Path(bad["log"]).read_text(errors="replace").splitlines() if ln.strip()]
        last = lines[-1].strip()[:400] if lines else ""
    return "; ".join(x for x in (bad.get("error") or "", last, f"log {bad.get('log')}" if bad.get("log") else "") if x)


def bench(train: Path, prepare_dir: Path, out: Path, *, max_steps=BENCH_MAX_STEPS,
          min_steps=BENCH_MIN_STEPS, eta=BENCH_ETA, decay_steps=1, seed=0, small=True, log=print,
          executor: str | None = None, ray_address: str | None = None, gpus_per_task: float = 0) -> dict:
    """Same bracket, same candidates: baseline (sequential, from scratch) vs the harness; with
    `executor` ("local" or "ray") a third arm runs the harness's schedule on that executor."""
    from search import knobs
    from search.space import SMALL_BASE
    import prepare
    source, _ = knobs.for_profile(train.read_text(), prepare.PROFILE)   # the profile's knob values
    if small:
        source = knobs.set_knobs(source, SMALL_BASE)
    space = Space.for_source(source)
    bracket = hyperband_brackets(max_steps, min_steps, eta)[0]
    rng = np.random.default_rng(seed)
    configs = [space.sample(rng) for _ in range(bracket.rungs[0].n)]
    cands = [Candidate(config_id(c), c, write_candidate(source, space, c, out / "candidates")) for c in configs]
    prof = load_profile()
    cores = prof["cores"]
    report = {"small_base": small, "bracket": [[r.n, r.steps] for r in bracket.rungs], "decay_steps": decay_steps,
              "candidates": len(cands), "cores": cores, "profile": prof}
    arms = {
        "baseline": dict(workers=1, mode="subprocess", threads=cores, promotion=False, overlap=False),
        "harness": dict(workers=prof["workers"], mode="inprocess", threads=None, promotion=True, overlap=True),
    }
    if executor:
        arms[f"executor-{executor}"] = dict(workers=prof["workers"], mode=executor, threads=prof.get("threads") or 1,
                                            promotion=True, overlap=True)
    for name, a in arms.items():
        log(f"bench: {name}: {a['workers']} worker(s), {a['mode']}, promotion {a['promotion']}")
        t0 = time.time()
        if a["mode"] in ("local", "ray"):
            from search.executor_pool import open_executor_pool
            tasks = open_executor_pool(a["mode"], a["workers"], prepare_source=(prepare_dir / "prepare.py").read_text(),
                                       run_dir=out / name, ray_address=ray_address,
                                       gpus_per_task=gpus_per_task, threads=a["threads"])
        else:
            box, view = worker_seal(log)
            tasks = Pool(a["workers"], prepare_dir=prepare_dir, log_dir=out / name / "logs", cores=cores,
                         mode=a["mode"], threads=a["threads"], sandbox=box, data=view,
                         root=out)   # the arms share out/candidates: the sandbox sees the whole folder
        with tasks as pool:
            recs = run_schedule(pool, [bracket], _Fixed(cands), decay_steps=decay_steps,
                                ckpt_dir=out / name / "ckpt", seed=seed, promotion=a["promotion"],
                                overlap=a["overlap"])
        wall = time.time() - t0
        evals = sum(1 for r in recs if r.get("val_bpb") is not None)
        final = [r for r in recs if r["rung"] == len(bracket.rungs) - 1 and r.get("val_bpb") is not None]
        report[name] = {"wall_s": round(wall, 2), "evals": evals, "tasks": len(recs),
                        "evals_per_hour": round(evals / wall * 3600, 1),
                        "steps": bracket_cost(bracket, decay_steps, a["promotion"]),
                        "winner": final[0]["cand"] if final else None,
                        "winner_bpb": final[0]["val_bpb"] if final else None}
        log(f"bench: {name}: {wall:.1f}s, {evals} evals, {report[name]['evals_per_hour']:.0f} evals/hour, "
            f"winner {report[name]['winner']} ({report[name]['winner_bpb']})")
        if not final:   # an arm that measured nothing has no speed and no winner to compare
            raise BenchFailed(f"the {name} arm measured nothing ({evals} of {len(recs)} evaluations"
                              f"{', no final rung' if evals else ''}): {_why(recs)}")
    report["speedup"] = round(report["baseline"]["wall_s"] / report["harness"]["wall_s"], 3)
    report["same_winner"] = report["baseline"]["winner"] == report["harness"]["winner"]
    report["load_avg"] = os.getloadavg()
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    log(f"bench: speedup {report['speedup']:.2f}x wall-clock; evals/hour "
        f"{report['baseline']['evals_per_hour']:.0f} -> {report['harness']['evals_per_hour']:.0f}; "
        f"same winner: {report['same_winner']}; load average {report['load_avg'][0]:.2f} "
        f"(other processes on the machine slow both arms)")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m search.throughput", description=__doc__.split("\n\n")[0],
                                 epilog="Details and measured figures: docs/hyperband.md", allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune", help="probe worker/thread splits, write harness_profile.json", allow_abbrev=False)
    t.add_argument("--steps", type=int, default=TUNE_STEPS)
    t.add_argument("--small", action="store_true", help="probe with the small base model")
    b = sub.add_parser("bench", help="baseline vs harness on the same bracket and candidates", allow_abbrev=False)
    b.add_argument("--max-steps", type=int, default=BENCH_MAX_STEPS)
    b.add_argument("--min-steps", type=int, default=BENCH_MIN_STEPS)
    b.add_argument("--eta", type=int, default=BENCH_ETA)
    b.add_argument("--decay-steps", type=int, default=1)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--out", type=Path, default=Path("out/bench"))
    b.add_argument("--full-size", action="store_true", help="bench train.py's own model size "
                   "(default: the small base model of search/space.py, seconds per run)")
    for p in (t, b):
        p.add_argument("--train", type=Path, default=Path("train.py"))
    b.add_argument("--executor", choices=["local", "ray"], default=None,
                   help="add an arm that runs the harness's schedule on this executor (executors/)")
    b.add_argument("--ray-address", default=None, help="with --executor ray: join this Ray cluster")
    b.add_argument("--gpus-per-task", type=float, default=0, help="with --executor: GPUs per task")
    args = ap.parse_args(argv)
    import prepare
    prepare_dir = Path(prepare.__file__).resolve().parent
    if args.cmd == "tune":
        tune(args.train.resolve(), prepare_dir, args.steps, small=args.small)
    else:
        if args.out.exists():
            shutil.rmtree(args.out)
        try:
            bench(args.train.resolve(), prepare_dir, args.out, max_steps=args.max_steps,
                  min_steps=args.min_steps, eta=args.eta, decay_steps=args.decay_steps, seed=args.seed,
                  small=not args.full_size, executor=args.executor, ray_address=args.ray_address,
                  gpus_per_task=args.gpus_per_task)
        except BenchFailed as exc:
            print(f"bench failed: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
