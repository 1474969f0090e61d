"""A Ray task's watchdog: when the task's worker dies, end what the task started and remove its folder.

`ray.cancel(force=True)` (and a node shutting down) kills the Ray worker process, but a training
run lives in its own process group (harness/runner.py), so it would go on training. The task starts
this watchdog in a session of its own with a pipe on its stdin; the kernel closes the pipe when the
worker dies, however it dies. The watchdog forks away at once so it is no child of the worker:
Ray kills a dying worker's direct children (which ends the training's leader, not its group). On "done" the task finished normally and the watchdog just exits;
on end-of-file without it, the watchdog kills the groups recorded in the job's run folder
(child-K.pid, .verify/verify-K.pid: harness.runner.kill_leftover) and removes the job's folder.

    python executors/watchdog.py RUN_DIR JOB_ROOT   (harness importable via PYTHONPATH)
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

DONE = b"done"
# A run may be starting while the worker dies: its pid file appears a moment later. Look again
# for this long before giving up.
SETTLE_S = 2.0


def main(run_dir: str, job_root: str) -> int:
    if os.fork() > 0:                    # the task reaps this parent; the child lives on, orphaned
        os._exit(0)
    data = sys.stdin.buffer.read()       # blocks until the worker closes the pipe or dies
    if DONE in data:
        return 0
    from harness.procs import kill_leftover
    deadline = time.monotonic() + SETTLE_S
    while True:
        kill_leftover(Path(run_dir))
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    shutil.rmtree(job_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
