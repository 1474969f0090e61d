"""Hyperband tasks on an Executor (executors/): the pool interface over Local or Ray jobs.

`ExecutorPool` offers what search/hyperband.run_schedule and pool.run_tasks drive
(`submit(task)`, `free_slots()`, `next_result()`, `close()`), so a sweep or the throughput bench
can run its tasks on the loop's executors, a Ray cluster included, instead of the local process
pool. Each task becomes a TrainJob whose files are the candidate's train.py and prepare.py, so a
node needs no shared file system: a state to resume from travels with the job, and the state a
task saves is fetched back and written where the schedule expects it (task.state.save).

Against search/pool.Pool: every task is a fresh `python train.py` (the pool's
"subprocess" mode; no long-lived in-process workers), with a fixed thread count per task.
"""
from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from harness.job import FIXED_SOURCES, JobSeal, TrainJob
from search.hyperband import Task, TaskResult
from search.pool import TASK_TIMEOUT, task_env

# How often next_result() polls the executor.
POLL_S = 0.05
# The file names a task's states travel under (in the job's folder and its output folder).
RESUME_NAME, SAVE_NAME = "resume_state.pt", "state.pt"
# A step-budgeted task does not read the time budget; this only fills AUTORESEARCH_TIME_BUDGET.
NOMINAL_BUDGET = 300.0


class ExecutorPool:
    """submit() tasks, next_result() gets them back as they finish (any order)."""

    def __init__(self, executor, *, prepare_source: str, run_dir: Path, threads: int | None = None,
                 env: dict | None = None, task_timeout: float = TASK_TIMEOUT, sandbox: str = "none",
                 data: dict | None = None, data_mode: str = "open", runtime_source: str | None = None):
        self.ex = executor
        self.n = executor.slots
        self.prepare_source = prepare_source
        # runtime.py, attention.py and graph_export.py, this checkout's unless given: train.py imports them
        here = Path(__file__).resolve().parents[2]
        self.fixed = {name: (here / name).read_text() for name in FIXED_SOURCES
                      if name != "prepare.py" and (here / name).is_file()}
        if runtime_source is not None:
            self.fixed["runtime.py"] = runtime_source
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cores = os.cpu_count() or 1
        self.threads = threads or max(1, cores // self.n)
        self.env = {k: str(v) for k, v in (env or {}).items() if v is not None}
        self.timeout = task_timeout
        self.seal = JobSeal(sandbox=sandbox, data=data, data_mode=data_mode)   # every task's
        self._running: dict[str, tuple[Task, float]] = {}
        self._count = 0

    def free_slots(self) -> int:
        return self.n - len(self._running)

    def submit(self, task: Task) -> None:
        if self.free_slots() <= 0:
            raise RuntimeError("no free slot: call next_result() first")
        task.threads = int(task.meta.get("pin_threads") or self.threads)
        self._count += 1
        jid = self.ex.submit(self.job_for(task, self._count))
        self._running[jid] = (task, time.time())

    def job_for(self, task: Task, n: int) -> TrainJob:
        files = {"train.py": Path(task.source).read_text(), "prepare.py": self.prepare_source, **self.fixed}
        env = dict(self.env)
        env.update(task_env(task))
        env["AUTORESEARCH_ARTIFACT"] = ""           # no model to save: the task prints its val_bpb
        fetch = ()
        if task.state.resume is not None:
            files[RESUME_NAME] = Path(task.state.resume).read_bytes()
            env["AUTORESEARCH_RESUME_STATE"] = "{src}/" + RESUME_NAME
        if task.state.save is not None:
            env["AUTORESEARCH_SAVE_STATE"] = "{out}/" + SAVE_NAME
            fetch = (SAVE_NAME,)
        return TrainJob(n=n, files=files, budget=NOMINAL_BUDGET, run_dir=str(self.run_dir),
                        log_name=f"{task.id}.log", timeout=self.timeout, env=env, seal=self.seal,
                        fetch=fetch, meta={"task": task.id})

    def next_result(self) -> TaskResult:
        if not self._running:
            raise RuntimeError("next_result() with nothing submitted")
        while True:
            for jid, (task, started) in list(self._running.items()):
                res = self.ex.poll(jid)
                if res is not None:
                    del self._running[jid]
                    return self._result(task, res, time.time() - started)
            time.sleep(POLL_S)

    def _result(self, task: Task, res, wall: float) -> TaskResult:
        out_dir = self.run_dir / "artifacts" / f"exp-{res.n:04d}"
        state = res.outputs.get(SAVE_NAME)
        if task.state.save is not None and state and Path(state).is_file():
            Path(task.state.save).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(state, task.state.save)
        shutil.rmtree(out_dir, ignore_errors=True)
        log = res.log_path if res.log_path.is_file() else None
        val = (res.summary or {}).get("val_bpb")
        slot = res.extra.get("slot")
        worker = int(slot) if isinstance(slot, str) and slot.isdigit() else -1
        if res.crash_class is not None or not isinstance(val, (int, float)):
            fail = next((ln for ln in res.log_text().splitlines() if ln.startswith("FAIL:")), None)
            error = fail or f"{res.crash_class or 'no val_bpb'} (exit {res.returncode})"
            return TaskResult(task, None, res.summary, wall, error=error, log=log, worker=worker)
        return TaskResult(task, float(val), res.summary, wall, log=log, worker=worker)

    def close(self) -> None:
        for jid in list(self._running):
            self.ex.cancel(jid)
        self._running.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextmanager
def open_executor_pool(kind: str, workers: int, *, prepare_source: str, run_dir: Path,
                       ray_address: str | None = None, gpus_per_task: float = 0, threads: int | None = None,
                       env: dict | None = None):
    """An ExecutorPool on a new executor of `kind` ("local" or "ray") with `workers` slots; the
    executor is closed (its jobs cancelled, a Ray runtime it started shut down) on the way out."""
    from executors import make_executor
    gpus = None
    if kind == "local" and gpus_per_task:
        gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g] or \
            [str(i) for i in range(_gpu_count())]
    ex = make_executor(kind, workers, gpus=gpus, ray_address=ray_address, num_gpus_per_job=gpus_per_task,
                       num_cpus_per_job=threads or 1)
    try:
        with ExecutorPool(ex, prepare_source=prepare_source, run_dir=run_dir, threads=threads, env=env) as pool:
            yield pool
    finally:
        ex.close()


def _gpu_count() -> int:
    try:
        import torch
        return torch.cuda.device_count()
    except ImportError:
        return 0


def add_executor_args(ap) -> None:
    """--executor / --ray-address / --gpus-per-task, shared by the sweep and throughput CLIs."""
    ap.add_argument("--executor", choices=["pool", "local", "ray"], default="pool",
                    help="where tasks run: the local process pool (default: long-lived workers), or the "
                         "loop's executors (executors/): local subprocess slots or Ray tasks")
    ap.add_argument("--ray-address", default=None,
                    help="with --executor ray: join this Ray cluster (default: start a local runtime)")
    ap.add_argument("--gpus-per-task", type=float, default=0,
                    help="with --executor local|ray: GPUs per task (local: one GPU per slot, round-robin)")
