"""What an executor runs and returns: typed, picklable jobs and results, and the Executor protocol.

A `TrainJob` is everything one training run (and its trusted evaluation) needs, with no Loop in
it: the commit's files to materialise, the budget, the environment, the seal. It travels to a
thread (LocalExecutor) or to another machine (RayExecutor), where harness/executors/node.py
writes the files into a fresh folder, runs harness.runner.run_train there and, when the job
carries an `EvalSpec`, harness.verify.verify on the saved model. The `JobResult` comes back with
the log's text, so a remote node's log is never lost.

Placeholders in `TrainJob.env` values: "{src}" is the folder the files were written to, "{out}"
the run's output folder (artifacts/exp-NNNN, the only place a sealed run may write). They let a
job name node-local paths it cannot know in advance (a Hyperband state to save and fetch back).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

# crash_class of a job that was cancelled before it finished (never judged).
CANCELLED = "cancelled"
# crash_class of a job whose node could not run it as asked (e.g. no bubblewrap for a sealed run).
NODE_ERROR = "node_error"
# The fixed files beside train.py, which the loop never edits: it imports prepare.py and runtime.py
# from its own folder, and runtime.py imports attention.py and graph_export.py.
FIXED_SOURCES = ("prepare.py", "runtime.py", "attention.py", "graph_export.py")
# Files of a commit a run needs (and all of the project a sandboxed run sees).
RUN_SOURCES = ("train.py", *FIXED_SOURCES)
# How often wait() polls the executor.
WAIT_POLL_S = 0.1


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
    """How the run is sealed (harness.runner.run_train's arguments of the same names): whether the
    harness clock times it against the tag's baseline, the sandbox it runs in and the data that
    sandbox shows. job_seal() below fills it from the loop's harness.pinned.Seal."""
    sealed: bool = False
    sandbox: str = "none"                # "bwrap" | "none"
    data: dict | None = None             # harness.sandbox.DataView fields (str paths), for the sandbox
    data_mode: str = "train"             # "train" | "open" (harness.sandbox.data_view)
    stand_ins: dict | None = None        # training shard -> file shown in its place (screening)
    clock_reference: dict | None = None  # harness.clock.ClockReference fields: the tag's baseline


@dataclass
class TrainJob:
    """One training run. Mirrors harness.runner.run_train's arguments plus what a remote node
    needs, the files themselves; job_seal() and eval_spec() below fill the seal and the
    trusted evaluation from the loop's harness.pinned.Seal."""
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


@dataclass
class JobLog:
    """A job's log: its whole text (a remote node's travels back in it), its last lines, and where
    it is on this machine (written back there for a remote job)."""
    text: str = ""
    tail: str = ""
    path: str | None = None


@dataclass
class JobTimes:
    """When a job's run started and ended (epoch seconds) and its wall seconds."""
    started_at: float = 0.0
    ended_at: float = 0.0
    wall_seconds: float = 0.0


@dataclass
class JobResult:
    """What happened to a job: harness.runner.RunResult's fields the loop uses, plus the log text,
    the trusted evaluation (harness.verify.VerifyResult.as_dict()) and where things are locally."""
    n: int
    returncode: int | None
    summary: dict | None
    crash_class: str | None
    timed_out: bool = False
    log: JobLog = field(default_factory=JobLog)
    times: JobTimes = field(default_factory=JobTimes)
    artifact: str | None = None          # the model on this machine, when it is here
    outputs: dict = field(default_factory=dict)   # fetched output name -> local path
    extra: dict = field(default_factory=dict)     # clock, sealed, sandbox, steps_mode, node, slot, gpu
    verify: dict | None = None           # VerifyResult.as_dict(), when the job had an EvalSpec
    meta: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.crash_class is None

    @property
    def cancelled(self) -> bool:
        return self.crash_class == CANCELLED

    def verify_result(self):
        """The trusted evaluation as a harness.verify.VerifyResult (None without one)."""
        from harness.verify import VerifyResult
        if self.verify is None:
            return None
        return VerifyResult.from_dict(dict(self.verify))

    def run_result(self):
        """A harness.runner.RunResult for code that takes one (judges, records)."""
        from harness.runner import RunResult
        log, t = self.log, self.times
        return RunResult(returncode=self.returncode, summary=self.summary, crash_class=self.crash_class,
                         log_path=Path(log.path) if log.path else Path(self.extra.get("node_log", "")),
                         wall_seconds=t.wall_seconds, timed_out=self.timed_out,
                         artifact=Path(self.artifact) if self.artifact else None, log_tail=log.tail,
                         started_at=t.started_at, ended_at=t.ended_at, extra=dict(self.extra))


@runtime_checkable
class Executor(Protocol):
    """Runs TrainJobs, `slots` at once. Implementations: LocalExecutor, RayExecutor."""
    slots: int

    def submit(self, job: TrainJob) -> str:
        """Queue `job`; returns its id. Jobs beyond `slots` wait for a free slot."""

    def poll(self, job_id: str) -> JobResult | None:
        """The job's result once it has ended (cancelled ones too), else None."""

    def cancel(self, job_id: str) -> None:
        """End the job and every process it started; returns once they are gone (where the
        executor can see them: a remote node's watchdog ends them there)."""

    def close(self) -> None:
        """Cancel everything still running and release the executor's resources."""


def wait(executor: Executor, ids: list[str], timeout: float | None = None,
         first: bool = False) -> dict[str, JobResult]:
    """Poll until every job in `ids` (or, with first=True, any one) has a result or `timeout`
    seconds pass; returns the results that are in, by id."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done: dict[str, JobResult] = {}
    while True:
        for jid in ids:
            if jid not in done:
                res = executor.poll(jid)
                if res is not None:
                    done[jid] = res
        if len(done) == len(ids) or (first and done):
            return done
        if deadline is not None and time.monotonic() >= deadline:
            return done
        time.sleep(WAIT_POLL_S)


def sources_at(repo: Path, commit: str, names=RUN_SOURCES) -> dict[str, str]:
    """The files of `commit` a run needs, read from git (byte-exact); a name the commit lacks
    is left out (a stand-in project of the tests has no runtime.py, attention.py or graph_export.py)."""
    from harness import gitops
    out = {}
    for name in names:
        try:
            out[name] = gitops.show_file(Path(repo), commit, name)
        except gitops.GitError:
            if name == "train.py":
                raise
    return out


def job_seal(seal, *, sealed: bool = False, data_mode: str = "train", clock_reference: dict | None = None,
             stand_ins: dict | None = None) -> JobSeal:
    """A job's JobSeal from a harness.pinned.Seal (the loop's sandbox and data view; None: no
    sandbox, no data view): TrainJob(..., seal=job_seal(loop.seal, sealed=True, ...))."""
    if seal is None:
        return JobSeal(sealed=sealed, data_mode=data_mode, clock_reference=clock_reference, stand_ins=stand_ins)
    return JobSeal(sealed=sealed, sandbox=seal.sandbox.kind, data=seal.data.as_dict() if seal.data else None,
                   data_mode=data_mode, stand_ins=stand_ins, clock_reference=clock_reference)


def eval_spec(seal, *, prepare_source: str, train_source: str, profile: str,
              timeout_s: float | None = None, eval_tokens: int | None = None) -> EvalSpec:
    """The EvalSpec agent/judges/hierarchy.py's _verify amounts to: the trusted prepare.py, the
    run's evaluation batch, the seal's pinned inputs (and the data cache to repair them from)."""
    from harness.verify import eval_rows
    return EvalSpec(prepare_source=prepare_source, batch_size=eval_rows(profile),
                    inputs=dict(seal.inputs) if seal is not None else {},
                    eval_cache=str(seal.eval_cache) if seal is not None and seal.eval_cache else None,
                    data_cache=str(seal.data.cache) if seal is not None and seal.data else None,
                    timeout_s=timeout_s, train_source=train_source, eval_tokens=eval_tokens)
