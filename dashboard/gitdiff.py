"""An experiment's diff, from git.

A kept experiment's commit is on the branch; a discarded or crashed one survives under
`refs/autoresearch/<tag>/discarded/<n>` (contract). Either may be gone (a deleted ref, a gc'd
object, a run folder copied without its repo): then the journal's copy of the diff is shown,
labelled, and the page says what is missing. Git is only ever given validated hashes and refs.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness.experiment_record import ExperimentRecord
from harness.results_table import ResultLine

# Seconds a git command may take before the page gives up on it.
GIT_TIMEOUT_S = 10
# Largest diff shown (characters); model-written diffs can be huge.
MAX_DIFF_CHARS = 200_000
HEX = re.compile(r"^[0-9a-fA-F]{4,64}$")
REF = re.compile(r"^refs/[A-Za-z0-9._/~-]+$")


@dataclass
class Diff:
    text: str | None = None
    source: str = ""                     # what the text was read from, in words
    problems: list[str] = field(default_factory=list)


def _git(git_dir: Path, *args: str) -> tuple[int, str]:
    try:
        out = subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True,
                             timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 1, str(e)
    return out.returncode, out.stdout.decode("utf-8", errors="replace")


def resolve(git_dir: Path, name: str) -> str | None:
    """The commit a hash or ref names, or None when git does not have it."""
    if not (HEX.match(name) or REF.match(name)):
        return None
    rc, out = _git(git_dir, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
    return out.strip() if rc == 0 and out.strip() else None


def show(git_dir: Path, commit: str) -> str | None:
    rc, out = _git(git_dir, "show", "--no-color", "--no-ext-diff", "--patch-with-stat",
                   "--format=commit %H%nparent %P%nauthor %an  %ad%n%n%B", commit)
    if rc != 0:
        return None
    return out if len(out) <= MAX_DIFF_CHARS else out[:MAX_DIFF_CHARS] + "\n... (diff cut here)\n"


def experiment_diff(git_dir: Path | None, tag: str, row: ResultLine, record: ExperimentRecord | None) -> Diff:
    """The diff of one experiment: its results.tsv line and its journal record (None: lost)."""
    d = Diff()
    commit = str((record.commit if record else None) or row.commit or "").strip()
    ref = record.discarded_ref if record else None
    if not ref and row.status in ("discard", "crash") and record is not None and isinstance(record.n, int):
        ref = f"refs/autoresearch/{tag}/discarded/{record.n}"
    found = None
    if git_dir is None:
        d.problems.append("no git repository for this run (started with --runs on a copy?)")
    else:
        if ref:
            found = resolve(git_dir, str(ref))
            if found is None:
                d.problems.append(f"discarded ref {ref} is gone (deleted?)")
            else:
                d.source = f"git: {ref}"
        if found is None and commit:
            found = resolve(git_dir, commit)
            if found is not None:
                d.source = f"git: commit {commit[:12]}"
            else:
                d.problems.append(f"commit {commit[:12]} not found in git")
        if found is not None:
            d.text = show(git_dir, found)
            if d.text is None:
                d.problems.append(f"git show {found[:12]} failed")
    if d.text is None and record is not None and isinstance(record.diff, str) and record.diff:
        d.text = record.diff[:MAX_DIFF_CHARS]
        d.source = "the journal's copy (git does not have it)"
    return d
