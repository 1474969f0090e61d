"""Executors: run training jobs (and their trusted evaluation) a few at a time, here or on Ray.

    from harness.job import TrainJob
    from executors import LocalExecutor, wait
    from agent.gitops import sources_at
    ex = LocalExecutor(slots=2, gpus=["0", "1"])
    jid = ex.submit(TrainJob(n=3, files=sources_at(repo, sha), budget=300, run_dir=str(run_dir)))
    res = wait(ex, [jid])[jid]          # RunResult: summary, crash_class, log_path, verified, ...
    ex.close()

RayExecutor lives in executors.ray_exec (imported on demand: Ray takes a second to import).
SharedExecutor is the executor every run is submitted to (agent/experiment.py run_commit): the
--workers' N threads share one over their slots (agent/workers.py), and the single loop runs on one
over a single local slot (agent/experiment.py one_slot; the report's ablations use one too).
"""
from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from executors.local import LocalExecutor
from harness.job import TrainJob
from harness.runner import RunResult

# How often wait() polls the executor.
WAIT_POLL_S = 0.1


@runtime_checkable
class Executor(Protocol):
    """Runs TrainJobs, `slots` at once. Implementations: LocalExecutor, RayExecutor."""
    slots: int

    def submit(self, job: TrainJob) -> str:
        """Queue `job`; returns its id. Jobs beyond `slots` wait for a free slot."""

    def poll(self, job_id: str) -> RunResult | None:
        """The job's result once it has ended (cancelled ones too), else None."""

    def cancel(self, job_id: str) -> None:
        """End the job and every process it started; returns once they are gone (where the
        executor can see them: a remote node's watchdog ends them there)."""

    def close(self) -> None:
        """Cancel everything still running and release the executor's resources."""


def wait(executor: Executor, ids: list[str], timeout: float | None = None,
         first: bool = False) -> dict[str, RunResult]:
    """Poll until every job in `ids` (or, with first=True, any one) has a result or `timeout`
    seconds pass; returns the results that are in, by id."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done: dict[str, RunResult] = {}
    while True:
        for jid in ids:
            if jid not in done:
                res = executor.poll(jid)
                if res is not None:
                    done[jid] = res
        if len(done) == len(ids) or (first and done):
            return done
        if deadline is not None and time.monotonic() >= deadline:
            return done
        time.sleep(WAIT_POLL_S)



def make_executor(kind: str, slots: int, *, gpus: list[str] | None = None, ray_address: str | None = None,
                  num_gpus_per_job: float = 0, num_cpus_per_job: float = 1) -> Executor:
    """The executor a command line asks for: "local" or "ray"."""
    if kind == "local":
        return LocalExecutor(slots, gpus=gpus)
    if kind == "ray":
        from executors.ray_exec import RayExecutor
        return RayExecutor(ray_address, slots=slots, num_gpus_per_job=num_gpus_per_job,
                           num_cpus_per_job=num_cpus_per_job)
    raise ValueError(f"executor must be local or ray, got {kind!r}")


class SharedExecutor:
    """An executor (LocalExecutor or RayExecutor) behind a lock: the --workers' threads or the single
    loop's one slot submit to it alike (RayExecutor keeps plain dicts). on_tick (the loop's phase
    display) is passed to a LocalExecutor only: it runs its jobs on this machine."""

    def __init__(self, inner):
        self.inner, self.slots, self._lock = inner, inner.slots, threading.Lock()
        self._ticks = isinstance(inner, LocalExecutor)

    def submit(self, job, on_tick=None) -> str:
        with self._lock:
            return self.inner.submit(job, on_tick=on_tick) if self._ticks else self.inner.submit(job)

    def poll(self, job_id: str):
        with self._lock:
            return self.inner.poll(job_id)

    def cancel(self, job_id: str) -> None:
        with self._lock:
            self.inner.cancel(job_id)

    def close(self) -> None:
        self.inner.close()
