"""Git operations of the loop, through the git CLI (what the user would type, nothing hidden).

The loop never touches the user's checkout: it makes branch autoresearch/<tag> at the current
commit and a separate worktree for it. Only train.py is ever committed. A discarded commit is
kept reachable under refs/autoresearch/<tag>/discarded/<n> before the branch is reset, so
`git show` works on every experiment forever.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

BRANCH_PREFIX = "autoresearch/"
REF_PREFIX = "refs/autoresearch/"
# Notes live on their own ref so they never mix with the user's notes.
NOTES_REF = "refs/notes/autoresearch"
# Identity for commits when the repository has none configured (CI machines, fresh boxes).
FALLBACK_NAME, FALLBACK_EMAIL = "autoresearch", "autoresearch@localhost"


class GitError(RuntimeError):
    pass


def git(cwd: Path, *args: str, check: bool = True, input: str | None = None, raw: bool = False) -> str:
    """Run git in cwd and return stdout (stripped unless raw); GitError with stderr when it fails."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          input=input)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout if raw else proc.stdout.strip()


def toplevel(path: Path) -> Path:
    return Path(git(Path(path), "rev-parse", "--show-toplevel"))


def rev_parse(cwd: Path, rev: str) -> str | None:
    out = git(cwd, "rev-parse", "--verify", "--quiet", rev + "^{commit}", check=False)
    return out or None


def branch_name(tag: str) -> str:
    return BRANCH_PREFIX + tag


def discarded_ref(tag: str, n: int, attempt: int | None = None) -> str:
    """refs/autoresearch/<tag>/discarded/<n>; crashed fix attempts under .../attempts/<n>/<k>."""
    if attempt is None:
        return f"{REF_PREFIX}{tag}/discarded/{n}"
    return f"{REF_PREFIX}{tag}/attempts/{n}/{attempt}"


def branch_exists(repo: Path, tag: str) -> bool:
    return rev_parse(repo, "refs/heads/" + branch_name(tag)) is not None


def create_worktree(repo: Path, tag: str, path: Path, start: str = "HEAD") -> str:
    """New branch autoresearch/<tag> at `start` with its worktree at `path`; returns the commit."""
    commit = rev_parse(repo, start)
    if commit is None:
        raise GitError(f"{repo}: no commit at {start} (the repository needs at least one commit)")
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "-b", branch_name(tag), str(path), commit)
    return commit


def reattach_worktree(repo: Path, tag: str, path: Path) -> None:
    """Recreate a worktree whose folder vanished (e.g. a wiped disk) on the existing branch."""
    git(repo, "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", str(path), branch_name(tag))


def _identity_args(cwd: Path) -> list[str]:
    have_name = git(cwd, "config", "user.name", check=False)
    have_email = git(cwd, "config", "user.email", check=False)
    args = []
    if not have_name:
        args += ["-c", f"user.name={FALLBACK_NAME}"]
    if not have_email:
        args += ["-c", f"user.email={FALLBACK_EMAIL}"]
    return args


def commit_file(worktree: Path, relpath: str, message: str) -> str:
    """Commit exactly one file (train.py) in the worktree; returns the new commit's sha.

    --no-verify: the user's hooks are for their own commits; --allow-empty is not used, so an
    edit that changes nothing fails loudly (the guard rejects those before we get here).
    """
    git(worktree, "add", "--", relpath)
    git(worktree, *_identity_args(worktree), "commit", "--no-verify", "-q", "-F", "-", "--", relpath,
        input=message)
    return git(worktree, "rev-parse", "HEAD")


def commit_empty(worktree: Path, message: str) -> str:
    """A commit that changes nothing (a proposal that left train.py as it was): the experiment
    still gets a commit of its own, so no results.tsv row repeats its parent's."""
    git(worktree, *_identity_args(worktree), "commit", "--no-verify", "--allow-empty", "-q", "-F", "-",
        input=message)
    return git(worktree, "rev-parse", "HEAD")


def head(worktree: Path) -> str:
    return git(worktree, "rev-parse", "HEAD")


def reset_hard(worktree: Path, commit: str) -> None:
    git(worktree, "reset", "-q", "--hard", commit)


def update_ref(repo: Path, ref: str, commit: str) -> None:
    git(repo, "update-ref", ref, commit)


def ref_exists(repo: Path, ref: str) -> bool:
    return rev_parse(repo, ref) is not None


def list_refs(repo: Path, prefix: str) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def show_file(repo: Path, commit: str, relpath: str) -> str:
    return git(repo, "show", f"{commit}:{relpath}", raw=True)   # byte-exact: trailing newline kept


