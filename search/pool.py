"""Worker processes that run train.py tasks: long-lived (import torch once) or one child per task.

Why long-lived workers: on a small CPU run, starting Python and importing torch costs seconds,
as much as the training itself. An "inprocess" worker imports torch and prepare once, then runs
each task by executing the candidate's train.py as `__main__` (runpy) with the task's
environment, exactly what `python train.py` would read; its stdout goes to the task's log and
the summary block is parsed from there (harness/clock.py (the summary block)). tests/test_throughput.py checks
that this gives the same val_bpb as running the file as a script. "subprocess" workers start
`python train.py` per task instead (the baseline of `bench`, and the safe choice for sources
that leave global state behind).

Threads: each task gets a thread count when it is dispatched. With adaptive threads, tasks
dispatched together share the cores that are free at that moment, so a late rung with fewer
tasks than workers gives the idle cores to the tasks that remain.
"""
from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path

from harness.job import FIXED_SOURCES
from search.hyperband import Task, TaskResult
from harness.clock import parse_summary

# A task running longer than this is killed and reported as a crash (the worker is replaced).
TASK_TIMEOUT = 1800.0
# Environment variables a task sets; anything else comes from the pool's base environment.
TASK_ENV = ("AUTORESEARCH_STEPS", "AUTORESEARCH_DECAY_STEPS", "AUTORESEARCH_SAVE_STATE",
            "AUTORESEARCH_RESUME_STATE", "AUTORESEARCH_SEED", "AUTORESEARCH_THREADS",
            "AUTORESEARCH_KNOBS_AS_WRITTEN")


def task_env(task: Task) -> dict[str, str]:
    env = {"AUTORESEARCH_STEPS": str(task.steps + task.decay_steps),
           "AUTORESEARCH_DECAY_STEPS": str(task.decay_steps),
           "AUTORESEARCH_SEED": str(task.seed), "AUTORESEARCH_THREADS": str(task.threads),
           # a candidate's source carries its profile's knob values already (search/knobs.for_profile)
           "AUTORESEARCH_KNOBS_AS_WRITTEN": "1"}
    if task.state.save is not None:
        env["AUTORESEARCH_SAVE_STATE"] = str(task.state.save)
    if task.state.resume is not None:
        env["AUTORESEARCH_RESUME_STATE"] = str(task.state.resume)
    return env


def _run_inprocess(task: Task, log: Path, env: dict) -> tuple[int, str | None]:
    """Run the candidate as __main__ in this process; returns (exit code, error)."""
    import torch
    saved_env = {k: os.environ.get(k) for k in TASK_ENV}
    saved_io, saved_argv, saved_cwd = (sys.stdout, sys.stderr), list(sys.argv), os.getcwd()
    for k in TASK_ENV:
        os.environ.pop(k, None)
    os.environ.update(env)
    torch.set_num_threads(task.threads)
    # torch globals an edited train.py might flip; restored after, so tasks cannot leak into each other
    saved_torch = (torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
                   torch.get_float32_matmul_precision(), torch.is_grad_enabled())
    code, error = 0, None
    with open(log, "w", buffering=1) as f:
        sys.stdout = sys.stderr = f
        sys.argv = [str(task.source)]
        try:
            os.chdir(log.parent)
            runpy.run_path(str(task.source), run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:                      # the candidate's own failure, not ours
            traceback.print_exc(file=f)
            code, error = 1, traceback.format_exc().strip().splitlines()[-1]
        finally:
            sys.stdout, sys.stderr = saved_io
            sys.argv = saved_argv
            os.chdir(saved_cwd)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    torch.set_default_dtype(saved_torch[0])
    torch.use_deterministic_algorithms(saved_torch[1])
    torch.set_float32_matmul_precision(saved_torch[2])
    torch.set_grad_enabled(saved_torch[3])
    import gc                    # train.py freezes and disables the GC for its run: undo that,
    gc.unfreeze()                # or every task's garbage would pile up in this worker
    gc.enable()
    gc.collect()
    return code, error


def _run_subprocess(task: Task, log: Path, env: dict, prepare_dir: str,
                    seal: dict | None = None) -> tuple[int, str | None, float | None]:
    """Run the candidate as `python train.py` in a child; returns (exit code, error, trusted
    val_bpb or None). Sealed (LLM-written candidates, screening): harness.runner.run_train in the
    sandbox, the proxy split hidden, then the trusted evaluation of its saved model on that split."""
    if seal:
        return _run_sealed(task, log, env, prepare_dir, seal)
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = prepare_dir + os.pathsep + full.get("PYTHONPATH", "")
    from harness.sandbox import child_env
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, str(task.source)], cwd=log.parent, env=child_env(full, sealed=False),
                              stdout=f, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    return proc.returncode, None, None


