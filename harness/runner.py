"""Run one experiment: `python train.py` in the worktree, in its own process group.

Why a process group: train.py may start helpers (dataloader workers, compilers, a shell); a
timeout or Ctrl-C must end all of them, not just the leader. The group id is written to a pid
file before we wait, so a later `--resume` can kill a group left behind by a loop that died
with kill -9 (see kill_leftover).
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

from harness import gitops
from harness.clock import KILL_MARGIN_S, LogClock, limit_for, startup_allowance
from harness.sandbox import DataView, Sandbox, scrub_env
from harness.summary import parse_summary

# A run may take this many times the training budget (startup + eval fit easily) before it is
# killed; the seed's program.md says ">10 minutes" for a 5-minute budget, i.e. 2x.
TIMEOUT_FACTOR = 2.0
# ...but a tiny smoke budget still needs time to import torch and evaluate.
MIN_GRACE_SECONDS = 300.0  # startup + the fixed evaluation can take minutes on a loaded CPU
# How often we poll the child (and call on_tick): small next to any budget.
POLL_SECONDS = 0.2
# After SIGTERM to the group, wait this long before SIGKILL.
TERM_GRACE_SECONDS = 5.0
# Lines of log shown to the proposer when asked to fix a crash (program.md: tail -n 50).
TAIL_LINES = 50
# The pid file of the running child's process group, at the top of the run folder.
PID_FILE = "child.pid"

# Markers in the log, checked in this order after timeouts. OOM first: the kernel's OOM killer
# also shows up as SIGKILL, and a CUDA OOM is a Python exception.
OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "MemoryError",
               "DefaultCPUAllocator: can't allocate memory", "std::bad_alloc")
SYNTAX_MARKERS = ("SyntaxError", "IndentationError", "TabError")
FAIL_PREFIX = "FAIL:"

# Crash classes recorded in the journal (crash_class).
TIMEOUT, OOM, SEGFAULT, KILLED = "timeout", "oom", "segfault", "killed"
SYNTAX, NAN, EXCEPTION, MISSING = "syntax_error", "nan_divergence", "exception", "missing_summary"
OVER_BUDGET, NO_ARTIFACT = "over_budget", "missing_artifact"


@dataclass
class RunResult:
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

    @property
    def ok(self) -> bool:
        return self.crash_class is None


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


def kill_group(pgid: int, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, TERM_GRACE_SECONDS), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()   # reap the leader, or it stays a zombie member of the group
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in the group."""
    if Path("/proc").is_dir():
        return bool(_members(pgid))
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def run_train(worktree: Path, run_dir: Path, n: int, budget: float, *, timeout: float | None = None,
              env: dict | None = None, log_name: str | None = None, on_tick=None,
              script: str = "train.py", sandbox: Sandbox | None = None, data: DataView | None = None,
              sealed: bool = False, data_mode: str = "train", startup_reference: float | None = None,
              clean: bool = False, pid_name: str = PID_FILE) -> RunResult:
    """Run `sys.executable train.py` in `worktree`; return what happened (never raises on crash).

    sandbox: run it inside (harness/sandbox.py) with `data` shown per `data_mode`; the only
    writable place is the run's output folder artifacts/exp-NNNN/ (model.pt, any state).
    sealed: loop mode (AUTORESEARCH_SEALED=1): train.py saves its model and does not evaluate;
    the harness clock (harness/clock.py) times the training and ends a run far past its budget.
    clean: afterwards, anything the run left in the worktree is removed (gitops.clean_worktree);
    the loop asks for it (a tag's worktree is the harness's own), nothing else does by default.
    pid_name: the file in run_dir that records the child's process group while it runs (one per
    worker or executor slot when several runs share a run folder: child.pid, child-w2.pid, ...).
    KeyboardInterrupt (and anything else raised while waiting, e.g. from on_tick) ends the
    child's whole process group before propagating.
    """
    worktree, run_dir = Path(worktree), Path(run_dir)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out_dir = run_dir / "artifacts" / f"exp-{n:04d}"
    shutil.rmtree(out_dir, ignore_errors=True)   # never let an old artifact pass for this run's
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = logs / (log_name or f"exp-{n:04d}.log")
    artifact = out_dir / "model.pt"
    timeout = timeout_for(budget) if timeout is None else timeout
    child_env = dict(os.environ)
    child_env.update({"AUTORESEARCH_TIME_BUDGET": f"{budget:g}",
                      "AUTORESEARCH_ARTIFACT": str(artifact),
                      "PYTHONUNBUFFERED": "1",
                      # no .pyc files: a forged prepare.pyc must not change the next run
                      "PYTHONDONTWRITEBYTECODE": "1"})
    if sealed:
        child_env["AUTORESEARCH_SEALED"] = "1"
    else:
        child_env.pop("AUTORESEARCH_SEALED", None)
    child_env.update(env or {})
    argv = [sys.executable, script]
    if sandbox is not None and sandbox.sealed:
        child_env = scrub_env(child_env)
        child_env["TMPDIR"] = "/tmp"
        argv = sandbox.wrap(argv, cwd=worktree, writable=[out_dir], data=data, data_mode=data_mode,
                            run_dir=run_dir)
    steps_mode = bool(child_env.get("AUTORESEARCH_STEPS"))

    started = time.time()
    t0 = time.monotonic()
    clock = LogClock(log_path, t0, startup_allowance(startup_reference))
    kill_at = limit_for(budget) + KILL_MARGIN_S
    timed_out = over_budget = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=worktree, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=child_env, start_new_session=True)
        pid_file = run_dir / pid_name
        pid_file.write_text(json.dumps({"pgid": proc.pid, "n": n, "cwd": str(worktree),
                                        "started_at": started}))
        try:
            while True:
                try:
                    proc.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                clock.poll(now)
                if now - t0 > timeout:
                    timed_out = True
                    break
                if sealed and not steps_mode and clock.live_charge(now) > kill_at:
                    over_budget = True
                    break
                if on_tick is not None:
                    on_tick(now - t0, log_path)
        except BaseException:
            kill_group(proc.pid, proc)
            proc.wait()
            pid_file.unlink(missing_ok=True)
            raise
        ended = time.monotonic()
        # The leader may be done while its children live on (or it timed out): end the group.
        kill_group(proc.pid, proc)
        proc.wait()
        pid_file.unlink(missing_ok=True)
    wall = time.monotonic() - t0
    clock.poll(ended)
    figures = clock.figures(ended if not (timed_out or over_budget) else None)
    if clean:
        _clean(worktree)

    text = log_path.read_text(errors="replace")
    summary = parse_summary(text)
    returncode = None if (timed_out or over_budget) else proc.returncode
    crash = OVER_BUDGET if over_budget else \
        classify(returncode, timed_out, text, summary, sealed=sealed, artifact=artifact.exists())
    note = _runner_note(crash, returncode, wall, timeout, budget)
    if note:   # a killed process says nothing itself: the log (and the proposer) must still know why
        with open(log_path, "a") as log:
            log.write(f"\n[runner] {note}\n")
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-TAIL_LINES:])
    return RunResult(returncode=returncode, summary=summary, crash_class=crash, log_path=log_path,
                     wall_seconds=wall, timed_out=timed_out,
                     artifact=artifact if artifact.exists() else None, log_tail=tail,
                     started_at=started, ended_at=time.time(),
                     extra={"clock": figures.as_dict(), "sealed": sealed,
                            "sandbox": sandbox.kind if sandbox is not None else "none",
                            "steps_mode": steps_mode})


