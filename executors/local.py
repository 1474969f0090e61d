"""LocalExecutor: `slots` runs at once on this machine, one thread per running job.

Each slot has its own folder (<root>/slot-K, refilled with the job's files for every job) and,
when `gpus` are given, its own GPU: slot K gets CUDA_VISIBLE_DEVICES=gpus[K % len(gpus)]. The
thread calls harness.job.run_job, i.e. harness.runner.run_train + the trusted
evaluation, so a run keeps every guarantee of today's loop runs; the slot's pid files
(child-K.pid in the run folder, verify-K.pid in its .verify/) let `--resume` end a run left by a
loop killed with -9 (harness.runner.kill_leftover).

Cancel: the job's on_tick raises inside run_train, which ends the whole process group; a trusted
evaluation in progress has its recorded group killed. cancel() returns once the thread is done.
"""
from __future__ import annotations

import atexit
import itertools
import json
import shutil
import tempfile
import threading
import time
import traceback
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from harness.job import VERIFY_DIR, TrainJob, failed, run_job
from harness.runner import CANCELLED, NODE_ERROR, RunResult
from harness.procs import kill_group

# How long cancel()/close() wait for a job's thread (the runner's SIGTERM grace is 5 s).
JOIN_TIMEOUT_S = 30.0


class _Cancelled(Exception):
    """Raised from on_tick inside run_train: it kills the run's process group and propagates."""


@dataclass
class _Entry:
    job: TrainJob
    on_tick: object = None
    slot: int | None = None
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    result: RunResult | None = None
    submitted_at: float = field(default_factory=time.time)


class LocalExecutor:
    """Runs TrainJobs on this machine, `slots` at once (executors.Executor)."""

    def __init__(self, slots: int = 1, gpus: list[str] | None = None, root: Path | None = None,
                 env: dict | None = None):
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.gpus = [str(g) for g in gpus] if gpus else None
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="autoresearch-slots-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self._lock = threading.Lock()
        self._jobs: dict[str, _Entry] = {}
        self._queue: deque[str] = deque()
        self._free = list(range(slots))
        self._ids = itertools.count(1)
        self._closed = False
        # A driver that ends without close() (an unhandled Ctrl-C, sys.exit) still ends its runs:
        # they live in process groups of their own, which no signal to the driver reaches.
        atexit.register(_close_at_exit, weakref.ref(self))

    # ---- the protocol ------------------------------------------------------------------------
    def submit(self, job: TrainJob, *, on_tick=None) -> str:
        """Queue `job`. on_tick(elapsed, log_path), local only: called while it trains (the loop's
        phase display); an exception from it ends the run like a cancel."""
        with self._lock:
            if self._closed:
                raise RuntimeError("executor is closed")
            jid = f"local-{next(self._ids)}"
            self._jobs[jid] = _Entry(job, on_tick)
            self._queue.append(jid)
            self._dispatch()
        return jid

    def poll(self, job_id: str) -> RunResult | None:
        return self._jobs[job_id].result

    def cancel(self, job_id: str) -> None:
        with self._lock:
            e = self._jobs[job_id]
            if e.result is not None:
                return
            e.stop.set()
            if job_id in self._queue:
                self._queue.remove(job_id)
                e.result = failed(e.job, CANCELLED, "cancelled before it started", None)
                return
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while e.thread is not None and e.thread.is_alive() and time.monotonic() < deadline:
            self._kill_evaluation(e)      # again each time: an evaluation may start meanwhile
            e.thread.join(0.2)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ids = list(self._jobs)
        for jid in ids:
            self.cancel(jid)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # ---- extras --------------------------------------------------------------------------------
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free) - len(self._queue)

    def log_path(self, job_id: str) -> Path:
        """Where the job's log is written while it runs (the loop's live view reads it)."""
        job = self._jobs[job_id].job
        return Path(job.run_dir) / "logs" / job.log_file

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- inside ----------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Start queued jobs on free slots (called with the lock held)."""
        while self._free and self._queue:
            jid = self._queue.popleft()
            e = self._jobs[jid]
            e.slot = self._free.pop(0)
            e.thread = threading.Thread(target=self._work, args=(jid, e), name=f"executor-{jid}", daemon=True)
            e.thread.start()

    def _slot_env(self, slot: int) -> dict:
        env = dict(self.env)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        return env

    def _work(self, jid: str, e: _Entry) -> None:
        def tick(elapsed, log_path):
            if e.stop.is_set():
                raise _Cancelled()
            if e.on_tick is not None:
                e.on_tick(elapsed, log_path)

        try:
            res = run_job(e.job, self.root / f"slot-{e.slot}", Path(e.job.run_dir), slot=str(e.slot),
                          extra_env=self._slot_env(e.slot), on_tick=tick, should_stop=e.stop.is_set)
            if e.stop.is_set():       # cancelled during the trusted evaluation: never judged
                res.crash_class = CANCELLED
                res.extra.pop("verify_result", None)
        except _Cancelled:
            res = failed(e.job, CANCELLED, "cancelled while training", self.log_path(jid))
        except BaseException as exc:  # a harness failure (or on_tick's): report it, never hang
            why = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            res = failed(e.job, CANCELLED if e.stop.is_set() else NODE_ERROR, f"executor error: {why}",
                         self.log_path(jid), traceback=traceback.format_exc())
        res.extra.setdefault("slot", str(e.slot))
        with self._lock:
            e.result = res
            self._free.append(e.slot)
            self._free.sort()
            if not self._closed:
                self._dispatch()

    def _kill_evaluation(self, e: _Entry) -> None:
        """End a trusted evaluation in progress (its group is recorded in .verify/verify-K.pid)."""
        if e.slot is None:
            return
        pid_file = Path(e.job.run_dir) / VERIFY_DIR / f"verify-{e.slot}.pid"
        try:
            kill_group(int(json.loads(pid_file.read_text())["pgid"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass


def _close_at_exit(ref) -> None:
    ex = ref()
    if ex is not None and not ex._closed:
        ex.close()
