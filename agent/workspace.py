"""Setting up (or reopening) a tag's workspace: branch, worktree, data, run.json, results.tsv, and
the seal (make_seal, at the end: which sandbox its runs get, the pinned copy of the eval inputs).

The user's checkout is never touched: everything happens on branch autoresearch/<tag> in a
separate worktree (default <repo>/.autoresearch/<tag>/). A tag's fixed settings (budget, data
fingerprint, profile, base commit) are written once to run.json; --resume refuses to mix them.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agent import gitops
from harness import verify as pinned_inputs
from search import knobs
from harness.verify import PinnedError, Seal
from runfiles.run import DataInfo, RunInfo
from harness.results import init_results
from runfiles.state import write_json_atomic
from harness.sandbox import DataView, detect, refusal, warning

# Default home of the worktrees, under the repository (and ignored by a .gitignore of "*").
DEFAULT_ROOT = ".autoresearch"
# How we ask prepare.py what data a run would see (run in the worktree, with the run's env).
DESCRIBE_CODE = "import json, prepare; print(json.dumps(prepare.describe()))"
# prepare.py is slow only the first time (download or fallback build); then it is a no-op.
PREPARE_TIMEOUT = 3600
# prepare.py's process group while the loop waits on it (harness/procs.py ends a leftover one).
PREPARE_PID_FILE = "child-prepare.pid"


# The files a run writes at the top of its worktree (docs/contracts.md) and the loop's own
# bookkeeping (lock, pending experiment, child pid, temp files of atomic writes, torn tails).
RUN_FILE_PATTERNS = tuple(f"/{name}" for name in gitops.RUN_FILES)   # one list: agent/gitops.py
RUN_FILES_MARK = "# autoresearch run files (written by agent/workspace.py)"


class SetupError(RuntimeError):
    """A refusal with a message for the user (existing tag, mismatched budget...)."""


@dataclass(frozen=True)
class RunFiles:
    """Where a tag lives: the user's repository, the tag's worktree (where edits are committed)
    and its run folder (the worktree itself: logs, artifacts, the records below). A --workers
    worker's view (agent/workers.py) has its own worktree, and keeps move the branch in the tag's
    worktree (branch_worktree)."""
    repo: Path
    tag: str
    worktree: Path
    run_dir: Path
    branch_worktree: Path | None = None   # where keeps move the branch (None: worktree)

    @property
    def results_path(self) -> Path:
        return self.run_dir / "results.tsv"

    @property
    def journal_path(self) -> Path:
        return self.run_dir / "journal.jsonl"

    @property
    def state_path(self) -> Path:
        return self.run_dir / "state.json"


def worktree_path(repo: Path, tag: str, root: str | None) -> Path:
    base = Path(root).expanduser() if root else repo / DEFAULT_ROOT
    return (base if base.is_absolute() else repo / base).resolve() / tag


def _ignore_root(root: Path) -> None:
    """Keep the worktrees out of the user's `git status` without editing their .gitignore."""
    root.mkdir(parents=True, exist_ok=True)
    ignore = root / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# autoresearch worktrees and run files: never part of the user's checkout\n*\n")


def open_worktree(repo: Path, tag: str, worktree: Path, resume: bool) -> tuple[str, bool]:
    """Create (fresh tag) or reopen (--resume) the worktree; returns (base commit, created)."""
    exists = gitops.branch_exists(repo, tag)
    if exists and not resume:
        raise SetupError(f"tag {tag!r} exists (branch {gitops.branch_name(tag)}); pick a new tag "
                         f"or pass --resume to continue it")
    if not exists and resume:
        tags = existing_tags(repo)
        raise SetupError(f"--resume: no tag {tag!r} (no branch {gitops.branch_name(tag)}); "
                         + (f"the tags here: {', '.join(tags)}" if tags else "this repository has no tags yet"))
    _ignore_root(worktree.parent)
    if not exists:
        return gitops.create_worktree(repo, tag, worktree), True
    if not (worktree / ".git").exists():
        gitops.reattach_worktree(repo, tag, worktree)
        print(f"warning: worktree {worktree} was missing; re-attached it to the branch "
              f"(run files that lived there are gone)", file=sys.stderr)
    return "", False


def existing_tags(repo: Path) -> list[str]:
    """The repository's tags (branches autoresearch/<tag>), sorted."""
    out = gitops.git(repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{gitops.BRANCH_PREFIX}",
                     check=False)
    return sorted(line[len(gitops.BRANCH_PREFIX):] for line in out.splitlines()
                  if line.startswith(gitops.BRANCH_PREFIX))


