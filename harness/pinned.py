"""The evaluation's inputs, pinned by content: a private copy that only the trusted evaluator reads.

The metric depends on the validation shard, the tokenizer (its files, token_bytes.pt) and the
profile's pointer file that says which of them to use; prepare.py itself is pinned separately
(the evaluator runs prepare.py as committed at the tag's base). At the tag's start `pin()` copies
those files from the shared data cache into `<run>/.sealed/cache/` (same layout, so prepare.py
finds them through AUTORESEARCH_CACHE) and records their SHA-256 in run.json ("inputs").

Before every trusted evaluation `check()` hashes the pinned copy again. A mismatch (or a missing
file) fails that experiment as an integrity failure and `repair()` restores the copy from the
shared cache if the cache still matches the recorded hashes; if it does not, the tag cannot be
measured any more and the loop stops with a message (re-prepare the data, or start a new tag).
Nothing tampered is ever carried forward: the fingerprint is the content, not a cached claim.
"""
from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.sandbox import DataView, Sandbox

PINNED_DIR = ".sealed"
CHUNK = 1 << 20


class PinnedError(RuntimeError):
    """The evaluation inputs can no longer be restored to what the tag was measured on."""


@dataclass
class Seal:
    """Everything a sealed run needs: the sandbox, the data view, the pinned inputs."""
    sandbox: Sandbox
    data: DataView | None = None
    eval_cache: Path | None = None
    inputs: dict = field(default_factory=dict)       # path relative to the cache -> sha256

    @property
    def sealed(self) -> bool:
        return self.sandbox.sealed


def input_files(view: DataView) -> list[Path]:
    """The files the metric depends on, absolute, under view.cache."""
    files = []
    if view.val is not None and view.val.is_file():
        files.append(view.val)
    if view.tokenizer is not None and view.tokenizer.is_dir():
        files += sorted(p for p in view.tokenizer.rglob("*") if p.is_file())
    if view.pointer is not None and view.pointer.is_file():
        files.append(view.pointer)
    return files


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_inputs(view: DataView) -> dict:
    cache = view.cache.resolve()
    return {str(p.resolve().relative_to(cache)): sha256(p) for p in input_files(view)}


def pin(run_dir: Path, view: DataView) -> tuple[Path, dict]:
    """Copy the inputs into run_dir/.sealed/cache; returns (that cache, their hashes)."""
    target = Path(run_dir) / PINNED_DIR / "cache"
    hashes = hash_inputs(view)
    _copy(view.cache, target, hashes)
    if check(target, hashes):
        raise PinnedError(f"the data cache {view.cache} changed while it was being pinned; try again")
    return target, hashes


def _copy(cache: Path, target: Path, hashes: dict) -> None:
    for rel in hashes:
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(cache / rel, tmp)
        tmp.replace(dst)
        dst.chmod(0o444)


def check(eval_cache: Path, hashes: dict) -> list[str]:
    """What differs from the recorded hashes ([] when everything matches)."""
    bad = []
    for rel, want in sorted(hashes.items()):
        path = Path(eval_cache) / rel
        if not path.is_file():
            bad.append(f"{rel} is missing")
        elif sha256(path) != want:
            bad.append(f"{rel} changed")
    return bad


def repair(eval_cache: Path, view: DataView | None, hashes: dict) -> str:
    """Restore the pinned copy from the shared cache, if that still holds the recorded content."""
    if view is None:
        raise PinnedError("the evaluation inputs changed and there is no data cache to restore them from")
    shared = check(view.cache, hashes)
    if shared:
        raise PinnedError("the evaluation inputs changed, and the shared data cache no longer matches "
                          f"what this tag was measured on ({'; '.join(shared[:4])}): re-prepare the data "
                          "(uv run prepare.py) and start a new tag")
    for p in Path(eval_cache).rglob("*"):
        if p.is_file():
            p.chmod(0o644)
    _copy(view.cache, Path(eval_cache), hashes)
    return f"restored {len(hashes)} pinned input file(s) from {view.cache}"
