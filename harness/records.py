"""The run's typed records, in one module: what the loop writes and every reader reads.

- results.tsv: RESULT_COLUMNS, ResultRow, ResultLine, ResultTable, parse_results, read_table
  (harness/results_table.py, re-exported here: the one table the loop, recovery and the dashboard read).
- Decision and its typed Basis, ExperimentRecord (the journal's "experiment" record, the loop's
  history in memory, with to_dict/from_dict and typed accessors) and EvidenceFigures:
  harness/experiment_record.py, re-exported here.
- RunState and WorkerState: state.json (agent/loop.py Loop.refresh).
- Best: the incumbent (the commit to beat and its trusted val_bpb), in memory and in state.json.
- RunInfo: run.json, what a tag is fixed to (agent/workspace.py writes it; its make_seal adds
  the sandbox and the pinned inputs).
- The journal's other records, typed for their readers: AuditRecord, QueueAppliedRecord,
  Measurement (a re-measurement's outcome) and SpanRecord (a line of traces.jsonl).

Records read from disk are data, not trusted: from_dict never raises and keeps values as read;
the accessors check types (a hostile journal gives None, never an exception).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypedDict

# results.tsv: the table lives in harness/results_table.py; its names are re-exported here,
# where readers of the typed records have always found them.
from harness.results_table import (MAX_DESCRIPTION, QUOTE_CHARS, RESULT_COLUMNS, RESULT_HEADER,  # noqa: F401
                                   STATUSES, ResultLine, ResultRow, ResultTable, clean_description, finite,
                                   fnum, parse_results, read_table)

# ---------------------------------------------------------------- decisions, the journal record, evidence
# Basis, Decision: harness/decision.py; ExperimentRecord (and its accessors), EvidenceFigures: harness/experiment_record.py.
from harness.experiment_record import (  # noqa: E402, F401  (re-exported: readers import them from here)
    OPTIONAL_KEYS, RECORD_KEYS, RECORD_PATHS, Basis, Decision, EvidenceFigures, EvidenceRun, ExperimentRecord,
    NoiseBandFigures, ProposalInfo, RecordCosts, RecordDecision, RecordIdentity, RecordProposal, RecordRun,
    experiment_records)
from harness.figures import as_dict, as_int, as_str  # noqa: E402


# ---------------------------------------------------------------- the incumbent

class Best(TypedDict):
    """The incumbent every candidate must beat: its commit and trusted val_bpb (None when only the
    commit is known, e.g. a branch recovered without its figure). Both keys are always present."""
    commit: str | None
    val_bpb: float | None


def best_of(commit: str | None, val_bpb) -> Best:
    return {"commit": commit, "val_bpb": fnum(val_bpb)}


# ---------------------------------------------------------------- prepare.describe()

# prepare.describe()'s source when the hub was out of reach: data built from this machine's stdlib.
OFFLINE_SOURCE = "offline-fallback"


@dataclass(frozen=True)
class DataInfo:
    """prepare.py's describe() (its last stdout line, JSON): which data is prepared. The rest of
    it (the paths) is harness/sandbox.DataView's."""
    fingerprint: str | None = None
    profile: str | None = None
    source: str | None = None
    ready: bool = False          # prepared: a fingerprint, and not marked "ready": false
    eval_tokens: int | None = None   # the profile's EVAL_TOKENS

    @classmethod
    def of(cls, d) -> "DataInfo":
        d = d if isinstance(d, dict) else {}
        fp = as_str(d.get("fingerprint"))
        return cls(fingerprint=fp, profile=as_str(d.get("profile")), source=as_str(d.get("source")),
                   ready=bool(fp) and d.get("ready", True) is not False, eval_tokens=as_int(d.get("eval_tokens")))

    @property
    def offline(self) -> bool:
        return self.source == OFFLINE_SOURCE


# ---------------------------------------------------------------- run.json

# The sandbox kind under which runs are sealed (harness/sandbox.py); any other kind is "unsealed".
SEALED_KIND = "bwrap"


