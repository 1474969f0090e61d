"""state.json: the live status the dashboard shows (agent/loop.py and agent/status.py write it).

Read from disk it is data: from_dict never raises."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from harness.results_table import as_int, as_str, fnum
from harness.results import write_text_atomic
from runfiles.run import Best, best_of


def write_json_atomic(path: Path, data: dict) -> None:
    """A JSON file of the run folder (state.json, knob_space.json, run.json), written atomically."""
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


def write_state(path: Path, **state) -> dict:
    state["updated_at"] = time.time()
    write_json_atomic(path, state)
    return state


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):   # absent, torn, not JSON, not UTF-8
        return None


# ---------------------------------------------------------------- state.json

@dataclass
class WorkerState:
    """One experiment in flight under --workers N."""
    worker: int
    n: int | None = None
    phase: str | None = None
    phase_started_at: float | None = None
    run_started_at: float | None = None
    commit: str | None = None
    parent: str | None = None
    description: str = ""
    gpu: str | None = None               # its CUDA_VISIBLE_DEVICES, None on CPU
    done: int = 0                        # experiments it has recorded in this session

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in WORKER_KEYS}

    @classmethod
    def from_dict(cls, d) -> "WorkerState | None":
        if not isinstance(d, dict) or as_int(d.get("worker")) is None:
            return None
        return cls(worker=d["worker"], n=as_int(d.get("n")), phase=as_str(d.get("phase")),
                   phase_started_at=fnum(d.get("phase_started_at")), run_started_at=fnum(d.get("run_started_at")),
                   commit=as_str(d.get("commit")), parent=as_str(d.get("parent")),
                   description=as_str(d.get("description")) or "", gpu=as_str(d.get("gpu")),
                   done=as_int(d.get("done")) or 0)

    def elapsed(self, now: float) -> float | None:
        """Seconds in the current run (training) or phase."""
        t = self.run_started_at if self.phase in ("training", "evaluating") and self.run_started_at else \
            self.phase_started_at
        return max(0.0, now - t) if t is not None else None


WORKER_KEYS = tuple(f.name for f in fields(WorkerState))


@dataclass
class RunningExperiment:
    """The experiment the (single) loop is at: its number, when its run started, its log and last
    step line, what it tries and which run of it this is."""
    experiment: int | None = None
    run_started_at: float | None = None
    log: str | None = None               # the running experiment's log, relative to the run folder
    progress: dict | None = None         # its last step line: {"step", "loss", "tok_s", "trained"}
    idea: dict | None = None             # the running experiment's {"description", "hypothesis", "proposer"}
    run: dict | None = None              # which run of it: {"k": 2, "of": 3, "why": "confirming"} (reruns)


@dataclass
class SessionTally:
    """What the tag has come to so far: the incumbent, the last decision, the keep rate, the
    proposers' tokens and cost."""
    best: Best | None = None
    last_decision: str | None = None
    keep_rate: float | None = None
    tokens: dict | None = None           # {"input", "output"}
    cost_usd: float | None = None


@dataclass
class RunState:
    """state.json: the loop's live status, rewritten atomically (write_state above).
    The file is flat (STATE_KEYS); the running experiment and the tally are the type's parts."""
    tag: str | None = None
    phase: str | None = None
    phase_started_at: float | None = None
    started_at: float | None = None
    budget: float | None = None
    pid: int | None = None
    running: RunningExperiment = field(default_factory=RunningExperiment)
    tally: SessionTally = field(default_factory=SessionTally)
    workers: list[WorkerState] = field(default_factory=list)   # --workers N: the experiments in flight
    updated_at: float | None = None      # set by write_state

    def to_dict(self) -> dict:
        r, t = self.running, self.tally
        out = {"tag": self.tag, "phase": self.phase, "experiment": r.experiment, "started_at": self.started_at,
               "run_started_at": r.run_started_at, "budget": self.budget, "best": t.best,
               "last_decision": t.last_decision, "keep_rate": t.keep_rate, "tokens": t.tokens, "cost_usd": t.cost_usd,
               "pid": self.pid, "phase_started_at": self.phase_started_at, "log": r.log, "progress": r.progress,
               "workers": [w.to_dict() for w in self.workers], "idea": r.idea, "run": r.run,
               "updated_at": self.updated_at}
        if out["updated_at"] is None:
            del out["updated_at"]
        return out

    @classmethod
    def from_dict(cls, d) -> "RunState":
        """Every field checked for its type (state.json is data): a wrong one reads as None."""
        d = d if isinstance(d, dict) else {}
        best = d.get("best") if isinstance(d.get("best"), dict) else None
        if best is not None:
            best = best_of(as_str(best.get("commit")), best.get("val_bpb"))
        tokens = d.get("tokens") if isinstance(d.get("tokens"), dict) else None
        if tokens is not None:
            tokens = {k: int(fnum(tokens.get(k)) or 0) for k in ("input", "output")}
        progress = d.get("progress") if isinstance(d.get("progress"), dict) else None
        workers = d.get("workers") if isinstance(d.get("workers"), list) else []
        last = d.get("last_decision")
        running = RunningExperiment(experiment=as_int(d.get("experiment")), run_started_at=fnum(d.get("run_started_at")),
                                    log=as_str(d.get("log")), progress=progress, idea=_idea(d.get("idea")),
                                    run=_run_of(d.get("run")))
        tally = SessionTally(best=best, last_decision=last if isinstance(last, (str, dict)) else None,
                             keep_rate=fnum(d.get("keep_rate")), tokens=tokens, cost_usd=fnum(d.get("cost_usd")))
        return cls(tag=as_str(d.get("tag")), phase=as_str(d.get("phase")) or None,
                   phase_started_at=fnum(d.get("phase_started_at")), started_at=fnum(d.get("started_at")),
                   budget=fnum(d.get("budget")), pid=as_int(d.get("pid")), running=running, tally=tally,
                   workers=[w for w in (WorkerState.from_dict(x) for x in workers) if w is not None],
                   updated_at=fnum(d.get("updated_at")))


def _idea(d) -> dict | None:
    """state.json's idea: its strings, or None."""
    if not isinstance(d, dict):
        return None
    return {k: as_str(d.get(k)) or "" for k in ("description", "hypothesis", "proposer")}


def _run_of(d) -> dict | None:
    """state.json's run: {"k", "of", "why"} with k an int, or None."""
    if not isinstance(d, dict) or as_int(d.get("k")) is None:
        return None
    return {"k": as_int(d.get("k")), "of": as_int(d.get("of")), "why": as_str(d.get("why")) or ""}


# state.json's keys, in the order they are written.
STATE_KEYS = ("tag", "phase", "experiment", "started_at", "run_started_at", "budget", "best", "last_decision",
              "keep_rate", "tokens", "cost_usd", "pid", "phase_started_at", "log", "progress", "workers", "idea",
              "run", "updated_at")


# ---------------------------------------------------------------- the journal's other records
# Typed for their readers: the journal's audit and queue_applied
# objects, a re-measurement's outcome, and the trace spans of traces.jsonl.
#
# Their writers build plain JSON objects (agent/judges/hierarchy.py, agent/judges/queue_apply.py,
# agent/tracing.py); readers (recovery, the dashboard, the Braintrust sink) read them only through
# these classes. Read from disk they are data, not trusted: from_dict never raises, and a value of
# the wrong type reads as None (or empty).

# queue_applied actions that move the branch (a restore cherry-picks, a revert undoes a keep).
