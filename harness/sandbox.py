"""Sealed processes: run LLM-written code where it cannot read validation data or leave traces.

Every harness path that runs an edited train.py (the loop's runs and confirming reruns, queue
re-measurements, screening candidates, sweep workers) and the trusted evaluator (which imports
train.py to build the model) starts its process through `Sandbox.wrap()`. With bubblewrap (Debian
`bubblewrap`) the process sees:

- the whole file system read-only (Python, the venv, CUDA libraries, the HF hub cache);
- /dev with its device nodes (GPUs stay usable), a private /dev/shm, /tmp and /proc;
- no network (its own network namespace), its own pid, ipc and uts namespaces; it dies with us;
- the data cache replaced by an empty folder, in which only what this view needs is bound back
  read-only: for training, the profile's training shards and tokenizer, with the validation
  shard's path bound to an empty file; for the evaluator, the pinned copy of the evaluation inputs;
- the tags' folder (`.autoresearch/`) hidden except the current worktree, and in it the other
  runs' artifacts and the pinned inputs hidden;
- exactly the folders named writable (the run's own output folder).

Where bubblewrap is missing or cannot make namespaces (some containers), `detect()` says why and
the caller must say so loudly (console and run.json) and continue with the weaker guarantees:
the trusted evaluation, the content check of the inputs and the worktree clean-up still hold.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Environment variables never passed into a sandbox: credentials have no business there.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
# Folder names in a run folder that a sealed process never sees.
HIDDEN_IN_RUN = ("artifacts", ".sealed", ".verify", "screen")
# How long the one-off "can bubblewrap make namespaces here?" probe may take.
PROBE_TIMEOUT_S = 20


@dataclass
class DataView:
    """Paths of the prepared data, from prepare.describe()["paths"] (absolute)."""
    cache: Path
    data: Path | None = None
    tokenizer: Path | None = None
    pointer: Path | None = None
    val: Path | None = None

    @classmethod
    def from_describe(cls, info: dict) -> "DataView | None":
        paths = (info or {}).get("paths") or {}
        if not paths.get("cache"):
            return None
        get = lambda k: Path(paths[k]) if paths.get(k) else None  # noqa: E731
        return cls(cache=Path(paths["cache"]), data=get("data"), tokenizer=get("tokenizer"),
                   pointer=get("pointer"), val=get("val"))


@dataclass
class Sandbox:
    kind: str                  # "bwrap" | "none"
    reason: str = ""           # why "none"
    binary: str | None = None
    extra_hidden: list[Path] = field(default_factory=list)

    @property
    def sealed(self) -> bool:
        return self.kind == "bwrap"

    def describe(self) -> dict:
        return {"kind": self.kind, "reason": self.reason}

    def wrap(self, argv: list[str], *, cwd: Path, writable: list[Path] = (), data: DataView | None = None,
             data_mode: str = "train", run_dir: Path | None = None, readonly: list[Path] = ()) -> list[str]:
        """`argv` as seen through this sandbox. data_mode: "train" (training shards, no validation),
        "screen" (the last training shard stands in for the validation shard), "open" (the
        validation shard too: a train.py that evaluates itself, for a reviewer that trusts it) or
        "eval" (only `readonly` paths, e.g. the pinned inputs, are visible from the cache)."""
        if not self.sealed:
            return list(argv)
        a = [self.binary, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm",
             "--proc", "/proc", "--tmpfs", "/tmp",
             "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session"]
        for hidden in self._hidden_roots(data, run_dir):
            a += ["--tmpfs", str(hidden)]
        for p in _interpreter_paths():   # the venv and its Python may live under /tmp (a CI clone)
            a += ["--ro-bind", str(p), str(p)]
        cwd = Path(cwd).resolve()
        a += ["--ro-bind", str(cwd), str(cwd)]     # /tmp or a hidden root may hold it
        if run_dir is not None:
            run_dir = Path(run_dir).resolve()
            if run_dir != cwd:
                a += ["--ro-bind", str(run_dir), str(run_dir)]
            for name in HIDDEN_IN_RUN:
                if (run_dir / name).is_dir():
                    a += ["--tmpfs", str(run_dir / name)]
        if data is not None and data_mode in ("train", "screen", "open"):
            for p in (data.data, data.tokenizer, data.pointer):
                if p is not None and p.exists():
                    a += ["--ro-bind", str(p), str(p)]
            if data_mode != "open" and data.val is not None and data.val.exists():
                stand_in = _screen_shard(data) if data_mode == "screen" else None
                a += ["--ro-bind", str(stand_in or "/dev/null"), str(data.val)]
        for p in readonly:
            a += ["--ro-bind", str(Path(p).resolve()), str(Path(p).resolve())]
        for p in writable:
            Path(p).mkdir(parents=True, exist_ok=True)
            a += ["--bind", str(Path(p).resolve()), str(Path(p).resolve())]
        a += ["--chdir", str(cwd), "--"]
        return a + list(argv)

    def _hidden_roots(self, data: DataView | None, run_dir: Path | None) -> list[Path]:
        """Folders replaced by empty ones: every data cache, the other tags' folders."""
        roots = []
        default_cache = Path.home() / ".cache" / "autoresearch"
        for p in ([data.cache] if data else []) + [default_cache] + list(self.extra_hidden):
            if p.is_dir() and p.resolve() not in roots:
                roots.append(p.resolve())
        if run_dir is not None:
            tags = Path(run_dir).resolve().parent
            if tags.name == ".autoresearch" and tags not in roots:
                roots.append(tags)
        return roots


