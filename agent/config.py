"""LoopConfig: what the loop was asked to do, frozen once the command line is checked.

agent/cli.py's parse_args builds it from the arguments (validated there, defaults filled in), and
the loop reads its settings from it; the pieces the loop builds are handed the few fields each one
needs (a proposer its kind and model, the reviewer its baseline repeats, an executor its kind and
address), never the whole configuration or the argument parser's namespace.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from agent import budget
from agent.judges import stats

# The environment variable that gives --notify's webhook URL (a secret: never on the command line
# of a shared machine).
NOTIFY_ENV = "AUTORESEARCH_NOTIFY_URL"


@dataclass(frozen=True)
class LoopConfig:
    tag: str
    budget: float                         # training seconds per run
    max_experiments: int | None = None    # stop after N experiments (the baseline counts)
    max_runs: int | None = None           # stop after N training runs (repeats and confirmations count)
    until: str | None = None              # start no experiment after this local HH:MM
    proposer: str = "offline"             # claude | offline
    model: str | None = None              # the Claude model id (claude proposer)
    max_cost: float | None = None         # LLM spend cap in dollars (None: no cap)
    crash_streak: int = budget.CRASH_STREAK
    resume: bool = False
    fix_tries: int = 2
    api_patience: float = 600.0           # seconds of API outage before the offline proposer stands in
    seed: int = 0                         # the offline search's seed
    offline_search: str = "local"
    worktree_root: str | None = None
    baseline_repeats: int = stats.BASELINE_RUNS
    reviewer: str = "hierarchy"           # hierarchy | simple
    timeout: float | None = None          # kill a run after this many seconds (None: runner.timeout_for)
    repo: str = "."
    sandbox: str = "auto"                 # auto | bwrap | none
    screen: int = 1                       # candidates per experiment (1: no screen)
    workers: int = 1                      # experiments in flight at once
    executor: str = "local"               # local | ray
    ray_address: str | None = None
    gpus: str | None = None               # GPU ids for local workers, comma-separated
    smoke: bool = False                   # the smoke preset (agent/smoke.py): tiny profile, fixed steps
    notify: str | None = None             # webhook URL for notifications (agent/notify.py); a secret

    @classmethod
    def of(cls, args: "LoopConfig | argparse.Namespace") -> "LoopConfig":
        """The configuration from checked arguments (an argparse namespace; other keys ignored)."""
        if isinstance(args, cls):
            return args
        given = vars(args)
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given})

    @property
    def parallel(self) -> bool:
        """Experiments go through an executor (several workers, or Ray) rather than one local slot."""
        return self.workers > 1 or self.executor != "local"