@dataclass
class RunSeal:
    """What agent/workspace.py make_seal adds to run.json once the tag's first run is sealed: the sandbox its
    runs ran in (harness/sandbox.Sandbox.describe(): kind, reason, ...) and the pinned evaluation
    inputs' hashes (harness/pinned.py)."""
    sandbox: dict | None = None
    inputs: dict | None = None


@dataclass
class RunInfo:
    """run.json: the tag's fixed terms (budget, data, profile, base commit), written once for a new
    tag, then the seal: the sandbox and the pinned evaluation inputs (agent/workspace.py make_seal). Read from
    disk it is data: every field is type-checked, unknown keys are kept as read. The file stays
    flat (RUN_INFO_KEYS): the seal's keys sit beside the others."""
    tag: str | None = None
    budget: float | None = None
    fingerprint: str | None = None       # the prepared data's (prepare.describe())
    profile: str | None = None           # gpu | cpu | tiny
    base_commit: str | None = None
    created_at: float | None = None
    source: str | None = None            # where the data came from ("offline-fallback" off the hub)
    seal: RunSeal = field(default_factory=RunSeal)
    settings: dict | None = None         # the options the tag was started with: --resume's defaults
    inventory: dict | None = None        # the data shards and tokenizer files it started with (agent/envcheck.py)
    eval_tokens: int | None = None       # the trusted evaluation's tokens (None: the profile's EVAL_TOKENS)
    extra: dict = field(default_factory=dict)

    @property
    def smoke(self) -> bool:
        """Started with --smoke: its runs train a fixed number of steps, not the budget."""
        return isinstance(self.settings, dict) and self.settings.get("smoke") is True

    def to_dict(self) -> dict:
        out = {k: getattr(self.seal if k in _SEAL_KEYS else self, k) for k in RUN_INFO_KEYS if k != "extra"}
        return {k: v for k, v in out.items() if v is not None or k in _RUN_INFO_WRITTEN} | self.extra

    @classmethod
    def from_dict(cls, d) -> "RunInfo":
        d = d if isinstance(d, dict) else {}
        return cls(tag=as_str(d.get("tag")), budget=fnum(d.get("budget")), fingerprint=as_str(d.get("fingerprint")),
                   profile=as_str(d.get("profile")), base_commit=as_str(d.get("base_commit")),
                   created_at=fnum(d.get("created_at")), source=as_str(d.get("source")),
                   seal=RunSeal(sandbox=d.get("sandbox") if isinstance(d.get("sandbox"), dict) else None,
                                inputs=d.get("inputs") if isinstance(d.get("inputs"), dict) else None),
                   settings=d.get("settings") if isinstance(d.get("settings"), dict) else None,
                   inventory=d.get("inventory") if isinstance(d.get("inventory"), dict) else None,
                   eval_tokens=as_int(d.get("eval_tokens")),
                   extra={k: v for k, v in d.items() if k not in RUN_INFO_KEYS})

    @classmethod
    def read(cls, path) -> "RunInfo | None":
        """run.json at `path`, or None when it is missing or not JSON."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    @property
    def sandbox_kind(self) -> str | None:
        return as_str((self.seal.sandbox or {}).get("kind"))

    @property
    def unsealed(self) -> str | None:
        """Why this tag's runs had no sandbox (its reason, else its kind), or None when they were
        sealed or no sandbox was recorded yet."""
        kind = self.sandbox_kind
        if kind in (None, SEALED_KIND):
            return None
        return as_str((self.seal.sandbox or {}).get("reason")) or kind


# run.json's keys, in the order they are written; anything else read is kept in `extra`.
RUN_INFO_KEYS = ("tag", "budget", "fingerprint", "profile", "base_commit", "created_at", "source", "sandbox",
                 "inputs", "settings", "inventory", "eval_tokens", "extra")
_SEAL_KEYS = tuple(f.name for f in fields(RunSeal))
# Written for a new tag even when None (agent/workspace.py): the file always names them.
_RUN_INFO_WRITTEN = ("tag", "budget", "fingerprint", "profile", "base_commit", "created_at", "source")


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
    """state.json: the loop's live status, rewritten atomically (harness/results.write_state).
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
BRANCH_ACTIONS = ("restore", "revert")


