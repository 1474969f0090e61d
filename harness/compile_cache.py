"""A trusted compile cache for a tag: written once by trusted code, read (never written) by every run.

A sealed run compiles into its own /tmp (harness/sandbox.py sets TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR there): a cache one run writes and the next reads would be a channel between
experiments, so without this every GPU experiment compiles cold. Here:

- warm(): before the tag's first run, the harness runs the tag's base train.py (trusted: the
  unmodified file, committed before any proposal) for WARM_STEPS steps, sealed like any run, with
  the two cache folders bound writable from `<run>/.sealed/compile-cache.work/` at the paths every
  run compiles into; on success the folder is renamed to `<run>/.sealed/compile-cache/` (publish).
  Skipped when the base train.py does not compile (its COMPILE knob is False: cpu and tiny).
- every later sealed run of the tag (harness/runner.run_train, compile_cache="read") sees the
  published folder read-only at INSIDE and copies it into its private /tmp before train.py starts
  (COPY_CMD), so a graph the base compiled compiles warm, and whatever a run writes stays in its
  own /tmp, gone with its sandbox. Nothing a proposed run writes can reach the published folder:
  it is written only by the warm-up, which runs no proposal, and renamed into place by the harness.

Unsealed runs (--sandbox none) keep torch's default shared cache, as before (untrusted anyway).
"""
from __future__ import annotations

import shutil
from pathlib import Path

# The published cache and the warm-up's working folder, in the run folder's sealed area.
FOLDER = Path(".sealed") / "compile-cache"
WORK = Path(".sealed") / "compile-cache.work"
# Where a run sees the published cache (read-only) and where it compiles (its private /tmp; these
# must be the paths harness/sandbox.child_env gives TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR).
INSIDE = "/tmp/.trusted-compile-cache"
CACHE_DIRS = ("/tmp/inductor-cache", "/tmp/triton-cache")
# Copy the trusted cache into the run's own /tmp, then become train.py (exec: same pid, group).
COPY_CMD = f'cp -a {INSIDE}/. /tmp/ 2>/dev/null; exec "$@"'
# Optimizer steps of the warm-up: the first compiles the model, its backward and the Muon step.
WARM_STEPS = 2
WARM_TIMEOUT_S = 1800.0


def published(run_dir: Path) -> Path | None:
    """The tag's published cache, or None."""
    path = Path(run_dir) / FOLDER
    return path if path.is_dir() and any(path.iterdir()) else None


def read_argv(argv: list[str]) -> list[str]:
    """argv run through the copy step (inside the sandbox: /bin/sh and cp come from its /usr)."""
    return ["/bin/sh", "-c", COPY_CMD, "sh", *argv]


def writable_binds(work: Path) -> list[tuple[Path, str]]:
    """(host folder, path inside) of the warm-up's cache folders."""
    out = []
    for inside in CACHE_DIRS:
        host = Path(work) / Path(inside).name
        host.mkdir(parents=True, exist_ok=True)
        out.append((host, inside))
    return out


def publish(run_dir: Path, work: Path) -> Path:
    """Move the warm-up's caches into place (a rename: readers see all of it or none)."""
    target = Path(run_dir) / FOLDER
    shutil.rmtree(target, ignore_errors=True)
    Path(work).rename(target)
    return target


def wants_compile(train_source: str) -> bool:
    """Whether a train.py compiles: its COMPILE knob (absent: True, as a GPU train.py may not say)."""
    from harness import knobs
    return knobs.values(train_source).get("COMPILE", True) is not False
