"""`--workers N`: N experiments in flight, each in its own worktree and on its own GPU.

Every worker is a thread that carries one experiment at a time through the same pipeline as the
single loop (agent/experiment.py: guard, commit, sealed run, trusted evaluation, judges, record):
its own worktree (<worktree-root>/<tag>.workers/wK, detached at the experiment's parent) and its
own "pending" journal lines (they name the worker). Its runs go to the shared executor (executors/) as
jobs: the commit's files, the seal and the trusted evaluation. --executor local runs them on this
machine, one slot (and GPU, CUDA_VISIBLE_DEVICES) each; --executor ray as Ray tasks with a GPU
each where the cluster has GPUs, on any node, from the files alone. What is shared goes through
the loop's coordinator (agent/coordinator.py): the experiment numbers, the proposer (one call at
a time; it sees what is in flight), and the record + git step, which runs under the
coordinator's lock so keeps stay a linear history. A would-be keep whose parent is no longer the
tip is rebased onto the tip and confirmed there by another run (experiment.py).

Ctrl-C: the main thread tells every worker to stop; a training run ends within a poll, and its
experiment stays pending (its pending line and commit) for --resume to run again.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from agent import between
from agent.coordinator import LockedProposer
from agent.errors import WorkerStopped  # noqa: F401  (raised in run_commit when the stop event is set)
from agent.experiment import TRAIN, Attempt, Slot, run_experiment, write_pending
from agent.coordinator import undecided
from agent.proposing import ProposalInfo
from agent.status import WorkerStatus
from agent import gitops
from harness.results import append_journal, read_journal
from executors import LocalExecutor
from executors import SharedExecutor  # noqa: F401  (the workers' executor)

# How often the main thread refreshes state.json and looks at the human queue while workers run.
POLL_S = 0.5
BOUNDARY_EVERY_S = 10.0


class Worker:
    """One of --workers N: a thread carrying one experiment at a time through run_experiment, in
    its own slot (worktree, pending file, executor slot, the stop event), with its own proposer
    side (the shared proposers behind the coordinator's lock; nothing prefetched: workers overlap
    proposing with each other's runs) and its own status row. The tag's state is the loop's
    coordinator."""

    def __init__(self, loop, wid: int, worktree: Path, executor, stop: threading.Event):
        self.loop, self.wid = loop, wid
        # its own worktree; keeps move the branch in the tag's worktree
        files = replace(loop.files, worktree=worktree, branch_worktree=loop.worktree)
        self.slot: Slot = replace(loop.slot, files=files, executor=executor, wid=wid, stop=stop)
        self.ideas = replace(loop.ideas, proposers=locked(loop.ideas.proposers, loop.coord.proposer_lock),
                             prefetch=None, feedback="")
        self.status = WorkerStatus(loop.panel, wid)
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def work(self, resumed: list, limit: int | None, deadline: float | None) -> None:
        coord, slot = self.loop.coord, self.slot
        try:
            while not slot.stop.is_set():
                a = _pop(resumed, coord.lock)
                if a is not None:
                    coord.adopt(self.wid, a)
                    with coord.lock:
                        gitops.reset_hard(slot.files.worktree, a.commit)
                        write_pending(slot, a)   # this worker carries it now
                else:
                    if deadline is not None and time.time() >= deadline:
                        return
                    with coord.lock:
                        self.loop.check_space()
                        parent = coord.last_kept
                        n = coord.claim(self.wid, parent, limit)
                        if n is None:
                            return
                        gitops.reset_hard(slot.files.worktree, parent)
                    try:
                        self.status.phase("proposing", n)
                        proposal, info = self.ideas.propose(n, parent)
                    except BaseException:
                        coord.finish(n)
                        raise
                    a = Attempt(n=n, parent=parent, proposal=proposal, info=info)
                    coord.proposed(n, a.proposal)
                try:
                    coord.update(a.n, commit=a.commit)
                    rec = run_experiment(a, coord, slot, self.ideas, self.loop.reviewer, self.status,
                                         committed=a.commit is not None)
                    self.ideas.decided(rec)
                finally:
                    coord.finish(a.n)
        except KeyboardInterrupt:   # WorkerStopped: the loop is stopping; the experiment stays pending
            self.status.phase("stopped")
        except BaseException as exc:   # delivered to the main thread, which stops the others
            self.error = exc
            slot.stop.set()


def locked(proposers, lock):
    """The loop's proposers (agent/proposing.py Proposers), each call waiting for `lock`: workers
    share one proposer. With --proposer offline the fallback stays the proposer itself."""
    proposer = LockedProposer(proposers.proposer, lock)
    offline = proposer if not proposers.llm else LockedProposer(proposers.offline, lock)
    return replace(proposers, proposer=proposer, offline=offline)


def _pop(items: list, lock):
    with lock:
        return items.pop(0) if items else None


def run_parallel(loop, deadline: float | None) -> str | None:
    """Run workers until --max-experiments / --until / Ctrl-C; returns the stop reason."""
    c = loop.config
    count = max(1, int(c.place.workers))
    # local slots beside the workers' worktrees: reused after a kill -9, hidden from sealed runs
    executor, where = open_executor(c.place.executor, count, ray_address=c.place.ray_address, gpus=c.place.gpus, slots_root=worker_root(loop) / "slots")
    loop.slot = replace(loop.slot, executor=executor)   # the baseline runs where the experiments will
    try:
        loop.ensure_baseline()
        return _run_workers(loop, count, executor, where, deadline)
    finally:
        loop.slot = replace(loop.slot, executor=None)
        executor.close()


def _run_workers(loop, count: int, executor, where: str, deadline: float | None) -> str | None:
    stop = threading.Event()
    workers = [Worker(loop, k, worker_worktree(loop, k), executor, stop) for k in range(1, count + 1)]
    loop.panel.workers = [w.status for w in workers]
    loop.panel.event(f"{count} workers on {where}; each experiment in its own worktree under "
                     f"{workers[0].slot.files.worktree.parent}")
    resumed = pending_attempts(loop)
    for a in resumed:   # their numbers are taken before any worker claims one
        loop.coord.adopt(0, a)
        loop.panel.event(f"resume: experiment {a.n} was in flight ({a.commit[:7]}): running it again")
    limit = loop.config.stops.max_experiments
    for w in workers:
        w.thread = threading.Thread(target=w.work, args=(resumed, limit, deadline), name=f"worker-{w.wid}",
                                    daemon=True)
        w.thread.start()
    last_boundary = time.monotonic()
    try:
        while any(w.thread.is_alive() for w in workers):
            for w in workers:
                w.thread.join(timeout=POLL_S / count)
            loop.panel.tick()
            if time.monotonic() - last_boundary > BOUNDARY_EVERY_S and not stop.is_set():
                last_boundary = time.monotonic()
                _boundary(loop)
    except BaseException:
        stop.set()
        for w in workers:
            w.thread.join()
        raise
    errors = [w.error for w in workers if w.error is not None]
    if errors:
        raise errors[0]
    _boundary(loop)
    if limit is not None and loop.coord.next_n() > limit:
        return f"reached --max-experiments {limit}"
    if deadline is not None and time.time() >= deadline:
        return f"reached --until {loop.config.stops.until}"
    return None


def _boundary(loop) -> None:
    """Human-queue decisions, applied between decisions (under the coordinator's lock)."""
    with loop.coord.lock:
        between.apply(loop.reviewer, loop.coord, loop.slot, loop.panel)


def open_executor(kind: str, count: int, *, ray_address: str | None = None, gpus: str | None = None,
                  slots_root: Path | None = None) -> tuple[SharedExecutor, str]:
    """The executor --executor names (local | ray), with `count` slots; and a line saying where jobs
    run. `gpus`: --gpus (local slots)."""
    if kind == "ray":
        import ray
        from executors.ray_exec import RayExecutor, start_ray
        # a local runtime gets a CPU per worker at least: the slots, not the cores, bound the jobs
        started = start_ray(ray_address, num_cpus=None if ray_address else max(count, os.cpu_count() or 1))
        gpus = float(ray.cluster_resources().get("GPU", 0))
        inner = RayExecutor(ray_address, slots=count, num_gpus_per_job=1 if gpus >= 1 else 0)
        inner._owns_ray = started   # shut down at close() only if this loop started it
        inner.warm()                # every slot's Ray worker up before the first jobs
        nodes = len([n for n in ray.nodes() if n.get("Alive")])
        return SharedExecutor(inner), (f"Ray ({ray_address or 'local runtime'}, {nodes} node(s), "
                                       f"{gpus:g} GPU(s){', one per job' if gpus >= 1 else ', CPU jobs'})")
    ids = gpu_ids(gpus)
    inner = LocalExecutor(count, gpus=ids or None, root=slots_root)
    return SharedExecutor(inner), (f"this machine, GPUs {','.join(ids)} (one per slot)" if ids
                                   else "this machine, CPU")


def gpu_ids(flag: str | None) -> list[str]:
    """--gpus, else CUDA_VISIBLE_DEVICES, else what nvidia-smi lists, else [] (CPU workers)."""
    if flag:
        return [g.strip() for g in flag.split(",") if g.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
            return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]
    return []


def worker_root(loop) -> Path:
    """<worktree-root>/<tag>.workers: the workers' worktrees and the local executor's slots."""
    return loop.worktree.parent / f"{loop.tag}.workers"


def worker_worktree(loop, wid: int) -> Path:
    """<worktree-root>/<tag>.workers/w<wid>: a detached worktree of the repository, reused on resume."""
    path = worker_root(loop) / f"w{wid}"
    if not (path / ".git").exists():
        with contextlib.suppress(gitops.GitError):
            gitops.git(loop.repo, "worktree", "prune")
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        gitops.git(loop.repo, "worktree", "add", "--detach", "-q", str(path), loop.last_kept)
    return path


def pending_attempts(loop) -> list[Attempt]:
    """The experiments a stopped parallel loop had in flight (the journal's undecided "pending"
    lines that name a worker), to run again in number order; one whose commit is gone is given
    up (a journal line says so)."""
    journal, _ = read_journal(loop.files.journal_path, kind=None)
    out, recorded = [], {r.number for r in loop.history}
    for pending in undecided(journal):
        commit = pending.commit
        if pending.worker is None or pending.n in recorded:
            continue
        if not commit or not gitops.rev_parse(loop.repo, commit):
            loop.panel.event(f"resume: experiment {pending.n}: pending commit {commit} not found; dropped")
            append_journal(loop.files.journal_path, replace(pending, dropped="pending commit not found").as_line())
            continue
        out.append(Attempt(n=pending.n, parent=pending.parent,
                           proposal=pending.proposal(gitops.show_file(loop.repo, commit, TRAIN)), commit=commit,
                           info=replace(ProposalInfo.from_dict(pending.info), resumed=True), attempts=pending.attempts))
    return out


