"""SharedExecutor: the executor every run is submitted to (agent/experiment.py run_commit).

The --workers' N threads share one over their slots (agent/workers.py), and the single loop runs on
one over a single local slot (agent/experiment.py one_slot; the report's ablations use one too).
Its calls are serialised, so threads can share it (RayExecutor keeps plain dicts), and on_tick (the
loop's phase display) reaches only a LocalExecutor, which runs its jobs on this machine.
"""
from __future__ import annotations

import threading

from harness.executors.local import LocalExecutor


class SharedExecutor:
    """An executor (LocalExecutor or RayExecutor) behind a lock: the --workers' threads or the single
    loop's one slot submit to it alike. on_tick (the phase display) is passed to a LocalExecutor only."""

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
