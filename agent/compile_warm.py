"""The warm-up that writes a tag's trusted compile cache (harness/compiled.py has the layout
and how runs read it): the base commit's train.py trained a few steps, sealed, by trusted code,
with the cache folders writable; published by a rename when it succeeds.

Apart from compile_cache.py because it runs a training (harness/runner.py), and the runner reads
the cache's layout: one module for each direction keeps the imports one-way.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from harness.compiled import WARM_STEPS, WARM_TIMEOUT_S, WORK, publish, published
from search import knobs
from harness.job import materialise
from harness.runner import RunPlace, RunSpec, RunView, run_train


def warm(files: dict, run_dir: Path, budget: float, *, sandbox, data, eval_rows: int | None = None,
         say=print) -> dict:
    """Compile the base commit's `files` (train.py and the fixed files beside it) once, sealed, into the
    tag's trusted cache. Returns what happened: {"status": published|skipped|failed, ...}."""
    run_dir = Path(run_dir)
    if published(run_dir) is not None:
        return {"status": "skipped", "reason": "already published"}
    if sandbox is None or not sandbox.sealed:
        return {"status": "skipped", "reason": "unsealed runs use torch's own cache"}
    if not wants_compile(files.get("train.py", "")):
        return {"status": "skipped", "reason": "the base train.py does not compile (COMPILE = False)"}
    work = run_dir / WORK
    shutil.rmtree(work, ignore_errors=True)
    folder = materialise(files, run_dir / ".runs" / "src")   # where the single loop runs commits
    t0 = time.time()
    say(f"compile cache: warming up on the base train.py ({WARM_STEPS} steps, sealed)")
    try:
        run = run_train(RunSpec(folder, run_dir, 0, budget, timeout=WARM_TIMEOUT_S,
                                env={"AUTORESEARCH_STEPS": str(WARM_STEPS)}, sealed=True, eval_rows=eval_rows,
                                view=RunView(sandbox=sandbox, data=data, compile_cache="write", cache_work=work),
                                place=RunPlace(log_path=run_dir / "logs" / "compile-warmup.log", out_dir=work / "out")))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    seconds = round(time.time() - t0, 1)
    if run.crash_class is not None:
        shutil.rmtree(work, ignore_errors=True)
        say(f"compile cache: warm-up failed ({run.crash_class}); runs compile cold (log: {run.log_path})")
        return {"status": "failed", "crash": run.crash_class, "seconds": seconds}
    shutil.rmtree(work / "out", ignore_errors=True)
    size = sum(f.stat().st_size for f in work.rglob("*") if f.is_file())
    target = publish(run_dir, work)
    say(f"compile cache: {size / 2**20:.1f} MiB published to {target} in {seconds}s; runs read it read-only")
    return {"status": "published", "seconds": seconds, "bytes": size}


def wants_compile(train_source: str) -> bool:
    """Whether a train.py compiles: its COMPILE knob (absent: True, as a GPU train.py may not say)."""
    return knobs.values(train_source).get("COMPILE", True) is not False
