"""A night you can afford: when the LLM hands its turn to the offline proposer.

Two reasons, checked before every proposal (agent/proposing.py call_proposer):

- the cost cap (--max-cost USD): once the journal's spend (proposals plus LLM-judge verdicts)
  reaches it, the offline proposer proposes every experiment and the judge stops calling the LLM;
  the loop goes on (a cap is a budget, not a stop);
- a crash streak (--crash-streak N): N crashed experiments of the LLM's in a row hand the next
  HANDOVER_EXPERIMENTS experiments to the offline proposer, then the LLM proposes again (a model
  stuck on a broken idea gets a few runs of distance; the offline runs reset the streak).

Both hand-overs are said on the console when they start, recorded per experiment in the journal
(`handover`), and summed up in the end summary and the morning report.

And when a night stops by itself (stop_due: --max-experiments, --until, --max-runs,
--max-run-seconds), with the runs of the final's re-measurement kept inside those limits.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from agent.config import Stops
from harness.experiment_record import ExperimentRecord

# Experiments the offline proposer takes after a crash streak.
HANDOVER_EXPERIMENTS = 2
OFFLINE = ("offline", "baseline", "scripted")


def spent(history: list) -> float:
    """The LLM spend of the decided records (an experiment in flight, InFlight, has none yet)."""
    return sum(r.cost() for r in history if isinstance(r, ExperimentRecord))


def cap_reason(history: list, cap: float | None) -> str | None:
    if cap is None:
        return None
    now = spent(history)
    if now >= cap:
        return f"cost cap: ${now:.4f} of --max-cost ${cap:.4f} spent on the LLM"
    return None


def streak_reason(history: list, streak: int | None) -> str | None:
    """A crash streak's hand-over still running, or None. History in decision order (records, then
    experiments still in flight, InFlight, status "pending"): one in flight counts as handed over
    when it is, and otherwise ends the look back."""
    if not streak:
        return None
    exps = [r for r in history if not isinstance(r, ExperimentRecord) or r.is_experiment]
    handed, i = 0, len(exps) - 1
    while i >= 0 and str(exps[i].handover or "").startswith("crash streak"):
        handed, i = handed + 1, i - 1
    crashes = 0
    while i >= 0 and exps[i].status == "crash" and exps[i].proposer not in OFFLINE:
        crashes, i = crashes + 1, i - 1
    if crashes >= streak and handed < HANDOVER_EXPERIMENTS:
        return (f"crash streak: the LLM's last {crashes} experiments crashed; the offline proposer takes "
                f"{HANDOVER_EXPERIMENTS - handed} more before the LLM proposes again")
    return None


def handover(config, history: list) -> str | None:
    """Why the LLM does not propose this experiment (None: it does). `config`: what holds the two
    limits, max_cost and crash_streak (the loop's IdeasConfig, agent/config.py; or the
    agent/proposing.py Proposers built from it); `history`: what the proposal request
    sees (ProposalRequest.tried(): experiments in flight included)."""
    return cap_reason(list(history), config.max_cost) or streak_reason(list(history), config.crash_streak)


class Handovers:
    """Says a hand-over on the console when it starts, once (at the cap, the LLM judge stops too).
    `say`: the console's event line; `stop_llm(why)`: the reviewer's (agent/judges/hierarchy.py)."""

    def __init__(self, say: Callable[[str], None], stop_llm: Callable[[str], None] | None = None):
        self._say, self._stop_llm = say, stop_llm
        self._said: set = set()
        self._lock = threading.Lock()   # --workers N: proposals and decisions come from N threads

    def announce(self, why: str, n) -> None:
        kind = why.split(":", 1)[0]
        starts = kind == "cost cap" or f"takes {HANDOVER_EXPERIMENTS} more" in why
        key = (kind, n if kind != "cost cap" else None)
        with self._lock:
            if not starts or key in self._said:
                return
            self._said.add(key)
        if kind == "cost cap":
            if self._stop_llm is not None:
                self._stop_llm(why)
            why += "; the offline proposer proposes from now on and the judge stops calling the LLM (the loop goes on)"
        self._say(f"exp {n}: hand-over: {why}")


def runs_done(history: list) -> int:
    """Training runs of every decided record (--max-runs counts these)."""
    return sum(r.training_runs for r in history if isinstance(r, ExperimentRecord) and r.is_experiment)


def device_seconds(history: list) -> float:
    """Wall seconds of every training run the decided records made (--max-run-seconds counts these)."""
    return sum(r.timing("runs") or r.timing("run") or 0.0 for r in history
               if isinstance(r, ExperimentRecord) and r.is_experiment)


def run_seconds(history: list) -> float:
    """A training run's wall time as this tag has measured it (the median of its recorded runs'
    that ran to their end: a run --early-stop ended is no measure of the final's), 0 before any:
    what --until and --max-run-seconds keep for the runs the night's end will make."""
    walls = sorted(w for w in (r.timing("run") for r in history if isinstance(r, ExperimentRecord)
                                 and r.is_experiment and not r.stopped_early)
                   if w is not None and w > 0)
    return walls[len(walls) // 2] if walls else 0.0


def night_lines(records: list[ExperimentRecord], cap: float | None = None) -> list[str]:
    """What the end summary and the report say about the LLM's spend and the hand-overs."""
    exps = [r for r in records if r.is_experiment]
    capped = [r for r in exps if str(r.handover or "").startswith("cost cap")]
    streaks = [r for r in exps if str(r.handover or "").startswith("crash streak")]
    out = []
    if capped:
        out.append(f"cost cap reached at exp {capped[0].n}: the offline proposer proposed {len(capped)} "
                   f"experiment(s) since and the judge stopped calling the LLM ({capped[0].handover})")
    elif cap is not None:
        out.append(f"cost cap ${cap:.4f}: ${spent(exps):.4f} spent, not reached")
    if streaks:
        starts = sum(1 for i, r in enumerate(exps) if r in streaks and (i == 0 or exps[i - 1] not in streaks))
        out.append(f"crash streaks: {starts} hand-over(s) to the offline proposer, {len(streaks)} experiment(s) "
                   f"(exp {', '.join(str(r.n) for r in streaks)})")
    return out


def stop_due(stops: Stops, history: list[ExperimentRecord], n: int, deadline: float | None,
             final: int) -> str | None:
    """Why a night stops before experiment n (--max-experiments, --until, --max-runs,
    --max-run-seconds), or None. The final's re-measurement at the night's end (`final` runs,
    --final-runs) is kept inside --until, --max-runs and --max-run-seconds: its runs are reserved."""
    if stops.max_experiments is not None and n > stops.max_experiments:
        return f"reached --max-experiments {stops.max_experiments}"
    if deadline is not None and time.time() + final * run_seconds(history) >= deadline:
        return f"reached --until {stops.until}" + (f" ({final} run(s) kept for the final's re-measurement)"
                                                   if final else "")
    if stops.max_runs is not None and runs_done(history) + final >= stops.max_runs:
        return (f"reached --max-runs {stops.max_runs} ({runs_done(history)} training runs"
                + (f", {final} kept for the final's re-measurement)" if final else ")"))
    spent = device_seconds(history)
    if stops.max_run_seconds is not None and spent + final * run_seconds(history) >= stops.max_run_seconds:
        return f"reached --max-run-seconds {stops.max_run_seconds:g} ({spent:.0f} s of training runs)"
    return None
