"""The loop's control flow by exception, in one place (the mini-swe-agent way: a step raises, the
step that can act on it catches). Who raises each and who catches it:

| exception | raised by | caught by | means |
| --- | --- | --- | --- |
| ProposalError | a proposer | agent/proposing.py call_proposer | this attempt has no proposal (malformed reply, nothing left to try): recorded, the loop goes on |
| ProposerUnavailable | the Claude proposer | agent/proposing.py | the API stayed down past --api-patience: the offline proposer proposes this time |
| Rerun | agent/experiment.py (the judge asked for another run) | agent/experiment.py _run_and_judge | run the same commit again with the next seed |
| InterruptedBaseline | agent/experiment.py (Ctrl-C during a baseline repeat) | agent/experiment.py run_experiment | record the baseline on the runs that finished, then stop |
| BranchMoved | agent/experiment.py record (under the decision lock) | agent/experiment.py run_experiment | another worker kept first: rebase onto the tip and confirm there |
| OutOfSpaceStop | agent/loop.py check_space | agent/loop.py main | too little disk for the next experiment: stop cleanly, nothing lost |
| EnvironmentStop | agent/envcheck.py (at start, on resume, after a crashed run) | agent/loop.py main | data, tokenizer or fixed files missing or corrupt: stop with what to run, nothing lost |
| WorkerStopped | agent/workers.py (the loop is stopping) | agent/workers.py Worker.run | end this worker's run; its experiment stays pending for --resume |
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.records import Decision
    from harness.runner import RunResult


class ProposalError(Exception):
    """This attempt failed (malformed reply, nothing left to try, can't fix); message says why."""


class ProposerUnavailable(Exception):
    """The API stayed down past --api-patience; the loop uses the offline proposer this time."""


class Rerun(Exception):
    """The judge asked for the same commit to be run again; carries the run it judged."""

    def __init__(self, run: RunResult, decision: Decision):
        super().__init__("the judge asked for another run")
        self.run, self.decision = run, decision


class InterruptedBaseline(Exception):
    """Ctrl-C while a baseline repeat trained, after a run that finished and was judged: the loop
    records the baseline with the runs it has (its band then rests on them) before it stops."""

    def __init__(self, run: RunResult, decision: Decision):
        super().__init__("interrupted during a baseline repeat")
        self.run, self.decision = run, decision


class BranchMoved(Exception):
    """Raised under the decision lock: a keep whose parent is no longer the branch tip."""


class OutOfSpaceStop(Exception):
    """Too little free disk for the next experiment (checked before it starts)."""


class EnvironmentStop(Exception):
    """The machine, not the experiment: data shards, the tokenizer or a fixed file are missing or
    corrupt. The loop stops (the experiment in flight stays pending) rather than burn ideas."""


class WorkerStopped(KeyboardInterrupt):
    """Raised inside a worker's run when the loop stops (Ctrl-C, another worker's fatal error)."""
