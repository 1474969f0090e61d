"""run.json (what a tag is fixed to: agent/workspace.py writes it, its make_seal adds the sandbox
and the pinned inputs) and the incumbent (Best).

Read from disk it is data: from_dict never raises."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypedDict

from harness.results_table import as_int, as_str, fnum


# ---------------------------------------------------------------- the incumbent

class Best(TypedDict):
    """The incumbent every candidate must beat: its commit and trusted val_bpb (None when only the
    commit is known, e.g. a branch recovered without its figure). Both keys are always present."""
    commit: str | None
    val_bpb: float | None


def best_of(commit: str | None, val_bpb) -> Best:
    return {"commit": commit, "val_bpb": fnum(val_bpb)}


# ---------------------------------------------------------------- prepare.describe()

# prepare.describe()'s source when the hub was out of reach: data built from this machine's stdlib.
OFFLINE_SOURCE = "offline-fallback"


@dataclass(frozen=True)
class DataInfo:
    """prepare.py's describe() (its last stdout line, JSON): which data is prepared. The rest of
    it (the paths) is harness/sandbox.DataView's."""
    fingerprint: str | None = None
    profile: str | None = None
    source: str | None = None
    ready: bool = False          # prepared: a fingerprint, and not marked "ready": false
    eval_tokens: int | None = None   # the profile's EVAL_TOKENS

    @classmethod
    def of(cls, d) -> "DataInfo":
        d = d if isinstance(d, dict) else {}
        fp = as_str(d.get("fingerprint"))
        return cls(fingerprint=fp, profile=as_str(d.get("profile")), source=as_str(d.get("source")),
                   ready=bool(fp) and d.get("ready", True) is not False, eval_tokens=as_int(d.get("eval_tokens")))

    @property
    def offline(self) -> bool:
        return self.source == OFFLINE_SOURCE


# ---------------------------------------------------------------- run.json

# The sandbox kind under which runs are sealed (harness/sandbox.py); any other kind is "unsealed".
SEALED_KIND = "bwrap"


@dataclass
class RunSeal:
    """What agent/workspace.py make_seal adds to run.json once the tag's first run is sealed: the sandbox its
    runs ran in (harness/sandbox.Sandbox.describe(): kind, reason, ...) and the pinned evaluation
    inputs' hashes (harness/verify.py (the pinned inputs))."""
    sandbox: dict | None = None
    inputs: dict | None = None


@dataclass
class RunInfo:
    """run.json: the tag's fixed terms (budget, data, profile, base commit), written once for a new
    tag, then the seal: the sandbox and the pinned evaluation inputs (agent/workspace.py make_seal). Read from
    disk it is data: every field is type-checked, unknown keys are kept as read. The file stays
    flat (RUN_INFO_KEYS): the seal's keys sit beside the others."""
    tag: str | None = None
    budget: float | None = None
    fingerprint: str | None = None       # the prepared data's (prepare.describe())
    profile: str | None = None           # gpu | cpu | tiny
    base_commit: str | None = None
    created_at: float | None = None
    source: str | None = None            # where the data came from ("offline-fallback" off the hub)
    seal: RunSeal = field(default_factory=RunSeal)
    settings: dict | None = None         # the options the tag was started with: --resume's defaults
    inventory: dict | None = None        # the data shards and tokenizer files it started with (agent/envcheck.py)
    eval_tokens: int | None = None       # the trusted evaluation's tokens (None: the profile's EVAL_TOKENS)
    threads: int | None = None           # torch threads of its CPU runs (agent/hardware.py; None: the user's or every core)
    extra: dict = field(default_factory=dict)

    @property
    def notified(self) -> bool:
        """Started with --notify (or its environment variable): its URL is not in the file."""
        return isinstance(self.settings, dict) and self.settings.get("notified") is True

    @property
    def smoke(self) -> bool:
        """Started with --smoke: its runs train a fixed number of steps, not the budget."""
        return isinstance(self.settings, dict) and self.settings.get("smoke") is True

    def to_dict(self) -> dict:
        out = {k: getattr(self.seal if k in _SEAL_KEYS else self, k) for k in RUN_INFO_KEYS if k != "extra"}
        return {k: v for k, v in out.items() if v is not None or k in _RUN_INFO_WRITTEN} | self.extra

    @classmethod
    def from_dict(cls, d) -> "RunInfo":
        """run.json's object (anything else reads as empty); a RunInfo is returned as it is."""
        if isinstance(d, cls):
            return d
        d = d if isinstance(d, dict) else {}
        return cls(tag=as_str(d.get("tag")), budget=fnum(d.get("budget")), fingerprint=as_str(d.get("fingerprint")),
                   profile=as_str(d.get("profile")), base_commit=as_str(d.get("base_commit")),
                   created_at=fnum(d.get("created_at")), source=as_str(d.get("source")),
                   seal=RunSeal(sandbox=d.get("sandbox") if isinstance(d.get("sandbox"), dict) else None,
                                inputs=d.get("inputs") if isinstance(d.get("inputs"), dict) else None),
                   settings=d.get("settings") if isinstance(d.get("settings"), dict) else None,
                   inventory=d.get("inventory") if isinstance(d.get("inventory"), dict) else None,
                   eval_tokens=as_int(d.get("eval_tokens")), threads=as_int(d.get("threads")),
                   extra={k: v for k, v in d.items() if k not in RUN_INFO_KEYS})

    @classmethod
    def read(cls, path) -> "RunInfo | None":
        """run.json at `path`, or None when it is missing or not JSON."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    @property
    def sandbox_kind(self) -> str | None:
        return as_str((self.seal.sandbox or {}).get("kind"))

    @property
    def unsealed(self) -> str | None:
        """Why this tag's runs had no sandbox (its reason, else its kind), or None when they were
        sealed or no sandbox was recorded yet."""
        kind = self.sandbox_kind
        if kind in (None, SEALED_KIND):
            return None
        return as_str((self.seal.sandbox or {}).get("reason")) or kind


# run.json's keys, in the order they are written; anything else read is kept in `extra`.
RUN_INFO_KEYS = ("tag", "budget", "fingerprint", "profile", "base_commit", "created_at", "source", "sandbox",
                 "inputs", "settings", "inventory", "eval_tokens", "threads", "extra")
_SEAL_KEYS = tuple(f.name for f in fields(RunSeal))
# Written for a new tag even when None (agent/workspace.py): the file always names them.
_RUN_INFO_WRITTEN = ("tag", "budget", "fingerprint", "profile", "base_commit", "created_at", "source")


