"""Finding the runs to show: one per tag.

By default the runs of one repository: `<repo>/.autoresearch/<tag>/` folders holding a
results.tsv (the loop's worktrees). With `--runs DIR`: every folder below DIR holding a
results.tsv (runs copied off a GPU box, for example). Discovery is repeated at most every
few seconds, so a tag started while the dashboard runs shows up without a restart.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from dashboard.data import read_json
from runfiles.run import RunInfo

# Where the loop puts its worktrees inside a repo (contract).
RUNS_SUBDIR = ".autoresearch"
# Seconds a discovery result is reused (a walk of a big --runs folder is not free).
DISCOVERY_TTL_S = 2.0
# Folders never descended into when walking --runs.
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", "artifacts", "logs"}
# What a tag may look like in a URL; anything else is slugged.
TAG_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Run:
    key: str            # the id used in URLs (the tag, made unique and URL-safe)
    tag: str            # the tag as the loop named it
    path: Path          # the run folder (results.tsv, journal.jsonl, ...)
    git_dir: Path | None  # a folder git commands can run in, or None

    def file(self, name: str) -> Path:
        return self.path / name


def git_toplevel(start: Path) -> Path | None:
    try:
        out = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def _is_git(path: Path) -> bool:
    return (path / ".git").exists()


def _tag_of(folder: Path) -> str:
    run, _ = read_json(folder / "run.json")
    return RunInfo.from_dict(run).tag or folder.name


def _folders(repo: Path | None, runs_dir: Path | None) -> list[Path]:
    if runs_dir is not None:
        found = []
        for root, dirs, files in os.walk(runs_dir):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            if "results.tsv" in files:
                found.append(Path(root))
        return found
    if repo is None:
        return []
    base = repo / RUNS_SUBDIR
    try:
        return sorted(p for p in base.iterdir() if (p / "results.tsv").is_file())
    except OSError:
        return []


def find_runs(repo: Path | None, runs_dir: Path | None) -> list[Run]:
    runs, used = [], set()
    for folder in _folders(repo, runs_dir):
        tag = _tag_of(folder)
        key = TAG_SAFE.sub("-", tag).strip("-") or "run"
        base, i = key, 2
        while key in used:           # two folders claiming one tag (--runs over copies)
            key, i = f"{base}~{i}", i + 1
        used.add(key)
        # A worktree has a .git file; otherwise fall back to the repo (or none).
        git_dir = folder if _is_git(folder) else (repo if repo is not None else None)
        runs.append(Run(key=key, tag=tag, path=folder, git_dir=git_dir))
    return runs


class RunIndex:
    """The runs, re-discovered at most every DISCOVERY_TTL_S."""

    def __init__(self, repo: Path | None, runs_dir: Path | None, default_tag: str | None = None):
        self.repo, self.runs_dir, self.default_tag = repo, runs_dir, default_tag
        self._lock = threading.Lock()
        self._at = 0.0
        self._runs: list[Run] = []

    def where(self) -> str:
        """Where runs are looked for, for the 'no runs' page."""
        if self.runs_dir is not None:
            return f"folders holding results.tsv below {self.runs_dir}"
        if self.repo is None:
            return "nowhere: not started inside a git repository (use --repo or --runs)"
        return f"{self.repo / RUNS_SUBDIR}/<tag>/results.tsv"

    def all(self) -> list[Run]:
        with self._lock:
            if time.monotonic() - self._at > DISCOVERY_TTL_S:
                self._runs = find_runs(self.repo, self.runs_dir)
                self._at = time.monotonic()
            return list(self._runs)

    def get(self, key: str) -> Run | None:
        for run in self.all():
            if run.key == key:
                return run
        return None

    def default(self) -> Run | None:
        runs = self.all()
        if self.default_tag:
            for run in runs:
                if self.default_tag in (run.key, run.tag):
                    return run
        # The most recently active run is the one a user most likely wants.
        return max(runs, key=lambda r: _mtime(r.file("results.tsv")), default=None)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
