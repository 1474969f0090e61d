"""RayExecutor: TrainJobs as Ray tasks, on this machine or on any node of a Ray cluster.

Each job is one `@ray.remote` task. On its node the task makes a temporary folder, writes the
job's files into it (the commit travels with the job: no shared file system is assumed), and
runs harness.job.run_job there: run_train + the trusted evaluation, every guarantee of
a loop run. It returns the run's RunResult with the log's text and the bytes of the outputs the job
asked to fetch (the model by default); the driver writes both into the job's run folder, so the
loop finds the log and artifact where a local run puts them. The node's folder is then removed.

GPUs: `num_gpus_per_job` is the task's Ray resource; Ray sets CUDA_VISIBLE_DEVICES for it.
Concurrency: at most `slots` tasks are submitted at once (the rest wait here), and Ray's own
resources (CPUs and GPUs per task) bound what each node takes.

Cancel: ray.cancel(force=True) kills the task's worker; a watchdog the task started in its own
session (executors/watchdog.py) sees the worker die and ends the training's process group
(and the evaluation's) on that node, then removes the folder.

Ray under `uv run`: Ray would package the working directory into a runtime environment;
RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 turns that off (locally the workers use this venv). Joining a
cluster (`address`), the `harness` and `executors` packages are shipped with the tasks (runtime_env
py_modules); each node needs the project's Python environment (torch etc.) and its prepared data.
"""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import deque
from pathlib import Path

from harness.job import TrainJob, failed, run_job
from harness.runner import CANCELLED, NODE_ERROR, RunResult

# How long cancel() waits for Ray to report a force-cancelled task as ended.
CANCEL_WAIT_S = 30.0
# warm(): how long each slot's first task holds its slot (so N tasks get N processes), and how
# long to wait for them all (a cluster still adding nodes is not waited for).
WARM_HOLD_S = 0.5
WARM_TIMEOUT_S = 120.0
# ray.init options that keep a local runtime quiet and small.
QUIET = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
# The packages a task runs on its node (this one for the task and the watchdog, harness for the job).
PROJECT = Path(__file__).resolve().parent.parent
SHIPPED = (PROJECT / "harness", PROJECT / "executors")
WATCHDOG = Path(__file__).resolve().with_name("watchdog.py")