def _ident(v) -> str | int | None:
    """A span id, parent or trace: a string or an int, else None."""
    return v if isinstance(v, str) or as_int(v) is not None else None


@dataclass(frozen=True)
class AuditRecord:
    """journal kind "audit": the MetaJudge's audit of one decision (agent/judges/hierarchy.py
    writes {"kind": "audit", "tag", **MetaAudit.as_dict(), "escalated"})."""
    n: int | None
    tag: str | None
    flags: list = field(default_factory=list)         # {"kind", "reason"} dicts
    contradiction: str | None = None
    escalated: list = field(default_factory=list)     # the flags that went to the human queue
    raw: dict = field(default_factory=dict)           # the object as read (shown as is)

    @classmethod
    def from_dict(cls, d) -> "AuditRecord | None":
        """The audit, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") != "audit":
            return None
        n = as_int(d.get("n"))
        if n is None:
            n = as_int(d.get("experiment"))   # an older writer's key
        flags, escalated = d.get("flags"), d.get("escalated")
        return cls(n=n, tag=as_str(d.get("tag")),
                   flags=[f for f in flags if isinstance(f, dict)] if isinstance(flags, list) else [],
                   contradiction=as_str(d.get("contradiction")),
                   escalated=[f for f in escalated if isinstance(f, dict)] if isinstance(escalated, list) else [],
                   raw=d)


@dataclass(frozen=True)
class QueueAppliedRecord:
    """journal kind "queue_applied": one human decision applied at a boundary
    (agent/judges/queue_apply.py apply_item)."""
    item: int | None
    action: str | None            # restore | revert | acknowledged | restore_failed | *_conflict | *_empty
    commit: str | None            # the commit it made on the branch
    trusted_bpb: float | None     # the branch's re-measured value after it, when measured
    result: str | None

    @classmethod
    def from_dict(cls, d) -> "QueueAppliedRecord | None":
        """The record, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") != "queue_applied":
            return None
        return cls(item=as_int(d.get("item")), action=as_str(d.get("action")), commit=as_str(d.get("commit")) or None,
                   trusted_bpb=fnum(d.get("trusted_bpb")), result=as_str(d.get("result")))

    @property
    def moved_branch(self) -> bool:
        """It left a commit on the branch: the branch head is that commit from here on."""
        return self.action in BRANCH_ACTIONS and self.commit is not None


@dataclass(frozen=True)
class ClaimRecord:
    """journal kind "claim": a commit measured again on fresh seeds (agent/judges/confirm.py):
    "confirmed" when those runs pass the statistical test against its parent's runs; for the
    night's final also its gain over the baseline's runs (the morning report's headline)."""
    commit: str | None
    n: int | None                 # the experiment that kept it
    runs: list                    # its fresh runs (trusted val_bpb)
    parent: str | None
    parent_runs: list
    p_better: float | None
    confirmed: bool
    final: bool                   # the night's final, measured when the night ended
    baseline_runs: list = field(default_factory=list)
    gain: float | None = None     # the baseline's mean minus these runs' mean
    se: float | None = None
    failed: list = field(default_factory=list)
    why: str | None = None
    seeds: list = field(default_factory=list)   # the fresh seeds its runs used

    @classmethod
    def from_dict(cls, d) -> "ClaimRecord | None":
        """The claim, or None for any other journal object."""
        if not isinstance(d, dict) or d.get("kind") != "claim":
            return None

        def nums(v):
            return [float(x) for x in v if fnum(x) is not None] if isinstance(v, list) else []
        return cls(commit=as_str(d.get("commit")), n=as_int(d.get("n")), runs=nums(d.get("runs")),
                   parent=as_str(d.get("parent")), parent_runs=nums(d.get("parent_runs")),
                   p_better=fnum(d.get("p_better")), confirmed=d.get("confirmed") is True, final=d.get("final") is True,
                   baseline_runs=nums(d.get("baseline_runs")), gain=fnum(d.get("gain")), se=fnum(d.get("se")),
                   failed=[str(x) for x in d.get("failed") or [] if isinstance(x, str)]
                   if isinstance(d.get("failed"), list) else [], why=as_str(d.get("why")),
                   seeds=[x for x in d.get("seeds") or [] if isinstance(x, int) and not isinstance(x, bool)]
                   if isinstance(d.get("seeds"), list) else [])