def _clean(worktree: Path) -> None:
    """Anything train.py left in the worktree goes; a failure here must not lose the run."""
    try:
        gitops.clean_worktree(worktree)
    except gitops.GitError:
        pass


def _runner_note(crash, returncode, wall, timeout, budget) -> str | None:
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


def _members(pgid: int) -> list[int]:
    """Pids whose process group is pgid (Linux /proc; empty elsewhere)."""
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def kill_leftover(run_dir: Path) -> str | None:
    """Kill the process groups left by a loop that died without cleaning up (kill -9, reboot):
    the training run's (child.pid) and the trusted evaluation's (verify.pid); returns what was done."""
    notes = [n for n in (_kill_recorded(p) for p in _pid_files(Path(run_dir))) if n]
    return "; ".join(notes) or None


def _pid_files(run_dir: Path) -> list[Path]:
    """child.pid / child-K.pid (executor slots) in the run folder, verify*.pid there and in its
    .verify/ folder (where the trusted evaluation records its group)."""
    found = []
    for folder in (run_dir, run_dir / ".verify"):
        if folder.is_dir():
            found += sorted(folder.glob("child*.pid")) + sorted(folder.glob("verify*.pid"))
    return found


def _kill_recorded(pid_file: Path) -> str | None:
    """The group is killed only if one of its processes still runs in the recorded folder, so a
    recycled process-group id of someone else's is never touched."""
    if not pid_file.exists():
        return None
    try:
        info = json.loads(pid_file.read_text())
        pgid, cwd = int(info["pgid"]), os.path.realpath(info["cwd"])
    except (ValueError, KeyError, TypeError, OSError) as exc:
        pid_file.unlink(missing_ok=True)
        return f"ignored unreadable pid file ({exc})"
    members = _members(pgid)
    ours = []
    for pid in members:
        try:
            if os.path.realpath(f"/proc/{pid}/cwd") == cwd:
                ours.append(pid)
        except OSError:
            continue
    note = None
    if ours:
        kill_group(pgid)
        note = f"killed leftover process group {pgid} ({len(members)} processes) of experiment {info.get('n')}"
    pid_file.unlink(missing_ok=True)
    return note
