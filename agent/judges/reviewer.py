"""The reviewer: what the loop asks before a run (guard), after it (judge) and between runs.

The loop only knows this protocol. The judge hierarchy (agent/judges/hierarchy.py) is the
default; SimpleReviewer (`--reviewer simple`) is the reference protocol of the seed's program.md,
keep iff the printed val_bpb beats the best so far, plugged in through the same three methods. Each gets a context, never the loop: an
ExperimentContext before and after a run, a BoundaryContext between experiments.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from agent.proposers.base import Proposal
from agent.workspace import RunFiles
from harness.decision import Basis, Decision  # noqa: F401  (Basis, Decision: re-exported)
from harness.experiment_record import ExperimentRecord  # noqa: F401  (Basis, Decision: re-exported)
from runfiles.run import Best  # noqa: F401  (Basis, Decision: re-exported)
from harness.runner import RunResult
from search import knobs

# train.py must keep these for the trusted re-evaluation and the knob tools (docs/contracts.md).
REQUIRED_DEFS = ("build_model",)


@dataclass
class ExperimentContext:
    n: int
    tag: str
    worktree: Path
    parent: str
    commit: str | None
    old_source: str
    new_source: str
    diff: str
    proposal: Proposal
    history: list[ExperimentRecord]   # the decided experiments so far
    best: Best | None
    run_dir: Path


@dataclass(frozen=True)
class BoundaryContext:
    """What the boundary step (between experiments) gets: the tag's files (its worktree holds the
    branch), its decided history, `on_moved(head, best)` to move the tag's state after each applied
    decision (best None: unchanged), and `train(commit)`, a run of `commit` (checked out in the
    worktree) outside the experiment sequence, with its trusted evaluation (agent/between.py)."""
    files: RunFiles
    history: list[ExperimentRecord]
    on_moved: Callable[[str, dict | None], None]
    train: Callable[[str], RunResult]


@dataclass
class GuardVerdict:
    ok: bool
    reason: str = ""
    details: dict = field(default_factory=dict)


@runtime_checkable
class Reviewer(Protocol):
    # True: the loop runs train.py sealed and every job carries the trusted evaluation (harness/job.py),
    # the only figure this reviewer decides on; False: it decides on what train.py printed.
    evaluates: bool

    def guard(self, ctx: ExperimentContext) -> GuardVerdict: ...

    def judge(self, ctx: ExperimentContext, run: RunResult) -> Decision: ...

    def judge_incumbent(self, ctx: ExperimentContext, run: RunResult) -> Decision:
        """A run of ctx.best's commit that a Decision on ctx asked for (Decision.run_next);
        the candidate decided again. Only a reviewer that asks for such runs is handed one."""
        ...

    def boundary(self, ctx: BoundaryContext) -> list[dict]: ...

    def out_of_reruns(self, ctx: ExperimentContext, decision: Decision, runs: int) -> Decision:
        """`decision` still asks for runs after the most one experiment may have: what it becomes."""
        ...

    def stop_llm(self, why: str) -> None:
        """No more LLM calls from this reviewer (a spend cap, a hand-over to the offline proposer)."""
        ...


def _defines(source: str, names: tuple[str, ...]) -> list[str]:
    """Names of `names` that the source does not define at module level (best effort on bad syntax)."""
    try:
        tree = knobs.parse(source)
    except SyntaxError:
        return [n for n in names if f"def {n}(" not in source]
    top = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    return [n for n in names if n not in top]


class SimpleReviewer:
    """Guard: the edit must change train.py and keep build_model. Judge: keep iff it beats the best."""
    evaluates = False

    def guard(self, ctx: ExperimentContext) -> GuardVerdict:
        if ctx.new_source == ctx.old_source:
            return GuardVerdict(False, "the proposal does not change train.py")
        if not ctx.new_source.strip():
            return GuardVerdict(False, "the proposal empties train.py")
        missing = _defines(ctx.new_source, REQUIRED_DEFS)
        if missing:
            return GuardVerdict(False, f"train.py must keep {', '.join(missing)}() (used by the "
                                       "trusted re-evaluation)", {"missing": missing})
        return GuardVerdict(True, "ok", {"lines_changed": ctx.diff.count("\n+") + ctx.diff.count("\n-")})

    def judge(self, ctx: ExperimentContext, run: RunResult) -> Decision:
        if run.crash_class is not None:
            return Decision("crash", f"run crashed: {run.crash_class}", basis=Basis.CRASH)
        bpb = run.summary["val_bpb"]
        best = ctx.best["val_bpb"] if ctx.best else None
        if best is None or not math.isfinite(best):
            return Decision("keep", f"first result: val_bpb {bpb:.6f}", basis=Basis.BASELINE)
        if bpb < best:
            return Decision("keep", f"val_bpb {bpb:.6f} beats best {best:.6f} by {best - bpb:.6f}")
        return Decision("discard", f"val_bpb {bpb:.6f} does not beat best {best:.6f}")

    def judge_incumbent(self, ctx: ExperimentContext, run: RunResult) -> Decision:
        raise RuntimeError("the simple reviewer never asks for a run of the incumbent")

    def boundary(self, ctx: BoundaryContext) -> list[dict]:
        return []

    def out_of_reruns(self, ctx: ExperimentContext, decision: Decision, runs: int) -> Decision:
        raise RuntimeError("the simple reviewer never asks for another run")

    def stop_llm(self, why: str) -> None:
        pass   # it calls no LLM
