"""The one shape of an experiment that is not decided yet, in its two places:

- `InFlight`: an experiment in flight as the proposers see it (ProposalRequest.pending; its
  status reads "pending") (the single loop's prefetch, --screen's gathered candidates, the coordinator's
  experiments in flight under --workers). It carries the proposal's knob values and code
  fingerprint where known, so a proposer neither repeats it nor takes it for a lost trial.
- `PendingFile`: pending.json (pending-wK.json per worker): committed but not recorded. Written
  before the run, removed after the record; --resume and a stopping loop read it
  (agent/recovery.py, agent/workers.py pending_attempts, Loop.stop).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from agent.proposers.base import Proposal
from harness import knobs
from harness.records import ExperimentRecord
from harness.results import read_json, write_json_atomic
from harness.secrets import scrub

BEING_PROPOSED = "(being proposed)"


@dataclass
class InFlight:
    status: ClassVar[str] = "pending"   # what a proposer reads beside the decided records' statuses
    n: int
    parent: str | None
    commit: str | None = None
    description: str = BEING_PROPOSED
    config: dict | None = None        # knob values of the proposed train.py, once there is one
    code: str | None = None           # its code fingerprint (harness/knobs.code_fingerprint)
    proposer: str | None = None
    worker: int | None = None         # --workers: which worker carries it (0: queued for the first free)
    handover: str | None = None       # agent/budget.py: why the offline proposer made it

    @classmethod
    def of(cls, n: int, parent: str | None, proposal: Proposal | None = None, **fields) -> InFlight:
        entry = cls(n=n, parent=parent, **fields)
        if proposal is not None:
            entry.proposed(proposal)
        return entry

    def proposed(self, proposal: Proposal, description: str | None = None) -> None:
        """The proposal is made: what it tries becomes visible to the other proposers."""
        self.description = proposal.description if description is None else description
        self.proposer = proposal.proposer
        self.config, self.code = knobs.values(proposal.source), knobs.code_fingerprint(proposal.source)

    @property
    def knob_values(self) -> dict | None:
        """Its knob values (None until proposed): what ExperimentRecord.knob_values is for a record."""
        return self.config if isinstance(self.config, dict) else None

    @property
    def code_id(self) -> str | None:
        return self.code or None

    def snapshot(self) -> InFlight:
        """A copy a ProposalRequest carries (the coordinator's entry goes on changing)."""
        return replace(self)

    def as_crash(self) -> ExperimentRecord:
        """The record it would leave if it crashed (agent/budget.py: would that start a crash streak?)."""
        return ExperimentRecord.of(n=self.n, parent=self.parent, commit=self.commit, status="crash",
                                description=self.description, proposer=self.proposer, handover=self.handover,
                                config=self.config or {}, code=self.code)


@dataclass
class PendingFile:
    n: int
    parent: str | None
    commit: str | None
    description: str = ""
    hypothesis: str = ""
    proposer: str = "offline"
    model: str | None = None
    notes: str = ""
    info: dict = field(default_factory=dict)
    attempts: list = field(default_factory=list)
    started_at: float | None = None

    @classmethod
    def of(cls, a) -> PendingFile:
        """Of an Attempt (agent/experiment.py)."""
        p = a.proposal
        return cls(n=a.n, parent=a.parent, commit=a.commit, description=p.description, hypothesis=p.hypothesis,
                   proposer=p.proposer, model=p.model, notes=p.notes, info=a.info.to_dict(),
                   attempts=list(a.attempts), started_at=a.started_at)

    def write(self, path: Path) -> None:
        write_json_atomic(Path(path), scrub(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> PendingFile | None:
        """The file's experiment, or None where there is none to resume: absent, empty, torn, or
        without an integer experiment number (a value of the wrong type is left at its default)."""
        raw = read_json(Path(path))
        if not isinstance(raw, dict) or not isinstance(raw.get("n"), int) or isinstance(raw.get("n"), bool):
            return None
        out = cls(n=raw["n"], parent=_str(raw.get("parent")), commit=_str(raw.get("commit")))
        for name, kind in (("description", str), ("hypothesis", str), ("proposer", str), ("model", str),
                           ("notes", str), ("info", dict), ("attempts", list), ("started_at", (int, float))):
            if isinstance(raw.get(name), kind) and not isinstance(raw.get(name), bool):
                setattr(out, name, raw[name])
        return out

    def proposal(self, source: str) -> Proposal:
        return Proposal(description=self.description, hypothesis=self.hypothesis, source=source,
                        proposer=self.proposer, model=self.model, notes=self.notes)


def _str(v) -> str | None:
    return v if isinstance(v, str) and v else None
