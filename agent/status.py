"""What the loop shows while it works: the console's panel and state.json, the experiment in flight
(its idea, which run of it and why), the judge's interim calls as they are made, and the switch to
"evaluating" once the run trained its budget or the trusted evaluator has the saved model.

A status sink is what agent/experiment.py reports to (it never reads anything back):

    phase(name, n, run_started_at)   the step an experiment is at (guarding, training, judging, ...)
    tick(force)                       refresh the panel and state.json (at most once a second)
    attempt(a) / run(a, done, asked)  the experiment now in flight, and which run of it starts
    judged(n, decision)               a judge call as it is made (an interim one is a note)
    on_log(elapsed, log_path)         the executor's tick while a run trains
    decided(rec)                      a recorded decision
    event(text)                       one console line

The single loop reports to the Panel; each of --workers N to its own WorkerStatus, which keeps its
phase and forwards the rest to the one Panel (state.json lists the workers).
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.console import one_line, read_tail, run_progress, run_text
from agent.judges import stats
from agent.judges.advance import EQUAL_RESULT
from agent.tracing import span_of
from harness.experiment_record import ExperimentRecord
from runfiles.state import RunningExperiment, RunState, SessionTally, WorkerState
from runfiles.state import write_state

# The training progress line of train.py: "... | trained 12.3s" (shows the evaluating phase).
TRAINED_RE = re.compile(r"trained ([0-9.]+)s")
# Bytes of a training log's end read on each executor tick.
TICK_TAIL = 400


@dataclass
class Phase:
    """The step an experiment is at, and since when (the loop's, or one worker's)."""
    name: str = "setup"
    experiment: int | None = None
    started_at: float = field(default_factory=time.time)
    run_started_at: float | None = None

    def set(self, name: str, n: int | None = None, run_started_at: float | None = None) -> None:
        if name != self.name or (n is not None and n != self.experiment) or run_started_at is not None:
            self.started_at = time.time()
        self.name, self.experiment = name, n if n is not None else self.experiment
        if run_started_at is not None:
            self.run_started_at = run_started_at


@dataclass
class Shown:
    """The experiment in flight as the panel shows it, and the last call the judge made."""
    idea: dict | None = None            # description, hypothesis, proposer
    run_of: dict | None = None          # run k of (at most) `of`, and why
    last_decision: str | None = None
    interim: tuple | None = None        # (n, reason) of the last "again": why a stop left it undecided
    written_at: float = 0.0             # when state.json was last written


@dataclass
class Spend:
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0

    def add(self, rec: ExperimentRecord) -> None:
        counts = rec.token_counts()
        for k in self.tokens:
            self.tokens[k] += counts.get(k, 0)
        self.cost_usd += rec.cost()


# Runs whose wall time the pace line takes the median of (the latest ones: a proposal that grows
# the model makes later runs slower, and the machine's load changes through a night).
PACE_RUNS = 5


@dataclass
class RunPace:
    """What a run costs on this machine, measured: the wall time of each run from its start to its
    judgement (training, the trusted evaluation, the judge), against the opening estimate."""
    walls: list = field(default_factory=list)
    began: float | None = None
    estimate_s: float | None = None     # the opening estimate of one run (agent/cli.py run_seconds)

    def per_run(self) -> float:
        """The measured wall time of a run (the median of the last PACE_RUNS), 0 before any."""
        import statistics
        return statistics.median(self.walls[-PACE_RUNS:]) if self.walls else 0.0

    def line(self, n: int, decision, wall: float, now: float | None = None) -> str:
        """The eta line said after every run: the measured pace, and when what comes next ends."""
        import statistics
        from agent.console import clock
        self.walls.append(wall)
        recent = self.walls[-PACE_RUNS:]
        per = statistics.median(recent)
        said = f"; the opening estimate said {clock(self.estimate_s)}" if self.estimate_s else ""
        head = f"eta: a run takes about {clock(per)} here (the median of the last {len(recent)} measured{said})"
        if not decision.is_again:
            return head
        ends = time.strftime("%H:%M", time.localtime((now or time.time()) + per))
        return f"{head}; exp {n}'s next run should end about {ends}"


class Panel:
    """The tag's panel and state.json; the single loop's status sink."""

    def __init__(self, files, budget: float, coord, console, notify, baseline_repeats: int):
        self.files, self.budget, self.coord = files, budget, coord
        self.console, self.notify, self.baseline_repeats = console, notify, baseline_repeats
        self.now, self.shown, self.spend = Phase(), Shown(), Spend()
        self.started_at = time.time()
        self.workers: list[WorkerStatus] = []   # --workers N: one row each in state.json
        self.tracer = None   # agent/tracing.py Tracer, once the loop opened traces.jsonl
        self.pace = RunPace()

    def span(self, name: str, input: dict):
        """A traced span (traces.jsonl) of a step: the guard, a run, a judge call."""
        return span_of(self.tracer, name, input)

    # ---- the status sink -----------------------------------------------------------------------
    def phase(self, name: str, n: int | None = None, run_started_at: float | None = None) -> None:
        self.now.set(name, n, run_started_at)
        self.tick(force=True)

    def event(self, text: str) -> None:
        self.console.event(text)

    def attempt(self, a) -> None:
        """The experiment now in flight: its idea on the panel and in state.json, and one line."""
        p = a.proposal
        self.shown.idea = {"description": p.description, "hypothesis": p.hypothesis, "proposer": p.proposer}
        self.shown.run_of = None
        self.console.event(f"exp {a.n}: trying {one_line(p.description)} -- hypothesis: {one_line(p.hypothesis)}")

    def run(self, a, done: int, asked) -> None:
        """The next run of experiment `a` (`done` runs so far; `asked`: the judge's call that asked
        for it): run k of (at most) `of`, and why it runs again (k > 1)."""
        k, of, why = run_label(self.baseline_repeats, a, done, asked)
        self.shown.run_of = {"k": k, "of": of, "why": why}
        self.pace.began = time.monotonic()
        if k > 1:
            self.console.event(f"exp {a.n}: run {run_text(self.shown.run_of)}")

    def judged(self, n: int, decision, wall: float | None = None) -> None:
        """A judge call as it is made; an interim one ("again") is a note, not a verdict. Then the
        eta line, from the run's measured wall time (`wall`: a worker's own; else since run())."""
        if wall is None and self.pace.began is not None:
            wall = time.monotonic() - self.pace.began
        self.pace.began = None
        if decision.is_again:
            self.shown.interim = (n, decision.reason)
            self.console.event(f"exp {n}: not decided yet: {one_line(decision.reason)}")
        else:
            self.shown.last_decision = f"exp {n} {decision.status}: {decision.reason}"
        if wall is not None:
            self.console.event(self.pace.line(n, decision, wall))
        self.tick(force=True)

    def on_log(self, elapsed: float, log_path) -> None:
        if self.now.name == "training" and trained_all(log_path, self.budget):
            self.phase("evaluating", self.now.experiment)
        else:
            self.tick()

    def decided(self, rec: ExperimentRecord) -> None:
        """A recorded decision (the tag's history has it already)."""
        self.spend.add(rec)
        self.shown.last_decision = f"exp {rec.n} {rec.status}: {rec.decision_reason}"
        self.shown.idea, self.shown.run_of = None, None   # decided: no longer shown in flight
        self.console.decision(rec)
        self.notify.record(rec, self.coord.history, self.coord.in_flight)
        if not self.workers:
            self.phase("idle", rec.n)
        else:
            self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        if not force and time.time() - self.shown.written_at < 1.0:
            return
        self.shown.written_at = time.time()
        now = self.now
        if now.name == "training" and _evaluating(self.files.run_dir):
            self.phase("evaluating", now.experiment)   # the trusted evaluator has the saved model
            return
        history = self.coord.history
        keeps = sum(1 for r in history if r.status == "keep")
        log, progress = run_progress(self.files.run_dir, now.name, now.run_started_at, now.experiment)
        shown = self.shown
        running = RunningExperiment(
            experiment=now.experiment, run_started_at=now.run_started_at, log=log, progress=progress,
            idea=shown.idea if now.name not in ("idle", "stopped", "setup") else None,
            run=shown.run_of if now.name in ("training", "evaluating", "judging") else None)
        tally = SessionTally(best=self.coord.best, last_decision=shown.last_decision,
                             keep_rate=keeps / len(history) if history else None,
                             tokens=self.spend.tokens, cost_usd=self.spend.cost_usd)
        state = RunState(tag=self.files.tag, phase=now.name, phase_started_at=now.started_at,
                         started_at=self.started_at, budget=self.budget, pid=os.getpid(), running=running,
                         tally=tally, workers=[w.state() for w in self.workers]).to_dict()
        with self.coord.lock, contextlib.suppress(OSError):
            write_state(self.files.state_path, **state)
        self.console.update(state)


class WorkerStatus:
    """One worker's status sink: its own phase and count, the rest on the tag's Panel."""

    def __init__(self, panel: Panel, wid: int):
        self.panel, self.wid = panel, wid
        self.now = Phase(name="idle")
        self.done = 0
        self.gpu = None   # the executor's slot decides (LocalExecutor: slot K's GPU; Ray: its own)
        self.began: float | None = None   # when its current run started (the pace line)

    def phase(self, name: str, n: int | None = None, run_started_at: float | None = None) -> None:
        self.now.set(name, n, run_started_at)
        self.panel.tick(force=True)

    def tick(self, force: bool = False) -> None:
        self.panel.tick(force)

    def span(self, name: str, input: dict):
        return self.panel.span(name, dict(input, worker=self.wid))

    def event(self, text: str) -> None:
        self.panel.event(text)

    def attempt(self, a) -> None:
        p = a.proposal
        self.panel.event(f"exp {a.n} (worker {self.wid}): trying {one_line(p.description)} -- "
                         f"hypothesis: {one_line(p.hypothesis)}")

    def run(self, a, done: int, asked) -> None:
        k, of, why = run_label(self.panel.baseline_repeats, a, done, asked)
        self.began = time.monotonic()
        if k > 1:
            self.panel.event(f"exp {a.n} (worker {self.wid}): run {run_text({'k': k, 'of': of, 'why': why})}")

    def judged(self, n: int, decision) -> None:
        wall, self.began = (time.monotonic() - self.began if self.began is not None else None), None
        self.panel.judged(n, decision, wall)

    def on_log(self, elapsed: float, log_path) -> None:
        if self.now.name == "training" and trained_all(log_path, self.panel.budget):
            self.phase("evaluating", self.now.experiment)
        else:
            self.panel.tick()

    def decided(self, rec: ExperimentRecord) -> None:
        self.done += 1
        self.now.set("idle", rec.n)
        self.panel.decided(rec)

    def state(self) -> WorkerState:
        entry = self.panel.coord.in_flight.get(self.now.experiment)
        return WorkerState(worker=self.wid, n=self.now.experiment, phase=self.now.name, gpu=self.gpu,
                           phase_started_at=self.now.started_at, run_started_at=self.now.run_started_at,
                           commit=entry.commit if entry else None, parent=entry.parent if entry else None,
                           description=entry.description if entry else "", done=self.done)


def run_label(baseline_repeats: int, a, done: int, asked) -> tuple[int, int | None, str]:
    """(k, of, why) of the run about to start: run k of the `of` planned, and why it runs again.
    Past the plan (a disturbed run replaced, the incumbent run again) there is no total to give:
    `of` is None and `why` names the plan, so a counter never reads "run 7 of 7" with more to come."""
    k = done + 1
    if a.parent is None:
        planned = baseline_repeats
        why = "first run" if k == 1 else "measuring the noise"
    else:
        planned = stats.MAX_RUNS
        why = "first run" if k == 1 else "confirming a possible gain"
    of = planned if k <= planned else None
    reason = asked.reason if asked is not None else ""
    if asked is not None and asked.run_next:
        why = f"the incumbent {asked.run_next[:7]} again, for a fair bar"
    elif "disturbed" in reason or "no evidence" in reason:
        why = "replacing a run the machine disturbed"
    elif EQUAL_RESULT in reason:   # an equal result that is cheaper or shorter (agent/judges/advance.py)
        why = "testing an equal result"
    if of is None:
        why += f"; {planned} planned"
    return k, of, why


def trained_all(log_path, budget: float) -> bool:
    """train.py reports it trained the whole budget (its last progress line)."""
    tail = read_tail(Path(log_path), TICK_TAIL) if log_path else ""
    found = TRAINED_RE.findall(tail)
    return bool(found) and float(found[-1]) >= budget


def _evaluating(run_dir: Path) -> bool:
    """A trusted evaluation is running: its process group is recorded (harness/verify.py)."""
    return any((Path(run_dir) / ".verify").glob("verify*.pid"))


class NoNotify:
    """No --notify URL (the Panel's notify): nothing posts (agent/notify.py is not even imported)."""

    def record(self, *args) -> None:
        pass

    def stopped(self, loop) -> None:
        pass


def notifier(url: str | None, tag: str, say):
    if not url:
        return NoNotify()
    from agent.notify import LoopNotify
    return LoopNotify(url, tag, say)
