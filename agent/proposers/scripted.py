"""A scripted proposer: a fixed list of edits, one per experiment number (no LLM, no search).

Used by scripts/bench_judge.py to put known edits through the real loop: null edits (changes that
do nothing) and gains of known size. An edit is a function of the parent's train.py, or of a
fixed source (`on_base`: the same edit from the same starting point whatever was kept before).
Proposals are a pure function of the experiment number, so a prefetched proposal that went
stale is simply asked for again (cheap_redo).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from agent.proposers.base import Proposal, ProposalError, ProposalRequest


@dataclass
class Edit:
    kind: str                            # "null" | "gain" | anything the caller counts by
    label: str                           # one line: what it changes
    apply: Callable[[str], str]          # train.py -> train.py
    on_base: bool = False                # apply to the fixed base source, not to the parent
    size: float | None = None            # a gain's planned size (the caller's unit, e.g. sigmas)


class ScriptedProposer:
    name = "scripted"
    cheap_redo = True

    def __init__(self, edits: dict[int, Edit], base_source: str = ""):
        self.edits, self.base_source = edits, base_source

    def propose(self, req: ProposalRequest) -> Proposal:
        if req.fix_of is not None:
            raise ProposalError("the scripted proposer does not repair crashes")
        edit = self.edits.get(req.n)
        if edit is None:
            raise ProposalError(f"no scripted edit for experiment {req.n}")
        source = edit.apply(self.base_source if edit.on_base else req.train_source)
        return Proposal(description=f"{edit.kind}: {edit.label}", hypothesis=f"scripted {edit.kind} edit"
                        + (f" of planned size {edit.size:g}" if edit.size is not None else ""),
                        source=source, proposer="scripted", notes=f"scripted {edit.kind}")
