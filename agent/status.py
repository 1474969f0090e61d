"""What the loop shows while it works: the panel and state.json (refresh), the experiment in
flight (its idea, which run of it and why), the judge's calls as they are made, and the switch to
"evaluating" once the trusted evaluator has the saved model. A mixin of agent/loop.py's Loop."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from agent.console import run_progress
from agent.judges import stats
from harness.records import RunState
from harness.results import write_state


class LoopStatus:
    def show_attempt(self, a) -> None:
        """The experiment now in flight: its idea on the panel and in state.json, and one line."""
        p = a.proposal
        self.idea = {"description": p.description, "hypothesis": p.hypothesis, "proposer": p.proposer}
        self.run_of = None
        self.console.event(f"exp {a.n}: trying {p.description} -- hypothesis: {p.hypothesis}")

    def show_run(self, a, done: int, asked) -> None:
        """The next run of experiment `a` (`done` runs so far; `asked`: the judge's call that asked
        for it): run k of (at most) `of`, and why it runs again (k > 1)."""
        k, of, why = run_label(self.config.baseline_repeats, a, done, asked)
        self.run_of = {"k": k, "of": of, "why": why}
        if k > 1:
            self.console.event(f"exp {a.n}: run {k} of {of} ({why})")

    def announce(self, n: int, decision) -> None:
        """A judge decision as it is made; an interim one ("run again") is a note, not a verdict."""
        if getattr(decision, "rerun", False):
            self.interim = (n, decision.reason)
            self.console.event(f"exp {n}: not decided yet: {decision.reason}")
        else:
            self.last_decision = f"exp {n} {decision.status}: {decision.reason}"
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        if not force and time.time() - self._last_state < 1.0:
            return
        self._last_state = time.time()
        if self.phase == "training" and _evaluating(self.run_dir):
            self.set_phase("evaluating", self.experiment)   # the trusted evaluator has the saved model
            return
        decided = len(self.history)
        keeps = sum(1 for r in self.history if r.status == "keep")
        log, progress = run_progress(self.run_dir, self.phase, self.run_started_at, self.experiment)
        state = RunState(tag=self.tag, phase=self.phase, experiment=self.experiment, started_at=self.started_at,
                         run_started_at=self.run_started_at, budget=self.budget, best=self.best,
                         last_decision=self.last_decision, keep_rate=keeps / decided if decided else None,
                         tokens=self.tokens, cost_usd=self.cost_usd, pid=os.getpid(),
                         phase_started_at=self.phase_started_at, log=log, progress=progress,
                         workers=[w.state() for w in getattr(self, "workers", [])],
                         idea=self.idea if self.phase not in ("idle", "stopped", "setup") else None,
                         run=self.run_of if self.phase in ("training", "evaluating", "judging") else None).to_dict()
        with self.coord.lock, contextlib.suppress(OSError):
            write_state(self.files.state_path, **state)
        self.console.update(state)



def run_label(baseline_repeats: int, a, done: int, asked) -> tuple[int, int, str]:
    """(k, of, why) of the run about to start: run k of at most `of`, and why it runs again."""
    k = done + 1
    if a.parent is None:
        of = max(k, baseline_repeats)
        why = "first run" if k == 1 else "measuring the noise"
    else:
        of = max(k, stats.MAX_RUNS)
        why = "first run" if k == 1 else "confirming a possible gain"
    reason = asked.reason if asked is not None else ""
    if asked is not None and asked.rerun_commit:
        why = f"the incumbent {asked.rerun_commit[:7]} again, for a fair bar"
    elif "disturbed" in reason or "no evidence" in reason:
        why = "replacing a run the machine disturbed"
    return k, of, why


def _evaluating(run_dir: Path) -> bool:
    """A trusted evaluation is running: its process group is recorded (harness/verify.py)."""
    return any((Path(run_dir) / ".verify").glob("verify*.pid"))