def _interpreter_paths() -> list[Path]:
    """Folders the sandboxed `sys.executable` needs: its venv and the base Python installation."""
    out = []
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        p = Path(p).resolve()
        if p.is_dir() and p != Path("/") and not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


def _screen_shard(data: DataView) -> Path | None:
    """The last training shard of the data set, standing in for validation in screening."""
    if data.data is None:
        return None
    shards = sorted(p for p in data.data.glob("shard_*.parquet") if data.val is None or p.name != data.val.name)
    return shards[-1] if shards else None


def scrub_env(env: dict) -> dict:
    """A copy of `env` without credentials, with the hub kept offline (there is no network)."""
    out = {k: v for k, v in env.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
    out["HF_HUB_OFFLINE"] = "1"
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    # Compilers' caches default to $HOME, read-only in here: give them the private /tmp.
    out["TRITON_CACHE_DIR"] = "/tmp/triton-cache"
    out["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/inductor-cache"
    return out


_DETECTED: dict[str, Sandbox] = {}


def detect(mode: str = "auto") -> Sandbox:
    """The best sandbox this machine can make. mode: auto | bwrap | none."""
    if mode == "none":
        return Sandbox("none", "disabled with --sandbox none")
    if mode in _DETECTED:
        return _DETECTED[mode]
    binary = shutil.which("bwrap")
    if binary is None:
        box = Sandbox("none", "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    else:
        try:
            probe = subprocess.run([binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                    "--unshare-net", "--unshare-pid", "--die-with-parent", "true"],
                                   capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
            ok, why = probe.returncode == 0, probe.stderr.strip()[-300:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, why = False, str(exc)
        box = Sandbox("bwrap", binary=binary) if ok else \
            Sandbox("none", f"bubblewrap cannot make namespaces here: {why}")
    if mode == "bwrap" and not box.sealed:
        raise RuntimeError(f"--sandbox bwrap: {box.reason}")
    _DETECTED[mode] = box
    return box


def warning(box: Sandbox) -> str | None:
    """The loud line the loop prints (and run.json keeps) when runs are not sealed."""
    if box.sealed:
        return None
    return ("WARNING: NO SANDBOX: " + box.reason + ". train.py runs unsealed: it can read the "
            "validation data and write outside its run folder. The trusted evaluation, the content "
            "check of the evaluation inputs and the worktree clean-up still apply.")
