"""Screen K candidate train.py sources at short step budgets with successive halving.

For `agent/loop.py --screen K`: the proposer makes K edits, `screen()` trains all K for
`min_steps`, keeps the best 1/eta, promotes the survivors from their pre-decay checkpoints to
eta x the steps, and so on until one is left; only the winner then gets the loop's full
wall-clock run. Every candidate gets a journal record (kind "screen") with its rung history.

    from search.halving import screen
    res = screen([src_a, src_b, src_c, src_d], workdir=run_dir / "screen" / "0007",
                 prepare_dir=worktree, labels=["lr up", "depth 6", ...])
    res.winner        # index into the sources, or None if all crashed
    res.ranking       # indices, best first (furthest rung, then val_bpb; crashes last)
    res.records       # list of dicts for journal.jsonl
"""
from __future__ import annotations

import hashlib
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from search.hyperband import Bracket, Candidate, Rung, run_schedule

# Steps of the first rung, and the downsampling rate between rungs.
MIN_STEPS = 20
ETA = 3
# Cool-down branch of each rung evaluation (steps); kept short, the same for every candidate.
DECAY_STEPS = 5


@dataclass
class ScreenResult:
    ranking: list[int]
    winner: int | None
    records: list[dict]
    spent_steps: int
    wall: float


def screen_bracket(k: int, min_steps: int = MIN_STEPS, eta: int = ETA) -> Bracket:
    """Rungs for k candidates: k at r steps, floor(k/eta) at eta*r, ... down to one."""
    if k < 1:
        raise ValueError("nothing to screen")
    rungs, n, steps = [], k, min_steps
    while True:
        rungs.append(Rung(n, steps))
        if n == 1:
            break
        n, steps = max(1, n // eta), steps * eta
    return Bracket(len(rungs) - 1, tuple(rungs))


def screen(sources: list[str], *, workdir: Path, prepare_dir: Path, labels: list[str] | None = None,
           min_steps: int = MIN_STEPS, eta: int = ETA, decay_steps: int = DECAY_STEPS, seed: int = 0,
           pool=None, workers: int | None = None, log=print, sandbox=None, data=None, proxy=None,
           rows: int = 8, eval_tokens: int | None = None) -> ScreenResult:
    """Successive halving over the sources; a pool is created (and closed) when none is given.
    With a sandbox (harness/sandbox.py) every task runs sealed in its own process, and each rung
    is scored by the trusted evaluator (harness/verify.py) on the proxy split (search/proxy.py:
    training text held out from every candidate), never by a figure a candidate printed; the
    validation data is never shown to LLM-written code, and only the winner's full run gets the
    real evaluation."""
    from search.pool import Pool
    from search.throughput import load_profile

    workdir = Path(workdir)
    src_dir = workdir / "candidates"
    src_dir.mkdir(parents=True, exist_ok=True)
    labels = labels or [f"candidate {i}" for i in range(len(sources))]
    cands = []
    for i, src in enumerate(sources):
        path = src_dir / f"c{i}.py"
        path.write_text(src)
        cands.append(Candidate(f"c{i}", {"index": i}, path))
    bracket = screen_bracket(len(sources), min_steps, eta)
    own_pool = pool is None
    if own_pool:
        prof = load_profile()
        pool = Pool(min(workers or prof["workers"], len(sources)), prepare_dir=prepare_dir,
                    log_dir=workdir / "logs", cores=prof["cores"], sandbox=sandbox, data=data,
                    sealed_tasks=True, proxy=proxy, rows=rows, eval_tokens=eval_tokens)
    t0 = time.time()
    history: dict[int, list[dict]] = {i: [] for i in range(len(sources))}

    def on_result(res, cum):
        i = int(res.task.cand[1:])
        history[i].append({"steps": res.task.steps, "val_bpb": res.val_bpb, "error": res.error,
                           "wall": round(res.wall, 2), "log": str(res.log) if res.log else None})
        shown = f"{res.val_bpb:.4f}" if res.val_bpb is not None else f"crash ({res.error})"
        log(f"screen: {labels[i]}: {res.task.steps} steps -> {shown}")

    try:
        recs = run_schedule(pool, [bracket], lambda _i, _b: cands, decay_steps=decay_steps,
                            ckpt_dir=workdir / "ckpt", seed=seed, on_result=on_result)
    finally:
        if own_pool:
            pool.close()
        shutil.rmtree(workdir / "ckpt", ignore_errors=True)

    def key(i):
        done = [h for h in history[i] if h["val_bpb"] is not None]
        if not done:
            return (1, 0, math.inf, i)                      # crashed: last
        last = max(done, key=lambda h: h["steps"])
        return (0, -last["steps"], last["val_bpb"], i)

    ranking = sorted(range(len(sources)), key=key)
    winner = ranking[0] if key(ranking[0])[0] == 0 else None
    records = []
    for rank, i in enumerate(ranking):
        records.append({"kind": "screen", "candidate": i, "label": labels[i], "rank": rank,
                        "winner": i == winner, "rungs": history[i],
                        "sha": hashlib.sha256(sources[i].encode()).hexdigest()[:12],
                        "settings": {"min_steps": min_steps, "eta": eta, "decay_steps": decay_steps,
                                     "seed": seed}})
    spent = max((r["cum_steps"] for r in recs), default=0)
    return ScreenResult(ranking, winner, records, spent, time.time() - t0)
