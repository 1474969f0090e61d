"""Executors: run training jobs (and their trusted evaluation) a few at a time, here or on Ray.

    from harness.job import TrainJob, wait
    from executors import LocalExecutor
    from agent.gitops import sources_at
    ex = LocalExecutor(slots=2, gpus=["0", "1"])
    jid = ex.submit(TrainJob(n=3, files=sources_at(repo, sha), budget=300, run_dir=str(run_dir)))
    res = wait(ex, [jid])[jid]          # JobResult: summary, crash_class, log.text, verify, ...
    ex.close()

RayExecutor lives in executors.ray_exec (imported on demand: Ray takes a second to import).
SharedExecutor is the executor every run is submitted to (agent/experiment.py run_commit): the
--workers' N threads share one over their slots (agent/workers.py), and the single loop runs on one
over a single local slot (agent/experiment.py one_slot; the report's ablations use one too).
"""
import threading

from executors.local import LocalExecutor
from harness.job import Executor


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
