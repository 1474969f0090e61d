"""Environment faults: what every run needs from the machine, checked before it can cost an idea.

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

import shlex
from pathlib import Path

from agent.errors import EnvironmentStop
from harness.executors.base import FIXED_SOURCES
from harness.records import OFFLINE_SOURCE
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
