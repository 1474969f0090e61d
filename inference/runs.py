"""Find a run's kept commits and load one commit's model.

A kept commit's model is rebuilt with train.py *at that commit* (`git show C:train.py` into a
temporary module, then its build_model(config)), and the weights come from the artifact of that
commit's experiment: the journal record with that commit gives n -> artifacts/exp-NNNN/model.pt.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Kept:
    n: int                  # experiment number
    commit: str             # full hash
    short: str
    val_bpb: float | None   # the trusted figure
    description: str
    artifact: Path          # artifacts/exp-NNNN/model.pt (may be missing)


def journal_records(run_dir: Path) -> list[dict]:
    """Experiment records of a run's journal (other kinds and torn lines skipped)."""
    path = Path(run_dir) / "journal.jsonl"
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("kind", "experiment") == "experiment" and rec.get("commit"):
            out.append(rec)
    return out


def artifact_path(run_dir: Path, n: int) -> Path:
    return Path(run_dir) / "artifacts" / f"exp-{int(n):04d}" / "model.pt"


def _bpb(rec: dict) -> float | None:
    v = rec.get("trusted_bpb")
    if v is None:
        v = (rec.get("summary") or {}).get("val_bpb")
    return v if isinstance(v, (int, float)) else None


def kept_commits(run_dir: Path, kept_only: bool = True) -> list[Kept]:
    """Kept experiments in journal order (a commit kept twice counts once, its last record);
    with kept_only False, every experiment (a discarded one's artifact may survive pruning)."""
    by_commit = {}
    for rec in journal_records(run_dir):
        if rec.get("status") == "keep" or not kept_only:
            by_commit[rec["commit"]] = Kept(rec["n"], rec["commit"], rec.get("short") or rec["commit"][:7],
                                            _bpb(rec), rec.get("description", ""), artifact_path(run_dir, rec["n"]))
    return sorted(by_commit.values(), key=lambda k: k.n)


def find_kept(run_dir: Path, commit: str | None = None, kept_only: bool = True) -> Kept:
    """The kept experiment of `commit` (a prefix will do); without one, the best kept (lowest val_bpb)."""
    kept = [k for k in kept_commits(run_dir, kept_only or commit is None) if k.artifact.exists()]
    if not kept:
        raise SystemExit(f"no kept experiment with a saved model in {run_dir}")
    if commit is None:
        return min(kept, key=lambda k: (k.val_bpb if k.val_bpb is not None else float("inf"), -k.n))
    found = [k for k in kept if k.commit.startswith(commit.lower())]
    if len(found) != 1:
        raise SystemExit(f"commit {commit!r} matches {len(found)} kept experiments with a model in {run_dir}")
    return found[0]


def train_source(run_dir: Path, commit: str) -> str:
    return subprocess.run(["git", "-C", str(run_dir), "show", f"{commit}:train.py"], check=True,
                          capture_output=True, text=True).stdout


def import_source(source: str, name: str):
    """Import a train.py text as a fresh module (prepare is importable from the repo root)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    folder = Path(tempfile.mkdtemp(prefix="infer-train-"))
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_artifact_model(artifact: Path, train_module, device="cpu"):
    """build_model(config) of `train_module`, with the artifact's weights, in eval mode."""
    blob = torch.load(artifact, map_location="cpu", weights_only=True)  # tensors and plain data: no pickled code
    model = train_module.build_model(blob["config"])
    model.load_state_dict(blob["state_dict"])
    return model.to(device).eval(), blob


def load_kept(run_dir: Path, commit: str | None = None, device="cpu", kept_only: bool = True):
    """(model, Kept, train module) of a kept commit of a run (any experiment with kept_only False)."""
    kept = find_kept(run_dir, commit, kept_only)
    source = train_source(run_dir, kept.commit)
    module = import_source(source, f"train_{kept.short}")
    model, blob = load_artifact_model(kept.artifact, module, device)
    sha = hashlib.sha256(source.encode()).hexdigest()
    if blob.get("train_py_sha") not in (None, sha):
        print(f"warning: the artifact of {kept.short} was saved by another train.py (sha differs)", file=sys.stderr)
    return model, kept, module


def run_tokenizer(run_dir: Path):
    """The run's pinned tokenizer (.sealed/cache), else the prepared cache's."""
    import prepare
    pinned = Path(run_dir) / ".sealed" / "cache"
    for p in sorted(pinned.glob("**/tokenizer.pkl")) + sorted(pinned.glob("**/byte.json")):
        return prepare.Tokenizer.from_directory(p.parent)
    return prepare.Tokenizer.from_directory()
