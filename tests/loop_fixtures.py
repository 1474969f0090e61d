"""Helpers for the loop's tests: throwaway git repos and fast stand-in prepare.py / train.py.

The stand-ins speak the real contracts (CAPS knob block, build_model, the padded summary block,
prepare.describe()) but train nothing, so loop mechanics can be tested in a second; the real
prepare.py/train.py are exercised by tests/test_loop.py::test_loop_real_train.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.job import RUN_SOURCES

REPO = Path(__file__).resolve().parent.parent
GIT_ID = ["-c", "user.name=tester", "-c", "user.email=tester@example.com"]

# A stand-in prepare.py: describe() reports a fingerprint only once `prepare.py` has run.
FAKE_PREPARE = '''
import json, os, sys
from pathlib import Path
MARK = Path(os.environ["FAKE_DATA_DIR"]) / "ready"
def describe():
    fp = MARK.read_text().strip() if MARK.exists() else None
    return {"profile": "tiny", "time_budget": float(os.environ.get("AUTORESEARCH_TIME_BUDGET", 300)),
            "source": "fake", "fingerprint": fp}
if __name__ == "__main__":
    MARK.parent.mkdir(parents=True, exist_ok=True)
    MARK.write_text(os.environ.get("FAKE_FINGERPRINT", "feedbeef0001"))
    print("prepared")
'''

# A stand-in train.py: val_bpb is a smooth function of the knobs (DEPTH up to 6 helps, moving
# LR or WIDTH away from their start hurts), so the offline search has something real to find.
FAKE_TRAIN = '''"""stand-in train.py"""
import math, os, signal, subprocess, sys, time

DEPTH = 4  # layers
LR = 0.04  # learning rate
WIDTH = 64  # model width
USE_BIAS = False  # biases in linear layers


def build_model(config):
    return None


def main():
    hang = os.environ.get("FAKE_HANG_FILE")
    artifact = os.environ.get("AUTORESEARCH_ARTIFACT", "")
    if hang and os.path.exists(hang) and (os.environ.get("FAKE_HANG_EXP", "exp-0002") + os.sep) in artifact:
        child = subprocess.Popen(["sleep", "300"])
        with open(hang + ".pids", "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(300)
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0.2")))
    bpb = 1.0 + 0.01 * abs(DEPTH - 6) + 0.05 * abs(math.log2(LR / 0.04)) + 0.02 * abs(math.log2(WIDTH / 64))
    bpb += 0.03 * USE_BIAS
    print("step 00001 | loss 1.0 | trained 0.2s")
    print("---")
    for k, v in [("val_bpb", f"{bpb:.6f}"), ("training_seconds", "0.2"), ("total_seconds", "0.3"),
                 ("peak_vram_mb", "100.0"), ("mfu_percent", "0.00"), ("total_tokens_M", "0.1"),
                 ("num_steps", 3), ("num_params_M", "0.1"), ("depth", DEPTH), ("eval_seconds", "0.0")]:
        print(f"{k + ':':<18}{v}")


if __name__ == "__main__":
    main()
'''


def git(cwd, *args) -> str:
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A fresh repo at `path` with `files` committed on master, plus an uncommitted user change."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "master")
    for name, text in files.items():
        (path / name).write_text(text)
    (path / "notes.txt").write_text("the user's file\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "initial")
    (path / "notes.txt").write_text("the user's file\nwith an uncommitted edit\n")
    (path / "scratch.txt").write_text("untracked user work\n")
    return path


def fake_repo(path: Path) -> Path:
    program = (REPO / "program.md").read_text()
    return make_repo(path, {"prepare.py": FAKE_PREPARE, "train.py": FAKE_TRAIN, "program.md": program})


def fake_env(tmp: Path, **extra) -> dict:
    env = dict(os.environ, FAKE_DATA_DIR=str(tmp / "fakedata"), AUTORESEARCH_THREADS="1")
    env.pop("ANTHROPIC_API_KEY", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def loop_cmd(*args) -> list[str]:
    """The loop's command line; the stand-in train.py saves no model, so unless a test asks for the
    judge hierarchy (which re-evaluates the saved model) it gets the simple reviewer, and no
    sandbox (the stand-in signals tests through files in tmp; tests/test_sealed.py and the real
    train.py tests cover the sandbox)."""
    if "--reviewer" not in args:
        args = (*args, "--reviewer", "simple")
    if "--sandbox" not in args and "simple" in args:   # the stand-in writes marker files in tmp
        args = (*args, "--sandbox", "none")
    return [sys.executable, str(REPO / "agent" / "loop.py"), *args]


def run_loop(repo: Path, env: dict, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(loop_cmd(*args), cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout)


def copy_real(repo_files=(*RUN_SOURCES, "program.md")) -> dict[str, str]:
    return {name: (REPO / name).read_text() for name in repo_files}


def branch_commits(repo: Path, tag: str) -> list[str]:
    return git(repo, "rev-list", "--reverse", f"autoresearch/{tag}").split()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def loop_run_folder(tmp: Path, tag: str = "rec", experiments: int = 4) -> Path:
    """A run folder written by the real loop (agent/loop.py, offline proposer, simple reviewer) on
    the stand-in train.py; returns the worktree that holds results.tsv, journal.jsonl, state.json.
    Tests that only read it share one (tests/conftest.py: `loop_run`)."""
    repo = fake_repo(tmp / "repo")
    p = run_loop(repo, fake_env(tmp), "--tag", tag, "--budget", "1", "--max-experiments", str(experiments))
    assert p.returncode == 0, p.stdout + p.stderr
    return repo / ".autoresearch" / tag


def fake_run(*, wall_seconds: float = 1.0, crash_class=None, summary=None, extra=None, log_path=None):
    """A harness.runner.RunResult of a run that never happened (the judges' tests hand one in)."""
    from harness.runner import RunResult
    return RunResult(returncode=None if crash_class else 0, summary=summary, crash_class=crash_class,
                     log_path=Path(log_path) if log_path else None, wall_seconds=wall_seconds,
                     timed_out=False, artifact=None, extra=dict(extra or {}))


# `python agent/loop.py ARGS` as a user runs it, watched: at exit it writes SPY_OUT (JSON) with the
# modules the process had loaded, every answer of the trusted evaluator (the worker's JSON) with
# the id of the VerifyResult harness/verify.py made of it, and the id of every VerifyResult the
# judge decided on. Nothing in the loop changes: two functions are wrapped, their results passed on.
SPY = r'''
import atexit, json, os, runpy, sys
out, repo, script, *args = sys.argv[1:]
sys.argv, sys.path[0] = [script, *args], os.path.dirname(os.path.abspath(script))
sys.path.insert(1, repo)
seen = {"answers": [], "judged": []}
def dump():
    seen["modules"] = sorted(sys.modules)
    with open(out, "w") as f:
        json.dump(seen, f, default=str)
atexit.register(dump)
import harness.verify as verify
def watch_answer(real):
    def inner(answer, *a, **kw):
        v = real(answer, *a, **kw)
        seen["answers"].append({"answer": answer, "id": id(v), "ok": v.ok})
        return v
    return inner
verify.judge_worker_output = watch_answer(verify.judge_worker_output)
import agent.judges.hierarchy as hierarchy
def watch_judged(real):
    def inner(self, ctx, run):
        v = real(self, ctx, run)
        seen["judged"].append({"id": id(v), "commit": ctx.commit, "trusted_bpb": v.trusted_bpb})
        return v
    return inner
hierarchy.JudgeHierarchy._verify = watch_judged(hierarchy.JudgeHierarchy._verify)
runpy.run_path(script, run_name="__main__")
'''


def spied_loop_cmd(spy_out: Path, *args) -> list[str]:
    """The loop's command line exactly as a user types it, run under SPY (above)."""
    return [sys.executable, "-c", SPY, str(spy_out), str(REPO), str(REPO / "agent" / "loop.py"), *args]