def tag_lock(root: Path, tag: str):
    """The tag's own lock, outside its worktree, taken before anything of the tag exists (branch,
    worktree, records): of two loops started at once on one tag, the second finds it held and
    exits touching nothing, so no start can delete or break another loop's tag. Held for the life
    of the process (released even on kill -9)."""
    folder = Path(root) / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    _ignore_root(Path(root))
    f = open(folder / f"{tag}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise SetupError(f"another loop is running tag {tag} (its lock {folder / (tag + '.lock')} is held); "
                         "nothing was changed") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def lock(run_dir: Path):
    """Hold an exclusive lock for this tag for the life of the process (released even on kill -9).

    The file is opened without truncating it: a refused second loop must not touch anything of
    the running one, not even the pid written in its lock file.
    """
    f = open(run_dir / "loop.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise SetupError(f"another loop is running on {run_dir} (loop.lock is held)") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def ignore_run_files(worktree: Path) -> str | None:
    """Make git ignore the run's files in the worktree, whatever the base commit's .gitignore says.

    The patterns go to the repository's info/exclude (`git rev-parse --git-path info/exclude`,
    shared by all its worktrees, the user's checkout included; never committed). They are
    anchored at the top and name only the loop's own files, so nothing else of the user's is
    hidden. Returns the exclude file's path, or None when it could not be written.
    """
    try:
        rel = gitops.git(worktree, "rev-parse", "--git-path", "info/exclude")
    except gitops.GitError:
        return None
    path = Path(rel) if Path(rel).is_absolute() else Path(worktree) / rel
    try:
        text = path.read_text() if path.exists() else ""
        have = set(text.splitlines())
        missing = [pat for pat in RUN_FILE_PATTERNS if pat not in have]   # new names reach old repos too
        if not missing:
            return str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        block = "\n".join(([] if RUN_FILES_MARK in have else [RUN_FILES_MARK]) + missing) + "\n"
        with open(path, "a") as f:
            f.write(("" if not text or text.endswith("\n") else "\n") + block)
    except OSError:
        return None
    return str(path)


def describe_data(worktree: Path, env: dict, log_path: Path) -> dict:
    """prepare.describe() as the runs will see it; prepares the data first if it is missing."""
    def ask():
        return subprocess.run([sys.executable, "-c", DESCRIBE_CODE], cwd=worktree, env=env,
                              capture_output=True, text=True)
    first = ask()
    if first.returncode == 0 and _looks_ready(first.stdout):
        return json.loads(first.stdout.strip().splitlines()[-1])
    print(f"data not ready; running prepare.py (log: {log_path})", flush=True)
    prep = _prepare(worktree, env, log_path)
    second = ask()
    if prep.returncode != 0 or second.returncode != 0 or not _looks_ready(second.stdout):
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise SetupError(f"prepare.py could not prepare the data (exit {prep.returncode}); "
                         f"last lines of {log_path}:\n{tail}\n{second.stderr[-2000:]}")
    return json.loads(second.stdout.strip().splitlines()[-1])


def _prepare(worktree: Path, env: dict, log_path: Path) -> subprocess.CompletedProcess:
    """prepare.py in its own process group, recorded in the worktree (PREPARE_PID_FILE) while it
    runs: a loop killed with -9 meanwhile leaves a group the next start ends (harness/procs.py)."""
    from harness.procs import kill_group
    pid_file = Path(worktree) / PREPARE_PID_FILE
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "prepare.py"], cwd=worktree, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            pid_file.write_text(json.dumps({"pgid": proc.pid, "cwd": str(Path(worktree).resolve()),
                                            "n": "prepare"}))
            proc.wait(timeout=PREPARE_TIMEOUT)
        except BaseException:   # Ctrl-C or the timeout: the whole group goes
            kill_group(proc.pid, proc)
            proc.wait()
            raise
        finally:
            pid_file.unlink(missing_ok=True)
    return subprocess.CompletedProcess(proc.args, proc.returncode)


