"""Disk space: prune old model artifacts, and refuse to start an experiment that would not fit.

An experiment writes a model artifact (about 200 MB at 50M parameters on GPU), its log, a few
records and git objects. Before each experiment the loop estimates what the next one needs from
the largest recent artifact and log, and stops through its normal stop path (everything recorded,
--resume continues) when the run folder's filesystem (or the repository's) has less free space.
A write that fails for space anyway (ENOSPC, EDQUOT, EFBIG, EIO) takes the same way out.

Artifacts are pruned as docs/contracts.md promises: those of kept experiments and of the last
few experiments stay (a human may want to re-check them); the others are deleted.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from harness import gitops

# Artifacts of this many most recent experiments are kept whatever their status.
KEEP_LAST_ARTIFACTS = 3
# Room for records, state, traces, notes and git objects of one experiment (they are small).
RECORDS_MARGIN_BYTES = 8 * 1024 * 1024
# The next run's artifact and log are assumed this much larger than the largest recent one
# (a proposal may widen the model).
GROWTH_FACTOR = 2
ARTIFACT_RE = re.compile(r"^exp-(\d+)$")   # a run's output folder: artifacts/exp-NNNN/model.pt


def _largest(folder: Path, pattern: str) -> int:
    sizes = []
    for p in folder.glob(pattern):
        try:
            sizes.append(p.stat().st_size)
        except OSError:
            continue
    return max(sizes, default=0)


def bytes_needed(run_dir: Path) -> int:
    """What the next experiment needs free: artifact + log (largest seen, with room to grow) + margin."""
    run_dir = Path(run_dir)
    artifact = _largest(run_dir / "artifacts", "exp-*/*.pt")
    log = _largest(run_dir / "logs", "exp-*.log")
    return GROWTH_FACTOR * (artifact + log) + RECORDS_MARGIN_BYTES


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def shortfall(run_dir: Path, git_dir: Path | None = None) -> tuple[int, int, Path] | None:
    """(needed, free, where) when a filesystem the experiment writes to is too full, else None."""
    need = bytes_needed(run_dir)
    for where in (Path(run_dir), git_dir):
        if where is None:
            continue
        try:
            free = free_bytes(where)
        except OSError:
            continue
        if free < need:
            return need, free, where
    return None


def git_dir(repo: Path) -> Path | None:
    """The repository's object store (commits land there, not in the worktree)."""
    try:
        out = gitops.git(repo, "rev-parse", "--git-common-dir")
    except gitops.GitError:
        return None
    p = Path(out)
    return p if p.is_absolute() else Path(repo) / p


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def out_of_space_message(path: str | Path | None, need: int | None, free: int | None) -> str:
    """The one line the loop prints when it stops for space."""
    where = f" on the filesystem of {path}" if path else ""
    figures = (f": {mb(free)} free, the next experiment needs about {mb(need)}"
               if need is not None and free is not None else
               f": free at least {mb(need)} there" if need is not None else "")
    return (f"stopped: out of disk space{where}{figures}. Everything recorded is safe; free some "
            f"space and run again with --resume to continue.")


def prune_artifacts(run_dir: Path, history: list, keep_last: int = KEEP_LAST_ARTIFACTS,
                    busy=()) -> list[str]:
    """Delete artifacts of experiments that were neither kept nor among the last `keep_last`,
    nor `busy` (in flight on another worker)."""
    folder = Path(run_dir) / "artifacts"
    if not folder.is_dir():
        return []
    kept = {r.number for r in history if r.status == "keep"}
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := ARTIFACT_RE.match(p.name)))
    recent = {n for n, _ in found[-keep_last:]} if keep_last > 0 else set()
    removed = []
    for n, p in found:
        if n in kept or n in recent or n in busy:
            continue
        shutil.rmtree(p, ignore_errors=True)
        if not p.exists():
            removed.append(p.name)
    return removed
