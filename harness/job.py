"""One job: a training run and its trusted evaluation, as a value that can travel, and the run of it.

A `TrainJob` is everything one training run (and its trusted evaluation) needs, with no Loop in
it: the commit's files to materialise, the budget, the environment, the seal. It runs in a thread
(executors/local.py) or on another machine (executors/ray_exec.py), where `run_job` writes the
files into a fresh folder, runs harness.runner.run_train there and, when the job carries an
`EvalSpec`, harness.verify.verify on the saved model, the pinned inputs checked first. Every
guarantee of a loop run holds wherever it lands, because this *is* a loop run. What comes back
is the run's harness.runner.RunResult itself, the trusted evaluation in it (`verified`); a Ray
node sends its log's text beside it (executors/ray_exec.py), so a remote log is never lost.

Placeholders in `TrainJob.env` values: "{src}" is the folder the files were written to, "{out}"
the run's output folder (artifacts/exp-NNNN, the only place a sealed run may write). They let a
job name node-local paths it cannot know in advance (a Hyperband state to save and fetch back).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import verify as pinned_inputs
from harness.clock import ClockReference
from harness.runner import NODE_ERROR, TAIL_LINES, RunPlace, RunResult, RunSpec, RunView, run_train
from harness.sandbox import DataView, detect
from harness.verify import EvalPlace, Evaluation, VerifyResult, verify
# The fixed files beside train.py, which the loop never edits: it imports prepare.py and runtime.py
# from its own folder, and runtime.py imports attention.py and graph_export.py.
FIXED_SOURCES = ("prepare.py", "runtime.py", "attention.py", "graph_export.py")
# Files of a commit a run needs (and all of the project a sandboxed run sees).
RUN_SOURCES = ("train.py", *FIXED_SOURCES)


@dataclass
class EvalSpec:
    """The trusted evaluation of the job's saved model (harness/verify.py).

    prepare_source: prepare.py as committed at the tag's base (what no experiment touched).
    batch_size: rows of the evaluation batch, harness.verify.eval_rows(profile) (the graph's input).
    inputs: the pinned evaluation inputs' hashes (run.json "inputs": path relative to the cache ->
    sha256); checked before every evaluation, as agent/judges/hierarchy.py does.
    eval_cache: the pinned copy (<run>/.sealed/cache) where it exists; a node without it pins its
    own copy from `data_cache` (its prepared data) after checking the same hashes.
    """
    prepare_source: str
    batch_size: int = 8
    inputs: dict = field(default_factory=dict)
    eval_cache: str | None = None
    data_cache: str | None = None
    timeout_s: float | None = None
    train_source: str | None = None      # default: the job's files["train.py"]
    eval_tokens: int | None = None       # fewer tokens than the profile's EVAL_TOKENS (a short budget's)


@dataclass
class JobSeal:
    """How the run is sealed (harness.runner's RunSpec and RunView fields of the same names): whether the
    harness clock times it against the tag's baseline, the sandbox it runs in and the data that
    sandbox shows. agent/experiment.py job_seal() fills it from the loop's harness.verify.Seal."""
    sealed: bool = False
    sandbox: str = "none"                # "bwrap" | "none"
    data: dict | None = None             # harness.sandbox.DataView fields (str paths), for the sandbox
    data_mode: str = "train"             # "train" | "open" (harness.sandbox.data_view)
    stand_ins: dict | None = None        # training shard -> file shown in its place (screening)
    clock_reference: dict | None = None  # harness.clock.ClockReference fields: the tag's baseline


@dataclass
class TrainJob:
    """One training run. Mirrors harness.runner's RunSpec (picklable: no paths, no sandbox) plus what a remote node
    needs, the files themselves; agent/experiment.py job_seal() and eval_spec() fill the seal and the
    trusted evaluation from the loop's harness.verify.Seal."""
    n: int
    files: dict                          # name -> str | bytes, written into the run's folder
    budget: float
    run_dir: str                         # where the log (and fetched outputs) land on this machine
    log_name: str | None = None          # default exp-NNNN.log
    commit: str | None = None
    timeout: float | None = None         # default harness.runner.timeout_for(budget)
    env: dict = field(default_factory=dict)   # e.g. {"AUTORESEARCH_SEED": "1000"}; placeholders above
    seal: JobSeal = field(default_factory=JobSeal)
    evaluation: EvalSpec | None = None
    fetch: tuple = ("model.pt",)         # output files a remote node sends back into run_dir/artifacts
    meta: dict = field(default_factory=dict)   # the caller's own tags; returned untouched
    stop_limits: list | None = None      # [[fraction, loss], ...]: end it early past them (run_train)

    @property
    def log_file(self) -> str:
        return self.log_name or f"exp-{self.n:04d}.log"


# Where a node without the tag's pinned copy keeps its own (one per set of input hashes).
NODE_PIN_ROOT = Path(tempfile.gettempdir()) / "autoresearch-pinned"
# The trusted evaluation's folders, inside the run folder.
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
            on_tick=None, should_stop=None) -> RunResult:
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
        return failed(job, NODE_ERROR, f"sandbox {seal.sandbox}: {exc}", run_dir / "logs" / job.log_file,
                      started, node=socket.gethostname())
    data = DataView.from_dict(seal.data)
    rows = job.evaluation.batch_size if job.evaluation is not None else None
    run = run_train(RunSpec(folder, run_dir, job.n, job.budget, timeout=job.timeout, env=env, sealed=seal.sealed,
                            clock_reference=ClockReference(**(seal.clock_reference or {})), eval_rows=rows,
                            stop_limits=job.stop_limits,
                            view=RunView(sandbox=box, data=data, data_mode=seal.data_mode, stand_ins=seal.stand_ins),
                            place=RunPlace(log_name=job.log_name, pid_name=f"child-{slot}.pid", out_dir=staging)),
                    on_tick=on_tick)
    run = swap_in(run, staging, out_dir)
    run.n, run.meta = job.n, dict(job.meta)
    run.extra.update(node=socket.gethostname(), slot=slot,
                     gpu=os.environ.get("CUDA_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES")))
    run.outputs = {name: str(out_dir / name) for name in job.fetch
                   if run.crash_class is None and (out_dir / name).is_file()}
    if job.evaluation is not None and run.crash_class is None and not (should_stop and should_stop()):
        run.extra["verify_result"] = evaluate(job, run.artifact, run.summary, run_dir, box, env, slot)
    run.ended_at = time.time()   # the evaluation included
    return run


