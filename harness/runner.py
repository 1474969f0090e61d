"""Run one experiment: `python train.py` in the worktree, in its own process group.

Why a process group: train.py may start helpers (dataloader workers, compilers, a shell); a
timeout or Ctrl-C must end all of them, not just the leader. The group id is written to a pid
file before we wait, so a later `--resume` can kill a group left behind by a loop that died
with kill -9 (harness/procs.py: kill_group, kill_leftover).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import compiled
from harness.clock import (CHEAT_FACTOR, KILL_MARGIN_S, STARTUP_FIRST_S, ClockFigures, ClockReference, LogClock,
                           limit_for, parse_summary)
from harness.procs import (MAX_LOAD, TERM_GRACE_SECONDS, CpuAccount, LoadMeter, kill_group,  # noqa: F401
                           kill_leftover, threads_of)   # (kill_leftover: re-exported)
from harness.output import OutputReader, out_flood, read_capped
from harness.sandbox import DataView, Sandbox, View, data_view, gpus_of

# A run may take this many times the training budget (startup + eval fit easily) before it is
# killed; the seed's program.md says ">10 minutes" for a 5-minute budget, i.e. 2x.
TIMEOUT_FACTOR = 2.0
# ...but a tiny smoke budget still needs time to import torch and evaluate.
MIN_GRACE_SECONDS = 300.0  # startup + the fixed evaluation can take minutes on a loaded CPU
# How often we poll the child (and call on_tick): small next to any budget.
POLL_SECONDS = 0.2
# Lines of log shown to the proposer when asked to fix a crash (program.md: tail -n 50).
TAIL_LINES = 50
# The pid file of the running child's process group, at the top of the run folder.
PID_FILE = "child.pid"
# Where a sandboxed run sees its output folder, whatever the folder's real name (exp-NNNN): no run
# can tell a re-measurement's folder number from a loop run's.
ARTIFACT_INSIDE = Path("/artifact")

# The tail of the log read back for the proposer (bytes, then lines).
TAIL_BYTES = 256 << 10
# How long to wait for the output reader once the child's group is gone.
READER_JOIN_S = 10.0

# Markers in the log, checked in this order after timeouts. OOM first: the kernel's OOM killer
# also shows up as SIGKILL, and a CUDA OOM is a Python exception.
OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "MemoryError",
               "DefaultCPUAllocator: can't allocate memory", "std::bad_alloc")
SYNTAX_MARKERS = ("SyntaxError", "IndentationError", "TabError")
# faulthandler's own words for a crash by signal: the process died of it, whatever the exit status says.
SIGNAL_MARKERS = ("Fatal Python error: Segmentation fault", "Fatal Python error: Bus error")
FAIL_PREFIX = "FAIL:"

# Crash classes recorded in the journal (crash_class).
TIMEOUT, OOM, SEGFAULT, KILLED = "timeout", "oom", "segfault", "killed"
SYNTAX, NAN, EXCEPTION, MISSING = "syntax_error", "nan_divergence", "exception", "missing_summary"
OVER_BUDGET, NO_ARTIFACT, FLOOD = "over_budget", "missing_artifact", "output_flood"
# Ended by the harness because its printed curve was far worse than the incumbent's (run_train's
# `stop_limits`): no crash of the idea, and no evidence for it either: a discard that cost less.
STOPPED_EARLY = "stopped_early"
# A job an executor cancelled before it finished (never judged), and one whose node could not run
# it as asked (no bubblewrap for a sealed run, say): harness/job.py, executors/.
CANCELLED, NODE_ERROR = "cancelled", "node_error"


@dataclass
class RunResult:
    """One run, as run_train ends it and as every executor hands it back (harness/job.py run_job,
    here or on a Ray node): the same object from the runner to the judge."""
    returncode: int | None
    summary: dict | None
    crash_class: str | None
    log_path: Path
    wall_seconds: float
    timed_out: bool
    artifact: Path | None
    log_tail: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0
    extra: dict = field(default_factory=dict)
    n: int = 0                                    # the experiment's number (a job's)
    outputs: dict = field(default_factory=dict)   # a job's fetched output name -> path on this machine
    meta: dict = field(default_factory=dict)      # a job's caller's own tags, handed back untouched

    @property
    def ok(self) -> bool:
        return self.crash_class is None

    @property
    def cancelled(self) -> bool:
        return self.crash_class == CANCELLED

    def log_text(self) -> str:
        """The run's whole log as it is on this machine ("" without one)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # Typed reads of the run: `summary` is what train.py printed (harness/clock.py (the summary block)), `extra` the
    # harness's notes on the run (runner, executors, the loop). Readers use these, not the dicts.
    def printed(self, key: str) -> float | None:
        """A figure train.py printed in its summary (val_bpb, peak_vram_mb, ...), None when absent
        or not a number. Not trusted: the trusted val_bpb is harness/verify.py's."""
        v = (self.summary or {}).get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def clock(self) -> ClockFigures | None:
        """The harness's clock of the run (harness/clock.py), None when it had none."""
        return ClockFigures.from_dict(self.extra.get("clock"))

    @property
    def clock_figures(self) -> dict | None:
        """The same as the harness wrote it (ClockFigures.as_dict()): what the journal stores."""
        v = self.extra.get("clock")
        return v if isinstance(v, dict) else None

    @property
    def sealed(self) -> bool:
        return self.extra.get("sealed") is True

    @property
    def steps_mode(self) -> bool:
        """Run for a fixed number of steps (AUTORESEARCH_STEPS), not the time budget."""
        return self.extra.get("steps_mode") is True

    @property
    def stopped_early(self) -> str | None:
        """Why the harness ended it early on its printed curve (run_train's stop_limits), or None."""
        v = self.extra.get("stopped_early")
        return v if isinstance(v, str) and v else None

    @property
    def resumed(self) -> bool:
        """Started from a saved state (AUTORESEARCH_RESUME_STATE): its first step line is not step 1."""
        return self.extra.get("resumed") is True

    @property
    def seed(self) -> int | None:
        v = self.extra.get("seed")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def verified(self):
        """The trusted evaluation an executor made where the model was (harness/job.py run_job),
        the harness.verify.VerifyResult itself (a Ray task pickles it whole), or None."""
        return self.extra.get("verify_result")


