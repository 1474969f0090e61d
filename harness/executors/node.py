"""Run one TrainJob where it landed: materialise its files, train, evaluate, report.

Both executors call `run_job`: LocalExecutor in a thread per slot (folder = that slot's folder,
run_dir = the tag's run folder), RayExecutor inside a Ray task (folder and run_dir in a temporary
folder on the node). Every guarantee of a loop run holds because this *is* a loop run:
harness.runner.run_train (sandbox, harness clock, process-group kill, pid file for kill -9
recovery) and then harness.verify.verify on the saved model, with the pinned inputs checked first
the way agent/judges/hierarchy.py does.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from harness import pinned
from harness.executors.base import NODE_ERROR, JobLog, JobResult, JobTimes, TrainJob
from harness.runner import TAIL_LINES, run_train
from harness.clock import ClockReference
from harness.sandbox import DataView, detect
from harness.verify import VerifyResult, verify

# Where a node without the tag's pinned copy keeps its own (one per set of input hashes).
NODE_PIN_ROOT = Path(tempfile.gettempdir()) / "autoresearch-pinned"
# The trusted evaluation's folders, inside the run folder (agent/judges/hierarchy.VERIFY_DIR).
VERIFY_DIR = ".verify"
# Where a run's artifacts folder is while it trains (artifacts/.staging/exp-NNNN), swapped in
# when it is done (the folder keeps its name: what the run sees is exp-NNNN/ as before).
STAGING_DIR = ".staging"


def materialise(files: dict, folder: Path) -> Path:
    """A fresh `folder` holding exactly `files` (name -> str | bytes)."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, content in files.items():
        path = folder / name
        if path.resolve().parent != folder.resolve() and folder.resolve() not in path.resolve().parents:
            raise ValueError(f"job file {name!r} would land outside its folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return folder


def expand_env(env: dict, src: Path, out: Path) -> dict:
    return {k: str(v).replace("{src}", str(src)).replace("{out}", str(out)) for k, v in env.items()}


def swap_in(run, staging: Path, out_dir: Path):
    """A run that finished without a crash replaces the experiment's artifacts folder; a crashed
    one leaves the folder as it was and its own staging goes. Returns `run` pointing there."""
    if run.crash_class is None:
        old = out_dir.with_name(out_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(staging, out_dir)
        shutil.rmtree(old, ignore_errors=True)
        if run.artifact is not None:
            run.artifact = out_dir / Path(run.artifact).name
    else:
        shutil.rmtree(staging, ignore_errors=True)
        run.artifact = None
    try:
        staging.parent.rmdir()   # only when no other slot's run stages there
    except OSError:
        pass
    return run


def clear_staging(run_dir: Path) -> list[str]:
    """Remove the staging folders of runs a stop cut short (--resume); their names."""
    folder = Path(run_dir) / "artifacts" / STAGING_DIR
    gone = sorted(f"artifacts/{STAGING_DIR}/{p.name}" for p in folder.iterdir()) if folder.is_dir() else []
    shutil.rmtree(folder, ignore_errors=True)
    return gone


def run_job(job: TrainJob, folder: Path, run_dir: Path, *, slot: str = "0", extra_env: dict | None = None,
            on_tick=None, should_stop=None) -> JobResult:
    """Train `job` in `folder` (replaced by the job's files) with logs and artifacts in `run_dir`.
    KeyboardInterrupt, or anything `on_tick` raises, ends the run's process group and propagates;
    should_stop() true after training skips the evaluation (a cancel)."""
    folder, run_dir = Path(folder), Path(run_dir)
    started = time.time()
    materialise(job.files, folder)
    out_dir = run_dir / "artifacts" / f"exp-{job.n:04d}"
    # The run writes a staging folder, swapped in only once it trained: a rerun of a kept experiment
    # (a baseline repeat) that is stopped midway leaves the kept run's model where it was.
    staging = out_dir.parent / STAGING_DIR / out_dir.name
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    env = expand_env(job.env, folder, staging)
    env.update(extra_env or {})
    seal = job.seal
    try:
        box = detect("bwrap") if seal.sandbox == "bwrap" else detect("none")
    except RuntimeError as exc:
        return _node_error(job, f"sandbox {seal.sandbox}: {exc}", started)
    data = DataView.from_dict(seal.data)
    rows = job.evaluation.batch_size if job.evaluation is not None else None
    run = run_train(folder, run_dir, job.n, job.budget, timeout=job.timeout, env=env, log_name=job.log_name,
                    on_tick=on_tick, sandbox=box, data=data, sealed=seal.sealed, data_mode=seal.data_mode,
                    clock_reference=ClockReference(**(seal.clock_reference or {})), stand_ins=seal.stand_ins,
                    eval_rows=rows, pid_name=f"child-{slot}.pid", out_dir=staging, stop_limits=job.stop_limits)
    run = swap_in(run, staging, out_dir)
    result = JobResult(n=job.n, returncode=run.returncode, summary=run.summary, crash_class=run.crash_class,
                       timed_out=run.timed_out,
                       log=JobLog(text=run.log_path.read_text(errors="replace"), tail=run.log_tail,
                                  path=str(run.log_path)),
                       times=JobTimes(started_at=run.started_at, ended_at=run.ended_at, wall_seconds=run.wall_seconds),
                       artifact=str(run.artifact) if run.artifact else None,
                       extra=dict(run.extra, node=socket.gethostname(), slot=slot,
                                  gpu=os.environ.get("CUDA_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))),
                       meta=dict(job.meta))
    result.outputs = {name: str(out_dir / name) for name in job.fetch
                      if run.crash_class is None and (out_dir / name).is_file()}
    if job.evaluation is not None and run.crash_class is None and not (should_stop and should_stop()):
        v = evaluate(job, run.artifact, run.summary, run_dir, box, env, slot)
        result.verify = v.as_dict()
    result.times.ended_at = time.time()
    return result


def evaluate(job: TrainJob, artifact, summary: dict | None, run_dir: Path, box, env: dict,
             slot: str) -> VerifyResult:
    """The trusted evaluation, exactly as agent/judges/hierarchy.py's _verify calls it."""
    spec = job.evaluation
    printed = None if job.seal.sealed else (summary or {}).get("val_bpb")
    cache, problem = _eval_cache(spec, job.seal.data)
    if problem is not None:
        problem.printed_bpb = printed
        return problem
    kw = {"timeout_s": spec.timeout_s} if spec.timeout_s else {}
    if spec.eval_tokens:
        kw["eval_tokens"] = spec.eval_tokens
    train_source = spec.train_source if spec.train_source is not None else job.files.get("train.py", "")
    return verify(artifact, train_source=train_source, prepare_source=spec.prepare_source,
                  printed_bpb=printed, sealed=job.seal.sealed, rows=spec.batch_size,
                  env=dict(os.environ, **env), sandbox=box, eval_cache=cache,
                  work_root=run_dir / VERIFY_DIR, pid_name=f"verify-{slot}.pid", **kw)


def _eval_cache(spec, data: dict | None) -> tuple[Path | None, VerifyResult | None]:
    """The pinned inputs to evaluate with, checked against spec.inputs; or why there are none."""
    if not spec.inputs:
        return (Path(spec.eval_cache) if spec.eval_cache else None), None
    if spec.eval_cache and Path(spec.eval_cache).is_dir():
        cache = Path(spec.eval_cache)
        bad = pinned.check(cache, spec.inputs)
        if not bad:
            return cache, None
        view = DataView(cache=Path(spec.data_cache)) if spec.data_cache else None
        try:
            note = pinned.repair(cache, view, spec.inputs)
        except pinned.PinnedError as exc:
            return None, VerifyResult(False, f"the evaluation inputs changed ({'; '.join(bad[:4])}); {exc}",
                                      details={"inputs_changed": bad, "pinned_error": str(exc)})
        return None, VerifyResult(False, f"the evaluation inputs changed ({'; '.join(bad[:4])}); {note}",
                                  details={"inputs_changed": bad, "repaired": note})
    return _node_pin(spec, data)


def _node_pin(spec, data: dict | None) -> tuple[Path | None, VerifyResult | None]:
    """A node without the tag's pinned copy pins its own from its prepared data, if that data
    holds exactly the inputs the tag was measured on."""
    shared = spec.data_cache or (data or {}).get("cache")
    if not shared or not Path(shared).is_dir():
        return None, VerifyResult(False, f"this node ({socket.gethostname()}) has no copy of the evaluation "
                                  "inputs: prepare the data there (uv run prepare.py)",
                                  details={"node_inputs": ["missing data cache"]})
    bad = pinned.check(Path(shared), spec.inputs)
    if bad:
        return None, VerifyResult(False, f"this node's ({socket.gethostname()}) data is not what the tag was "
                                  f"measured on ({'; '.join(bad[:4])}): prepare the same data there",
                                  details={"node_inputs": bad})
    digest = hashlib.sha256(repr(sorted(spec.inputs.items())).encode()).hexdigest()[:16]
    target = NODE_PIN_ROOT / digest / "cache"
    if pinned.check(target, spec.inputs):
        tmp = NODE_PIN_ROOT / digest / f"cache.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        pinned._copy(Path(shared), tmp, spec.inputs)
        shutil.rmtree(target, ignore_errors=True)
        try:
            tmp.rename(target)
        except OSError:            # another task on this node pinned it first
            shutil.rmtree(tmp, ignore_errors=True)
    bad = pinned.check(target, spec.inputs)
    if bad:
        return None, VerifyResult(False, f"pinning the evaluation inputs on this node failed ({'; '.join(bad[:4])})",
                                  details={"node_inputs": bad})
    return target, None


def _node_error(job: TrainJob, why: str, started: float) -> JobResult:
    return JobResult(n=job.n, returncode=None, summary=None, crash_class=NODE_ERROR,
                     log=JobLog(text=f"[executor] {why}\n", tail=f"[executor] {why}"),
                     times=JobTimes(started_at=started, ended_at=time.time()), extra={"node": socket.gethostname(), "error": why},
                     meta=dict(job.meta))


def tail(text: str) -> str:
    return "\n".join(text.splitlines()[-TAIL_LINES:])
