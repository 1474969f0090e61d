"""The run's typed records, in one module: what the loop writes and every reader reads.

- results.tsv: RESULT_COLUMNS, ResultRow (one row, formatted and parsed), parse_results (the one
  parser: a corrupt line is a flagged ResultLine with a clear message, never a crash, never dropped).
- Decision and its typed Basis: what a judge decided and on what grounds (str Enum: the journal
  keeps the same strings).
- ExperimentRecord: the journal's "experiment" record (agent/experiment.py record()), with
  to_dict/from_dict that round-trip a journal line exactly (unknown keys kept in `extra`) and
  typed accessors for what readers need (the decision's val_bpb, the noise band, the basis...).
- RunState and WorkerState: state.json (agent/loop.py Loop.refresh).

Records read from disk are data, not trusted: from_dict never raises and keeps values as read;
the accessors check types (a hostile journal gives None, never an exception).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

# ---------------------------------------------------------------- results.tsv

# The header of program.md, exactly; never extra columns (richer data goes to the journal).
RESULT_COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")
RESULT_HEADER = "\t".join(RESULT_COLUMNS)
STATUSES = ("keep", "discard", "crash")
# Descriptions are one line and tab-free so the TSV stays 5 columns.
MAX_DESCRIPTION = 200
# Characters of a bad cell quoted in a problem message.
QUOTE_CHARS = 40


def clean_description(text: str) -> str:
    one = " ".join(str(text).replace("\t", " ").split())
    return one[:MAX_DESCRIPTION] or "(no description)"


def finite(v) -> bool:
    """A real number (not bool) that is finite; ints too large for a float are not."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def fnum(v) -> float | None:
    """v as a finite float, else None (bools, strings, inf and nan are not figures)."""
    return float(v) if finite(v) else None


@dataclass
class ResultRow:
    """One results.tsv row. val_bpb/memory_gb are None when the cell is not a number."""
    commit: str
    val_bpb: float | None
    memory_gb: float | None
    status: str
    description: str

    def format(self) -> str:
        """The TSV line (with its newline); crashes carry 0.000000 and 0.0 as program.md says."""
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        crash = self.status == "crash"
        bpb = 0.0 if crash or not finite(self.val_bpb) else float(self.val_bpb)   # NaN never reaches the table
        mem = 0.0 if crash or not finite(self.memory_gb) else float(self.memory_gb)
        return f"{self.commit[:7]}\t{bpb:.6f}\t{mem:.1f}\t{self.status}\t{clean_description(self.description)}\n"

    @classmethod
    def parse(cls, raw: str) -> tuple["ResultRow", list[str]]:
        """(row, problems): never raises; a malformed line gives what could be read plus why not."""
        cells = raw.rstrip("\r\n").split("\t")
        problems = []
        if len(cells) < len(RESULT_COLUMNS):
            problems.append(f"{len(cells)} of {len(RESULT_COLUMNS)} columns")
        elif len(cells) > len(RESULT_COLUMNS):
            # A tab inside the description: keep the text, it is still one experiment.
            cells = cells[:4] + ["\t".join(cells[4:])]
            problems.append("extra tab(s) in the description")
        commit, bpb, mem, status, desc = (cells + [""] * len(RESULT_COLUMNS))[:len(RESULT_COLUMNS)]
        row = cls(commit, _cell_float(bpb), _cell_float(mem), status, desc)
        for name, text, value in (("val_bpb", bpb, row.val_bpb), ("memory_gb", mem, row.memory_gb)):
            if value is not None and not math.isfinite(value):
                problems.append(f"{name} {text!r} is not finite")
            elif value is None and text:
                problems.append(f"{name} {text[:QUOTE_CHARS]!r} is not a number")
            elif value is None and len(cells) == len(RESULT_COLUMNS):
                problems.append(f"{name} is empty")
        if status and status not in STATUSES:
            problems.append(f"unknown status {status[:QUOTE_CHARS]!r}")
        elif not status and len(cells) == len(RESULT_COLUMNS):
            problems.append("status is empty")
        return row, problems


def _cell_float(text: str) -> float | None:
    try:
        return float(text)
    except (ValueError, OverflowError):
        return None


@dataclass
class ResultLine:
    """One non-blank line of results.tsv after the header, as parsed."""
    n: int                       # 1-based row number (file order)
    line: int                    # 1-based line number in the file
    raw: str
    row: ResultRow
    problems: list[str] = field(default_factory=list)
    partial: bool = False        # the last line, without its newline yet (being written?)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class ResultTable:
    lines: list[ResultLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # about the file (header, emptiness)
    complete: int = 0            # rows that end with a newline

    def line_problems(self) -> list[str]:
        """Every problem, file-level first, each malformed row as "line N: why"."""
        return self.problems + [f"line {ln.line}: {'; '.join(ln.problems)}" for ln in self.lines if ln.problems]


def parse_results(text: str) -> ResultTable:
    """The one results.tsv parser. Without a valid header the first line is read as a row
    (a lost header loses no experiment); every row is returned, flagged when malformed."""
    out = ResultTable()
    if not text.strip():
        out.problems.append("results.tsv is empty (no header yet)")
        return out
    lines = text.split("\n")
    terminated = text.endswith("\n")
    if terminated:
        lines.pop()                       # the empty string after the final newline
    start = 0
    if lines[0].rstrip("\r") == RESULT_HEADER:
        start = 1
    else:
        out.problems.append(f"line 1: header is {lines[0][:80]!r}, expected {RESULT_HEADER!r}; "
                            "reading rows anyway")
    n = 0
    for i in range(start, len(lines)):
        raw = lines[i].rstrip("\r")
        if not raw.strip():
            continue
        n += 1
        partial = (i == len(lines) - 1) and not terminated
        row, problems = ResultRow.parse(raw)
        out.lines.append(ResultLine(n, i + 1, raw, row, problems, partial))
        if not partial:
            out.complete = n
    return out


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