def timeout_for(budget: float) -> float:
    """2x budget, never less than budget + MIN_GRACE (10 min for the default 300 s)."""
    return max(TIMEOUT_FACTOR * budget, budget + MIN_GRACE_SECONDS)


def classify(returncode: int | None, timed_out: bool, text: str, summary: dict | None, *,
             sealed: bool = False, artifact: bool = True) -> str | None:
    """Name what went wrong with a run, or None when it produced a usable result. A sealed run
    (loop mode) prints no val_bpb: its result is the saved model, measured by the harness."""
    if timed_out:
        return TIMEOUT
    if any(m in text for m in OOM_MARKERS):
        return OOM
    if returncode is not None and returncode < 0:
        return SEGFAULT if -returncode in (signal.SIGSEGV, signal.SIGBUS) else KILLED
    if returncode not in (0, None) and any(m in text for m in SIGNAL_MARKERS):
        return SEGFAULT
    # the exception's own line ("SyntaxError: invalid syntax"), at the start of a line: a syntax
    # error in train.py itself has no Traceback header, one in an imported module does
    if any(line.startswith(m + ":") for line in text.splitlines() for m in SYNTAX_MARKERS):
        return SYNTAX
    if any(line.startswith(FAIL_PREFIX) for line in text.splitlines()):
        return NAN
    if returncode != 0:
        return EXCEPTION
    if summary is None:
        return MISSING
    if sealed:
        return None if artifact else NO_ARTIFACT
    bpb = summary.get("val_bpb")
    if not isinstance(bpb, (int, float)) or not math.isfinite(bpb):
        return NAN
    return None


