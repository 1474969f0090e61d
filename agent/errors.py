"""The loop's control flow by exception, in one place (the mini-swe-agent way: a step raises, the
step that can act on it catches). Who raises each and who catches it:

| exception | raised by | caught by | means |
| --- | --- | --- | --- |
| ProposalError | a proposer | agent/proposing.py call_proposer | this attempt has no proposal (malformed reply, nothing left to try): recorded, the loop goes on |
| ProposerUnavailable | the Claude proposer | agent/proposing.py | the API stayed down past --api-patience: the offline proposer proposes this time |
| OutOfSpaceStop | agent/loop.py check_space | agent/loop.py main | too little disk for the next experiment: stop cleanly, nothing lost |
| EnvironmentStop | agent/envcheck.py (at start, on resume, after a crashed run) | agent/loop.py main | data, tokenizer or fixed files missing or corrupt: stop with what to run, nothing lost |
| WorkerStopped | agent/experiment.py run_commit (the slot's stop event: the loop is stopping) | agent/workers.py Worker.work | end this worker's run; its experiment stays pending for --resume |
"""
from __future__ import annotations


class ProposalError(Exception):
    """This attempt failed (malformed reply, nothing left to try, can't fix); message says why."""


class ProposerUnavailable(Exception):
    """The API stayed down past --api-patience; the loop uses the offline proposer this time."""


class OutOfSpaceStop(Exception):
    """Too little free disk for the next experiment (checked before it starts)."""


class EnvironmentStop(Exception):
    """The machine, not the experiment: data shards, the tokenizer or a fixed file are missing or
    corrupt. The loop stops (the experiment in flight stays pending) rather than burn ideas."""


class WorkerStopped(KeyboardInterrupt):
    """Raised inside a worker's run when the loop stops (Ctrl-C, another worker's fatal error)."""