def _looks_ready(stdout: str) -> bool:
    try:
        info = json.loads(stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return False
    return DataInfo.of(info).ready


def commit_profile_knobs(worktree: Path, profile: str | None, base: str) -> str:
    """A new tag on the cpu or tiny profile: commit train.py with that profile's knob values written
    in (runtime.PROFILE_KNOBS, search/knobs.for_profile), so what runs is what the file says and
    every diff after it shows a real change. Returns the tag's base commit: this one, or `base`
    where nothing changes (the gpu profile; a train.py whose knobs are already the profile's).
    An imported tag's base is this project's own train.py too (agent/import_run.py): the imported
    train.py is its first experiment, never its base."""
    path = Path(worktree) / "train.py"
    source = path.read_text()
    new, changes = knobs.for_profile(source, profile or "", (Path(worktree) / "runtime.py").read_text()
                                     if (Path(worktree) / "runtime.py").is_file() else None)
    if new == source:
        return base
    path.write_text(new)
    return gitops.commit_file(worktree, "train.py", f"baseline: the {profile} profile's knob values\n\n"
                              f"{knobs.describe_changes(changes, source) or 'no knob changes'} "
                              "(runtime.PROFILE_KNOBS), written in, so this train.py runs as it reads "
                              "by hand too; the repository's own values are the reference recipe's, for a GPU.\n")


def warm_compile_cache(repo: Path, run_dir: Path, run_info: RunInfo, seal, budget: float, say=print) -> dict:
    """The tag's trusted compile cache (harness/compiled.py): its base train.py compiled once,
    sealed, before the first run; every later run copies it into its own private cache. A no-op
    when published already, unsealed, or when the base train.py does not compile (cpu, tiny)."""
    from agent import compile_warm
    from agent.gitops import sources_at
    from harness.verify import eval_rows
    files = sources_at(repo, run_info.base_commit)
    return compile_warm.warm(files, run_dir, budget, sandbox=getattr(seal, "sandbox", None),
                              data=getattr(seal, "data", None), eval_rows=eval_rows(run_info.profile), say=say)


def write_or_check_run_json(path: Path, *, tag: str, budget: float, info: dict, base_commit: str,
                            resume: bool, settings: dict | None = None, inventory: dict | None = None,
                            eval_tokens: int | None = None, threads: int | None = None) -> RunInfo:
    """Write run.json for a new tag; on --resume refuse a different budget or data fingerprint.
    `info` is prepare.describe()'s (DataInfo)."""
    data = DataInfo.of(info)
    if resume and path.exists():
        fixed = RunInfo.read(path)
        if fixed is None or fixed.budget is None:
            raise SetupError(f"{path} is unreadable; cannot check that the resumed run is comparable")
        if fixed.budget != float(budget):
            raise SetupError(f"tag {tag} was run with --budget {fixed.budget:g}; refusing "
                             f"--budget {budget:g} (one tag never mixes budgets)")
        if fixed.fingerprint != data.fingerprint:
            raise SetupError(f"tag {tag} was run on data {fixed.fingerprint}; the prepared data "
                             f"is now {data.fingerprint} (one tag never mixes data)")
        return fixed
    fixed = RunInfo(tag=tag, budget=budget, fingerprint=data.fingerprint, profile=data.profile,
                    base_commit=base_commit, created_at=time.time(), source=data.source,
                    settings=settings, inventory=inventory, eval_tokens=eval_tokens, threads=threads)
    write_json_atomic(path, fixed.to_dict())
    return fixed


def start_results(path: Path) -> None:
    init_results(path)
    print(f"results: {path}", flush=True)


# ---- The tag's seal at setup: which sandbox its runs get, and the pinned copy of the eval inputs.
#
# Called once by the loop after the data is ready and run.json exists. Without a working sandbox
# the tag does not start unless the user asked for --sandbox none (then run.json, the console, the
# end summary and the dashboard say the results are unsealed). A new tag pins the inputs
# (harness/verify.py (the pinned inputs)) and records their hashes and the sandbox in run.json; a resumed tag checks
# that its pinned copy still holds what run.json recorded, restoring it from the shared cache if
# it can, and refusing to go on if it cannot (one tag is never measured on two versions of data).


class SealError(RuntimeError):
    """The tag's evaluation inputs cannot be trusted any more; the message says what to do."""


def make_seal(run_dir: Path, info: dict, run_info: RunInfo | dict, mode: str, say) -> Seal:
    """Detect the sandbox, pin (or check) the inputs, update run.json (and `run_info`, when it is
    the loop's RunInfo); `info` is prepare.describe()'s; `say` prints a line."""
    if not isinstance(run_info, RunInfo):
        run_info = RunInfo.from_dict(run_info)
    try:
        box = detect(mode)
    except RuntimeError as exc:
        raise SealError(str(exc)) from None
    if mode != "none" and not box.sealed:   # no sandbox is no trust: only an explicit --sandbox none
        raise SealError(refusal(box))
    loud = warning(box)
    if loud:
        say(loud)
    view = DataView.from_describe(info)
    seal = Seal(sandbox=box, data=view)
    run_json = Path(run_dir) / "run.json"
    changed = {}
    if run_info.seal.sandbox != box.describe():
        changed["sandbox"] = box.describe()
        if run_info.seal.sandbox:
            say(f"note: this tag's runs were sandboxed as {run_info.sandbox_kind}; now {box.kind}")
    if view is not None:
        target = Path(run_dir) / pinned_inputs.PINNED_DIR / "cache"
        recorded = run_info.seal.inputs
        try:
            if not recorded:
                seal.eval_cache, seal.inputs = pinned_inputs.pin(run_dir, view)
                changed["inputs"] = seal.inputs
            else:
                seal.eval_cache, seal.inputs = target, dict(recorded)
                bad = pinned_inputs.check_pinned(target, seal.inputs)
                if bad:
                    say(f"resume: pinned evaluation inputs: {'; '.join(bad[:4])}; "
                        + pinned_inputs.repair_pinned(target, view, seal.inputs))
        except PinnedError as exc:
            raise SealError(str(exc)) from None
    if changed:
        for key, value in changed.items():
            setattr(run_info.seal, key, value)
        write_json_atomic(run_json, run_info.to_dict())
    return seal


def clear_leftovers(run_dir: Path) -> list[str]:
    """Folders of trusted evaluations that a killed loop left behind (their processes are ended
    first by harness.runner.kill_leftover)."""
    gone = []
    for folder in (Path(run_dir) / ".verify", Path(run_dir) / ".runs"):   # evaluations; runs' files
        if folder.is_dir():
            for p in folder.iterdir():
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                    gone.append(p.name)
    return gone