@dataclass
class RunView:
    """What a run sees beyond its own folder (harness/sandbox.py): run it inside `sandbox` with
    `data` shown per `data_mode` ("train", "open"; `stand_ins` replace training shards, for
    screening); the only writable place is its output folder, plus `extra_writable` (a folder to
    save a Hyperband state in); `extra_readonly` (a state to resume). Without a sandbox (kind
    "none") the environment is still scrubbed of secrets. compile_cache: "read" (default): the
    tag's trusted compile cache (harness/compiled.py, run_dir/.sealed/compile-cache), when
    published, is copied into the run's private cache before train.py starts; "write": only the
    harness's warm-up of the base train.py, whose caches go to `cache_work`; "off"."""
    sandbox: Sandbox | None = None
    data: DataView | None = None
    data_mode: str = "train"
    stand_ins: dict | None = None
    extra_readonly: list = field(default_factory=list)
    extra_writable: list = field(default_factory=list)
    compile_cache: str = "read"
    cache_work: Path | None = None


@dataclass
class RunPlace:
    """Where a run's things go: its log (run_dir/logs/exp-NNNN.log, or `log_name` there, or
    `log_path`), its output folder (run_dir/artifacts/exp-NNNN/, or `out_dir`), the file in run_dir
    that records its process group while it runs (`pid_name`: one per worker or executor slot when
    runs share a run folder). clean: afterwards, anything left in the folder beyond its own files is
    removed. own_session: the child leads its own process group (default); False keeps it in the
    caller's (scripts/gpu_steps.py: killing a step's group then ends its train.py too)."""
    log_name: str | None = None
    log_path: Path | None = None
    out_dir: Path | None = None
    pid_name: str = PID_FILE
    clean: bool = False
    own_session: bool = True


@dataclass
class RunSpec:
    """One run of `script` in `folder` (executors/ materialise a commit's train.py and the fixed
    files beside it there: with a sandbox it is all of the project the run sees, read-only), the
    n-th of the run folder `run_dir`, on a budget of `budget` seconds (killed past `timeout`).
    sealed: loop mode (AUTORESEARCH_SEALED=1): train.py saves its model and does not evaluate; the
    harness clock (harness/clock.py, against `clock_reference`, the tag's baseline) times the
    training and ends a run far past its budget. eval_rows: the evaluation batch its graph is
    recorded at. stop_limits: [[fraction of the budget, loss], ...]: the run is ended (crash class
    stopped_early) once the loss it prints at that point of its budget is above the limit
    (harness/clock.py LogClock.stop_early): what it prints may make it cost less, never count for more."""
    folder: Path
    run_dir: Path
    n: int
    budget: float
    timeout: float | None = None
    env: dict | None = None
    script: str = "train.py"
    sealed: bool = False
    clock_reference: ClockReference | None = None
    eval_rows: int | None = None
    stop_limits: list | None = None
    view: RunView = field(default_factory=RunView)
    place: RunPlace = field(default_factory=RunPlace)


