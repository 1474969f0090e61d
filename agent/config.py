"""LoopConfig: what the loop was asked to do, frozen once the command line is checked.

agent/cli.py's parse_args builds it from the arguments (validated there, defaults filled in), and
the loop reads its settings from it; the pieces the loop builds are handed the few fields each one
needs (a proposer its kind and model, the reviewer its baseline repeats, an executor its kind and
address), never the whole configuration or the argument parser's namespace.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

# The environment variable that gives --notify's webhook URL (a secret: never on the command line
# of a shared machine).
NOTIFY_ENV = "AUTORESEARCH_NOTIFY_URL"
# LLM crashes in a row that hand the proposing over to the offline proposer (agent/budget.py;
# --crash-streak's default).
CRASH_STREAK = 3


@dataclass(frozen=True)
class Stops:
    """When the loop stops by itself (it never does otherwise)."""
    max_experiments: int | None = None    # stop after N experiments (the baseline counts)
    max_runs: int | None = None           # stop after N training runs (repeats and confirmations count)
    until: str | None = None              # start no experiment after this local HH:MM
    final_runs: int = 2                   # fresh runs of the final when the night ends (its headline); 0: none
    max_run_seconds: float | None = None  # stop after this many seconds of training runs (device-seconds)


@dataclass(frozen=True)
class IdeasConfig:
    """Who proposes, and what it may spend (agent/proposing.py Ideas, agent/budget.py's hand-overs)."""
    proposer: str = "offline"             # claude | offline
    model: str | None = None              # the Claude model id (claude proposer)
    offline_search: str = "local"
    seed: int = 0                         # the offline search's seed
    max_cost: float | None = None         # LLM spend cap in dollars (None: no cap)
    crash_streak: int = CRASH_STREAK
    api_patience: float = 600.0           # seconds of API outage before the offline proposer stands in
    fix_tries: int = 2
    screen: int = 1                       # candidates per experiment (1: no screen)
    early_stop: bool = False              # end a candidate's run early when its printed curve is far behind


@dataclass(frozen=True)
class Placement:
    """Where the runs go and how they are fenced."""
    workers: int = 1                      # experiments in flight at once
    executor: str = "local"               # local | ray
    ray_address: str | None = None
    gpus: str | None = None               # GPU ids for local workers, comma-separated
    sandbox: str = "auto"                 # auto | bwrap | none
    timeout: float | None = None          # kill a run after this many seconds (None: runner.timeout_for)
    worktree_root: str | None = None


GROUPS = {"stops": Stops, "ideas": IdeasConfig, "place": Placement}


@dataclass(frozen=True)
class LoopConfig:
    tag: str
    budget: float                         # training seconds per run
    repo: str = "."
    resume: bool = False
    reviewer: str = "hierarchy"           # hierarchy | simple (stand-in train.py files: printed figures, unsealed)
    rule: str = "default"                 # the judge's keep rule: default | reference | strict (agent/judges/advance.py)
    baseline_repeats: int | None = None   # None: the rule's own (advance.BASELINE_RUNS)
    smoke: bool = False                   # the smoke preset (agent/cli.py): tiny profile, fixed steps
    notify: str | None = None             # webhook URL for notifications (agent/notify.py); a secret
    stops: Stops = Stops()
    ideas: IdeasConfig = IdeasConfig()
    place: Placement = Placement()

    @property
    def repeats(self) -> int:
        """Baseline runs: --baseline-repeats, else the rule's own (agent/judges/advance.py)."""
        from agent.judges.advance import BASELINE_RUNS
        return self.baseline_repeats if self.baseline_repeats is not None else BASELINE_RUNS[self.rule]

    @classmethod
    def of(cls, args: "LoopConfig | argparse.Namespace | dict") -> "LoopConfig":
        """The configuration from checked arguments (an argparse namespace or a dict of option
        names: each goes to its group; other keys ignored)."""
        if isinstance(args, cls):
            return args
        given = dict(args) if isinstance(args, dict) else vars(args)
        groups = {name: kind(**{f.name: given[f.name] for f in fields(kind) if f.name in given})
                  for name, kind in GROUPS.items()}
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given and f.name not in GROUPS},
                   **groups)

    @staticmethod
    def option_names() -> list[str]:
        """Every option's name (the command line's dests), groups flattened."""
        return [f.name for f in fields(LoopConfig) if f.name not in GROUPS] + \
            [f.name for kind in GROUPS.values() for f in fields(kind)]

    def value(self, name: str):
        """An option's value by its name, wherever its group keeps it."""
        if name in GROUPS or name not in self.option_names():
            raise KeyError(name)
        for group in GROUPS:
            part = getattr(self, group)
            if name in {f.name for f in fields(part)}:
                return getattr(part, name)
        return getattr(self, name)

    def with_values(self, **values) -> "LoopConfig":
        """A copy with these options (by name) changed."""
        return LoopConfig.of({**{n: self.value(n) for n in self.option_names()}, **values})

    @property
    def parallel(self) -> bool:
        """Experiments go through an executor (several workers, or Ray) rather than one local slot."""
        return self.place.workers > 1 or self.place.executor != "local"