def diff(repo: Path, old: str, new: str, relpath: str = "train.py") -> str:
    return git(repo, "diff", old, new, "--", relpath, raw=True)


def text_diff(old: str, new: str, relpath: str = "train.py") -> str:
    """diff()'s unified format for an edit not committed yet (the guard reads it before the commit)."""
    import difflib
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"a/{relpath}", f"b/{relpath}"))


def rev_list(repo: Path, rev: str) -> list[str]:
    """Commits reachable from rev, newest first."""
    return git(repo, "rev-list", rev).split()


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=repo,
                          capture_output=True).returncode == 0


def parent_of(repo: Path, commit: str) -> str | None:
    return rev_parse(repo, commit + "^")


def add_note(repo: Path, commit: str, text: str) -> None:
    """Attach (or replace) the loop's note on a commit; `git log --notes=autoresearch` shows it."""
    git(repo, *_identity_args(repo), "notes", "--ref", NOTES_REF, "add", "-f", "-m", text, commit)


def read_note(repo: Path, commit: str) -> str | None:
    out = git(repo, "notes", "--ref", NOTES_REF, "show", commit, check=False)
    return out or None


# The run's own files at the top of a tag's worktree (docs/contracts.md): never cleaned away,
# and excluded from git so `git status` shows only what an experiment changed.
RUN_FILES = ["results.tsv", "journal.jsonl", "traces.jsonl", "state.json", "state.json.*", "run.json",
             "queue.sqlite*", "optuna.sqlite*", "knob_space.json*", "pending.json", "pending-w*.json", "seed-key", "child*.pid", "verify*.pid", "loop.lock",
             "*.torn-*", "*.json.*.tmp", "results.tsv.*.tmp", "run.log",
             "logs", "artifacts", "screen", ".sealed", ".verify", ".runs", "out", "report*",
             "bench", "flywheel_report.json", "imported.json"]  # inference/bench.py, speculative.py; lab/flywheel.py --run


def clean_worktree(worktree: Path) -> list[str]:
    """Put the worktree back to its commit: tracked files restored, untracked files that are not
    the run's own (RUN_FILES) and bytecode caches removed. Run after every training run, so
    nothing a run wrote into the worktree (a stray .py, a forged prepare.pyc, an edited
    prepare.py) reaches the next one. Only acts on the top of a git worktree (never on a parent
    repository). Returns what it removed or restored."""
    import fnmatch
    import shutil
    worktree = Path(worktree).resolve()
    if toplevel(worktree).resolve() != worktree:
        return []
    out = git(worktree, "status", "--porcelain=v1", "-z", "--untracked-files=normal", "--ignored=no", raw=True)
    removed, modified = [], False
    for entry in filter(None, out.split("\0")):
        code, path = entry[:2], entry[3:]
        path = path.rstrip("/")
        top = path.split("/", 1)[0]
        if any(fnmatch.fnmatch(top, pat) for pat in RUN_FILES):
            continue
        if code == "??":
            target = worktree / path
            if target.is_symlink() or target.is_file():
                target.unlink(missing_ok=True)
            else:
                shutil.rmtree(target, ignore_errors=True)
            removed.append(path)
        else:
            modified = True
            removed.append(path)
    if modified:
        git(worktree, "checkout", "--", ".")
    for cache in worktree.rglob("__pycache__"):
        if ".venv" not in cache.parts:
            shutil.rmtree(cache, ignore_errors=True)
            removed.append(str(cache.relative_to(worktree)))
    return removed


def status_porcelain(worktree: Path) -> str:
    return git(worktree, "status", "--porcelain", "--untracked-files=no")


def merge_file(current: str, base: str, other: str) -> str | None:
    """Three-way merge of texts with `git merge-file`; None on conflict (used to rebase proposals)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, text in (("current", current), ("base", base), ("other", other)):
            p = Path(d) / name
            p.write_text(text)
            paths.append(str(p))
        proc = subprocess.run(["git", "merge-file", "-p", *paths], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def sources_at(repo: Path, commit: str, names=None) -> dict[str, str]:
    """The files of `commit` a run needs, read from git (byte-exact); a name the commit lacks
    is left out (a stand-in project of the tests has no runtime.py, attention.py or graph_export.py)."""
    from harness.job import RUN_SOURCES
    out = {}
    for name in names or RUN_SOURCES:
        try:
            out[name] = show_file(Path(repo), commit, name)
        except GitError:
            if name == "train.py":
                raise
    return out