def _run_sealed(task: Task, log: Path, env: dict, prepare_dir: str, seal: dict):
    from harness.job import materialise
    from search.proxy import Proxy
    from harness.runner import RunPlace, RunSpec, RunView, run_train
    from harness.sandbox import DataView, detect
    from harness.verify import EvalPlace, Evaluation, verify
    box = detect("bwrap")
    data, proxy = DataView.from_dict(seal["data"]), Proxy.from_dict(seal["proxy"])
    source = Path(task.source).read_text()
    files = {"train.py": source, **{name: (Path(prepare_dir) / name).read_text()
                                    for name in FIXED_SOURCES if (Path(prepare_dir) / name).is_file()}}
    work = materialise(files, log.parent / f".{task.id}.src")
    out = log.parent / f".{task.id}.out"
    try:
        seen = RunView(sandbox=box, data=data, data_mode="train", stand_ins=proxy.stand_ins if proxy else None,
                       extra_readonly=[task.state.resume] if task.state.resume is not None else [],
                       extra_writable=[Path(task.state.save).parent] if task.state.save is not None else [])
        run = run_train(RunSpec(work, log.parent, 0, 0.0, timeout=seal.get("timeout"), env=env, sealed=True,
                                eval_rows=seal["rows"], view=seen,
                                place=RunPlace(log_path=log, out_dir=out, pid_name=f".{task.id}.pid")))
        if run.crash_class is not None:
            return 1, f"crashed: {run.crash_class}", None
        cache = proxy.cache if proxy else Path(seal["eval_cache"]) if seal.get("eval_cache") else None
        v = verify(run.artifact, Evaluation(source, files["prepare.py"], seal["rows"], sealed=True,
                                            eval_tokens=seal.get("eval_tokens"), eval_cache=cache),
                   EvalPlace(sandbox=box, work_root=log.parent / ".verify", pid_name=f"verify-{task.id}.pid"))
        with open(log, "a") as f:
            f.write(f"[pool] trusted evaluation on {'the proxy split' if proxy else 'the validation data'}: "
                    f"{v.reason}\n")
        return (0, None, v.trusted_bpb) if v.ok else (1, f"trusted evaluation: {v.reason}", None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker if the pool's process dies (kill -9, crash)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        except OSError:
            pass


def _worker(inbox: Connection, outbox: Connection, mode: str, prepare_dir: str) -> None:
    _die_with_parent()
    sys.path.insert(0, prepare_dir)
    if mode == "inprocess":               # the point: pay torch's import and lazy set-up once
        import torch
        import prepare  # noqa: F401
        try:                              # the candidates' platform module: without its deferral the
            import runtime                # first optimizer pulls in torch._dynamo (2-10 s), which
            runtime.defer_dynamo_import()  # nothing here compiles with
        except ImportError:
            pass
        w = torch.nn.Parameter(torch.zeros(2, 2))
        opt = torch.optim.AdamW([w])      # the first optimizer, backward and step: lazy set-up paid
        w.sum().backward()                # once, not by the first task
        opt.step()
    while True:
        try:
            msg = inbox.recv()
        except EOFError:                           # the pool went away
            return
        if msg is None:
            return
        task, log, seal = msg
        env = task_env(task)
        t0 = time.time()
        trusted = None
        if mode == "inprocess":
            code, error = _run_inprocess(task, log, env)
        else:
            code, error, trusted = _run_subprocess(task, log, env, prepare_dir, seal)
        outbox.send((task.id, code, error, time.time() - t0, trusted))


@dataclass
class WorkerLaunch:
    """How a worker process starts: its mode ("inprocess" | "subprocess"), the folder it imports
    prepare.py from, the folder of its logs, the environment added to its own, and, for harness-made
    variants, the sandbox every worker runs in (`box`, None: none) with the data it shows and the
    folder it may write (`root`, default the log folder)."""
    mode: str
    prepare_dir: str
    log_dir: Path
    env: dict
    box: object = None
    data: object = None
    root: Path | None = None


def cpu_budget() -> int:
    """The cores the pool's tasks may share: AUTORESEARCH_THREADS where it is set (the threads the
    user gives the harness's runs: a ceiling, so a lone late task is not handed cores other work
    holds; on a busy CPU a run with more threads than free cores waits on its own threads, steps
    10-60x slower), else every core."""
    try:
        given = int(os.environ.get("AUTORESEARCH_THREADS") or 0)
    except ValueError:
        given = 0
    return given if given > 0 else (os.cpu_count() or 1)


@dataclass
class ThreadShare:
    """How many threads a task gets: `fixed` for every task when set; else, `adaptive`, the
    pending tasks split the cores the busy ones leave free; else an even share of `cores`."""
    cores: int
    fixed: int | None = None
    adaptive: bool = True


class Pool:
    """submit() tasks, next_result() gets them back as they finish (any order)."""

    def __init__(self, workers: int, *, prepare_dir: Path, log_dir: Path, cores: int | None = None,
                 mode: str = "inprocess", env: dict | None = None, adaptive_threads: bool = True,
                 threads: int | None = None, task_timeout: float = TASK_TIMEOUT, sandbox=None,
                 data=None, sealed_tasks: bool = False, proxy=None, eval_cache: Path | None = None,
                 rows: int = 8, eval_tokens: int | None = None, root: Path | None = None):
        """sandbox (harness/sandbox.py), two ways:
        sealed_tasks=True (LLM-written candidates: screening, the hybrid arm): each task in its own
        sandbox, training data only (the `proxy` split hidden), scored by the trusted evaluator on
        the proxy split, or on `eval_cache` (the validation data) when there is no proxy;
        otherwise (harness-made knob variants of a reviewed train.py: sweeps, arms): every worker
        process runs inside the sandbox, seeing the data (it evaluates itself), the harness code
        and `root` (the sweep's folder: logs, candidates, checkpoints) and nothing else."""
        if mode not in ("inprocess", "subprocess"):
            raise ValueError(f"mode must be inprocess or subprocess, got {mode!r}")
        # Sealed tasks each get their own process in their own sandbox: a candidate can neither read
        # the validation data (nor the proxy split it is ranked on) nor touch another candidate's
        # worker or checkpoints; its score is the trusted evaluation's, never its own.
        self.seal = None
        if sandbox is not None and sandbox.sealed and sealed_tasks:
            mode = "subprocess"
            self.seal = {"data": data.as_dict() if data else None, "proxy": proxy.as_dict() if proxy else None,
                         "eval_cache": str(eval_cache) if eval_cache else None,
                         "rows": rows, "eval_tokens": eval_tokens, "timeout": task_timeout}
        self.launch = WorkerLaunch(
            mode=mode, prepare_dir=str(Path(prepare_dir).resolve()), log_dir=Path(log_dir).resolve(),
            env={k: v for k, v in (env or {}).items() if v is not None},
            box=sandbox if sandbox is not None and sandbox.sealed and not sealed_tasks else None,
            data=data, root=Path(root).resolve() if root is not None else None)
        self.launch.log_dir.mkdir(parents=True, exist_ok=True)
        self.n = workers
        self.threads = ThreadShare(cores=cores or cpu_budget(), fixed=threads,
                                   adaptive=adaptive_threads and threads is None)
        self.timeout = task_timeout
        self.procs: list = [None] * workers
        self.conns: list = [None] * workers
        self.busy: dict[int, tuple[Task, Path, float]] = {}   # worker -> (task, log, started)
        self.pending: list[Task] = []
        for i in range(workers):
            self._start(i)

    def _start(self, i: int) -> None:
        """A worker is `python -m search.pool` talking over two pipes (no re-import of __main__)."""
        w = self.launch
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ, **w.env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (w.prepare_dir, env.get("PYTHONPATH")) if p)
        err = open(w.log_dir / f"worker{i}.stderr", "ab")
        argv = [sys.executable, "-m", "search.pool", w.mode, w.prepare_dir,
                str(to_child_r), str(from_child_w)]
        if w.box is not None:
            from harness.sandbox import View, data_view
            readonly, binds, hide = data_view(w.data, "open")
            view = View(cwd=w.log_dir, writable=[w.root or w.log_dir], binds=binds, hide=hide,
                        readonly=readonly + [Path(w.prepare_dir), Path(__file__).resolve().parents[1]])
            p = w.box.popen(argv, view, env, pass_fds=(to_child_r, from_child_w),
                               stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        else:
            from harness.sandbox import child_env
            p = subprocess.Popen(argv, pass_fds=(to_child_r, from_child_w), env=child_env(env, sealed=False),
                                 stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        err.close()
        os.close(to_child_r)
        os.close(from_child_w)
        self.procs[i] = p
        self.conns[i] = (Connection(to_child_w, readable=False), Connection(from_child_r, writable=False))

    def free_slots(self) -> int:
        return self.n - len(self.busy) - len(self.pending)

    def submit(self, task: Task) -> None:
        if self.free_slots() <= 0:
            raise RuntimeError("no free worker: call next_result() first")
        # Workers run each task from its log folder: relative paths (an `--out out/sweep`) would
        # point somewhere else there, so every path is made absolute here.
        st = task.state
        task = replace(task, source=Path(task.source).resolve(),
                       state=replace(st, resume=Path(st.resume).resolve() if st.resume is not None else None,
                                     save=Path(st.save).resolve() if st.save is not None else None))
        self.pending.append(task)

    def _dispatch(self) -> None:
        """Start pending tasks; with adaptive threads they split the currently free cores."""
        if not self.pending:
            return
        used = sum(t.threads for t, _, _ in self.busy.values())
        share_of = self.threads
        free_cores = max(len(self.pending), share_of.cores - used)
        base_share = max(1, share_of.cores // self.n)
        for k, task in enumerate(self.pending):
            if task.meta.get("pin_threads"):         # a task that must not depend on the split
                task.threads = int(task.meta["pin_threads"])
            elif share_of.fixed:
                task.threads = share_of.fixed
            elif share_of.adaptive:
                share, extra = divmod(free_cores, len(self.pending))
                task.threads = max(1, share + (1 if k < extra else 0))
            else:
                task.threads = base_share
            i = next(j for j in range(self.n) if j not in self.busy)
            log = self.launch.log_dir / f"{task.id}.log"
            self.busy[i] = (task, log, time.time())
            try:
                self.conns[i][0].send((task, log, self.seal))
            except OSError:                # a worker that died at start: next_result reports it
                pass
        self.pending = []

    def next_result(self) -> TaskResult:
        self._dispatch()
        if not self.busy:
            raise RuntimeError("next_result() with nothing submitted")
        while True:
            now = time.time()
            deadline = min(started + self.timeout for _, _, started in self.busy.values())
            ready = wait([self.conns[i][1] for i in self.busy], timeout=max(0.0, deadline - now))
            for i in list(self.busy):
                task, log, started = self.busy[i]
                if self.conns[i][1] in ready:
                    try:
                        _, code, error, wall, trusted = self.conns[i][1].recv()
                    except (EOFError, OSError):
                        return self._lost(i, "worker died: " + self._stderr_tail(i))
                    del self.busy[i]
                    return _result(task, log, code, error, wall, i, trusted, sealed=self.seal is not None)
                if time.time() - started > self.timeout:
                    return self._lost(i, f"timeout after {self.timeout:.0f}s")

    def _stderr_tail(self, i: int) -> str:
        """The worker's last words (e.g. prepare's 'run uv run prepare.py first')."""
        try:
            lines = (self.launch.log_dir / f"worker{i}.stderr").read_text(errors="replace").splitlines()
        except OSError:
            return "no stderr"
        lines = [ln for ln in lines if ln.strip() and "leaked" not in ln and "nanobind" not in ln
                 and "skipped remainder" not in ln]
        return lines[-1][:300] if lines else f"exit {self.procs[i].poll()}"

    def _lost(self, i: int, why: str) -> TaskResult:
        task, log, started = self.busy.pop(i)
        if self.procs[i].poll() is None:
            self.procs[i].kill()
        self.procs[i].wait(5)
        for c in self.conns[i]:
            c.close()
        self._start(i)
        return TaskResult(task, None, None, time.time() - started, error=why, log=log, worker=i)

    def close(self) -> None:
        for i in range(self.n):
            try:
                self.conns[i][0].send(None)
            except (OSError, BrokenPipeError):
                pass
        for i, p in enumerate(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for c in self.conns[i]:
                c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _result(task: Task, log: Path, code: int, error: str | None, wall: float, worker: int,
            trusted: float | None = None, sealed: bool = False) -> TaskResult:
    text = log.read_text(errors="replace") if log.exists() else ""
    summary = parse_summary(text)
    val = trusted if sealed else (summary.get("val_bpb") if summary else None)
    if code != 0 or not isinstance(val, (int, float)) or val != val:
        fail = next((ln for ln in text.splitlines() if ln.startswith("FAIL:")), None)
        error = error or fail or (f"exit {code}" if code else "no summary block")
        return TaskResult(task, None, summary, wall, error=error, log=log, worker=worker)
    return TaskResult(task, float(val), summary, wall, log=log, worker=worker)


def worker_seal(log=print):
    """(sandbox, data view) for a sweep's workers, or (None, None) with a loud line when this
    machine cannot sandbox (the workers then run unsealed: no secrets in their environment)."""
    import prepare
    from harness.sandbox import DataView, detect
    box = detect("auto")
    if not box.sealed:
        log(f"WARNING: UNSEALED sweep: {box.reason}; its candidates run with this machine's files and network")
        return None, None
    return box, DataView.from_describe({"paths": prepare.data_paths()})


def run_tasks(pool: Pool, tasks: list[Task]) -> list[TaskResult]:
    """Run independent tasks through a pool; results in the tasks' order."""
    todo, out = list(tasks), {}
    while todo or len(out) < len(tasks):
        while todo and pool.free_slots() > 0:
            pool.submit(todo.pop(0))
        res = pool.next_result()
        out[res.task.id] = res
    return [out[t.id] for t in tasks]


if __name__ == "__main__":       # a worker: python -m search.pool MODE PREPARE_DIR IN_FD OUT_FD
    _worker(Connection(int(sys.argv[3]), writable=False), Connection(int(sys.argv[4]), readable=False),
            sys.argv[1], sys.argv[2])