def start_ray(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None,
              runtime_env: dict | None = None) -> bool:
    """ray.init unless Ray is already up; returns True when this call started (or joined) it."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray
    if ray.is_initialized():
        return False
    _no_uv_packaging()
    kw = dict(QUIET)
    if address:
        kw["address"] = address
        kw["runtime_env"] = runtime_env if runtime_env is not None else {"py_modules": [str(p) for p in SHIPPED]}
    else:   # "local": always a new runtime of our own, never a `ray start` cluster found on this machine
        kw.update(address="local", num_cpus=num_cpus, num_gpus=num_gpus)
        if runtime_env is not None:
            kw["runtime_env"] = runtime_env
    ray.init(**kw)
    return True


def _no_uv_packaging() -> None:
    """Ray reads RAY_ENABLE_UV_RUN_RUNTIME_ENV once, when it is imported: if something imported
    it before us, the variable came too late and Ray would copy the working directory and build a
    second venv for its workers under `uv run`. Turn it off where Ray looks (ray 2.60)."""
    try:
        from ray._private import ray_constants
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] not in ("0", "false", "False")
    except (ImportError, AttributeError):
        pass


def _warm(hold: float) -> str:
    """A worker process's first task: import what a job runs, hold the slot briefly so every
    slot gets a process of its own."""
    import harness.job  # noqa: F401  (the import is the point)
    time.sleep(hold)
    return os.getpid()


def _node_task(job: TrainJob):
    """Runs on the node: the job in a fresh temporary folder, watched by the watchdog."""
    import ray
    root = Path(tempfile.mkdtemp(prefix="autoresearch-job-"))
    run_dir = root / "run"
    run_dir.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT), env.get("PYTHONPATH")) if p)
    # started by path, not -m: nothing of the package is imported unless the watchdog must act
    dog = subprocess.Popen([sys.executable, str(WATCHDOG), str(run_dir), str(root)],
                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=env, start_new_session=True)
    dog.wait()          # it forked its watching half away and exited (see watchdog.py)
    try:
        res = run_job(job, root / "src", run_dir, slot="0")
        files = {name: Path(path).read_bytes() for name, path in res.outputs.items()}
        res.extra.update(node_ip=ray.util.get_node_ip_address(), node_log=str(res.log_path),
                         node_artifact=str(res.artifact) if res.artifact else None, python=sys.executable)
        return res, res.log_text(), files
    finally:
        try:
            dog.stdin.write(b"done")
            dog.stdin.close()
        except OSError:
            pass
        shutil.rmtree(root, ignore_errors=True)


class RayExecutor:
    """Runs TrainJobs as Ray tasks (executors.Executor)."""

    def __init__(self, address: str | None = None, slots: int = 1, num_gpus_per_job: float = 0,
                 num_cpus_per_job: float = 1, num_cpus: int | None = None, runtime_env: dict | None = None):
        self.slots = slots
        self._owns_ray = start_ray(address, num_cpus=num_cpus, runtime_env=runtime_env)
        import ray
        self._ray = ray
        self._options = dict(num_cpus=num_cpus_per_job, num_gpus=num_gpus_per_job, max_retries=0)
        self._remote = ray.remote(_node_task).options(**self._options)
        self._ids = itertools.count(1)
        self._jobs: dict[str, TrainJob] = {}
        self._refs: dict[str, object] = {}          # running: job id -> ObjectRef
        self._queue: deque[str] = deque()
        self._results: dict[str, RunResult] = {}
        self._closed = False

    def warm(self, timeout: float = WARM_TIMEOUT_S) -> float:
        """Start the Ray worker processes of all slots now (each imports the job code once), so
        the first jobs do not pay it side by side; returns the seconds it took."""
        t0 = time.monotonic()
        probe = self._ray.remote(_warm).options(**self._options)
        refs = [probe.remote(WARM_HOLD_S) for _ in range(self.slots)]
        try:
            self._ray.get(refs, timeout=timeout)
        except Exception:   # a slow or small cluster: the jobs will simply wait for their workers
            pass
        return time.monotonic() - t0

    def submit(self, job: TrainJob) -> str:
        if self._closed:
            raise RuntimeError("executor is closed")
        jid = f"ray-{next(self._ids)}"
        self._jobs[jid] = job
        self._queue.append(jid)
        self._dispatch()
        return jid

    def poll(self, job_id: str) -> RunResult | None:
        if job_id not in self._jobs:
            raise KeyError(job_id)
        self._collect()
        self._dispatch()
        return self._results.get(job_id)

    def cancel(self, job_id: str) -> None:
        if job_id in self._results:
            return
        if job_id in self._queue:
            self._queue.remove(job_id)
            self._results[job_id] = failed(self._jobs[job_id], CANCELLED, "cancelled before it started", None)
            return
        ref = self._refs.pop(job_id)
        self._ray.cancel(ref, force=True)
        try:
            self._ray.get(ref, timeout=CANCEL_WAIT_S)
        except Exception:           # TaskCancelledError / WorkerCrashedError: what we asked for
            pass
        self._results[job_id] = _failed(self._jobs[job_id], CANCELLED, "cancelled (the node's watchdog "
                                        "ended the run's process group)")
        self._dispatch()

    def close(self) -> None:
        self._closed = True
        for jid in list(self._queue) + list(self._refs):
            self.cancel(jid)
        if self._owns_ray:
            self._ray.shutdown()
            self._owns_ray = False

    def free_slots(self) -> int:
        self._collect()
        return self.slots - len(self._refs) - len(self._queue)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- inside ----------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        while self._queue and len(self._refs) < self.slots and not self._closed:
            jid = self._queue.popleft()
            self._refs[jid] = self._remote.remote(self._jobs[jid])

    def _collect(self) -> None:
        if not self._refs:
            return
        refs = list(self._refs.values())
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        for jid, ref in list(self._refs.items()):
            if ref in ready:
                del self._refs[jid]
                self._results[jid] = self._land(self._jobs[jid], ref)

    def _land(self, job: TrainJob, ref) -> RunResult:
        """The node's result, with its log and fetched outputs written into the job's run folder."""
        try:
            res, text, files = self._ray.get(ref)
        except Exception as exc:
            why = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return _failed(job, NODE_ERROR, f"the Ray task failed: {why[-2000:]}")
        run_dir = Path(job.run_dir)
        log = run_dir / "logs" / job.log_file
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(text)
        res.log_path = log
        out_dir = run_dir / "artifacts" / f"exp-{job.n:04d}"
        res.outputs, res.artifact = {}, None
        if files:
            shutil.rmtree(out_dir, ignore_errors=True)
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                (out_dir / name).write_bytes(data)
                res.outputs[name] = str(out_dir / name)
            if "model.pt" in files:
                res.artifact = out_dir / "model.pt"
        return res


def _failed(job: TrainJob, crash: str, why: str) -> RunResult:
    """A job no node ran to its end: the note lands in its log in the job's run folder."""
    return failed(job, crash, why, Path(job.run_dir) / "logs" / job.log_file)