def evaluate(job: TrainJob, artifact, summary: dict | None, run_dir: Path, box, env: dict,
             slot: str) -> VerifyResult:
    """The trusted evaluation of the run's model: the one place it is made (the judge reads it from
    the run, agent/judges/hierarchy.py _verify)."""
    spec = job.evaluation
    printed = None if job.seal.sealed else (summary or {}).get("val_bpb")
    cache, problem = _eval_cache(spec, job.seal.data)
    if problem is not None:
        problem.printed_bpb = printed
        return problem
    train_source = spec.train_source if spec.train_source is not None else job.files.get("train.py", "")
    what = Evaluation(train_source, spec.prepare_source, spec.batch_size, printed_bpb=printed,
                      sealed=job.seal.sealed, eval_tokens=spec.eval_tokens or None, eval_cache=cache)
    where = EvalPlace(sandbox=box, env=dict(os.environ, **env), work_root=run_dir / VERIFY_DIR,
                      pid_name=f"verify-{slot}.pid")
    if spec.timeout_s:
        where.timeout_s = spec.timeout_s
    return verify(artifact, what, where)


def _eval_cache(spec, data: dict | None) -> tuple[Path | None, VerifyResult | None]:
    """The pinned inputs to evaluate with, checked against spec.inputs; or why there are none."""
    if not spec.inputs:
        return (Path(spec.eval_cache) if spec.eval_cache else None), None
    if spec.eval_cache and Path(spec.eval_cache).is_dir():
        cache = Path(spec.eval_cache)
        bad = pinned_inputs.check_pinned(cache, spec.inputs)
        if not bad:
            return cache, None
        view = DataView(cache=Path(spec.data_cache)) if spec.data_cache else None
        try:
            note = pinned_inputs.repair_pinned(cache, view, spec.inputs)
        except pinned_inputs.PinnedError as exc:
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
    bad = pinned_inputs.check_pinned(Path(shared), spec.inputs)
    if bad:
        return None, VerifyResult(False, f"this node's ({socket.gethostname()}) data is not what the tag was "
                                  f"measured on ({'; '.join(bad[:4])}): prepare the same data there",
                                  details={"node_inputs": bad})
    digest = hashlib.sha256(repr(sorted(spec.inputs.items())).encode()).hexdigest()[:16]
    target = NODE_PIN_ROOT / digest / "cache"
    if pinned_inputs.check_pinned(target, spec.inputs):
        tmp = NODE_PIN_ROOT / digest / f"cache.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        pinned_inputs._copy_pinned(Path(shared), tmp, spec.inputs)
        shutil.rmtree(target, ignore_errors=True)
        try:
            tmp.rename(target)
        except OSError:            # another task on this node pinned it first
            shutil.rmtree(tmp, ignore_errors=True)
    bad = pinned_inputs.check_pinned(target, spec.inputs)
    if bad:
        return None, VerifyResult(False, f"pinning the evaluation inputs on this node failed ({'; '.join(bad[:4])})",
                                  details={"node_inputs": bad})
    return target, None


def failed(job: TrainJob, crash: str, why: str, log_path: Path | None, started: float = 0.0, **extra) -> RunResult:
    """A job that never ran to its end (cancelled, its node's or its executor's error): `why` is
    added to its log at `log_path` (made if missing; None: a job that never started has none)."""
    note = f"[executor] {why}"
    if log_path is not None:
        try:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(f"\n{note}\n")
        except OSError:
            pass
    run = RunResult(returncode=None, summary=None, crash_class=crash, log_path=Path(log_path or ""),
                    wall_seconds=0.0, timed_out=False, artifact=None, started_at=started, ended_at=time.time(),
                    extra={"reason": why, **extra}, n=job.n, meta=dict(job.meta))
    run.log_tail = tail(run.log_text() if log_path is not None else note)
    return run


def tail(text: str) -> str:
    return "\n".join(text.splitlines()[-TAIL_LINES:])
