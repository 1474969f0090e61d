"""Step 3 of the protocol (agent/loop.py): between experiments, the reviewer's boundary step.

The reviewer (agent/judges/reviewer.py) gets a BoundaryContext, not the loop: the tag's files,
its decided history, how to move the tag's state when an applied decision moves the branch
(the coordinator's `moved`), and how to train a commit outside the experiment sequence (a queue
re-measurement: `run_commit` on the loop's executor, the run the experiments get). What it
returns (audit records, queue applications) goes to the journal here; the experiment records
among them join the history. The single loop and `--workers N` (agent/workers.py, under the
coordinator's lock) both call `apply`.
"""
from __future__ import annotations

import contextlib

from agent import seeds
from agent.experiment import MAX_RERUNS, run_commit
from agent.judges.reviewer import BoundaryContext
from harness.experiment_record import ExperimentRecord
from harness.results import append_journal
from harness.runner import RunResult


def train(coord, slot, commit: str, status=None) -> RunResult:
    """A run of `commit` outside the experiment sequence (its log: logs/queue-<short>.log), under
    the next experiment's number (the job's number: its artifact folder), on a random seed no loop
    run had (agent/seeds.py: a queue decision's run looks like any other to train.py)."""
    n = coord.next_n()
    seed = seeds.one_off(seeds.loop_seeds(seeds.key_of(slot.files.run_dir), n, MAX_RERUNS))
    run = run_commit(slot, n, commit, f"queue-{commit[:7]}.log", {"AUTORESEARCH_SEED": str(seed)}, status=status)
    run.extra["seed"] = seed
    return run


def apply(reviewer, coord, slot, status) -> None:
    """The reviewer's boundary step, its records journaled (audits and queue applications are not
    experiments; an experiment record among them joins the history)."""
    ctx = BoundaryContext(files=slot.files, history=coord.history, on_moved=coord.moved,
                          train=lambda commit: _queue_run(coord, slot, status, commit))
    for rec in reviewer.boundary(ctx) or []:
        append_journal(slot.files.journal_path, rec)
        typed = ExperimentRecord.from_dict(rec)
        if typed.is_experiment:
            coord.history.append(typed)


def _queue_run(coord, slot, status, commit: str) -> RunResult:
    with contextlib.suppress(Exception):
        status.phase("training")
    return train(coord, slot, commit, status)
