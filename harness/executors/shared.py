"""SharedExecutor: one executor for several threads (the --workers, or the single loop's slot).

Its calls are serialised (RayExecutor keeps plain dicts), and on_tick (the loop's phase display)
reaches only an executor that runs jobs on this machine.
"""
from __future__ import annotations

import threading

from harness.executors.local import LocalExecutor


class SharedExecutor:
    """One executor for the N worker threads: its calls are serialised (RayExecutor keeps plain
    dicts); on_tick (the phase display) reaches only an executor that runs jobs here."""

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