# A claim's runs: at least this many fresh runs of the commit (the strict judge's least runs for a keep).
CLAIM_MIN_RUNS = 2


def read_claims(journal_path) -> list[ClaimRecord]:
    """Every claim in a tag's journal, in order."""
    from harness.results import read_journal
    return [c for c in (ClaimRecord.from_dict(d) for d in read_journal(journal_path, kind="claim")[0])
            if c is not None]


def confirmed_when_kept(rec) -> bool:
    """A keep made by the strict test: at least CLAIM_MIN_RUNS runs of its own at the P(better)
    the test required (the baseline is the bar, not a claim; a one-run rule's keep is a bet)."""
    if rec.is_baseline or rec.status != "keep":
        return False
    ev = rec.evidence_view()
    if ev is None or (ev.rule is not None and ev.rule.decided_by in ("default", "reference")):
        return False
    used = [r for r in ev.runs if r.used and r.bpb is not None]
    p, need = ev.comparison.p_better, ev.comparison.p_keep
    return len(used) >= CLAIM_MIN_RUNS and p is not None and need is not None and p >= need


def claim_label(rec, claims: list[ClaimRecord]) -> str:
    """"confirmed", "not confirmed" (a claim's fresh runs did not pass), or "unconfirmed" (none yet)."""
    if confirmed_when_kept(rec):
        return "confirmed"
    mine = [c for c in claims if c.commit == rec.commit]
    if any(c.confirmed for c in mine):
        return "confirmed"
    return "not confirmed" if mine else "unconfirmed"


@dataclass(frozen=True)
class Measurement:
    """A measurement of one commit outside the experiment sequence, read from the dict its maker
    returns: JudgeHierarchy.measure (trained, then the trusted evaluation; its figure is
    "trusted_bpb") or agent/report.py's ablations (cached in ablations.json; "bpb")."""
    ok: bool
    reason: str | None = None
    bpb: float | None = None
    log: str | None = None

    @classmethod
    def of(cls, d, figure: str = "trusted_bpb") -> "Measurement":
        """`d` read (None or no dict: not measured); `figure` names its val_bpb key."""
        d = as_dict(d)
        return cls(ok=d.get("ok") is True, reason=as_str(d.get("reason")), bpb=fnum(d.get(figure)),
                   log=as_str(d.get("log")))


@dataclass(frozen=True)
class SpanRecord:
    """One line of traces.jsonl: a finished span (agent/tracing.py Span.record())."""
    id: str | int | None
    parent: str | int | None
    trace: str | int | None
    name: str
    start: float | None
    end: float | None             # None: still open when written (never, for the file's spans)
    input: object = None
    output: object = None
    tokens: dict = field(default_factory=dict)
    cost: float | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, d) -> "SpanRecord | None":
        if not isinstance(d, dict):
            return None
        return cls(id=_ident(d.get("id")), parent=_ident(d.get("parent")), trace=_ident(d.get("trace")),
                   name=str(d.get("name", "?")), start=fnum(d.get("start")), end=fnum(d.get("end")),
                   input=d.get("input"), output=d.get("output"), tokens=as_dict(d.get("tokens")),
                   cost=fnum(d.get("cost")), error=as_str(d.get("error")) or None)

    def names_experiment(self, n: int | None) -> bool:
        """Its input names experiment n (the loop's spans carry {"n": ...}; older ones "experiment")."""
        inp = as_dict(self.input)
        return n is not None and n in (inp.get("n"), inp.get("experiment"))

    def token(self, key: str) -> int:
        """Tokens of one kind (input, output, cache_read, cache_write), 0 when absent."""
        return int(fnum(self.tokens.get(key)) or 0)
