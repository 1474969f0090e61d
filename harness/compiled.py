"""What a run finds compiled before it starts: the Python bytecode of the environment and the
tag's trusted compile cache.

Compiled bytecode for the packages a run imports, made once per environment.

Training and evaluation run with PYTHONDONTWRITEBYTECODE (harness/runner.py: a forged .pyc must not
change the next run) and see the environment read-only in the sandbox, so a run never writes the
.pyc files of what it imports. Where the environment has none (uv installs without them unless
asked: `uv sync --compile-bytecode`), every run compiled torch's Python from source: torch.optim
imports torch._dynamo, and on a 2-core CPU box that is ~10 s of each tiny run's ~20 s. ensure()
compiles the packages' directory once, before the first run, and says so; later calls cost a few
stat() calls.

The compile runs in its own process group, recorded in the run folder (PID_FILE, read by
harness/procs.py kill_leftover), so a loop killed with -9 mid-compile leaves nothing that --resume
does not end. Files a package ships for another Python (a newer version's syntax, never imported
here) do not compile; they are counted, not reported as a failure.

A trusted compile cache for a tag: written once by trusted code, read (never written) by every run.

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

import atexit
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Modules whose bytecode says whether the environment was compiled: the heaviest ones a run imports
# (torch.optim pulls in torch._dynamo, which pulls in sympy).
MARKERS = ("torch", "torch._dynamo", "sympy")
# Generous: ~15,000 files take ~40-80 s on 2 cores; a slower box still finishes, a hung one does not stall us.
COMPILE_TIMEOUT_S = 900

# The compile's process group, in the run folder while it runs (harness/procs.py reads child*.pid).
PID_FILE = "child-bytecode.pid"
# compileall's line for a file it could not compile.
ERROR_RE = re.compile(r"^\*\*\* Error compiling", re.M)

_lock = threading.Lock()
_running: set = set()   # compiles in flight: ended when this process exits (Ctrl-C of the loop)


@atexit.register
def _end_running() -> None:
    from harness.procs import kill_group
    for proc in list(_running):
        kill_group(proc.pid, proc)
_checked: set[str] = set()


def _source_of(module: str) -> Path | None:
    """The module's source file, found without importing it (or its parents)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    if rest:
        path = path.parent.joinpath(*rest)
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return path if path.is_file() else None


def missing(markers=MARKERS) -> dict[str, Path]:
    """{module: its source file} for the markers with no up-to-date .pyc beside their source."""
    out = {}
    for module in markers:
        src = _source_of(module)
        if src is None:
            continue
        pyc = Path(importlib.util.cache_from_source(str(src)))
        try:
            if pyc.stat().st_mtime >= src.stat().st_mtime:
                continue
        except OSError:
            pass
        out[module] = src
    return out


def package_root(src: Path, module: str) -> Path:
    """The directory that holds the top-level package of `module` (site-packages)."""
    depth = module.count(".") + (1 if src.name == "__init__.py" else 0)
    root = src.parent
    for _ in range(depth):
        root = root.parent
    return root


def compile_dirs(dirs: list[Path], timeout: float = COMPILE_TIMEOUT_S, pid_dir: Path | None = None,
                 ) -> tuple[bool, str, int]:
    """compileall over `dirs` with every core, in its own process group (recorded in
    pid_dir/PID_FILE while it runs); (ok, the last lines of its output, files that did not compile)."""
    from harness.procs import kill_group
    argv = [sys.executable, "-m", "compileall", "-q", "-j", "0", *map(str, dirs)]
    pid_file = Path(pid_dir) / PID_FILE if pid_dir is not None else None
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=str(pid_dir) if pid_dir is not None else None)
    except OSError as exc:
        return False, str(exc), 0
    _running.add(proc)
    try:
        if pid_file is not None:
            pid_file.write_text(json.dumps({"pgid": proc.pid, "cwd": str(Path(pid_dir).resolve()),
                                            "n": "bytecode"}))
        out, _ = proc.communicate(timeout=timeout)
    except BaseException as exc:   # a timeout, or the loop stopping: the whole group goes
        kill_group(proc.pid, proc)
        proc.wait()
        if isinstance(exc, subprocess.TimeoutExpired):
            return False, str(exc), 0
        raise
    finally:
        _running.discard(proc)
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
    tail = "\n".join(out.strip().splitlines()[-3:])
    return proc.returncode == 0, tail, len(ERROR_RE.findall(out))


def ensure(log=None, markers=MARKERS, pid_dir: Path | None = None) -> str | None:
    """Compile the markers' package directories if their bytecode is missing; what was done, or
    None when there was nothing to do. Never raises: a read-only environment only costs speed."""
    key = sys.executable + "|" + ",".join(markers)
    with _lock:
        if key in _checked:
            return None
        _checked.add(key)
        todo = missing(markers)
        if not todo:
            return None
        dirs = sorted({package_root(src, m) for m, src in todo.items()})
        say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        say(f"harness: the environment has no compiled bytecode for {', '.join(todo)}; compiling "
            f"{', '.join(map(str, dirs))} once (each run would compile them from source; "
            "`uv sync --compile-bytecode` does this at install)")
        ok, tail, skipped = compile_dirs(dirs, pid_dir=pid_dir if pid_dir is not None and Path(pid_dir).is_dir() else None)
        left = missing(markers)
        if not left:   # what runs import is compiled; files for another Python never load here
            note = "compiled" + (f" ({skipped} file(s) of the packages are written for another Python version "
                                 f"than {sys.version_info[0]}.{sys.version_info[1]} and are never imported here; "
                                 "left as they are)" if skipped else "")
        else:
            note = f"could not compile {', '.join(left)} ({tail or 'read-only?'}); runs go on slower"
        say(f"harness: bytecode {note}")
        return note


# ---- The tag's trusted compile cache

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


def run_cache(mode: str, run_dir: Path, work: Path | None, box, view, env: dict,
              argv: list[str]) -> tuple[list[str], Path | None]:
    """Show the run the tag's trusted compile cache (mode "read") or give the warm-up its folders
    (mode "write"); returns (argv, a private cache folder to remove afterwards, or None)."""
    if mode == "write":
        if work is None:
            raise ValueError("compile_cache='write' needs cache_work")
        binds = writable_binds(work)
        if box.sealed:
            view.rw_binds += binds
        else:
            env.update(TORCHINDUCTOR_CACHE_DIR=str(binds[0][0]), TRITON_CACHE_DIR=str(binds[1][0]))
        return argv, None
    trusted = published(run_dir) if mode == "read" else None
    if trusted is None:
        return argv, None
    if box.sealed:                        # read-only inside; copied into its own /tmp by the run
        view.binds.append((trusted, Path(INSIDE)))
        return read_argv(argv), None
    private = Path(tempfile.mkdtemp(prefix="compile-cache-"))   # unsealed: a private copy per run
    shutil.copytree(trusted, private, dirs_exist_ok=True)
    env.update(TORCHINDUCTOR_CACHE_DIR=str(private / "inductor-cache"), TRITON_CACHE_DIR=str(private / "triton-cache"))
    return argv, private
