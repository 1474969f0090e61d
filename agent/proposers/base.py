"""The proposer protocol: given the history and train.py, return a new train.py.

A new proposer is one small class with a `name` and a `propose(req)` method; the loop does not
change. Failures are exceptions the loop turns into journal entries (see docs/contracts.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from agent.errors import ProposalError, ProposerUnavailable  # noqa: F401  (part of the protocol: proposers raise them)
from runfiles.run import Best
from harness.experiment_record import ExperimentRecord


@dataclass
class Proposal:
    description: str          # one line, goes into results.tsv
    hypothesis: str           # why it might lower val_bpb
    source: str               # the full new train.py
    proposer: str             # "offline" | "claude"
    model: str | None = None
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0
    notes: str = ""


@dataclass
class ProposalRequest:
    n: int
    worktree: Path
    train_source: str         # train.py of the parent commit (the one to edit)
    program: str              # program.md, re-read each experiment
    history: list[ExperimentRecord]   # the decided experiments so far, in decision order
    best: Best | None         # the incumbent (runfiles/run.py)
    feedback: str = ""        # guard rejection, or a crash's last 50 log lines when asked to fix
    fix_of: Proposal | None = None
    seed: int = 0
    # Experiments in flight (agent/coordinator.py InFlight: status "pending", n, parent, commit,
    # description, knob_values, code_id, proposer, handover): the prefetch's running one, --screen's
    # gathered candidates, the other workers'. Not to be proposed again.
    pending: list = field(default_factory=list)

    def tried(self) -> list:
        """Every experiment decided or in flight (records, then InFlight entries): what was tried."""
        return [*self.history, *self.pending]


@runtime_checkable
class Proposer(Protocol):
    name: str
    # True where asking again costs nothing (offline, scripted, a local model): a proposal made on
    # a parent the branch has left is asked for again rather than rebased (agent/proposing.py).
    cheap_redo: bool

    def propose(self, req: ProposalRequest) -> Proposal: ...


