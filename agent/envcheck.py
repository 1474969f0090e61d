"""Environment faults: what every run needs from the machine, checked before it can cost an idea
(the data and the fixed files, here; the disk's free space, at the end of this file).

A deleted training shard, a truncated validation shard, a missing tokenizer or a fixed file gone
from the tag's worktree make every run crash the same way; recorded as crashes they would burn
the whole search space overnight. The loop checks them at start (and on --resume), and again after
any crashed run, before that crash is recorded: a fault stops the loop like a full disk (one line
saying what to run, a distinct exit status), the experiment in flight stays pending, and
--resume runs it again once the data is back.

The tag's inventory (the shard and tokenizer file names it started with) goes to run.json, so a
shard that disappears later is found even when others remain.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from agent.errors import EnvironmentStop
from agent import gitops
from harness.job import FIXED_SOURCES
from runfiles.run import OFFLINE_SOURCE
from harness.sandbox import DataView

# Exit status of a stop for the environment (EX_CONFIG: fix the setup, then --resume).
EXIT_ENVIRONMENT = 78
# The files of the tag's worktree every run and evaluation reads (train.py is the experiment's).
FIXED_FILES = (*FIXED_SOURCES, "train.py")
# The tokenizer folder holds one of these (prepare.Tokenizer.from_directory: BPE or bytes).
TOKENIZER_FILES = ("tokenizer.pkl", "byte.json")


def inventory(worktree: Path, view: DataView | None) -> dict:
    """{"files": fixed files, "data": shard names, "tokenizer": file names} as the tag starts
    (run.json "inventory")."""
    files = [name for name in FIXED_FILES if (Path(worktree) / name).is_file()]
    if view is None:
        return {"files": files}
    data = sorted(p.name for p in view.data.glob("shard_*.parquet")) if view.data and view.data.is_dir() else []
    tok = sorted(p.name for p in view.tokenizer.iterdir() if p.is_file()) \
        if view.tokenizer and view.tokenizer.is_dir() else []
    return {"files": files, "data": data, "tokenizer": tok}


def _parquet_ok(path: Path) -> bool:
    """A readable footer with a text column (a truncated or partial file has none)."""
    try:
        import pyarrow.parquet as pq
        return "text" in pq.ParquetFile(path).schema_arrow.names
    except Exception:
        return False


def problems(worktree: Path, view: DataView | None, recorded: dict | None = None) -> list[str]:
    """What is missing or corrupt, one phrase each (empty: the environment is whole)."""
    recorded = recorded or {}
    fixed = _names(recorded, "files") if "files" in recorded else ["prepare.py", "train.py"]
    out = [f"{name} is missing from the worktree {worktree}" for name in fixed
           if not (Path(worktree) / name).is_file()]
    if view is None:
        return out
    if view.data is None or not view.data.is_dir():
        return out + [f"the data folder {view.data} is missing"]
    shards = sorted(view.data.glob("shard_*.parquet"))
    names = {p.name for p in shards}
    lost = [n for n in _names(recorded, "data") if n not in names]
    if lost:
        out.append(f"data shard(s) {', '.join(lost[:4])} missing from {view.data}")
    if view.val is not None and not view.val.is_file():
        out.append(f"the validation shard {view.val.name} is missing from {view.data}")
    if not [p for p in shards if view.val is None or p.name != view.val.name]:
        out.append(f"no training shard in {view.data}")
    bad = [p.name for p in shards if not _parquet_ok(p)]
    if bad:
        out.append(f"data shard(s) {', '.join(bad[:4])} in {view.data} are corrupt (unreadable parquet)")
    tok = view.tokenizer
    if tok is None or not tok.is_dir():
        out.append(f"the tokenizer folder {tok} is missing")
    else:
        if not any((tok / name).is_file() for name in TOKENIZER_FILES):
            out.append(f"the tokenizer in {tok} is missing ({' or '.join(TOKENIZER_FILES)})")
        gone = [n for n in _names(recorded, "tokenizer") if not (tok / n).is_file()]
        if gone:
            out.append(f"tokenizer file(s) {', '.join(gone[:4])} missing from {tok}")
    return out


def _names(recorded: dict, key: str) -> list[str]:
    """run.json's inventory list `key` (data: anything else reads as none)."""
    v = recorded[key] if key in recorded else None
    return [n for n in v if isinstance(n, str)] if isinstance(v, list) else []


def prepare_command(profile: str | None, source: str | None) -> str:
    """The command that puts this tag's data back (the same source, the same profile)."""
    env = f"AUTORESEARCH_PROFILE={profile} " if profile and profile != "gpu" else ""
    args = ""
    if source == OFFLINE_SOURCE:
        args = " --offline"
    elif source and source.startswith("local:"):
        args = f" --source {shlex.quote(source[len('local:'):])}"
    return f"{env}uv run prepare.py{args}"


def stop_message(tag: str, found: list[str], profile: str | None, source: str | None) -> str:
    """The one line the loop stops with."""
    return (f"stopped: the environment is broken, not the experiment ({'; '.join(found)}). Run "
            f"`{prepare_command(profile, source)}`, then `uv run agent/loop.py --tag {tag} --resume` "
            "(the experiment in flight runs again; nothing recorded is lost)")


def check(tag: str, worktree: Path, view: DataView | None, recorded: dict | None, profile: str | None,
          source: str | None) -> None:
    """Raise EnvironmentStop with the one line when anything is missing or corrupt."""
    found = problems(worktree, view, recorded)
    if found:
        raise EnvironmentStop(stop_message(tag, found, profile, source))


# ---- Disk space: prune old model artifacts, and refuse to start an experiment that would not fit.
#
# An experiment writes a model artifact (about 200 MB at 50M parameters on GPU), its log, a few
# records and git objects. Before each experiment the loop estimates what the next one needs from
# the largest recent artifact and log, and stops through its normal stop path (everything recorded,
# --resume continues) when the run folder's filesystem (or the repository's) has less free space.
# A write that fails for space anyway (ENOSPC, EDQUOT, EFBIG, EIO) takes the same way out.
#
# Artifacts are pruned as docs/contracts.md promises: those of kept experiments and of the last
# few experiments stay (a human may want to re-check them); the others are deleted.

# Artifacts of this many most recent experiments are kept whatever their status.
KEEP_LAST_ARTIFACTS = 3
# Room for records, state, traces, notes and git objects of one experiment (they are small).
RECORDS_MARGIN_BYTES = 8 * 1024 * 1024
# The next run's artifact and log are assumed this much larger than the largest that runs of this
# tag wrote (a proposal may widen the model). A run that writes more still loses nothing: a full
# disk mid-run stops the loop cleanly and --resume runs that experiment again.
GROWTH_FACTOR = 1.25
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
    return int(GROWTH_FACTOR * (artifact + log)) + RECORDS_MARGIN_BYTES


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


def failed_write_message(exc: OSError, run_dir: Path) -> str:
    """What a stop says when a write failed for space (ENOSPC, EDQUOT): where, what a run needs,
    what is free there."""
    where = getattr(exc, "filename", None) or run_dir
    free = None
    try:
        free = free_bytes(Path(where).parent if Path(where).is_file() else Path(where))
    except OSError:
        pass
    return out_of_space_message(where, bytes_needed(run_dir), free)
