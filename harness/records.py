"""The run's typed records, in one module: what the loop writes and every reader reads.

- results.tsv: RESULT_COLUMNS, ResultRow, ResultLine, ResultTable, parse_results, read_table
  (harness/results_table.py, re-exported here: the one table the loop, recovery and the dashboard read).
- Decision and its typed Basis, ExperimentRecord (the journal's "experiment" record, the loop's
  history in memory, with to_dict/from_dict and typed accessors) and EvidenceFigures:
  harness/experiment_record.py, re-exported here.
- RunState and WorkerState: state.json (agent/loop.py Loop.refresh).

Records read from disk are data, not trusted: from_dict never raises and keeps values as read;
the accessors check types (a hostile journal gives None, never an exception).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

# results.tsv: the table lives in harness/results_table.py; its names are re-exported here,
# where readers of the typed records have always found them.
from harness.results_table import (MAX_DESCRIPTION, QUOTE_CHARS, RESULT_COLUMNS, RESULT_HEADER,  # noqa: F401
                                   STATUSES, ResultLine, ResultRow, ResultTable, clean_description, finite,
                                   fnum, parse_results, read_table)

# ---------------------------------------------------------------- decisions, the journal record, evidence
# Basis, Decision, ExperimentRecord (and its accessors), EvidenceFigures: harness/experiment_record.py.
from harness.experiment_record import (  # noqa: E402, F401  (re-exported: readers import them from here)
    OPTIONAL_KEYS, RECORD_KEYS, Basis, Decision, EvidenceFigures, EvidenceRun, ExperimentRecord, NoiseBandFigures,
    experiment_records)


# ---------------------------------------------------------------- state.json

PHASES = ("setup", "proposing", "screening", "guarding", "training", "evaluating", "judging", "idle",
          "stopped")


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


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
        if not isinstance(d, dict) or _int(d.get("worker")) is None:
            return None
        return cls(worker=d["worker"], n=_int(d.get("n")), phase=_str(d.get("phase")),
                   phase_started_at=fnum(d.get("phase_started_at")), run_started_at=fnum(d.get("run_started_at")),
                   commit=_str(d.get("commit")), parent=_str(d.get("parent")),
                   description=_str(d.get("description")) or "", gpu=_str(d.get("gpu")),
                   done=_int(d.get("done")) or 0)

    def elapsed(self, now: float) -> float | None:
        """Seconds in the current run (training) or phase."""
        t = self.run_started_at if self.phase in ("training", "evaluating") and self.run_started_at else \
            self.phase_started_at
        return max(0.0, now - t) if t is not None else None


WORKER_KEYS = tuple(f.name for f in fields(WorkerState))


@dataclass
class RunState:
    """state.json: the loop's live status, rewritten atomically (harness/results.write_state)."""
    tag: str | None = None
    phase: str | None = None
    experiment: int | None = None
    started_at: float | None = None
    run_started_at: float | None = None
    budget: float | None = None
    best: dict | None = None             # {"commit", "val_bpb"}
    last_decision: str | None = None
    keep_rate: float | None = None
    tokens: dict | None = None           # {"input", "output"}
    cost_usd: float | None = None
    pid: int | None = None
    phase_started_at: float | None = None
    log: str | None = None               # the running experiment's log, relative to the run folder
    progress: dict | None = None         # its last step line: {"step", "loss", "tok_s", "trained"}
    workers: list[WorkerState] = field(default_factory=list)   # --workers N: the experiments in flight
    updated_at: float | None = None      # set by write_state

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in STATE_KEYS}
        out["workers"] = [w.to_dict() for w in self.workers]
        if out["updated_at"] is None:
            del out["updated_at"]
        return out

    @classmethod
    def from_dict(cls, d) -> "RunState":
        """Every field checked for its type (state.json is data): a wrong one reads as None."""
        d = d if isinstance(d, dict) else {}
        best = d.get("best") if isinstance(d.get("best"), dict) else None
        if best is not None:
            best = {"commit": _str(best.get("commit")), "val_bpb": fnum(best.get("val_bpb"))}
        tokens = d.get("tokens") if isinstance(d.get("tokens"), dict) else None
        if tokens is not None:
            tokens = {k: int(fnum(tokens.get(k)) or 0) for k in ("input", "output")}
        progress = d.get("progress") if isinstance(d.get("progress"), dict) else None
        workers = d.get("workers") if isinstance(d.get("workers"), list) else []
        last = d.get("last_decision")
        return cls(tag=_str(d.get("tag")), phase=_str(d.get("phase")) or None, experiment=_int(d.get("experiment")),
                   started_at=fnum(d.get("started_at")), run_started_at=fnum(d.get("run_started_at")),
                   budget=fnum(d.get("budget")), best=best,
                   last_decision=last if isinstance(last, (str, dict)) else None,
                   keep_rate=fnum(d.get("keep_rate")), tokens=tokens, cost_usd=fnum(d.get("cost_usd")),
                   pid=_int(d.get("pid")), phase_started_at=fnum(d.get("phase_started_at")),
                   log=_str(d.get("log")), progress=progress,
                   workers=[w for w in (WorkerState.from_dict(x) for x in workers) if w is not None],
                   updated_at=fnum(d.get("updated_at")))


STATE_KEYS = tuple(f.name for f in fields(RunState))