def run_train(spec: RunSpec, on_tick=None) -> RunResult:
    """Run `sys.executable train.py` as `spec` says; return what happened (never raises on crash).

    The child's output is read through a pipe (harness/output.py): lines are cut, secrets removed,
    step lines stamped, and the log stops at its cap, where the run ends as a flood.
    on_tick(seconds, log_path) is called while it runs. KeyboardInterrupt (and anything else raised
    while waiting, e.g. from on_tick) ends the child's whole process group before propagating.
    """
    seen, place = spec.view, spec.place
    folder, run_dir, n, budget, sealed = Path(spec.folder), Path(spec.run_dir), spec.n, spec.budget, spec.sealed
    # once per process: without .pyc files every run compiles torch from source (its group recorded
    # in the run folder, so --resume ends it after a kill -9 of the loop)
    compiled.ensure(pid_dir=run_dir)
    log_path = Path(place.log_path) if place.log_path is not None else \
        run_dir / "logs" / (place.log_name or f"exp-{n:04d}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out_dir = Path(place.out_dir) if place.out_dir is not None else run_dir / "artifacts" / f"exp-{n:04d}"
    shutil.rmtree(out_dir, ignore_errors=True)   # never let an old artifact pass for this run's
    out_dir.mkdir(parents=True, exist_ok=True)
    artifact = out_dir / "model.pt"
    box = seen.sandbox if seen.sandbox is not None else Sandbox("none", "not sandboxed")
    timeout = timeout_for(budget) if spec.timeout is None else spec.timeout
    reference = spec.clock_reference or ClockReference()
    child_env = dict(os.environ)
    child_env.update({"AUTORESEARCH_TIME_BUDGET": f"{budget:g}",
                      "AUTORESEARCH_ARTIFACT": str(ARTIFACT_INSIDE / artifact.name if box.sealed else artifact),
                      "PYTHONUNBUFFERED": "1",
                      # no .pyc files: a forged prepare.pyc must not change the next run
                      "PYTHONDONTWRITEBYTECODE": "1",
                      # the source already carries its profile's knob values (search/knobs.for_profile)
                      "AUTORESEARCH_KNOBS_AS_WRITTEN": "1"})
    if spec.eval_rows:
        child_env["AUTORESEARCH_EVAL_BATCH"] = str(spec.eval_rows)
    child_env.pop("AUTORESEARCH_SEALED", None)
    child_env.update(({"AUTORESEARCH_SEALED": "1"} if sealed else {}) | (spec.env or {}))
    steps_mode = bool(child_env.get("AUTORESEARCH_STEPS"))
    started = time.time()
    if sealed and not steps_mode:
        # its start and the startup it is never charged for (the reference's own, before the jitter
        # and load stretch): an honest run pays a longer startup from its budget (runtime.budget_spent)
        credit = reference.startup_s if reference.startup_s is not None else STARTUP_FIRST_S
        child_env["AUTORESEARCH_CLOCK"] = json.dumps({"started_at": started, "startup_s": round(credit, 3)})
    readonly, binds, hide = data_view(seen.data, seen.data_mode, stand_ins=seen.stand_ins)
    view = View(cwd=folder, readonly=readonly + list(seen.extra_readonly or []),
                writable=([] if box.sealed else [out_dir]) + list(seen.extra_writable or []), binds=binds,
                rw_binds=[(out_dir, ARTIFACT_INSIDE)] if box.sealed else [],
                hide=hide + [run_dir.resolve()] + ([seen.data.cache] if seen.data is not None else []),
                gpus=gpus_of(child_env))
    argv = [sys.executable, spec.script]
    argv, private_cache = compiled.run_cache(seen.compile_cache, run_dir, seen.cache_work, box, view, child_env, argv)
    before = set(os.listdir(folder)) if place.clean else set()

    t0 = time.monotonic()
    steps_env = child_env.get("AUTORESEARCH_STEPS")
    clock = LogClock(t0, reference, budget=budget, steps=int(steps_env) if steps_env and steps_env.isdigit() else None)
    kill_at = CHEAT_FACTOR * limit_for(budget, MAX_LOAD) + KILL_MARGIN_S   # past what any load explains
    timed_out = over_budget = False
    flood = stopped = None
    # every CPU second of the run, counted by the kernel; its name says nothing of the run (without a
    # cgroup namespace, /proc/self/cgroup shows it inside)
    account = CpuAccount(os.urandom(4).hex())
    with open(log_path, "wb") as log:
        proc = box.popen(argv, view, child_env, enter=account.enter, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=place.own_session)
        # the machine's load, measured by the harness
        clock.meter = meter = LoadMeter(proc.pid, wants=threads_of(child_env), account=account)
        meter.sample(t0)
        pid_file = run_dir / place.pid_name
        pid_file.write_text(json.dumps({"pgid": proc.pid, "n": n, "cwd": str(folder),
                                        "started_at": started}))
        reader = OutputReader(proc.stdout, log, clock)
        reader.start()
        try:
            while True:
                try:
                    proc.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                meter.sample(now)
                if now - t0 > timeout:
                    timed_out = True
                    break
                if sealed and not steps_mode and clock.live_charge(now) > kill_at:
                    over_budget = True
                    break
                flood = reader.flood or out_flood(out_dir)
                if flood:
                    break
                stopped = clock.stop_early(spec.stop_limits)
                if stopped:
                    break
                if on_tick is not None:
                    on_tick(now - t0, log_path)
        finally:   # also on Ctrl-C or an on_tick that raised
            ended = time.monotonic()
            meter.sample(ended, force=True)
            # The leader may be done while its children live on (or it timed out): end the group,
            # and anything of the run's that left it (its cgroup)
            _end(proc, place.own_session)
            account.close()
            reader.join(READER_JOIN_S)
            pid_file.unlink(missing_ok=True)
            if private_cache:
                shutil.rmtree(private_cache, ignore_errors=True)
        flood = flood or reader.flood
    wall = time.monotonic() - t0
    ended_by_us = timed_out or over_budget or bool(flood) or bool(stopped)
    figures = clock.figures(ended if not ended_by_us else None)
    if place.clean:
        _clean_folder(folder, before)

    text = read_capped(log_path)
    summary = parse_summary(text)
    returncode = None if ended_by_us else _exit_status(proc.returncode, box.sealed)
    crash = FLOOD if flood else OVER_BUDGET if over_budget else STOPPED_EARLY if stopped else \
        classify(returncode, timed_out, text, summary, sealed=sealed, artifact=artifact.exists())
    note = _runner_note(crash, returncode, wall, timeout, budget, flood or stopped)
    if note:   # a killed process says nothing itself: the log (and the proposer) must still know why
        with open(log_path, "a") as log:
            log.write(f"\n[runner] {note}\n")
    tail = "\n".join(read_capped(log_path, TAIL_BYTES).splitlines()[-TAIL_LINES:])
    return RunResult(returncode=returncode, summary=summary, crash_class=crash, log_path=log_path,
                     wall_seconds=wall, timed_out=timed_out,
                     artifact=artifact if artifact.exists() else None, log_tail=tail,
                     started_at=started, ended_at=time.time(),
                     extra={"clock": figures.as_dict(), "sealed": sealed, "sandbox": box.kind,
                            "steps_mode": steps_mode, "resumed": bool(child_env.get("AUTORESEARCH_RESUME_STATE")),
                            "stopped_early": stopped})


def _end(proc: subprocess.Popen, own_session: bool) -> None:
    """End the run: its whole group when it leads one; else the leader (a sandbox's bwrap takes its
    processes with it: --die-with-parent and its own pid namespace)."""
    if own_session:
        kill_group(proc.pid, proc)
    elif proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=TERM_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _exit_status(code: int | None, sandboxed: bool) -> int | None:
    """bubblewrap exits 128 + N when its child dies of signal N: report the signal, as Popen does."""
    if sandboxed and code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code


def _clean_folder(folder: Path, keep: set) -> None:
    """Remove what a run left in its folder beyond the files it was given."""
    for name in set(os.listdir(folder)) - keep:
        target = folder / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def _runner_note(crash, returncode, wall, timeout, budget, why=None) -> str | None:
    if crash == FLOOD:
        return f"ended after {wall:.1f}s: {why} (a flood; the run's limits are in docs/contracts.md)"
    if crash == STOPPED_EARLY:
        return f"ended after {wall:.1f}s: {why}"
    if crash == TIMEOUT:
        return f"killed after {wall:.1f}s: timeout {timeout:.0f}s (budget {budget:g}s)"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"train.py was killed by {name} ({crash})"
    if crash == MISSING:
        return "train.py exited 0 without printing the summary block (---, then val_bpb: ...)"
    if crash == OVER_BUDGET:
        return (f"ended after {wall:.1f}s: by the harness's clock (timed step lines) it trained far past "
                f"its {budget:g}s budget")
    if crash == NO_ARTIFACT:
        return "train.py exited 0 without saving its model to AUTORESEARCH_ARTIFACT (loop mode needs it)"
    return None
