"""Compiled bytecode for the packages a run imports, made once per environment.

Training and evaluation run with PYTHONDONTWRITEBYTECODE (harness/runner.py: a forged .pyc must not
change the next run) and see the environment read-only in the sandbox, so a run never writes the
.pyc files of what it imports. Where the environment has none (uv installs without them unless
asked: `uv sync --compile-bytecode`), every run compiled torch's Python from source: torch.optim
imports torch._dynamo, and on a 2-core CPU box that is ~10 s of each tiny run's ~20 s. ensure()
compiles the packages' directory once, before the first run, and says so; later calls cost a few
stat() calls.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from pathlib import Path

# Modules whose bytecode says whether the environment was compiled: the heaviest ones a run imports
# (torch.optim pulls in torch._dynamo, which pulls in sympy).
MARKERS = ("torch", "torch._dynamo", "sympy")
# Generous: ~15,000 files take ~40-80 s on 2 cores; a slower box still finishes, a hung one does not stall us.
COMPILE_TIMEOUT_S = 900

_lock = threading.Lock()
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


def compile_dirs(dirs: list[Path], timeout: float = COMPILE_TIMEOUT_S) -> tuple[bool, str]:
    """compileall over `dirs` with every core; (ok, the last lines of its output)."""
    argv = [sys.executable, "-m", "compileall", "-q", "-j", "0", *map(str, dirs)]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-3:])
    return p.returncode == 0, tail


def ensure(log=None, markers=MARKERS) -> str | None:
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
        ok, tail = compile_dirs(dirs)
        left = missing(markers)
        note = "compiled" if ok and not left else f"could not compile all of it ({tail or 'read-only?'}); runs go on slower"
        say(f"harness: bytecode {note}")
        return note
